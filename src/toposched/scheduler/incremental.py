"""Cycles after submissions only (and checkpoints, protection ends, completions and evicted jobs'
leaving): the pending jobs the last cycle answered from what it knew are not walked again, only
the new jobs and the jobs whose turns changed what later jobs see.

Why that gives the full cycle's decisions. Let the last cycle be the reference. Since it, only
jobs were submitted: the cluster state, the budgets, the usage, the running set and the
nominations are as it left them, and the pending jobs it saw keep their order among themselves
(checked by the queue's runs holding them). Say first that the reference made no eviction, so
every job in it saw every preemption still allowed, and no nominee let its nodes go (below for
when it did). A job it bound is gone from the queue; the jobs before it saw more free capacity
then than they see now, and a placement that failed then fails now (the placement search fails
monotonically, as remembered failures assume).

In the reference each job was either *settled* or an *anchor*. A settled job was answered alike
an earlier job under the same knowledge (`Turn.answered`), or waited for its victims to exit,
or was told by a remembered failure (no search) and by a refusal already known in the cycle or
given by the preemption search from its memory: the very `Refusal` object it gave the job the
cycle before, which it keeps only for refusals that stand while nothing they depend on moves
(the epoch, the preemptible index, budgets, usage, the fenced nodes, under `fair_share` the
accounts' order, and no protection ended, or the job is walked again; all checked here). An
anchor searched, preempted, asked for a reservation and got one, or decided. A cycle after
submissions walks the anchors and the new jobs in queue order, through the same
`Walker.consider` as a full cycle, and skips the settled jobs, recording each one's refusal
again for the jobs alike behind it as its turn would. While each anchor gets the answer it got
in the reference (reason code, refusal, reservation job, nodes and domain, the wait for it no
longer) and no new job decides anything, the knowledge every skipped job would meet is what it
met then, give or take failures and refusals the new jobs added, which only answer more jobs
alike the same way (no decision, only other words). So a skipped job would decide nothing,
and its explanation stays the reference's. With the wait for the reservation no longer, a job
that was too long to backfill then still is. A refusal of the checkpoint wait or of the
cost/benefit rule (`FIGURES_MOVE`) counts as the same in other figures: its figures move with
the clock at every cycle, the preemption search never answers from its memory with one, and
the jobs alike behind it are told it without deciding by it; those skipped keep the figures
they were told.

A checkpoint reported since changes none of that: it moves only the work a victim would lose
(the preemptible index's version), which orders the victim search and weighs an eviction's
cost against its benefit, but never decides a lasting refusal, the only kind the preemption
search answers from its memory (`KeptRefusals`: a refusal stands through a checkpoint). A job
whose answer reads lost work searched for victims in the reference, so it is an anchor and is
walked again; the reservation's search and the moves that open a domain are an anchor's too.

A protection that ended since (a min-runtime expiry) gives a preemptor more it may take, and
changes nothing else a settled job's answer reads: no capacity, no failure, no order. The jobs
whose answer it can move are those the preemptor answered: the anchors, walked anyway, and the
settled jobs it refused from its memory (`Reference.replays`). Those are walked too, each
compared with its answer in the reference as an anchor is; a job refused by a refusal known
earlier in the cycle meets it again only if the job that recorded it, walked, got the same. The
others (answered alike, told by a failure, unallocated work, which never preempts) are skipped.

A new job that starts (deciding nothing else) takes free capacity and moves its account's load,
nothing else a settled job reads: a failure stays a failure with less capacity, the reservation
is an anchor's, and a refusal recorded earlier in a cycle serves later jobs across starts in a
full cycle too. The load is read by the preemptor: from such a start on, the settled jobs it
refused from its memory are walked and compared, as after a protection's end (`Walk.rejudge`).

A running job that ended on its own since frees capacity: a failure may not hold any more. A
remembered failure that outlived the release (no domain that gained GPUs can now hold a gang of
its shape: `FailureMemo.outlive_release`) tells every settled job of its shape the same, and one
answered alike meets the same answers. The jobs of the other shapes, whose failures the release
may have undone, are walked as new jobs are (`Walk.reopened`): one may start, which moves what a
new job's start moves, and any other decision departs; one that decides nothing adds failures
and refusals, and every job whose answer read its answer last time (alike, or by a refusal it
recorded) is of its shape, walked too. Where they are more than a quarter of the queue, the
cycle is a full one: walked one by one they would cost more than a full walk. The ended job's
account runs less, which only the preemptor reads: the settled jobs it refused from its memory
are walked and compared, as after a protection's end; the anchors are walked anyway (the
reservation may come sooner: a job too long to backfill then still is), and the owed accounts'
order is compared through the queue's runs. The scheduler allows it only where no answer reads
free capacity or the running jobs outside a job's own turn
(`BetweenCycles.skips_after_completions`).

An evicted job that left is such a release too and, queued again, a new job. The preemptor it
left for starts once its last victim is gone, at its turn: in a cycle after releases every
pending nominee takes its turn (`Incremental.walk`), judged as a new job is (its start moves
what a new job's start moves). When its last victim leaves, the nodes kept for it count as
released as well: what they hold beyond its pods opens, at its turn, to the jobs after it. A job
on its way out that ends moves no load the preemptor reads: its GPUs leave its account's running
and leaving counts alike. A nominee that started, or let go of its nodes, leaves them open after
its turn; the jobs walked before it saw them fenced, so the next cycle takes them for released
(`BetweenCycles.after_cycle`).

A reference that evicted for preemptors (or moved jobs for a reserved one) serves too, unless it
made as many preemptions as a cycle may (the jobs after the last asked for none). The next cycle
finds the state it left: the jobs walked after each preemptor saw it as it is; those before saw
the victims still preemptible and the nodes kept for the preemptor open, where now the victims
are on their way out and the nodes fenced. A placement that failed then fails now, with less
free capacity. What moved is what the preemptor reads: the victims' accounts count their GPUs
as leaving, and fewer jobs may be taken. So, as after a new job's start, the settled jobs the
preemptor refused from its memory are walked and compared (`Reference.preempted`), and each
nominee takes its turn, judged as a new job is: the preemptors of the reference now wait for
their victims, an answer that moves nothing a later job reads.

Such a cycle visits only those jobs (`Walk.visits`: the anchors and the settled jobs the
preemptor refused, kept in queue order, and the new and reopened jobs, put among them by their
sort keys), never the whole queue. The old jobs keep their order among themselves when the
queue's runs holding them do (`same_order`): jobs keep their place within a run.

From the first anchor whose answer differs, or the first new job that evicts, reserves or moves
jobs, the cycle walks every remaining job, as a full cycle does from there. A full cycle runs
whenever anything else happened since the reference (any other event, a change of the cluster
state, budgets or usage seen by their versions but a completion's, as above), when the
reference made as many preemptions as a cycle may or opened a gang's kept nodes, when the old
jobs' order moved
(usage accrues, so accounts may re-rank), and every `full_cycle_every` seconds regardless.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from toposched.policy.fairshare import Segment
from toposched.scheduler.decisions import Bind, Decision
from toposched.scheduler.failures import Shape
from toposched.scheduler.jobs import Job, ReasonCode
from toposched.scheduler.refusals import Refusal, RefusalCode
from toposched.scheduler.tally import PendingTally
from toposched.scheduler.turn import Asked, FullCycle

FIGURES_MOVE = frozenset({RefusalCode.WAITING_FOR_CHECKPOINTS, RefusalCode.NOT_WORTH_IT})
"""Refusals of the contract's checkpoint wait and cost/benefit rule: their figures (the work at
stake, the wait for checkpoints) move with the clock, so the preemption search never answers
from its memory with one (`Preemptor.search`), and the jobs told one later in a cycle
(`Turn.unpreemptable`) decide nothing by it."""

REOPENED_MOST = 0.25
"""A cycle after completions whose release may have undone the failures of more than this
share of the pending jobs is a full one: walked one by one, they would cost more than the full
walk, which answers jobs alike in its own loop."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an anchor was told: what later jobs read of its turn."""

    code: ReasonCode
    refusal: Refusal | None
    reservation: tuple[str, bytes, str] | None
    """The reservation it got: its job, nodes (as bytes) and domain."""
    wait: float = 0.0
    """Seconds from the cycle to the reservation's start."""

    @staticmethod
    def of(job: Job, now: float, reserved_nodes: NDArray[np.int64]) -> Outcome:
        """`job`'s answer; `reserved_nodes`: the nodes of the last reservation found."""
        reserved = job.reservation
        if reserved is None:
            return Outcome(job.reason_code, job.refusal, None)
        place = (reserved.job_id, reserved_nodes.tobytes(), reserved.domain)
        return Outcome(job.reason_code, job.refusal, place, reserved.start_time - now)

    def serves_for(self, earlier: Outcome) -> bool:
        """Whether later jobs meet nothing new in this answer after `earlier`: the same code,
        refusal and reservation, the wait for it no longer (a job too long to backfill then
        still is: the reserved job starts at max(its release, now)). A refusal whose figures
        move with the clock (`FIGURES_MOVE`) serves in other figures: later jobs are told it
        without deciding by it."""
        return (
            self.code is earlier.code
            and _same_refusal(self.refusal, earlier.refusal)
            and self.reservation == earlier.reservation
            and self.wait <= earlier.wait
        )


def _same_refusal(refusal: Refusal | None, earlier: Refusal | None) -> bool:
    """The same refusal, or one of the same code in `FIGURES_MOVE` in other figures."""
    if refusal == earlier:
        return True
    return (
        refusal is not None
        and earlier is not None
        and refusal.code is earlier.code
        and refusal.code in FIGURES_MOVE
    )


@dataclass
class Reference:
    """What the last cycle left for a cycle after submissions only."""

    now: float
    stamp: tuple[int, ...]
    """The versions of what its answers depend on (see `Walker.stamp`)."""
    until: float
    """When the next protection of a running job ends after it."""
    leaves: tuple[str, ...] | None
    """The accounts' order, where the contract reads it (None: where it does not)."""
    size: int
    """How many jobs were still pending after it."""
    segments: list[Segment]
    """The queue's runs holding them, in its order: while these keep their order, so do
    the jobs."""
    points: list[str]
    """The jobs of `outcomes` and `replays`, in queue order: the only ones a cycle after it
    visits, with the new jobs."""
    replays: dict[str, Asked]
    """The settled jobs the preemptor refused, with the refusal: the others it settled are
    the pending jobs in neither this nor `outcomes`."""
    outcomes: dict[str, Outcome]
    """The anchors' answers."""
    refused: dict[str, Outcome]
    """The answers of the settled jobs of `replays`, to compare with where they are walked
    (after a protection ended)."""
    preempted: bool = False
    """Whether its cycle evicted jobs for preemptors (or moved them for a reserved job)."""


@dataclass
class Walk:
    """One cycle's walk down the queue: which jobs it skips, and what it leaves for the next."""

    reference: Reference | None
    """None: a full cycle, which skips no job."""
    asked_before: dict[str, Refusal]
    """The refusals the preemptor gave in the last cycle, by job."""
    new: frozenset[str] = frozenset()
    reopened: frozenset[str] = frozenset()
    """The pending jobs of the shapes whose failures a release since the reference may have
    undone, but its anchors: walked and judged as new jobs are (`reopen`)."""
    rejudge: bool = False
    """Whether the settled jobs the preemptor refused take their turn, compared with their
    answers then: a running job's protection ended since the reference (the preemptor may
    take more), or a new job started earlier in the walk (the loads moved)."""
    replays: dict[str, Asked] = field(default_factory=dict)
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    refused: dict[str, Outcome] = field(default_factory=dict)
    points: list[str] = field(default_factory=list)
    """The jobs of `outcomes` and `replays`, in the order they were walked."""
    segments: list[Segment] | None = None
    """The queue's runs at the cycle's start, if read (see `Incremental.walk`)."""
    asked: dict[str, Refusal] = field(default_factory=dict)
    skipped: int = 0
    full_because: FullCycle | None = None
    """Why it skips no job (None: it skips)."""

    @property
    def skipping(self) -> bool:
        return self.reference is not None

    def visits(self) -> list[str]:
        """The jobs a cycle after the reference visits while it skips: its anchors and the
        settled jobs the preemptor refused (in queue order), then the new jobs; every other
        pending job is settled, and nothing since changed what it would meet."""
        reference = self.reference
        assert reference is not None
        return [*reference.points, *self.new, *self.reopened]

    def reopen(self, pending: Iterable[str], nominees: Iterable[str] = ()) -> None:
        """The pending jobs of the shapes whose failures a release may have undone, and the
        `nominees`: each takes its turn, and one that was no anchor, and every nominee, is
        judged as a new job is (see the module)."""
        reference = self.reference
        assert reference is not None
        anchors = reference.outcomes
        reopened = {job_id for job_id in pending if job_id not in anchors}
        self.reopened = frozenset(reopened.union(nominees))

    def replay(self, job_id: str) -> Asked | None:
        """The refusal a settled job the preemptor refused records again, its turn skipped;
        None for the jobs that take their turn: the anchors, the new jobs, and every job the
        preemptor refused once a protection ended or a new job started (it judges the refusal
        again)."""
        reference = self.reference
        assert reference is not None
        asked = reference.replays.get(job_id)
        if asked is None or self.rejudge:
            return None
        self.noted(job_id, replays=asked, refused=reference.refused[job_id])
        self.asked[job_id] = asked.refusal
        return asked

    def noted(
        self,
        job_id: str,
        *,
        outcome: Outcome | None = None,
        replays: Asked | None = None,
        refused: Outcome | None = None,
    ) -> None:
        """Keep for the next cycle an anchor's `outcome`, or a settled job's refusal from the
        preemptor's memory (`replays`) and its answer (`refused`)."""
        if outcome is not None:
            self.outcomes[job_id] = outcome
        if replays is not None and refused is not None:
            self.replays[job_id] = replays
            self.refused[job_id] = refused
        self.points.append(job_id)

    def check(self, job_id: str, decided: bool, outcome: Outcome, started_only: bool) -> None:
        """While skipping: stop where a job's turn departs from the reference's, a new job's
        by deciding anything but its own start (evicting, reserving or moving jobs changes
        what every later job meets; a start, see the module), an old job's by an answer later
        jobs would meet otherwise."""
        reference = self.reference
        assert reference is not None
        if job_id in self.new or job_id in self.reopened:
            if decided and started_only:
                self.rejudge = True
            elif decided:
                self.reference = None
            return
        known = reference.outcomes.get(job_id)
        if known is None and self.rejudge:
            known = reference.refused.get(job_id)
        reserved_only = not decided or outcome.reservation is not None
        if known is None or not reserved_only or not outcome.serves_for(known):
            self.reference = None


class Incremental:
    """What the scheduler keeps between cycles to run one after submissions only (see the
    module): the reference, the jobs submitted since, and when the last full cycle ran."""

    def __init__(self, enabled: bool, full_cycle_every: float) -> None:
        self.enabled = enabled
        self.full_cycle_every = full_cycle_every
        self.reference: Reference | None = None
        self.dropped = FullCycle.FIRST
        """Why there is no reference, when there is none."""
        self.submitted: list[str] = []
        self.checkpoints = False
        """Whether running jobs reported checkpoints since the reference."""
        self.completions = False
        """Whether running jobs ended (on their own, or evicted), or nominees let go of nodes,
        since the reference."""
        self.undone: frozenset[Shape] = frozenset()
        """The shapes whose failures those ends may have undone."""
        self.asked: dict[str, Refusal] = {}
        self.last_full = -float("inf")
        self.cycles = 0
        """Cycles run after submissions only."""

    def submitted_job(self, job_id: str) -> None:
        self.submitted.append(job_id)

    def forget(self, why: FullCycle) -> None:
        """Something other than a submission or a checkpoint happened (`why`): the next cycle
        is a full one."""
        if self.reference is not None:
            self.reference, self.dropped = None, why

    def checkpointed(self) -> None:
        """A running job saved its work: what victims would lose moved, which only the jobs
        that searched read (see the module), so the reference still serves."""
        self.checkpoints = True

    def completed(self) -> None:
        """A running job ended (on its own, or evicted), or the last cycle's nominees let go of
        nodes fenced for the jobs before them: the reference still serves, its jobs of the
        shapes whose failures the freed capacity may have undone walked again (`released`)."""
        self.completions = True

    def released(self, undone: frozenset[Shape] | None) -> None:
        """The cycle found what the capacity freed since the last one may have undone: the
        failures of the shapes `undone`, or every failure (None: the next cycle is a full
        one)."""
        if undone is None:
            self.forget(FullCycle.RELEASE_READ)
        else:
            self.undone = undone

    def walk(
        self,
        now: float,
        stamp: tuple[int, ...],
        leaves: tuple[str, ...] | None,
        size: int,
        segments: list[Segment] | None,
        tally: PendingTally | None = None,
    ) -> Walk:
        """The walk of a cycle at `now` over `size` pending jobs laid in the queue's runs
        `segments` (in order; None when there is no reference to compare them with): skipping
        the jobs the reference settled, when nothing but submissions, checkpoints, protection
        ends and completions happened since, but for the jobs of the shapes whose failures
        the completions may have undone (read from `tally`)."""
        reference, new = self.reference, frozenset(self.submitted)
        checkpoints, completions, undone = self.checkpoints, self.completions, self.undone
        self.reference = None
        self.submitted = []
        self.checkpoints = self.completions = False
        self.undone = frozenset()
        reopened: list[str] = []
        if undone and reference is not None and tally is not None:
            reopened = tally.of_shapes(undone)
        nominees: list[str] = []
        if reference is not None and tally is not None and (completions or reference.preempted):
            # A job that ended may have been a nominee's last victim, and a nominee of the
            # last cycle waits now: each nominee takes its turn (see the module).
            nominees = tally.nominees()
        why: FullCycle | None = None
        if not self.enabled:
            why = FullCycle.OFF
        elif reference is None:
            why = self.dropped
        elif self.full_cycle_every > 0 and now >= self.last_full + self.full_cycle_every:
            why = FullCycle.PERIODIC
        elif not reference.now <= now or not same_stamp(
            stamp, reference.stamp, checkpoints, completions
        ):
            why = FullCycle.CHANGED
        elif (
            segments is None
            or leaves != reference.leaves
            or size != reference.size + len(new)
            or not same_order(segments, reference.segments)
        ):
            why = FullCycle.ORDER
        elif (undone and tally is None) or len(reopened) + len(nominees) > REOPENED_MOST * size:
            why = FullCycle.REOPENED
        if why is not None or reference is None:
            self.last_full = now
            self.dropped = FullCycle.FIRST
            return Walk(None, self.asked, segments=segments, full_because=why)
        self.cycles += 1
        rejudge = completions or reference.preempted or now >= reference.until
        walk = Walk(reference, self.asked, new, rejudge=rejudge, segments=segments)
        if reopened or nominees:
            walk.reopen(reopened, nominees)
        return walk

    def settle(self, walk: Walk, reference: Reference | FullCycle) -> None:
        """The cycle is over: `reference` is what it leaves, or why it leaves none (see
        `Walker.leave_reference`)."""
        self.asked = walk.asked
        if isinstance(reference, FullCycle):
            self.reference, self.dropped = None, reference
        else:
            self.reference = reference


def same_order(segments: list[Segment], reference: list[Segment]) -> bool:
    """Whether the jobs the reference left pending keep their order among themselves: the
    runs holding them (`reference`) come in the same order among `segments`. Jobs keep their
    place within a run, and joining jobs move no other."""
    held = set(reference)
    return [segment for segment in segments if segment in held] == reference


def same_stamp(
    stamp: tuple[int, ...], reference: tuple[int, ...], checkpoints: bool, completions: bool = False
) -> bool:
    """Whether `stamp` (see `Walker.stamp`) is the reference's, but for the preemptible
    index's version (its last) when checkpoints were reported since: a checkpoint moves it,
    and what it moved is read only by searches (see the module). After completions only the
    budgets must be the same (its second)."""
    if completions:
        return stamp[1] == reference[1]
    if checkpoints:
        return stamp[:-1] == reference[:-1]
    return stamp == reference


def differences(expected: Sequence[Decision], actual: Sequence[Decision]) -> str | None:
    """How `actual` departs from `expected`, decision by decision, in words (None: not)."""
    for number, (want, got) in enumerate(zip(expected, actual, strict=False), start=1):
        if not _same(want, got):
            return f"decided {got} where a full cycle decided {want} (decision {number})"
    if len(expected) != len(actual):
        return f"made {len(actual)} decisions where a full cycle made {len(expected)}"
    return None


def _same(want: Decision, got: Decision) -> bool:
    if isinstance(want, Bind) and isinstance(got, Bind):
        mine, theirs = want.allocation, got.allocation
        return (
            (want.job_id, want.unallocated, want.backfilled)
            == (got.job_id, got.unallocated, got.backfilled)
            and (mine.gpu_milli, mine.cpu_milli, mine.memory_mib)
            == (theirs.gpu_milli, theirs.cpu_milli, theirs.memory_mib)
            and np.array_equal(mine.nodes, theirs.nodes)
            and np.array_equal(mine.gpus, theirs.gpus)
        )
    return want == got
