"""The contract's verdicts on running jobs for one preemptor, asked once per kind of victim
and remembered while the budgets, loads and ranking they depend on stay the same."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from toposched.policy.budget import BudgetTree
from toposched.policy.contract import BorrowingPreempts, Contract, PreemptionRule
from toposched.policy.queue_entry import QueueEntry
from toposched.policy.ranking import Ranking
from toposched.policy.usage import UsageTracker
from toposched.scheduler.ledger import Ledger
from toposched.scheduler.slot_verdicts import SlotVerdicts

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

PAIR_VERDICTS_KEPT = 100_000


class PreemptorSide(NamedTuple):
    """What a verdict on an unprotected allocated victim reads of the preemptor."""

    account: str
    priority: int
    unallocated: bool
    account_running: float
    """GPUs its account runs, as the contract counts them."""
    gpus: float
    """GPUs it asks for, as the borrowing rule reads them (0 when the contract reads none)."""


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


class Verdicts:
    """Answers which running jobs the contract lets a preemptor take (see `of`)."""

    def __init__(
        self, tree: BudgetTree, usage: UsageTracker, contract: Contract, ledger: Ledger
    ) -> None:
        self.tree = tree
        self.usage = usage
        self.contract = contract
        self.ledger = ledger
        # The contract's verdicts on pairs of running jobs (see `_pair_verdict`), for one
        # ranking and one version of the loads and budgets.
        self._pair_verdicts: dict[tuple[PreemptorSide, VictimSide], PairVerdict | None] = {}
        self._pair_verdicts_ranking: Ranking | None = None
        self._pair_verdicts_stamp = -1
        # Victim accounts' loads and standings by account code (see `_account_load`), for one
        # version of the usage, of the GPUs on their way out and of the ranking.
        self._account_loads: dict[int, AccountLoad] = {}
        self._account_loads_key: tuple[int, int, Ranking | None] = (-1, -1, None)

    def of(self, entry: QueueEntry, ranking: Ranking, now: float, slots: IntArray) -> SlotVerdicts:
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
            # Unallocated victims are fair game for any allocated preemptor that does not
            # borrow under the borrowing rule: one question.
            first = str(index.ids[slots[unallocated.argmax()]])
            verdict = self.contract.may_preempt(
                entry, self.ledger.views[first], now, ranking, self.ledger
            )
            if verdict.rule is PreemptionRule.BORROWING:
                verdicts.allowed[unallocated] = False
            elif not verdict.allowed:
                verdicts.allowed[:] = False
                return verdicts
            else:
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
        reads_gpus = self.contract.borrowing_preempts is BorrowingPreempts.OWN_ACCOUNT
        preemptor = PreemptorSide(
            entry.account,
            entry.priority,
            entry.unallocated,
            self.ledger.running_gpus(entry.account),
            entry.gpus if reads_gpus else 0.0,
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
        `entry`, as what `of` applies to its (account, priority) pair: None if refused.

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
