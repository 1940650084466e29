"""Where unallocated work may start: not on capacity the scheduler expects to take back before
the work has anything to keep.

Unallocated work is never protected: a budgeted job evicts it whenever it needs the room. So
the reservation of a blocked budgeted job welcomes it (EASY backfill lets unallocated work onto
the reserved nodes, since the reserved job may preempt it at any moment), and the reserved job
takes those nodes back when it is due, throwing away whatever the unallocated job did since
its last checkpoint. `AdmissionRule` keeps such a job off the reserved nodes when the
reservation is due before the job's first checkpoint (or, when it cannot resume, before its
end): a start there would only be evicted. Elsewhere, and on reserved nodes due later than
that, it starts as before.

Its `headroom` keeps a share of the cluster's GPUs free of unallocated work altogether: a
budgeted gang that a node failure interrupts, or budgeted work that arrives, then finds a free
rack instead of taking back racks of unallocated work that started minutes before (on the
frontier fleet, such gangs restarting elsewhere take back most of the unallocated runs they
evict). An unallocated job starts only while the free GPUs it leaves are at least the headroom.

Signals, all known at the job's turn without a look at any node: the cycle's reservation (its
expected start and the mask of its nodes, which the cycle already keeps closed to every search
but backfill), the job's tier, whether it can resume, and its expected or min runtime; for the
headroom, the count of free GPUs open to the job's search and, with `restarts`, the pending
budgeted gangs a node failure interrupted. The rule withholds the lift of the reservation's
fence for the job, so its placement is the search the job has anyway, on the capacity outside
the reservation, or, for the headroom, the search itself. See docs/preemption.md, *Where
unallocated work starts*.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.errors import InputError
from toposched.cluster.state import ClusterState
from toposched.cluster.units import HOUR
from toposched.policy.queue_entry import QueueTier
from toposched.scheduler.jobs import Job, JobState, Reservation
from toposched.scheduler.wording import hours

__all__ = ["AdmissionGate", "AdmissionRule", "Headroom", "Held"]


@dataclass(frozen=True)
class AdmissionRule:
    """Keep unallocated work off reserved nodes due before its first checkpoint.

    `checkpoint_s`: seconds a resumable job runs before its first checkpoint, when its work
    starts to survive an eviction (the scheduler is not told each job's interval; an hour is
    the simulator's default). A job that cannot resume keeps nothing until it ends: its
    expected runtime when it declared one, else the longer of its min runtime and
    `checkpoint_s`. None: unallocated work backfills onto reserved nodes as without the rule.

    `headroom`: the share of the cluster's GPUs (0 to 1) that unallocated work leaves free; it
    waits while starting would leave fewer free GPUs (0: no headroom).
    """

    checkpoint_s: float | None = HOUR
    headroom: float = 0.0
    restarts: bool = False
    """Whether the headroom also holds the GPUs of the budgeted gangs a node failure
    interrupted that wait to restart within their account's budget (pending jobs started more
    often than evicted): each takes back unallocated work as soon as it can reassemble."""
    borrowed: bool = False
    """Whether budgeted work that would take its account past its budget keeps the headroom
    free too: a team coming back to its budget then starts on the headroom instead of waiting
    for borrowed runs to end or evicting them (which loses their work when they cannot
    resume)."""
    reserved: bool = False
    """Whether the free GPUs of the cycle's reservation, held idle while its nodes drain for
    the reserved job, count towards the headroom: unallocated work may then start while they
    make up the headroom (outside the reservation where it fits, else as a backfill onto its
    nodes), instead of waiting beside them for GPUs outside it."""

    def __post_init__(self) -> None:
        value = self.checkpoint_s
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value <= 0
        ):
            raise InputError("checkpoint_s", value, "must be a number of seconds > 0, or None")
        share = self.headroom
        if (
            isinstance(share, bool)
            or not isinstance(share, int | float)
            or not math.isfinite(share)
            or not 0 <= share < 1
        ):
            raise InputError("headroom", share, "must be a share of the cluster's GPUs, 0 to < 1")
        if not isinstance(self.restarts, bool):
            raise InputError("restarts", self.restarts, "must be true or false")
        if not isinstance(self.borrowed, bool):
            raise InputError("borrowed", self.borrowed, "must be true or false")
        if not isinstance(self.reserved, bool):
            raise InputError("reserved", self.reserved, "must be true or false")

    def first_keep(self, job: Job) -> float:
        """Seconds from its start until the job has work an eviction would not throw away."""
        spec = job.spec
        checkpoint = HOUR if self.checkpoint_s is None else float(self.checkpoint_s)
        if spec.resumable:
            return checkpoint
        if spec.expected_runtime is not None:
            return float(spec.expected_runtime)
        return max(float(spec.min_runtime), checkpoint)


@dataclass(frozen=True, slots=True)
class Held:
    """A job kept off the reservation's nodes, and why."""

    holder: str
    """The reserved job."""
    due: float
    """Seconds from now until the reservation's expected start."""
    keeps: float
    """Seconds from now until the job would have work worth keeping."""

    def explain(self, reason: str) -> str:
        """`reason` (why it does not fit elsewhere), and why the reserved nodes are not used."""
        due = "now" if self.due <= 0 else f"in {hours(self.due)}"
        return (
            f"{reason}; the nodes reserved for {self.holder} are closed to it: {self.holder} is "
            f"due there {due}, before this job would keep any work (in {hours(self.keeps)})"
        )


@dataclass(frozen=True, slots=True)
class Headroom:
    """A job kept from starting anywhere: the GPUs it would take are part of the headroom."""

    free: float
    """Free GPUs open to the job's search: outside the nodes the cycle keeps for a
    reservation or a preemptor."""
    kept: float
    """GPUs the headroom keeps free of unallocated work."""
    gpus: float
    """The job's GPUs."""
    restarting: float = 0.0
    """Of `kept`, the GPUs of interrupted gangs waiting to restart (`AdmissionRule.restarts`)."""
    borrowed: bool = False
    """Whether the job is budgeted work that would take its account past its budget
    (`AdmissionRule.borrowed`), not unallocated work."""
    reserved: bool = False
    """Whether `free` counts the free GPUs of the reservation's nodes too
    (`AdmissionRule.reserved`)."""

    def explain(self) -> str:
        held = (
            f" ({self.restarting:,.0f} of them for gangs a node failure interrupted, waiting "
            "to restart)"
            if self.restarting > 0
            else ""
        )
        work = "work beyond its team's budget" if self.borrowed else "unallocated work"
        where = "with the reservation's" if self.reserved else "outside reservations"
        kept_for = "work within its team's budget" if self.borrowed else "budgeted work"
        return (
            f"{work} leaves {self.kept:,.0f} GPUs free for {kept_for}{held} "
            f"(restarts after node failures, new arrivals), and {self.free:,.0f} are free "
            f"{where}: starting this job's {self.gpus:,.0f} would leave "
            f"{max(self.free - self.gpus, 0.0):,.0f}"
        )


class AdmissionGate:
    """The rule as the cycle asks it, once per pending job; with no rule, it lets everything
    through. `state`: the cluster whose free GPUs the headroom reads (held, not read through a
    closure, so that a copy of the scheduler reads its own cluster).

    A long queue of unallocated work asks the headroom for most of its jobs while nothing
    moves: the free GPUs it reads are kept for one version of the cluster state and one mask
    of reserved nodes, and its answers' wording for the walk."""

    def __init__(self, rule: AdmissionRule | None, state: ClusterState | None = None) -> None:
        self.rule = rule
        self.state = state
        capacity = 0.0 if state is None else float(state.topology.n_gpus)
        self.kept = 0.0 if rule is None else rule.headroom * capacity
        self._pending: Callable[[], Iterable[Job]] = tuple
        self._within_budget: Callable[[Job], bool] = lambda job: False
        self._restarting: float | None = None
        self._free: tuple[int, NDArray[np.bool_] | None, float] | None = None
        self._wording: dict[tuple[float, float, float, float, bool], str] = {}
        self._unallocated: dict[float, str | None] = {}
        """`held`'s answers for unallocated work by GPU count, while `_answered_for` holds."""
        self._answered_for: tuple[int, NDArray[np.bool_] | None] = (-1, None)

    def start(
        self, job: Job, tier: QueueTier, reserved_nodes: NDArray[np.bool_] | None = None
    ) -> Headroom | None:
        """Why the job may not start anywhere this turn (None: it may, as far as the headroom
        goes). `reserved_nodes`: the mask of the reservation's nodes, whose free GPUs count
        while the fence keeps them closed (read only with `AdmissionRule.reserved`; a new
        reservation comes with a new mask)."""
        figures = self._holding(job, tier, reserved_nodes)
        return None if figures is None else self._headroom(job, tier, figures)

    def held(
        self, job: Job, tier: QueueTier, reserved_nodes: NDArray[np.bool_] | None = None
    ) -> str | None:
        """`start`'s answer as the job is told it: the explanation when the headroom holds the
        job (None: it does not). A walk asks for most of a long queue of unallocated work
        while nothing moves, so each wording is made once per walk for equal figures, and the
        answer for unallocated work, which reads nothing of the job but its GPUs, once per GPU
        count while the state's version and the reservation's mask stay the same."""
        state = self.state
        if tier is not QueueTier.UNALLOCATED or state is None:
            return self._held(job, tier, reserved_nodes)
        answered = self._answered_for
        if answered[0] != state.version or answered[1] is not reserved_nodes:
            self._unallocated.clear()
            self._answered_for = (state.version, reserved_nodes)
        gpus, answers = job.gpus, self._unallocated
        if gpus not in answers:
            answers[gpus] = self._held(job, tier, reserved_nodes)
        return answers[gpus]

    def _held(
        self, job: Job, tier: QueueTier, reserved_nodes: NDArray[np.bool_] | None
    ) -> str | None:
        """`held`, asked of the rule."""
        figures = self._holding(job, tier, reserved_nodes)
        if figures is None:
            return None
        key = (*figures, job.gpus, tier is QueueTier.ALLOCATED)
        text = self._wording.get(key)
        if text is None:
            text = self._wording[key] = self._headroom(job, tier, figures).explain()
        return text

    def _headroom(self, job: Job, tier: QueueTier, figures: tuple[float, float, float]) -> Headroom:
        free, kept, restarting = figures
        rule = self.rule
        assert rule is not None
        borrowed = tier is QueueTier.ALLOCATED
        return Headroom(free, kept, job.gpus, restarting, borrowed, rule.reserved)

    def _holding(
        self, job: Job, tier: QueueTier, reserved_nodes: NDArray[np.bool_] | None
    ) -> tuple[float, float, float] | None:
        """The free GPUs, the GPUs kept and of them the restarting gangs', when the headroom
        holds the job (None: it does not)."""
        rule = self.rule
        if rule is None or self.state is None or not self.may_hold(tier):
            return None
        free = self._free_gpus(reserved_nodes if rule.reserved else None)
        restarting = self._restarting_gpus() if rule.restarts else 0.0
        kept = self.kept + restarting
        if kept <= 0 or free - job.gpus >= kept:
            return None
        if tier is QueueTier.ALLOCATED and self._within_budget(job):
            return None
        return free, kept, restarting

    def may_hold(self, tier: QueueTier) -> bool:
        """Whether the headroom may hold jobs of `tier`: unallocated work, and with
        `AdmissionRule.borrowed` allocated work too (whether a job is beyond its account's
        budget is for `start`)."""
        rule = self.rule
        if rule is None or (self.kept <= 0 and not rule.restarts):
            return False
        return tier is QueueTier.UNALLOCATED or (tier is QueueTier.ALLOCATED and rule.borrowed)

    @property
    def starts_hold_no_fewer(self) -> bool:
        """Whether a job's start can only keep as many jobs from starting or more: it takes
        free GPUs, so the headroom holds again every job it held, and the rule for reserved
        nodes does not read it. Not so when the headroom counts the interrupted gangs waiting to
        restart within their budget (`AdmissionRule.restarts`): a start moves its account's
        load, which may take such a gang beyond its budget and the headroom down with it."""
        rule = self.rule
        return rule is None or not rule.restarts

    def _free_gpus(self, reserved_nodes: NDArray[np.bool_] | None) -> float:
        """Free GPUs open to new work, and those of the nodes in `reserved_nodes` that the
        fence keeps closed (a backfill's lift opens them, and open nodes count already)."""
        state = self.state
        assert state is not None
        known = self._free
        if known is not None and known[0] == state.version and known[1] is reserved_nodes:
            return known[2]
        free = float(state.total_free_gpus)
        if reserved_nodes is not None and reserved_nodes.size:
            closed = reserved_nodes & (state.closed != 0)
            free += float(state.free_whole_gpus[closed].sum())
        self._free = (state.version, reserved_nodes, free)
        return free

    def walk(
        self, pending: Callable[[], Iterable[Job]], within_budget: Callable[[Job], bool]
    ) -> None:
        """A cycle's walk begins; `pending()` reads its pending jobs (only when the rule
        counts the gangs waiting to restart), `within_budget(job)`: whether the job's account
        runs within its budget with the job."""
        self._pending = pending
        self._within_budget = within_budget
        self._restarting = None
        self._wording.clear()
        self._unallocated.clear()

    def _restarting_gpus(self) -> float:
        """GPUs of the budgeted gangs a node failure interrupted that still wait within their
        budget, not yet given their room. Counted at the walk's first unallocated turn, after
        every budgeted job's turn (with `borrowed`, at the first borrowed turn held back, which
        may come before later budgeted jobs' turns), and kept for the rest of the walk."""
        known = self._restarting
        if known is None:
            known = self._restarting = sum(
                job.gpus
                for job in self._pending()
                if job.state is JobState.PENDING
                and job.nomination is None
                and job.attempts > job.preemptions
                and job.spec.min_runtime > 0
                and self._within_budget(job)
            )
        return known

    def backfill(
        self, job: Job, tier: QueueTier, reservation: Reservation | None, now: float
    ) -> tuple[Reservation | None, Held | None]:
        """The reservation the job may backfill behind (None: it may not use the reserved
        nodes), and why it was held off them, if it was."""
        rule = self.rule
        if (
            rule is None
            or rule.checkpoint_s is None
            or reservation is None
            or tier is not QueueTier.UNALLOCATED
        ):
            return reservation, None
        keeps = rule.first_keep(job)
        if now + keeps <= reservation.start_time:
            return reservation, None
        return None, Held(reservation.job_id, reservation.start_time - now, keeps)
