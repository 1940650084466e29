"""Preemption for one pending job: the running jobs the contract lets it take, the victim
search over them, and refusals remembered while nothing they depend on has changed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from toposched.cluster import kernels
from toposched.cluster.state import ClusterState, distinct_inverse
from toposched.placement.request import GangRequest
from toposched.policy.budget import BudgetTree
from toposched.policy.contract import Contract, PreemptionRule
from toposched.policy.fairshare import QueueEntry, Ranking
from toposched.policy.usage import UsageTracker
from toposched.scheduler.fence import Fence, FencedNodes
from toposched.scheduler.jobs import Job, JobKind
from toposched.scheduler.ledger import Ledger
from toposched.scheduler.preemptible import SlotVerdicts, domain_nodes
from toposched.scheduler.preemption import (
    DOMAINS_EXAMINED,
    CandidatePool,
    PreemptionPlan,
    VictimSearch,
)
from toposched.scheduler.wording import gpus_text, needs

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

#: Contract verdicts on (preemptor, victim pair) kept at most (see `Preemptor._pair_verdict`).
PAIR_VERDICTS_KEPT = 100_000


class PreemptorSide(NamedTuple):
    """What a verdict on an unprotected allocated victim reads of the preemptor."""

    account: str
    priority: int
    unallocated: bool
    account_running: float
    """GPUs its account runs, as the contract counts them."""


class VictimSide(NamedTuple):
    """What such a verdict reads of the victim."""

    pair: int
    """Its (account, priority) pair in the preemptible index."""
    gpus: float
    account: str
    account_running: float


class PairVerdict(NamedTuple):
    """The contract allows the victim's pair by `rule`; under the budget rule, jobs of the
    pair up to `limit` GPUs (None: any)."""

    rule: str
    limit: float | None


class AccountLoad(NamedTuple):
    """A victim account's name, running GPUs (as the contract counts them) and standing in
    the ranking (None when it is not a ranked leaf)."""

    account: str
    running: float
    standing: float | None


_UNKNOWN = PairVerdict("", None)
"""Marks a pair not yet judged (a real verdict always names its rule)."""


@dataclass(frozen=True)
class _RememberedRefusal:
    """A refused preemption: what it depended on, the nodes fenced then, until when no
    protection ends, and the reason."""

    inputs: tuple[object, ...]
    fenced: FencedNodes
    until: float
    reason: str


@dataclass(frozen=True)
class LocalCandidates:
    """Running jobs (slots of the preemptible index) in the innermost domains where evicting
    unprotected work could fit a one-domain gang."""

    slots: IntArray
    complete: bool
    """Every domain that could hold the gang was included."""
    lasting: bool
    """Fewer than `DOMAINS_EXAMINED` domains had room, so the answer does not depend on
    which of them were cheapest."""


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
        # The contract's verdicts on pairs of running jobs (see `_pair_verdict`), for one
        # ranking and one version of the loads and budgets.
        self._pair_verdicts: dict[tuple[PreemptorSide, VictimSide], PairVerdict | None] = {}
        self._pair_verdicts_ranking: Ranking | None = None
        self._pair_verdicts_stamp = -1
        # Victim accounts' loads and standings by account code (see `_account_load`), for one
        # version of the usage, of the GPUs on their way out and of the ranking.
        self._account_loads: dict[int, AccountLoad] = {}
        self._account_loads_key: tuple[int, int, Ranking | None] = (-1, -1, None)
        # Refused preemptions by (pod shape, pods, account, priority), or by (pod shape, pods)
        # for jobs that may take unallocated work only (see `preempt_or_refuse`).
        self._refusals: dict[tuple[object, ...], _RememberedRefusal] = {}
        self._refusals_epoch = 0

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
    ) -> PreemptionPlan | str:
        """`plan`, with refusals remembered across cycles.

        A refusal is decided by the free capacity, the jobs preemption could take (running,
        not being evicted, past their protection, allowed by the contract) and the gang, not
        by the time otherwise: the work victims would lose orders the search, but the search
        refuses only when placing the gang fails with every allowed candidate gone (or their
        GPUs cannot add up to it), and a smaller set cannot succeed where that failed (the
        placement search fails monotonically, as remembered failures assume). So a
        refusal stands, word for word, while the epoch (free capacity and the running set,
        hence the loads), the fenced nodes, the preemptible index, the budget tree and usage
        (and under the fair-share rule the accounts' order) stay as they were and no
        protection has ended. The search that stopped at `DOMAINS_EXAMINED` domains with room
        depends on which were cheapest, so its refusals are not remembered.

        When unallocated work is all the job may take (`only_unallocated_victims`), nothing of
        its account or priority enters the search: the refusal is shared by every such job of
        the same shape.
        """
        index = self.ledger.preemptible
        index.refresh(now)
        only_unallocated = self.only_unallocated_victims(entry)
        key: tuple[object, ...] = (
            (kind.shape, kind.pods)
            if only_unallocated
            else (kind.shape, kind.pods, entry.account, entry.priority)
        )
        inputs = (
            epoch,
            index.version,
            self.tree.version,
            self.usage.version,
            ranking.leaves if self.contract.cross_account == "fair_share" else None,
        )
        fenced = fence.frozen()
        known = self._refusals.get(key)
        if (
            known is not None
            and known.inputs == inputs
            and now < known.until
            and fence.equals(known.fenced)
        ):
            return known.reason
        fence.settle()
        plan, lasting = self.search(job, entry, ranking, now, only_unallocated)
        if isinstance(plan, PreemptionPlan):
            return plan
        if self._refusals_epoch != epoch:
            # Refusals of an earlier epoch cannot match again: forget them.
            self._refusals.clear()
            self._refusals_epoch = epoch
        if lasting:
            until = self.ledger.next_protection_end(now)
            self._refusals[key] = _RememberedRefusal(inputs, fenced, until, plan)
        return plan

    def plan(
        self, job: Job, entry: QueueEntry, ranking: Ranking, now: float
    ) -> PreemptionPlan | str:
        """Victims whose eviction lets `job` run, or why there are none."""
        self.ledger.preemptible.refresh(now)
        only_unallocated = self.only_unallocated_victims(entry)
        return self.search(job, entry, ranking, now, only_unallocated)[0]

    def search(
        self, job: Job, entry: QueueEntry, ranking: Ranking, now: float, only_unallocated: bool
    ) -> tuple[PreemptionPlan | str, bool]:
        """`plan`, and whether its answer does not depend on the order of domains by lost work
        (False when the local search stopped at `DOMAINS_EXAMINED`). `only_unallocated`:
        `only_unallocated_victims(entry)`, as of a refresh at `now`."""
        local = self.local_candidates(job, now, only_unallocated)
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
            lasting = lasting and not candidates.caps_bind
            if isinstance(plan, PreemptionPlan) or local.complete:
                return plan, lasting
        else:
            # Larger gangs: domains chosen from the aggregates, without listing every candidate.
            spread = self.victim_search.across_domains(
                job.job_id,
                job.request,
                self.ledger.preemptible,
                lambda slots: self.verdicts(entry, ranking, now, slots),
                now,
                only_unallocated,
            )
            if spread is not None:
                return spread, lasting
        candidates = self.candidates(entry, ranking, now, only_unallocated=only_unallocated)
        plan = self.victim_search.plan(job.job_id, job.request, candidates, known_not_to_fit=True)
        return plan, lasting and not candidates.caps_bind

    def _nothing_to_evict(self, job: Job, now: float, only_unallocated: bool) -> str:
        """Why a one-domain gang finds no domain where evictions could make room."""
        ledger = self.ledger
        if not ledger.unallocated and (only_unallocated or ledger.unprotected_count(now) == 0):
            return "no running job may be preempted for it under the contract"
        level = self.state.topology.domain_levels[self.victim_search.leaf_level]
        victims = (
            "all unallocated work (its account runs its whole budget)"
            if only_unallocated
            else "every unprotected job"
        )
        return (
            f"even evicting {victims} leaves no {level} with room for "
            f"{needs(job).removeprefix('needs ')}"
        )

    def beyond_budget_note(self, job: Job, entry: QueueEntry) -> str:
        """Under the budget rule, what a job larger than its account's whole budget should know
        (else ""): preemption cannot make room for it, only other accounts' unused budget can."""
        contract = self.contract
        if type(contract) is not Contract or contract.cross_account != "budget":
            return ""
        budget = self.ledger.budget_gpus(entry.account)
        if entry.unallocated or budget <= 0 or job.gpus <= budget:
            return ""
        return (
            f" (it asks for {gpus_text(job.gpus)} GPUs, more than its account's whole budget "
            f"of {gpus_text(budget)}: preemption never takes another account below its budget, "
            "so it starts only while other accounts leave part of theirs unused)"
        )

    def only_unallocated_victims(self, entry: QueueEntry) -> bool:
        """Whether unallocated work is all that `entry` may preempt: under the budget rule its
        account runs its whole budget and holds no unprotected allocated job of lower priority
        (as of the preemptible index's last refresh). Only for the built-in contract: a
        replacement may judge otherwise."""
        contract = self.contract
        if type(contract) is not Contract or entry.unallocated:
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
        index = self.ledger.preemptible
        if slots is None:
            names = sorted(self.ledger.unallocated)
            if not only_unallocated:
                names += self.ledger.unprotected_ids(now)
            slot_of = index.slot_of
            slots = np.array([slot_of[name] for name in names], dtype=np.int64)
        verdicts = self.verdicts(entry, ranking, now, slots)
        keep = verdicts.allowed.nonzero()[0]
        return self._pool(
            slots[keep], verdicts.rules_of(keep), now, verdicts.standing[keep], verdicts.limit[keep]
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
        allocations = index.allocations
        pods = [allocations[slot].nodes for slot in slots.tolist()]
        counts = index.pods[slots]
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
            pod_starts=np.concatenate(([0], counts.cumsum())).astype(np.int64),
            pod_nodes=np.concatenate(pods) if pods else np.zeros(0, dtype=np.int64),
        )

    # --- verdicts -----------------------------------------------------------------------------
    def verdicts(
        self, entry: QueueEntry, ranking: Ranking, now: float, slots: IntArray
    ) -> SlotVerdicts:
        """The contract's answer for each of `slots` (of the preemptible index), asked once per
        kind of victim rather than once per job."""
        index = self.ledger.preemptible
        verdicts = SlotVerdicts(
            allowed=index.unprotected(slots, now),
            rule=np.zeros(slots.size, dtype=np.int64),
            rule_names=[],
            standing=np.zeros(slots.size),
            limit=np.full(slots.size, np.inf),
        )
        unallocated = index.unallocated[slots] & verdicts.allowed
        if unallocated.any():
            # Unallocated victims are fair game for any allocated preemptor: one question.
            first = str(index.ids[slots[unallocated.argmax()]])
            verdict = self.contract.may_preempt(
                entry, self.ledger.views[first], now, ranking, self.ledger
            )
            if not verdict.allowed:
                verdicts.allowed[:] = False
                return verdicts
            verdicts.rule_names.append(str(verdict.rule))
        mine = (~index.unallocated[slots] & verdicts.allowed).nonzero()[0]
        if mine.size:
            self._allocated_verdicts(entry, ranking, now, slots, mine, verdicts)
        return verdicts

    def _allocated_verdicts(
        self,
        entry: QueueEntry,
        ranking: Ranking,
        now: float,
        slots: IntArray,
        mine: IntArray,
        verdicts: SlotVerdicts,
    ) -> None:
        """Fill `verdicts` for the rows `mine` of `slots`: unprotected allocated jobs.

        For such a job the contract's verdict depends only on its account and priority, and
        under the budget rule on its size too, monotonically (a job no larger than what its
        account runs beyond its budget may go): one question per pair, asked about the pair's
        smallest job, the others then judged by that limit."""
        index = self.ledger.preemptible
        mine_slots = slots[mine]
        sizes = index.gpus[mine_slots]
        pairs = index.pair[mine_slots]
        # By pair, smallest first; stable, so that among equal sizes the first job answers.
        order = np.lexsort((sizes, pairs))
        sorted_pairs = pairs[order]
        opens = np.concatenate(([True], sorted_pairs[1:] != sorted_pairs[:-1]))
        heads = np.flatnonzero(opens)
        group_of_row = np.empty(mine.size, dtype=np.int64)
        group_of_row[order] = np.cumsum(opens) - 1
        judged = self._judge_pairs(entry, ranking, now, mine_slots[order[heads]], verdicts)
        kept = judged.allowed[group_of_row] & ~(sizes > judged.limit[group_of_row])
        verdicts.allowed[mine] = kept
        rows = mine[kept]
        verdicts.rule[rows] = judged.rule[group_of_row[kept]]
        verdicts.limit[rows] = judged.limit[group_of_row[kept]]
        ranked = kept & judged.ranked[group_of_row]
        verdicts.standing[mine[ranked]] = judged.standing[group_of_row[ranked]]

    def _judge_pairs(
        self,
        entry: QueueEntry,
        ranking: Ranking,
        now: float,
        head_slots: IntArray,
        verdicts: SlotVerdicts,
    ) -> _PairVerdicts:
        """The verdict on each pair, asked about its head (`head_slots`, one per pair); the
        rules met are added to `verdicts.rule_names`."""
        index = self.ledger.preemptible
        judged = _PairVerdicts.empty(head_slots.size)
        rule_codes: dict[str, int] = {}
        self._check_pair_verdicts(ranking)
        preemptor = PreemptorSide(
            entry.account,
            entry.priority,
            entry.unallocated,
            self.ledger.running_gpus(entry.account),
        )
        # The pairs' heads as Python scalars, each account's load and standing looked up once:
        # a cycle asks for thousands of pairs, most of them answered by the memo.
        loads = self._loads(ranking)
        for position, (slot, pair, size, account_code) in enumerate(
            zip(
                head_slots.tolist(),
                index.pair[head_slots].tolist(),
                index.gpus[head_slots].tolist(),
                index.account[head_slots].tolist(),
                strict=True,
            )
        ):
            load = loads.get(account_code)
            if load is None:
                load = loads[account_code] = self._account_load(
                    index.account_names[account_code], ranking
                )
            victim = VictimSide(pair, size, load.account, load.running)
            known = self._pair_verdict(entry, ranking, now, slot, preemptor, victim)
            if known is None:
                continue
            code = rule_codes.get(known.rule)
            if code is None:
                code = rule_codes[known.rule] = len(verdicts.rule_names)
                verdicts.rule_names.append(known.rule)
            judged.allowed[position] = True
            judged.rule[position] = code
            if known.limit is not None:
                judged.limit[position] = known.limit
            if load.standing is not None:
                judged.ranked[position] = True
                judged.standing[position] = load.standing
        return judged

    def _loads(self, ranking: Ranking) -> dict[int, AccountLoad]:
        """The victim accounts' loads known for this version of usage, leaving GPUs and
        ranking."""
        loads_key = (self.usage.version, self.ledger.leaving_version, ranking)
        if self._account_loads_key != loads_key:
            self._account_loads = {}
            self._account_loads_key = loads_key
        return self._account_loads

    def _check_pair_verdicts(self, ranking: Ranking) -> None:
        """Forget the remembered pair verdicts when the budgets (or, under the fair-share
        rule, the ranking) changed."""
        stamp = self.tree.version
        if self._pair_verdicts_stamp != stamp or (
            self.contract.cross_account == "fair_share"
            and self._pair_verdicts_ranking is not ranking
        ):
            self._pair_verdicts.clear()
            self._pair_verdicts_ranking = ranking
            self._pair_verdicts_stamp = stamp

    def _account_load(self, account: str, ranking: Ranking) -> AccountLoad:
        standing = None
        if ranking.is_ranked_leaf(account):
            standing = float(len(ranking.leaves) - ranking.rank(account))
        return AccountLoad(account, self.ledger.running_gpus(account), standing)

    def _pair_verdict(
        self,
        entry: QueueEntry,
        ranking: Ranking,
        now: float,
        slot: int,
        preemptor: PreemptorSide,
        victim: VictimSide,
    ) -> PairVerdict | None:
        """The contract's verdict on the unprotected allocated running job in `slot` for
        `entry`, as what `verdicts` applies to its (account, priority) pair: None if refused.

        Verdicts are remembered by `preemptor` and `victim`, while the budgets (and under the
        fair-share rule the ranking, see `_check_pair_verdicts`) stay the same: nothing else of
        either job enters a verdict on an unprotected victim.
        """
        key = (preemptor, victim)
        known = self._pair_verdicts.get(key, _UNKNOWN)
        if known is _UNKNOWN:
            verdict = self.contract.may_preempt(
                entry,
                self.ledger.views[str(self.ledger.preemptible.ids[slot])],
                now,
                ranking,
                self.ledger,
            )
            known = None
            if verdict.allowed:
                limit = None
                if self.contract.cross_account == "budget" and (
                    verdict.rule is PreemptionRule.RECLAIM_BUDGET
                ):
                    limit = self.contract.reclaim_limit(entry.account, victim.account, self.ledger)
                known = PairVerdict(str(verdict.rule), limit)
            if len(self._pair_verdicts) >= PAIR_VERDICTS_KEPT:
                self._pair_verdicts.clear()  # loads wander: keep the memo bounded
            self._pair_verdicts[key] = known
        return known

    # --- one-domain gangs ---------------------------------------------------------------------
    def local_candidates(
        self, job: Job, now: float, only_unallocated: bool = False
    ) -> LocalCandidates | None:
        """Running jobs in the innermost domains where evicting unprotected work could fit
        `job`, for gangs that fit in one such domain; None when that shortcut does not apply.
        With `only_unallocated`, the only work counted and listed is unallocated (all the
        contract lets the job take).

        Unprotected work is unallocated work and allocated jobs past their min runtime,
        whatever their standing (the contract filters later). The per-domain aggregates of free
        and unprotected GPUs bound each domain's room from above; the domains within that bound
        are taken by the work lost evicting all their unprotected jobs, cheapest first, and
        their room is counted node by node until `DOMAINS_EXAMINED` of them have room.
        """
        request = job.request
        search = self.victim_search
        if request.is_fractional or request.gpus_per_pod == 0:
            return None
        need = request.pods * request.gpus_per_pod
        if need > search.largest_leaf_gpus:
            return None
        state, index = self.state, self.ledger.preemptible
        index.refresh(now)
        leaf_free = state.free_gpus[search.leaf_level]
        freeable = index.leaf_unallocated_freeable if only_unallocated else index.leaf_freeable
        # With each such domain, the work lost evicting every unprotected job touching it.
        possible, cost = kernels.reaching(
            leaf_free, freeable, need, index.leaf_weight, index.leaf_weighted_since, now
        )
        one_domain = search.is_one_domain(request)
        nothing = LocalCandidates(np.zeros(0, dtype=np.int64), True, True)
        if possible.size == 0:
            return nothing if one_domain else None
        picked, examined, found = self._cheapest_with_room(
            possible, cost, need - leaf_free[possible], request, only_unallocated
        )
        complete = one_domain and examined == possible.size and found <= DOMAINS_EXAMINED
        if picked.size == 0:
            return nothing if one_domain else None
        slots = index.slots_on(domain_nodes(search.leaf_starts, picked, search.leaf_size))
        if only_unallocated:
            slots = slots[index.unallocated[slots]]
        # In job-name order, so that ties between equal victim sets always break the same way.
        ordered = slots[index.ids[slots].argsort(kind="stable")]
        return LocalCandidates(ordered, complete, found < DOMAINS_EXAMINED)

    def _cheapest_with_room(
        self,
        possible: IntArray,
        cost: FloatArray,
        lacking: IntArray,
        request: GangRequest,
        only_unallocated: bool,
    ) -> tuple[IntArray, int, int]:
        """Up to `DOMAINS_EXAMINED` of the `possible` innermost domains with room, cheapest
        first by `cost` (then by the GPUs each lacks now, `lacking`); with how many domains
        were examined and how many had room.

        The cheapest few first without sorting every domain: those up to the batch-th cost
        (ties included), then, if they do not give enough domains with room, all the rest."""
        chosen: list[IntArray] = []
        found = examined = 0
        batch = 2 * DOMAINS_EXAMINED
        cheapest: BoolArray | None = None
        if possible.size > batch:
            cheapest = cost <= np.partition(cost, batch - 1)[batch - 1]
        for stage_number in range(1 if cheapest is None else 2):
            if found >= DOMAINS_EXAMINED:
                break
            if cheapest is None:
                stage, stage_cost, stage_lacking = possible, cost, lacking
            else:
                # The rest only when the cheapest few fall short (rarely on a busy fleet).
                kept = cheapest if stage_number == 0 else ~cheapest
                stage, stage_cost, stage_lacking = possible[kept], cost[kept], lacking[kept]
            ranked = stage[np.lexsort((stage_lacking, stage_cost))]
            done = 0
            while done < ranked.size and found < DOMAINS_EXAMINED:
                leaves = ranked[done : done + batch]
                done += leaves.size
                examined += leaves.size
                batch *= 2
                fits = self._leaves_with_room(leaves, request, only_unallocated)
                chosen.append(fits[: DOMAINS_EXAMINED - found])
                found += fits.size
        return np.concatenate(chosen), examined, found

    def _leaves_with_room(
        self, leaves: IntArray, request: GangRequest, only_unallocated: bool = False
    ) -> IntArray:
        """Those of `leaves` (innermost domains) where free GPUs plus those of unprotected pods
        (with `only_unallocated`, of unallocated pods) give room for the gang, counted node by
        node."""
        state, topology = self.state, self.state.topology
        index = self.ledger.preemptible
        room = kernels.pods_in_domains(
            leaves,
            self.victim_search.leaf_starts,
            state.free_whole_gpus,
            index.node_unallocated_freeable if only_unallocated else index.node_freeable,
            topology.gpu_count,
            state.health,
            topology.gpu_model,
            request.model_allowed(topology),
            request.gpus_per_pod,
        )
        fits: IntArray = leaves[room >= request.pods]
        return fits


@dataclass(frozen=True)
class _PairVerdicts:
    """Per pair of victims' (account, priority): allowed, rule code, GPU limit, and standing
    where ranked."""

    allowed: BoolArray
    rule: IntArray
    limit: FloatArray
    standing: FloatArray
    ranked: BoolArray

    @staticmethod
    def empty(count: int) -> _PairVerdicts:
        return _PairVerdicts(
            allowed=np.zeros(count, dtype=bool),
            rule=np.zeros(count, dtype=np.int64),
            limit=np.full(count, np.inf),
            standing=np.zeros(count),
            ranked=np.zeros(count, dtype=bool),
        )
