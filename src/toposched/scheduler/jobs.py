"""Jobs as the scheduler tracks them: spec, resolved request, lifecycle and history."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import Allocation
from toposched.cluster.topology import Topology
from toposched.jobs.spec import JobSpec
from toposched.placement.job_sets import JobSets
from toposched.placement.request import GangRequest
from toposched.scheduler.refusals import Refusal


class JobState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"


class ReasonCode(StrEnum):
    """Why a job is where it is, as a code; `Job.reason` says it in words."""

    NOT_CONSIDERED = "not-considered"
    """Submitted; no cycle has looked at it yet."""
    QUEUED = "queued"
    """Back in the queue (submitted, requeued), waiting for the next cycle."""
    RESTARTING_FIRST = "restarting-first"
    """Interrupted by a node failure within its budget: first in the next cycle."""
    RESTARTING_ON_SPARE = "restarting-on-spare"
    """Interrupted by a node failure: restarts on its surviving nodes and a spare."""
    DOES_NOT_FIT = "does-not-fit"
    """No placement on the free capacity (and no preemption was looked for)."""
    NO_PREEMPTION = "no-preemption"
    """No placement, and no set of victims the contract allows makes room."""
    RESERVED = "reserved"
    """Blocked; capacity is reserved for it from an expected time on."""
    PREEMPTING = "preempting"
    """Victims were evicted for it; it starts on their nodes once they exit."""
    DEFRAGMENTING = "defragmenting"
    """Jobs are being moved to open a domain for it."""
    RUNNING = "running"
    RUNNING_ON_DRAINING = "running-on-draining"
    """Running on a draining node; it leaves when its min runtime ends."""
    ENDED = "ended"
    """Finished, failed or cancelled."""


@dataclass
class Reservation:
    """Where and when a blocked large job is expected to start; backfill must not delay it."""

    job_id: str
    start_time: float
    nodes_count: int
    domain: str
    """The domain that holds it, e.g. "block z0-b3" ("cluster" when it spans the top)."""

    def describe(self, now: float) -> str:
        wait = self.start_time - now
        if wait <= 0:
            # The releases it counts on are due: jobs past their expected end, or, having
            # declared none, past their min runtime but not preemptible for this job.
            return (
                f"waiting for reservation in {self.domain}, due now: the jobs holding it are "
                "past their expected end (or, without one, their min runtime)"
            )
        return f"waiting for reservation at +{_duration(wait)} in {self.domain}"


@dataclass
class Nomination:
    """Capacity being freed for a preemptor: nothing else may take these nodes."""

    victims: set[str]
    nodes: NDArray[np.int64]
    decided_at: float
    allocation: Allocation | None = None
    """The exact allocation to start on, when known (a gang moved onto a spare node)."""


@dataclass(frozen=True)
class EvictionRecord:
    """One eviction, as recorded on the victim."""

    time: float
    preemptor: str
    rule: str
    reason: str
    lost_gpu_seconds: float


@dataclass(eq=False, slots=True)
class AnswerBoard:
    """What the jobs of one scheduler read their shared answers against: the cycle now (or
    the last one), and the pending jobs with a nomination, which every cycle visits."""

    cycle: int = 0
    nominees: dict[str, Job] = field(default_factory=dict)
    """Jobs whose nomination is set, by id (a cycle reads those still pending)."""


@dataclass(eq=False, slots=True)
class SharedAnswer:
    """The answer of every pending job of one key (kind, account, priority, declared
    unallocated) that a cycle did not visit: it left the run of the account's jobs once every
    one left would be answered alike (see `toposched.scheduler.tally`). Such a job reads this
    answer, without a reservation, until its own is written again."""

    board: AnswerBoard
    reason: str = ""
    code: ReasonCode = ReasonCode.NOT_CONSIDERED
    refusal: Refusal | None = None
    cycle: int = -1
    """The cycle that gave it: jobs told before that cycle read it."""


@dataclass(frozen=True, eq=False, slots=True)
class JobKind:
    """What a pending job's answer in a cycle depends on besides its account: its shape, pod
    count and expected runtime. The scheduler keeps one object per distinct kind, so jobs of a
    kind are told apart by identity, without reading their spec or request again (at 10,000
    pending jobs those reads, scattered in memory, cost more than the rest of a job's turn)."""

    shape: tuple[object, ...]
    pods: int
    expected_runtime: float | None


@dataclass(slots=True)
class Job:
    """One job and its history; its identity survives requeues."""

    spec: JobSpec
    request: GangRequest
    """The gang of all the job's pods; for a job of several pod sets, its pods within the
    job's topology, each asking the most any set asks per pod (`JobSets.gang`: room for it
    holds every set, without their own topology), and `sets` says how they are placed."""
    submit_time: float
    state: JobState = JobState.PENDING
    start_time: float | None = None
    end_time: float | None = None
    unallocated: bool = False
    """Whether the current (or last) run is unallocated work: not charged, never protected."""
    min_runtime: float = 0.0
    """Protection after the cluster's cap, fixed at start."""
    attempts: int = 0
    preemptions: int = 0
    _reason: str = field(default="not yet considered", repr=False)
    _reason_code: ReasonCode = field(default=ReasonCode.NOT_CONSIDERED, repr=False)
    _refusal: Refusal | None = field(default=None, repr=False)
    _reservation: Reservation | None = field(default=None, repr=False)
    history: list[tuple[float, str]] = field(default_factory=list)
    last_checkpoint: float | None = None
    """When the running job last saved its state (resumable jobs that report it)."""
    checkpoint_every: float | None = None
    """Seconds between its checkpoints, learned from its reports (None: not known yet)."""
    evicting: bool = False
    """An eviction was decided; the job keeps its GPUs until the backend reports it gone."""
    _nomination: Nomination | None = field(default=None, repr=False)
    evictions: list[EvictionRecord] = field(default_factory=list)
    """Who preempted this job, why, and the impact charged."""
    _shape: tuple[object, ...] | None = field(default=None, repr=False)
    kind: JobKind | None = field(default=None, repr=False)
    """Set by the scheduler when the job joins its queue, or when it first considers the job
    (like `shape`, from the request as it is then)."""
    tier_key: tuple[object, ...] | None = field(default=None, repr=False)
    """The key of the answers it shares with the jobs of its shape in the unallocated tier
    (see `Walker.walk`), set with `kind` when it joins a counted queue."""
    sets: JobSets | None = None
    """A job of several pod sets: placed set by set, all or none (`job_sets`)."""
    held: JobSets | None = None
    """While a job of elastic pod sets runs: its sets at the pods each got (`hold`)."""
    shared: SharedAnswer | None = field(default=None, repr=False, compare=False)
    """While pending under a scheduler that shares answers: the answer its key shares (see
    `SharedAnswer`)."""
    board: AnswerBoard | None = field(default=None, repr=False, compare=False)
    """The scheduler's board, once the job joined its queue (kept: it lists nominees)."""
    told_at: int = field(default=0, repr=False, compare=False)
    """The board's cycle when the job's own answer was last written."""

    # --- what the job was told ---------------------------------------------------------------
    # Each reads the answer its key shares when the last cycle that shared one stopped before
    # the job (`shared.cycle` after `told_at`), and the job's own otherwise; a write first
    # takes the shared answer as the job's own, so the other fields keep saying it.

    @property
    def reason(self) -> str:
        shared = self.shared
        if shared is not None and shared.cycle > self.told_at:
            return shared.reason
        return self._reason

    @reason.setter
    def reason(self, reason: str) -> None:
        shared = self.shared
        if shared is not None and self.told_at != shared.board.cycle:
            self._own()
        self._reason = reason

    @property
    def reason_code(self) -> ReasonCode:
        shared = self.shared
        if shared is not None and shared.cycle > self.told_at:
            return shared.code
        return self._reason_code

    @reason_code.setter
    def reason_code(self, code: ReasonCode) -> None:
        shared = self.shared
        if shared is not None and self.told_at != shared.board.cycle:
            self._own()
        self._reason_code = code

    @property
    def refusal(self) -> Refusal | None:
        """For a pending job, why no preemption made room for it in the last cycle (None when
        none was looked for)."""
        shared = self.shared
        if shared is not None and shared.cycle > self.told_at:
            return shared.refusal
        return self._refusal

    @refusal.setter
    def refusal(self, refusal: Refusal | None) -> None:
        shared = self.shared
        if shared is not None and self.told_at != shared.board.cycle:
            self._own()
        self._refusal = refusal

    @property
    def reservation(self) -> Reservation | None:
        shared = self.shared
        if shared is not None and shared.cycle > self.told_at:
            return None
        return self._reservation

    @reservation.setter
    def reservation(self, reservation: Reservation | None) -> None:
        shared = self.shared
        if shared is not None and self.told_at != shared.board.cycle:
            self._own()
        self._reservation = reservation

    def tell(self, reason: str, code: ReasonCode, refusal: Refusal | None) -> None:
        """Give the pending job its answer, without a reservation: one call for the walk's
        jobs answered alike an earlier one."""
        self._reason = reason
        self._reason_code = code
        self._refusal = refusal
        self._reservation = None
        shared = self.shared
        if shared is not None:
            self.told_at = shared.board.cycle

    def _own(self) -> None:
        """Take the answer its key shares as the job's own, if it reads that one now (nothing
        to do if its own answer was written in the board's cycle: a setter tests that)."""
        shared = self.shared
        if shared is None:
            return
        if shared.cycle > self.told_at:
            self._reason = shared.reason
            self._reason_code = shared.code
            self._refusal = shared.refusal
            self._reservation = None
        self.told_at = shared.board.cycle

    def share(self, shared: SharedAnswer | None) -> None:
        """Read the answer of `shared` from the next cycle that shares one (None: only the
        job's own), keeping what the job was told until then."""
        self._own()
        self.shared = shared
        if shared is not None:
            board = self.board = shared.board
            self.told_at = board.cycle
            if self._nomination is not None:
                board.nominees[self.job_id] = self

    @property
    def nomination(self) -> Nomination | None:
        """For a pending preemptor: victims still to exit and the nodes kept for it."""
        return self._nomination

    @nomination.setter
    def nomination(self, nomination: Nomination | None) -> None:
        self._nomination = nomination
        board = self.board
        if board is None:
            return
        nominees, job_id = board.nominees, self.spec.name
        if nomination is not None:
            nominees[job_id] = self
        elif nominees.get(job_id) is self:
            del nominees[job_id]

    def __post_init__(self) -> None:
        if self.sets is not None:
            self.request = self.sets.gang(self.request)

    def hold(self, allocation: Allocation) -> None:
        """The job starts on `allocation`: a job of elastic sets counts (GPUs, its gang for
        moves and the preemptible index) the pods each set got, until `unhold`."""
        sets = self.sets
        if sets is None or not sets.elastic:
            return
        self.held = sets.at(sets.counts_in(allocation))
        self.request = self.held.gang(self.request)

    def unhold(self) -> None:
        """The job waits again: a job of elastic sets asks for its minimums."""
        if self.sets is not None and self.held is not None:
            self.held = None
            self.request = self.sets.gang(self.request)

    @property
    def shape(self) -> tuple[object, ...]:
        """Everything but the pod count: a gang that failed blocks larger gangs of its shape."""
        cached = self._shape
        if cached is None and self.sets is not None:
            cached = self._shape = ("pod sets", self.sets.shape)
        if cached is None:
            request = self.request
            models = (
                None if request.allowed_models is None else tuple(request.allowed_models.tolist())
            )
            cached = self._shape = (
                request.gpus_per_pod,
                request.gpu_milli,
                request.cpu_milli,
                request.memory_mib,
                models,
                request.required,
                request.slices,
                request.on_one_node,
                request.node_slice,
                request.within,
            )
        return cached

    @property
    def job_id(self) -> str:
        return self.spec.name

    @property
    def gpus(self) -> float:
        """GPUs held while running (shared pods count their fraction), every set's."""
        if self.sets is not None:
            return (self.held or self.sets).gpus
        request = self.request
        return request.pods * request.gpus_per_pod * request.gpu_milli / 1000

    @property
    def expected_end(self) -> float | None:
        if self.start_time is None or self.spec.expected_runtime is None:
            return None
        return self.start_time + self.spec.expected_runtime

    def record(self, time: float, event: str) -> None:
        self.history.append((time, event))


def job_sets(spec: JobSpec, topology: Topology) -> JobSets | None:
    """The pod sets of a job written with `pod_sets`, resolved against `topology` (None for
    the one-set shorthand)."""
    if spec.pod_sets is None:
        return None
    return JobSets.from_spec(spec, topology)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
