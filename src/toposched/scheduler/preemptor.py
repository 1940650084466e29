"""Preemption for one pending job: the running jobs the contract lets it take, the victim
search over them, and refusals remembered while nothing they depend on has changed."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.errors import InputError, did_you_mean
from toposched.cluster.state import ClusterState, distinct_inverse
from toposched.policy.budget import BudgetTree
from toposched.policy.contract import BorrowingPreempts, Contract
from toposched.policy.queue_entry import QueueEntry
from toposched.policy.ranking import Ranking
from toposched.policy.usage import UsageTracker
from toposched.policy.worth import EvictionWorth
from toposched.scheduler.checkpoint_gate import CheckpointGate
from toposched.scheduler.errors import InternalError
from toposched.scheduler.fence import Fence
from toposched.scheduler.jobs import Job, JobKind
from toposched.scheduler.kept_refusals import Keeping, KeptRefusals
from toposched.scheduler.ledger import Ledger
from toposched.scheduler.local_domains import LocalDomains
from toposched.scheduler.placing import sets_after
from toposched.scheduler.preemption import (
    CandidatePool,
    PreemptionPlan,
    VictimSearch,
)
from toposched.scheduler.refusals import Refusal, RefusalCode
from toposched.scheduler.spread import SpreadSearch
from toposched.scheduler.verdicts import Verdicts
from toposched.scheduler.wording import gpus_text, needs
from toposched.scheduler.worth import WorthGate

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

_BORROWING_NOTE = (
    " (it would take its account beyond its budget, and a job that borrows preempts only its "
    "account's lower-priority jobs: it starts on idle GPUs)"
)


def built_in_rules(contract: Contract) -> bool:
    """Whether `contract` decides preemption by `Contract`'s own rules (neither `may_preempt`
    nor `runs_its_budget` replaced): the shortcuts of the budget rule assume them."""
    kind = type(contract)
    return (
        kind.may_preempt is Contract.may_preempt
        and kind.runs_its_budget is Contract.runs_its_budget
    )


class Preemptor:
    """Plans preemptions for pending jobs under the contract (see `preempt_or_refuse`)."""

    def __init__(
        self,
        state: ClusterState,
        tree: BudgetTree,
        usage: UsageTracker,
        contract: Contract,
        ledger: Ledger,
        search: VictimSearch,
    ) -> None:
        self.state = state
        self.tree = tree
        self.usage = usage
        self.contract = contract
        self.ledger = ledger
        self.victim_search = search
        self.verdicts = Verdicts(tree, usage, contract, ledger)
        self.local = LocalDomains(state, ledger, search)
        self.spread = SpreadSearch(search)
        self.worth = None if contract.worth is None else WorthGate(contract.worth)
        if contract.worth is not None:
            _check_named_accounts(contract.worth, tree)
        wait = contract.checkpoint_wait
        self.checkpoints = None if wait is None else CheckpointGate(wait)
        self.kept = KeptRefusals(state, tree, usage, contract, ledger, search.domain_of_leaf)
        """Refused preemptions by (pod shape, pods, account, priority), or by (pod shape, pods)
        for jobs that may take unallocated work only (see `preempt_or_refuse`); replace it to
        keep them otherwise (`Keeping`)."""
        self.victim_searches = 0
        """Victim searches run by `preempt_or_refuse`: those no kept refusal answered."""

    # --- planning -----------------------------------------------------------------------------
    def preempt_or_refuse(
        self,
        job: Job,
        kind: JobKind,
        entry: QueueEntry,
        ranking: Ranking,
        fence: Fence,
        now: float,
        epoch: int,
    ) -> PreemptionPlan | Refusal:
        """`plan`, with refusals remembered across cycles (`kept`).

        A refusal is decided by the free capacity, the jobs preemption could take (running,
        not being evicted, past their protection, allowed by the contract) and the gang, not
        by the time otherwise: the work victims would lose orders the search, but the search
        refuses only when placing the gang fails with every allowed candidate gone (or their
        GPUs cannot add up to it), and a smaller set cannot succeed where that failed (the
        placement search fails monotonically, as remembered failures assume). So a refusal
        stands, word for word, while the epoch (free capacity and the running set, hence the
        loads), the fenced nodes, the preemptible index, the budget tree and usage (and under
        the fair-share rule the accounts' order) stay as they were and no protection has
        ended; and under the built-in rules, through the changes that cannot give the job
        room (see `KeptRefusals`), word for word (the figures it quotes are those it was
        found with). A refusal of the local search that stopped at `DOMAINS_EXAMINED` domains
        with room depends on which were cheapest, so it is not remembered; the search over
        every candidate that follows it when the local one found nothing does not.

        When unallocated work is all the job may take (`only_unallocated_victims`), nothing of
        its account or priority enters the search: the refusal is shared by every such job of
        the same shape.

        Under the contract's checkpoint wait, a job told to wait for its victims' checkpoints
        keeps those victims while they run (`CheckpointGate.awaited`): its turns judge the wait
        for them again, without a search, until the rule no longer says wait.

        Under the borrowing rule (`held_to_own_account`) a job that borrows while its account
        runs its whole budget with no job of its own to take is refused without a search, and
        refusals are kept apart for jobs that borrow and jobs that do not.
        """
        index = self.ledger.preemptible
        index.refresh(now)
        only_unallocated = self.only_unallocated_victims(entry)
        held = self.held_to_own_account(entry)
        if held and only_unallocated:
            return self._nothing_to_borrow_from(entry)
        key: tuple[object, ...] = (
            (kind.shape, kind.pods)
            if only_unallocated
            else (kind.shape, kind.pods, entry.account, entry.priority, held)
        )
        inputs = (
            epoch,
            index.version,
            self.tree.version,
            self.usage.version,
            ranking.leaves if self.contract.cross_account == "fair_share" else None,
        )
        fenced = fence.frozen()
        kept = self.kept
        known = kept.find(key, inputs, entry, ranking, fence, now, built_in_rules(self.contract))
        if known is not None:
            refusal, changed = known
            if changed and kept.keeping is Keeping.VERIFY:
                fence.settle()
                self._verify(job, entry, ranking, now, only_unallocated, refusal)
            return refusal
        gate = self.checkpoints
        if gate is not None:
            # Told to wait for victims' checkpoints: their wait is judged again, not searched.
            awaited = gate.awaited(job, self.ledger, now)
            if awaited is not None:
                return awaited
        fence.settle()
        self.victim_searches += 1
        plan, lasting = self.search(job, entry, ranking, now, only_unallocated)
        if isinstance(plan, PreemptionPlan):
            return plan
        if lasting:
            kept.keep(
                key, plan, inputs, fenced, job.request, entry, ranking, only_unallocated, now, held
            )
        return plan

    def left_queue(self, job_id: str) -> None:
        """Forget what is kept for a pending job that started or was cancelled."""
        if self.checkpoints is not None:
            self.checkpoints.forget(job_id)

    def _verify(
        self,
        job: Job,
        entry: QueueEntry,
        ranking: Ranking,
        now: float,
        only_unallocated: bool,
        kept: Refusal,
    ) -> None:
        """Raise `InternalError` if a search finds victims for `job` although `kept`, a
        refusal kept through changes, says there are none (a debugging check)."""
        plan, _ = self.search(job, entry, ranking, now, only_unallocated)
        if isinstance(plan, PreemptionPlan):
            raise InternalError(
                job.job_id,
                f"a refusal kept through changes answered it, yet victims make room ({kept})",
            )

    def plan(
        self, job: Job, entry: QueueEntry, ranking: Ranking, now: float
    ) -> PreemptionPlan | Refusal:
        """Victims whose eviction lets `job` run, or why there are none."""
        self.ledger.preemptible.refresh(now)
        only_unallocated = self.only_unallocated_victims(entry)
        return self.search(job, entry, ranking, now, only_unallocated)[0]

    def search(
        self, job: Job, entry: QueueEntry, ranking: Ranking, now: float, only_unallocated: bool
    ) -> tuple[PreemptionPlan | Refusal, bool]:
        """`plan`, and whether its answer does not depend on the order of domains by lost work
        (False when the local search stopped at `DOMAINS_EXAMINED` and answered alone, when
        budget caps chose among the victims, when the room the victims make does not hold the
        job's own pod sets, or when the contract's checkpoint wait or cost/benefit rule refused
        the plan, whose figures move with the clock).
        `only_unallocated`: `only_unallocated_victims(entry)`, as of a refresh at `now`."""
        plan, lasting = self._victims(job, entry, ranking, now, only_unallocated)
        if isinstance(plan, PreemptionPlan):
            # The gates below weigh only a plan whose room holds the job.
            plan = sets_after(self.state, self.victim_search.policy, job, plan)
            if isinstance(plan, Refusal):
                return plan, False
        if not isinstance(plan, PreemptionPlan) or not plan.victims:
            return plan, lasting
        gate = self.checkpoints
        if gate is not None:
            waiting = gate.refusal(job, plan, self.ledger, now)
            if waiting is not None:
                return waiting, False
        worth = self.worth
        if worth is None:
            return plan, lasting
        refusal = worth.refusal(job, plan, self.ledger, now)
        if refusal is None:
            return plan, lasting
        return refusal, False

    def _victims(
        self, job: Job, entry: QueueEntry, ranking: Ranking, now: float, only_unallocated: bool
    ) -> tuple[PreemptionPlan | Refusal, bool]:
        """`search` before the cost/benefit rule."""
        local = self.local.candidates(job, now, only_unallocated)
        lasting = True
        if local is not None:
            lasting = local.lasting
            if local.complete and not local.slots.size:
                return self._nothing_to_evict(job, now, only_unallocated), lasting
            # A gang that fits one innermost domain: only the domains where preemptible work
            # could make room are examined, not every running job.
            candidates = self.candidates(entry, ranking, now, local.slots)
            plan = self.victim_search.plan(
                job.job_id, job.request, candidates, known_not_to_fit=True
            )
            # Within budget caps the choice of victims is heuristic beyond the exact subsets,
            # ordered by lost work: such a refusal may not stand as the work grows.
            lasting = lasting and not _caps_chose(candidates, plan)
            if isinstance(plan, PreemptionPlan) or local.complete:
                return plan, lasting
        else:
            # Larger gangs: domains chosen from the aggregates, without listing every candidate.
            spread = self.spread.across_domains(
                job.job_id,
                job.request,
                self.ledger.preemptible,
                lambda slots: self.verdicts.of(entry, ranking, now, slots),
                now,
                only_unallocated,
            )
            if spread is not None:
                return spread, lasting
        candidates = self.candidates(entry, ranking, now, only_unallocated=only_unallocated)
        plan = self.victim_search.plan(job.job_id, job.request, candidates, known_not_to_fit=True)
        # Every job it may take was a candidate: a refusal says placing the gang failed with
        # all of them gone (or their GPUs cannot add up to it), whichever domains the local
        # search examined first, so it lasts unless budget caps chose among the victims.
        return plan, not _caps_chose(candidates, plan)

    def _nothing_to_evict(self, job: Job, now: float, only_unallocated: bool) -> Refusal:
        """Why a one-domain gang finds no domain where evictions could make room."""
        ledger = self.ledger
        if not ledger.unallocated and (only_unallocated or ledger.unprotected_count(now) == 0):
            return Refusal(
                RefusalCode.NO_ALLOWED_VICTIM,
                "no running job may be preempted for it under the contract",
            )
        level = self.state.topology.domain_levels[self.victim_search.leaf_level]
        victims = (
            "all unallocated work (its account runs its whole budget)"
            if only_unallocated
            else "every unprotected job"
        )
        return Refusal(
            RefusalCode.NO_ROOM,
            f"even evicting {victims} leaves no {level} with room for "
            f"{needs(job).removeprefix('needs ')}",
        )

    def held_to_own_account(self, entry: QueueEntry) -> bool:
        """Whether the borrowing rule (`BorrowingPreempts.OWN_ACCOUNT`) holds `entry` to its
        own account's lower-priority jobs: its start would take its account beyond its budget.
        Only under the built-in rules and for allocated work."""
        contract = self.contract
        if contract.borrowing_preempts is BorrowingPreempts.ANY or entry.unallocated:
            return False
        return built_in_rules(contract) and contract.borrows(entry, self.ledger)

    def _nothing_to_borrow_from(self, entry: QueueEntry) -> Refusal:
        """Why a job that borrows finds nobody to preempt: its account runs its whole budget
        and holds no unprotected job of lower priority (`only_unallocated_victims`)."""
        return Refusal(
            RefusalCode.NO_ALLOWED_VICTIM,
            f"account {entry.account} runs its whole budget and has no lower-priority job past "
            "its min runtime",
        )

    def beyond_budget_note(self, job: Job, entry: QueueEntry) -> str:
        """Under the budget rule, what a job larger than its account's whole budget should know
        (else ""): preemption cannot make room for it, only other accounts' unused budget can.
        Under the borrowing rule, what a job that would borrow should know."""
        contract = self.contract
        if not built_in_rules(contract) or contract.cross_account != "budget":
            return _BORROWING_NOTE if self.held_to_own_account(entry) else ""
        budget = self.ledger.budget_gpus(entry.account)
        if entry.unallocated or budget <= 0 or job.gpus <= budget:
            return _BORROWING_NOTE if self.held_to_own_account(entry) else ""
        return (
            f" (it asks for {gpus_text(job.gpus)} GPUs, more than its account's whole budget "
            f"of {gpus_text(budget)}: preemption never takes another account below its budget, "
            "so it starts only while other accounts leave part of theirs unused)"
        )

    def only_unallocated_victims(self, entry: QueueEntry) -> bool:
        """Whether unallocated work is all that `entry` may preempt: under the budget rule its
        account runs its whole budget and holds no unprotected allocated job of lower priority
        (as of the preemptible index's last refresh). Only under the built-in rules: a
        contract that replaces them may judge otherwise."""
        contract = self.contract
        if not built_in_rules(contract) or entry.unallocated:
            return False
        if contract.cross_account != "budget" or self.ledger.budget_gpus(entry.account) <= 0:
            # Without a budget the contract lets the job preempt nobody, not even unallocated
            # work: its refusal must not answer for budgeted jobs of the same shape.
            return False
        if not contract.runs_its_budget(entry.account, self.ledger):
            return False
        return not self.ledger.preemptible.holds_unprotected_below(entry.account, entry.priority)

    # --- candidates ---------------------------------------------------------------------------
    def candidates(
        self,
        entry: QueueEntry,
        ranking: Ranking,
        now: float,
        slots: IntArray | None = None,
        only_unallocated: bool = False,
    ) -> CandidatePool:
        """Running jobs the contract lets `entry` preempt now (among `slots` of the preemptible
        index, else every running job, or every unallocated one when that is all `entry` may
        take), with their lost work and standing."""
        if slots is None:
            slots = self.ledger.takeable(now, only_unallocated).slots
        verdicts = self.verdicts.of(entry, ranking, now, slots)
        keep = verdicts.allowed.nonzero()[0]
        return self._pool(
            slots[keep],
            verdicts.rules_of(keep),
            now,
            verdicts.standing[keep],
            verdicts.limit[keep],
        )

    def _pool(
        self,
        slots: IntArray,
        rules: list[str],
        now: float,
        standing: FloatArray,
        limit: FloatArray,
    ) -> CandidatePool:
        """The candidate arrays of `slots` of the preemptible index (`limit`: each one's
        account's budget cap, inf when none)."""
        index = self.ledger.preemptible
        pods = index.pods_of(slots)
        bounded = np.isfinite(limit)
        cap_group: IntArray | None = None
        caps, cap_accounts = np.zeros(0), []
        if bounded.any():
            accounts, group = distinct_inverse(index.account[slots[bounded]].astype(np.int64))
            cap_group = np.full(slots.size, -1, dtype=np.int64)
            cap_group[bounded] = group
            caps = np.zeros(accounts.size)
            caps[group] = limit[bounded]
            cap_accounts = [index.account_names[int(a)] for a in accounts.tolist()]
        return CandidatePool(
            cap_group=cap_group,
            caps=caps,
            cap_accounts=cap_accounts,
            held=index.gpus[slots].astype(np.float64),
            job_ids=index.ids[slots].tolist(),
            rules=rules,
            lost=index.gpus[slots] * np.maximum(now - index.since[slots], 0.0),
            standing=standing,
            whole=index.whole[slots],
            pod_starts=pods[0],
            pod_nodes=pods[1],
            index=index,
            slots=slots,
        )


def _caps_chose(candidates: CandidatePool, answer: PreemptionPlan | Refusal) -> bool:
    """Whether budget caps chose among the victims of `answer`: they bind, and it is not a
    refusal for want of room with every candidate gone (`RefusalCode.NO_ROOM`), which no cap
    can change: caps only keep victims back."""
    if isinstance(answer, Refusal) and answer.code is RefusalCode.NO_ROOM:
        return False
    return candidates.caps_bind


def _check_named_accounts(worth: EvictionWorth, tree: BudgetTree) -> None:
    """InputError for an account of `worth.account_loss_budgets` that the tree lacks."""
    leaves = tree.leaves()
    for account, _ in worth.account_loss_budgets:
        if account not in leaves:
            rule = (
                f"names no account of the budget tree{did_you_mean(account, leaves)}; a "
                "budget of lost work is an account's as its jobs name it, e.g. "
                f"{leaves[0] if leaves else 'team-a'}"
            )
            raise InputError("account_loss_budgets (--eviction-loss-budget-for)", account, rule)
