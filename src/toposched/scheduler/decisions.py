"""Decisions a cycle emits for a backend to carry out."""

from __future__ import annotations

from dataclasses import dataclass

from toposched.cluster.state import Allocation


@dataclass(frozen=True)
class Bind:
    """Start `job_id` on these pods; the allocation is already held in the cluster state."""

    job_id: str
    allocation: Allocation
    unallocated: bool
    backfilled: bool = False


@dataclass(frozen=True)
class Reserve:
    """`job_id` is expected to start at `start_time` on capacity now kept from backfill."""

    job_id: str
    start_time: float
    domain: str


Decision = Bind | Reserve
