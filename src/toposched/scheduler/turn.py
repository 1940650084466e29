"""What one cycle decided, and what it knows while it goes down the queue."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
from numpy.typing import NDArray

from toposched.policy.queue_entry import QueueTier
from toposched.policy.ranking import Ranking
from toposched.scheduler.decisions import Bind, Decision, Reserve
from toposched.scheduler.failures import FailureReasons
from toposched.scheduler.fence import Fence
from toposched.scheduler.jobs import ReasonCode, Reservation
from toposched.scheduler.refusals import Refusal

BoolArray = NDArray[np.bool_]
IntArray = NDArray[np.int64]


class FullCycle(StrEnum):
    """Why a cycle walked the whole queue rather than only the jobs its events could change."""

    OFF = "incremental cycles off"
    FIRST = "no cycle before"
    PERIODIC = "the periodic full cycle"
    PREEMPTIONS_SPENT = "the cycle before made as many preemptions as a cycle may"
    KEPT_NODES = "the cycle before opened a gang's kept nodes"
    LEFT_EARLY = "the cycle before left a run early"
    DRAINING = "jobs left draining nodes"
    JOB_FAILED = "a running job failed"
    CANCELLED = "a job was cancelled"
    NODE_HEALTH = "a node's health changed"
    PRIORITY = "a job's priority changed"
    BUDGET = "a budget changed"
    ADOPTED = "running jobs were adopted"
    OUTSIDE = "jobs were started or moved outside a cycle"
    RELEASE_READ = "a job ended while spares, checkpoint waits, admission or kept nodes are in use"
    REOPENED = "a release may undo the failures of more than a quarter of the queue"
    CHANGED = "the cluster, budgets or usage changed"
    ORDER = "the queue's order moved"


@dataclass
class CycleResult:
    """What one cycle decided, and what it looked at."""

    now: float
    decisions: list[Decision] = field(default_factory=list)
    considered: int = 0
    searches: int = 0
    """Placement searches run; the rest were answered by a failure of the same shape."""
    incremental: bool = False
    """Whether it ran after submissions only, skipping the jobs the last cycle answered alike
    (see `toposched.scheduler.incremental`)."""
    skipped: int = 0
    """Pending jobs it skipped so."""
    full_because: FullCycle | None = None
    """Why it walked the whole queue (None: it skipped, or a cycle did not run)."""
    alike: int = 0
    """Pending jobs answered alike an earlier job of their kind, account and priority, with
    nothing known changed since (see `Turn.answered`)."""
    shared: int = 0
    """Of those, the jobs it did not visit: it stopped once every job ahead would be answered
    alike, and they read their key's shared answer (see `toposched.scheduler.tally`)."""

    @property
    def bound(self) -> list[Bind]:
        return [d for d in self.decisions if isinstance(d, Bind)]

    @property
    def reservation(self) -> Reserve | None:
        return next((d for d in self.decisions if isinstance(d, Reserve)), None)


@dataclass(frozen=True, slots=True)
class Refused:
    """A preemption refused in this cycle to a gang of `pods` pods, and why."""

    pods: int
    refusal: Refusal


@dataclass(frozen=True, slots=True)
class Asked:
    """The preemptor refused a job: under which key of `Turn.unpreemptable`, for how many
    pods, and why."""

    key: tuple[object, ...]
    pods: int
    refusal: Refusal


@dataclass(slots=True)
class Answer:
    """What a pending job was told, and what the cycle knew then (see `Turn.answered`); never
    changed once made. Slotted: the walk reads its fields for most jobs of a long queue, and
    slots read faster than a named tuple's fields (a 2,000-job flood took about 2.5% more CPU
    with those). Not frozen: one is made for nearly every turn that searched, and a frozen
    dataclass is made about 4 times slower (each field set through `object.__setattr__`),
    about 4% of the scheduler's CPU time on the Ai2-like workload."""

    known: tuple[object, ...]
    failed_job: str
    """The job whose failure answered it."""
    reason: str
    code: ReasonCode
    refusal: Refusal | None


@dataclass(slots=True)
class Turn:
    """What one cycle knows while it goes down the queue."""

    now: float
    number: int
    result: CycleResult
    fence: Fence
    reasons: FailureReasons
    preemptions_left: int
    unpreemptable: dict[tuple[object, ...], Refused] = field(default_factory=dict)
    """Refused preemptions by (shape, account, priority): who may be evicted depends on the
    preemptor's account and priority. A start later in the cycle may give another account
    work beyond its budget; such a refusal is revisited at the next cycle."""
    refusals: int = 0
    """Moves whenever `unpreemptable` does."""
    tiers: dict[tuple[str, bool], QueueTier] = field(default_factory=dict)
    """The tier of each (account, declared unallocated): asked once for each."""
    no_preemption_texts: dict[tuple[str, str, str], str] = field(default_factory=dict)
    """Jobs refused preemption for the same reason share their explanation."""
    reservation: Reservation | None = None
    """The reservation found in this cycle: one per cycle, for the first blocked large job."""
    reserved_nodes: BoolArray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    """The reservation's nodes, marked: what backfills may use."""
    answered: dict[tuple[object, ...], Answer] = field(default_factory=dict)
    """Most pending jobs are answered by a known failure and a refused preemption, and many
    share everything that answer depends on: their kind (shape, pod count, declared runtime),
    account, priority, whether declared unallocated, and what the cycle knows so far (fence,
    failures, reservation, refusals, preemptions left). Such a job gets the reason an earlier
    job alike got, unless its own failure is the answer. The kind and the reservation fix
    whether it may backfill behind the reservation (`placing.backfills`), so that needs no
    reading before the answer is looked up."""
    asked: Asked | None = None
    """The refusal the preemptor gave in the current job's turn, if it asked one."""
    kept_nodes_opened: bool = False
    """Whether a gang's kept nodes were opened for its turn (`Interruptions`)."""
    opened: list[IntArray] = field(default_factory=list)
    """The nodes nominees let go of this cycle (each started, or must plan again): fenced for
    the jobs walked before them, open to those after."""
    ranking: Ranking | None = None
    """The standings at `now`, computed when a preemption first needs them: they do not move
    within a cycle (a job started now has used nothing yet)."""
