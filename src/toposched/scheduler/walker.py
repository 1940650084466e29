"""A cycle's walk down the pending queue: each job's turn in queue order (it starts on the nodes
kept for it, is placed or backfilled, preempts, or gets the reservation), the turns a cycle
after submissions only skips (see `toposched.scheduler.incremental`), and what the walk leaves
for the next cycle."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping

import numpy as np

from toposched.cluster.state import ClusterState
from toposched.policy.budget import BudgetTree
from toposched.policy.fairshare import UnallocatedOrder
from toposched.policy.queue_entry import QueueEntry, QueueTier
from toposched.policy.usage import UsageTracker
from toposched.scheduler.admission import AdmissionGate
from toposched.scheduler.decisions import Bind, Evict, Reserve
from toposched.scheduler.errors import InternalError
from toposched.scheduler.evictions import Evictor
from toposched.scheduler.failures import FailureMemo
from toposched.scheduler.incremental import Incremental, Outcome, Reference, Walk, differences
from toposched.scheduler.interruptions import Interruptions
from toposched.scheduler.jobs import Job, JobKind, ReasonCode
from toposched.scheduler.ledger import Ledger
from toposched.scheduler.placing import Placing, backfills, sets_refusal
from toposched.scheduler.preemption import PreemptionPlan
from toposched.scheduler.preemptor import Preemptor
from toposched.scheduler.queueing import JobQueue, TalliedQueue
from toposched.scheduler.reservations import ReservationSearch
from toposched.scheduler.settings import SchedulerSettings
from toposched.scheduler.tally import SHORT_QUEUE, JobKinds, PendingTally, tier_key
from toposched.scheduler.turn import Answer, Asked, CycleResult, FullCycle, Refused, Turn
from toposched.scheduler.wording import no_preemption


class Walker:
    """Walks the pending queue for the scheduler's cycles. `epoch` tells the scheduler's epoch
    now (it moves whenever free capacity may have changed, a start within the walk too);
    `jobs` holds every job by id; `tally` counts the queue's jobs by key, if it is counted."""

    def __init__(
        self,
        state: ClusterState,
        tree: BudgetTree,
        usage: UsageTracker,
        queue: JobQueue,
        ledger: Ledger,
        settings: SchedulerSettings,
        failures: FailureMemo,
        placing: Placing,
        preemptor: Preemptor,
        reservations: ReservationSearch,
        evictor: Evictor,
        incremental: Incremental,
        epoch: Callable[[], int],
        jobs: Mapping[str, Job],
        tally: PendingTally | None = None,
        interruptions: Interruptions | None = None,
    ) -> None:
        self.state = state
        self.tree = tree
        self.usage = usage
        self.queue = queue
        self.ledger = ledger
        self.settings = settings
        self.failures = failures
        self.placing = placing
        self.preemptor = preemptor
        self.reservations = reservations
        self.evictor = evictor
        self.incremental = incremental
        self.epoch = epoch
        self.admission = AdmissionGate(settings.admission, state)
        self.jobs = jobs
        self.tally = tally
        self.kinds = tally.kinds if tally is not None else JobKinds()
        self.interruptions = interruptions
        self.tallied = queue if isinstance(queue, TalliedQueue) else None
        """The queue as a cycle after submissions only reads it: in runs it can compare."""

    # --- the walk ----------------------------------------------------------------------------
    def walk(
        self,
        turn: Turn,
        runs: Iterable[Iterable[QueueEntry]],
        size: int,
        walk: Walk,
        owed: Collection[str],
        by_account: bool = False,
    ) -> bool:
        """Each pending job's turn (`runs`: the `size` pending jobs in queue order, in runs
        of one account's jobs if `by_account`; `owed`: the accounts whose allocated work goes
        first), in queue order, but those `walk` skips: while it skips, only the jobs it
        visits are read (`Walk.visits`), in queue order, and from the first whose answer
        departs from the reference's every job after it. With incremental cycles on, what
        each turn left for the next cycle is noted in `walk`. With the queue counted by key
        (`PendingTally`) and read by account, a full cycle leaves a run once every job left
        in it would be answered alike, those jobs reading their key's shared answer (see
        `toposched.scheduler.tally`).

        Returns whether every pending job was walked or skipped (no run left early)."""
        jobs, tally = self.jobs, self.tally
        runs = self._fence_nominated(turn, runs)
        turn.result.considered = size
        self.admission.walk(lambda: self._pending_jobs(turn.now), self._within_budget)
        track = self.incremental.enabled
        whole = True
        answered_alike = turn.answered
        tail = None
        walked = 0
        changed = walk.reference is not None
        if changed:
            runs, walked = self._walk_changed(turn, walk, owed)
            by_account = True
        elif tally is not None:
            tally.board.cycle = turn.number
            if by_account and size >= SHORT_QUEUE:
                tail = tally.tail(turn.number)
        known = self._known_so_far(turn)
        ahead = tail.ahead if tail is not None else {}
        # Oldest first, the unallocated tier interleaves the accounts' jobs: a look would
        # share answers for jobs of the account still to come in later runs, so none is taken
        # there (its turns answered alike stay cheap).
        interleaved = self.settings.unallocated_order is UnallocatedOrder.OLDEST
        unallocated, tier_of = QueueTier.UNALLOCATED, self.queue.tier
        # A gang whose nodes are kept takes its own turn, with them opened.
        kept = self.interruptions.kept_ids if self.interruptions is not None else ()
        # The unallocated tier's answers read no expected runtime, account or priority (see
        # `tally.tier_key`).
        shares_tier = self.admission.rule is None
        # Under the admission rule's headroom most unallocated jobs are held by it while
        # nothing moves: such a turn is told so without the rest of it (`_held`).
        held_first = self.admission.may_hold(unallocated)
        tiers = turn.tiers
        alike = shared = 0
        for run in runs:
            streak = every = 0
            # Runs read by account are one account's jobs of one tier: its tier is read once.
            run_tier: QueueTier | None = None
            for entry in run:
                walked += 1
                job = jobs[entry.job_id]
                # Answered alike an earlier job (`consider`'s first test, without the rest of
                # its turn): nothing a later job reads moves, not even `known`, and a full
                # walk leaves nothing of such a turn for the next cycle.
                kind = job.kind
                key = (kind, entry.account, entry.priority, entry.unallocated)
                if tail is not None:
                    ahead[key] = ahead.get(key, 0) - 1
                same = answered_alike.get(key)
                by_key = True
                if (same is None or same.known != known) and shares_tier and kind is not None:
                    if not by_account:
                        tier = self._tier_of(tiers, entry)
                    elif run_tier is None:
                        tier = run_tier = self._tier_of(tiers, entry)
                    else:
                        tier = run_tier
                    if tier is unallocated:
                        same = answered_alike.get(self._tier_key(job, kind, entry))
                        by_key = False
                if (
                    same is not None
                    and same.known == known
                    and job.nomination is None
                    and same.failed_job != entry.job_id
                    and entry.job_id not in kept
                ):
                    job.tell(same.reason, same.code, same.refusal)
                    alike += 1
                    if not by_key:
                        # Kept under its own key too, as its turn would have kept it, where
                        # the walk may leave runs: its looks at whether to leave one then
                        # find what they found when such a job took its turn.
                        if tail is not None:
                            answered_alike[key] = same
                        continue
                    streak += 1
                    if (
                        tail is not None
                        and streak >= every
                        and not (interleaved and tier_of(entry) is unallocated)
                    ):
                        if not every:
                            # The run's first job answered alike: how often to look.
                            every = tail.look_every(entry.account)
                            continue
                        streak = 0
                        left = tail.leave_run(entry.account, answered_alike, known, jobs)
                        if left is not None:
                            shared += left
                            whole = False
                            break
                    continue
                if (
                    held_first
                    and job.nomination is None
                    and entry.job_id not in kept
                    and self._held(turn, entry, job)
                ):
                    known = self._known_so_far(turn)
                    continue
                if track:
                    self._tracked_turn(turn, entry, job, walk)
                else:
                    self.consider(turn, entry, job)
                known = self._known_so_far(turn)
        turn.result.alike += alike + shared
        turn.result.shared += shared
        if changed:
            walk.skipped = size - walked
        return whole

    def _walk_changed(
        self, turn: Turn, walk: Walk, owed: Collection[str]
    ) -> tuple[Iterable[Iterable[QueueEntry]], int]:
        """While `walk` skips: the turns of the jobs it visits, in queue order, the others
        skipped (see `Walk.visits`). Returns the runs of the jobs after the first whose answer
        departs from the reference's, all to be walked (none if none departs), and how many
        jobs took their turn."""
        tallied = self.tallied
        assert tallied is not None
        jobs, get = self.jobs, tallied.get
        ranking = tallied.ranking(turn.now)
        keys = tallied.sort_keys(walk.visits(), ranking, owed)
        walked = 0
        for job_id in sorted(keys, key=keys.__getitem__):
            replayed = walk.replay(job_id)
            if replayed is not None:
                self._refused(turn, replayed)
                continue
            walked += 1
            self._tracked_turn(turn, get(job_id), jobs[job_id], walk)
            if walk.reference is None:
                return tallied.runs_after(keys[job_id], ranking, owed), walked
        return (), walked

    def _fence_nominated(
        self, turn: Turn, runs: Iterable[Iterable[QueueEntry]]
    ) -> Iterable[Iterable[QueueEntry]]:
        """Fence the nodes kept for the pending nominees; `runs` to walk (read whole to find
        the nominees where the queue is not counted)."""
        tally = self.tally
        if tally is None:
            entries = [entry for run in runs for entry in run]
            runs = (entries,)
            pending = map(self.jobs.__getitem__, (entry.job_id for entry in entries))
            nominated = [job.nomination.nodes for job in pending if job.nomination is not None]
        else:
            nominated = tally.nominated_nodes()
        if nominated:
            # One change of the cluster state for all of them, not one per preemptor.
            turn.fence.close(np.concatenate(nominated))
        return runs

    def _tracked_turn(self, turn: Turn, entry: QueueEntry, job: Job, walk: Walk) -> None:
        """The job's turn, noting in `walk` what it leaves for the next cycle: an anchor's
        answer, or the refusal a settled job's turn records again."""
        result, fence, failures = turn.result, turn.fence, self.failures
        decisions, job_id = result.decisions, entry.job_id
        # Each of these only grows: an equal sum after the turn means none moved (a
        # reservation found comes with its decision).
        made = len(decisions)
        moves = made + result.searches + fence.generation + failures.version
        turn.asked = None
        answered = self.consider(turn, entry, job)
        skipping = walk.reference is not None
        if answered and not skipping:
            return  # settled: nothing a later job reads moved
        asked = turn.asked
        if asked is not None:
            walk.asked[job_id] = asked.refusal
        # Settled too: no move, and a refusal from the memory of the preemption search
        # (the very one it gave last time).
        settled = answered or (
            moves == len(decisions) + result.searches + fence.generation + failures.version
            and (asked is None or walk.asked_before.get(job_id) is asked.refusal)
        )
        outcome = None
        if settled and asked is not None and not answered:
            outcome = Outcome.of(job, turn.now, self.reservations.reserved_nodes)
            walk.noted(job_id, replays=asked, refused=outcome)
        if settled and not skipping:
            return
        if outcome is None:
            outcome = Outcome.of(job, turn.now, self.reservations.reserved_nodes)
        if not settled:
            walk.noted(job_id, outcome=outcome)
        if skipping:
            decided = decisions[made:]
            started_only = self.admission.starts_hold_no_fewer and all(
                isinstance(decision, Bind) and decision.job_id == job_id for decision in decided
            )
            walk.check(job_id, bool(decided), outcome, started_only)

    def _known_so_far(self, turn: Turn) -> tuple[object, ...]:
        """What the cycle knows so far, as answers alike are kept under (see `Turn.answered`)."""
        return (
            turn.fence.generation,
            self.failures.version,
            turn.reservation,
            turn.refusals,
            turn.preemptions_left,
        )

    def stamp(self) -> tuple[int, ...]:
        """The versions of what the cycle's answers depend on besides the queue and the
        clock: equal stamps, and the cycle between them changed nothing either. The last is
        the preemptible index's, which a checkpoint moves too (see `same_stamp`)."""
        return (
            self.state.version,
            self.tree.version,
            self.usage.version,
            self.epoch(),
            self.failures.version,
            self.ledger.leaving_version,
            self.ledger.preemptible.version,
        )

    def leaves(self, now: float) -> tuple[str, ...] | None:
        """The accounts' order where preemption reads it (under the fair-share rule)."""
        if self.settings.contract.cross_account != "fair_share":
            return None
        return self.queue.ranking(now).leaves

    def leave_reference(self, turn: Turn, walk: Walk, whole: bool, owed: Collection[str]) -> None:
        """Keep what the cycle saw for a cycle after submissions only, unless it made as many
        preemptions as a cycle may, opened a gang's kept nodes or did not walk the whole queue
        (`whole`): the next cycle is a full one. `owed`: the accounts whose work went first.
        The nodes nominees let go of (`Turn.opened`) the next cycle finds released
        (`Scheduler`); after evictions its nominees take their turn (see
        `toposched.scheduler.incremental`)."""
        decisions, now, tallied = turn.result.decisions, turn.now, self.tallied
        reference: Reference | FullCycle | None = self._leaves_none(turn, whole)
        if reference is None and tallied is not None:
            bound = {d.job_id for d in decisions if isinstance(d, Bind)}
            segments = walk.segments
            if segments is None or len(tallied) != turn.result.considered:
                # Jobs left the queue (or its runs were not read): read them as they are now.
                segments = tallied.segments(tallied.ranking(now), owed)
            reference = Reference(
                now,
                self.stamp(),
                self.ledger.next_protection_end(now),
                self.leaves(now),
                len(tallied),
                segments,
                [job_id for job_id in walk.points if job_id not in bound],
                walk.replays,
                walk.outcomes,
                walk.refused,
                any(isinstance(decision, Evict) for decision in decisions),
            )
        self.incremental.settle(walk, reference or FullCycle.OFF)

    def _leaves_none(self, turn: Turn, whole: bool) -> FullCycle | None:
        """Why the cycle of `turn` leaves no reference (None: it leaves one)."""
        if self.tallied is None or not self.incremental.enabled:
            return FullCycle.OFF
        if turn.preemptions_left == 0:
            # Jobs after the last preemption the cycle allowed did not ask for one.
            return FullCycle.PREEMPTIONS_SPENT
        if turn.kept_nodes_opened:
            return FullCycle.KEPT_NODES
        return None if whole else FullCycle.LEFT_EARLY

    # --- one job's turn ----------------------------------------------------------------------
    def consider(self, turn: Turn, entry: QueueEntry, job: Job) -> bool:
        """One pending job's turn: start it, preempt or reserve for it, or say why not.
        Returns whether it was answered alike an earlier job, or waits for its victims to exit:
        nothing a later job reads changed (see `toposched.scheduler.incremental`).

        A gang whose nodes are kept for it after a node failure (`Interruptions`) has them
        opened for its turn and kept again after it."""
        interruptions = self.interruptions
        kept = interruptions.open_kept(job, turn.fence) if interruptions is not None else None
        if kept is None:
            return self._turn(turn, entry, job)
        assert interruptions is not None
        turn.unpreemptable.clear()
        turn.refusals += 1
        turn.kept_nodes_opened = True
        self._turn(turn, entry, job)
        interruptions.keep_again(job, kept, turn)
        return False

    def _turn(self, turn: Turn, entry: QueueEntry, job: Job) -> bool:
        job.reservation = None
        job.refusal = None
        fence = turn.fence
        tier = self._tier_of(turn.tiers, entry)
        if self.interruptions is not None:
            self.interruptions.fence_before(turn, entry, tier)
        nomination = job.nomination
        if nomination is not None:
            fence.settle()
            started = self.placing.start_nominee(job, fence, turn.now, turn.result)
            if job.nomination is None:
                # Its fence is open: the nominee may have started elsewhere or not at all, so
                # capacity may have grown. Remembered failures are checked against the fence
                # they were found under; refused preemptions too.
                turn.unpreemptable.clear()
                turn.refusals += 1
                turn.opened.append(nomination.nodes)
            if started:
                return job.nomination is not None
        kind = job.kind
        if kind is None:
            kind = self.kinds.of(job)
        # Answered alike every job of its kind, account, priority and declared work (see
        # `Turn.answered`): with the reservation in what the answer knew, that fixes whether it
        # may backfill too.
        alike = (kind, entry.account, entry.priority, entry.unallocated)
        known_so_far = self._known_so_far(turn)
        same = turn.answered.get(alike)
        if same is not None and same.known == known_so_far and same.failed_job != entry.job_id:
            job.tell(same.reason, same.code, same.refusal)
            turn.result.alike += 1
            return True
        held = None
        behind = turn.reservation
        if self.admission.rule is not None:
            if self._held(turn, entry, job):
                return False
            if behind is not None:
                behind, held = self.admission.backfill(job, tier, behind, turn.now)
        short = behind is not None and backfills(kind, tier, behind, turn.now)
        started, answered_by = self.placing.place(turn, entry, job, kind, short, self.epoch())
        if started:
            return False
        if held is not None:
            job.reason, answered_by = held.explain(job.reason), None
        allocated = tier is QueueTier.ALLOCATED
        if allocated and turn.preemptions_left > 0 and not entry.unallocated:
            if self._preempt(turn, entry, job, kind):
                return False
        if turn.reservation is None and allocated and job.gpus >= self.settings.reserve_min_gpus:
            answered_by = None  # a reservation is looked for job by job
            if self._reserve(turn, job):
                return False
        if answered_by is not None and known_so_far == self._known_so_far(turn):
            answer = Answer(known_so_far, answered_by, job.reason, job.reason_code, job.refusal)
            turn.answered[alike] = answer
            if tier is QueueTier.UNALLOCATED and self.admission.rule is None:
                turn.answered[self._tier_key(job, kind, entry)] = answer
        return False

    def _held(self, turn: Turn, entry: QueueEntry, job: Job) -> bool:
        """Whether the admission rule's headroom holds the job this turn, told so: its turn
        ends there, deciding nothing and keeping no answer. Asked in the job's turn, and by the
        walk's loop before a turn for a job neither nominated nor kept a gang's nodes: as a
        settled turn, it leaves nothing for the next cycle. The fence is set first for the
        jobs the nodes kept after a node failure are kept from, as at a turn's start."""
        tier = self._tier_of(turn.tiers, entry)
        if not self.admission.may_hold(tier):
            return False
        if self.interruptions is not None:
            self.interruptions.fence_before(turn, entry, tier)
        held = self.admission.held(job, tier, turn.reserved_nodes)
        if held is None:
            return False
        job.tell(held, ReasonCode.DOES_NOT_FIT, None)
        return True

    def _tier_key(self, job: Job, kind: JobKind, entry: QueueEntry) -> tuple[object, ...]:
        """The job's key in the unallocated tier (`tally.tier_key`), kept on it if counted."""
        key = job.tier_key
        return key if key is not None else tier_key(self.kinds, kind, entry)

    def _tier_of(self, tiers: dict[tuple[str, bool], QueueTier], entry: QueueEntry) -> QueueTier:
        """The tier of the job's account and declared work this cycle, kept in `tiers`."""
        tier_key = (entry.account, entry.unallocated)
        tier = tiers.get(tier_key)
        if tier is None:
            tier = tiers[tier_key] = self.queue.tier(entry)
        return tier

    def _preempt(self, turn: Turn, entry: QueueEntry, job: Job, kind: JobKind) -> bool:
        """Evict for the job if the contract allows a set of victims that makes room; else add
        why not to its reason. Returns whether victims were evicted for it (or it started)."""
        pods = kind.pods
        refusal_key = (kind.shape, entry.account, entry.priority)
        refused = turn.unpreemptable.get(refusal_key)
        if refused is not None and pods >= refused.pods:
            note = self.preemptor.beyond_budget_note(job, entry)
            explained = (job.reason, refused.refusal.reason, note)
            text = turn.no_preemption_texts.get(explained)
            if text is None:
                text = turn.no_preemption_texts[explained] = no_preemption(
                    job.reason, refused.refusal, note
                )
            job.reason = text
            job.refusal = refused.refusal
            job.reason_code = ReasonCode.NO_PREEMPTION
            return False
        if turn.ranking is None:
            turn.ranking = self.queue.ranking(turn.now)
        plan = self.preemptor.preempt_or_refuse(
            job, kind, entry, turn.ranking, turn.fence, turn.now, self.epoch()
        )
        if isinstance(plan, PreemptionPlan):
            turn.preemptions_left -= 1
            self._carry_out(job, plan, turn.now, turn.result)
            turn.fence.close(job.nomination.nodes if job.nomination else plan.nodes)
            return True
        turn.asked = asked = Asked(refusal_key, pods, plan)
        self._refused(turn, asked)
        note = self.preemptor.beyond_budget_note(job, entry)
        job.reason = no_preemption(job.reason, plan, note)
        job.refusal = plan
        job.reason_code = ReasonCode.NO_PREEMPTION
        return False

    @staticmethod
    def _refused(turn: Turn, asked: Asked) -> None:
        """Remember a refused preemption for the jobs alike later in the cycle, unless one
        refused for no more pods is known."""
        refused = turn.unpreemptable.get(asked.key)
        if refused is None or asked.pods < refused.pods:
            turn.unpreemptable[asked.key] = Refused(asked.pods, asked.refusal)
            turn.refusals += 1

    def _reserve(self, turn: Turn, job: Job) -> bool:
        """Reserve the earliest place the job fits as running jobs end, or open one now by
        moving jobs (defragmentation). Returns whether moves were decided for it."""
        now, fence = turn.now, turn.fence
        reserved = self.reservations.reserve(job, now, fence, self.epoch())
        if reserved is None:
            return False
        job.reason = f"{reserved.describe(now)}; now: {job.reason}"
        job.reason_code = ReasonCode.RESERVED
        # Moves open a domain for one gang: not for sets with topology of their own.
        unaimed = sets_refusal(job) is not None
        if not unaimed and self.evictor.defragment_for(job, reserved, now, turn.result.decisions):
            # Moves open a domain now: the nominated nodes replace the wait.
            assert job.nomination is not None
            fence.close(job.nomination.nodes)
            return True
        turn.reservation = reserved
        job.reservation = reserved
        nodes = self.reservations.reserved_nodes
        turn.reserved_nodes = np.zeros(self.state.topology.n_nodes, dtype=bool)
        turn.reserved_nodes[nodes] = True
        turn.result.decisions.append(Reserve(job.job_id, reserved.start_time, reserved.domain))
        # Capacity shrinks for everyone behind: earlier failures still hold.
        fence.close_block(nodes)
        return False

    def _within_budget(self, job: Job) -> bool:
        """Whether the job runs within its account's budget (for the admission rule)."""
        ledger = self.ledger
        return ledger.budget_gpus(job.spec.account) > 0 and not ledger.beyond_budget(job)

    def _pending_jobs(self, now: float) -> Iterator[Job]:
        """Every pending job (for the admission rule's count of gangs waiting to restart)."""
        jobs = self.jobs
        return (jobs[entry.job_id] for entry in self.queue.ordered(now))

    def _carry_out(self, job: Job, plan: PreemptionPlan, now: float, result: CycleResult) -> None:
        """Evict the plan's victims with their grace period and nominate their capacity."""
        if not plan.victims:
            # Room appeared since the job's last search (a nominee started elsewhere): no one
            # needs to leave.
            self.placing.bind(job, plan.placement, now, result)
            return
        self.evictor.carry_out(job, plan, now, result.decisions)


def checked_cycle(
    now: float, cycle: Callable[[float], CycleResult], full_cycle: Callable[[float], CycleResult]
) -> CycleResult:
    """`cycle(now)`, and if it skipped jobs, `full_cycle(now)` on a copy of the scheduler taken
    before it: `InternalError` unless both decided the same."""
    result = cycle(now)
    if result.incremental:
        expected = full_cycle(now)
        difference = differences(expected.decisions, result.decisions)
        if difference is not None:
            raise InternalError(
                "cycle", f"at {now!r}, the cycle after submissions only {difference}"
            )
    return result
