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


@dataclass(frozen=True)
class Evict:
    """Stop `job_id` within `grace_s` seconds to make room for `preemptor`.

    The backend reports the victim gone with `Scheduler.evicted(job_id, now)`; until then its
    GPUs stay held, and the freed capacity is nominated for the preemptor.
    """

    job_id: str
    preemptor: str
    grace_s: float
    rule: str
    lost_gpu_seconds: float


Decision = Bind | Reserve | Evict
