"""Node health, as an operator or a backend reports it."""

from __future__ import annotations

from enum import IntEnum


class Health(IntEnum):
    """Node health; only healthy nodes offer capacity to new work."""

    HEALTHY = 0
    DRAINING = 1
    CORDONED = 2
    DOWN = 3


HEALTHY = 0
"""`Health.HEALTHY` as a plain int: enum lookups cost on the hot path."""
