"""A pending job as the queue sees it, and the queue's tiers."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

__all__ = ["QueueEntry", "QueueTier"]


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """A pending job as the queue sees it."""

    job_id: str
    account: str
    """The leaf account the job charges to."""
    priority: int
    """Orders jobs within one account; higher first."""
    submit_time: float
    """Seconds; earlier first among equal priority. A requeued job keeps its original time."""
    unallocated: bool = False
    """Declared unallocated (min_runtime 0): it only fills idle GPUs. Jobs of accounts with no
    budget are unallocated whatever this says, decided afresh from the tree at every ordering."""
    gpus: float = 0.0
    """GPUs it asks for (shared pods by fraction), which `Contract.borrows` reads."""


class QueueTier(IntEnum):
    """The three runs of the queue, in order."""

    ALLOCATED = 0
    """Budgeted work, by Fair Tree rank of the account."""
    UNALLOCATED = 1
    """Work no budget pays for: declared unallocated, or the account has no budget."""
    DETACHED = 2
    """The account stopped being a leaf of the tree (removed, or given children) while queued."""
