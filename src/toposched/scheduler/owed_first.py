"""The accounts whose allocated work heads the queue: those running below their budget with
work waiting (`OwedAccounts`), as a set that Fair Tree's standing orders, or under
`OwedOrder.LEAST_MET` in order of what they received lately, least first (`LeastMetFirst`).

The teams' standing (`OwedStanding`) advances at each cycle, and each team's rates are read
again after it wherever what they depend on moved (GPUs held or leaving, pending work, budgets).
The order is read again once an hour of the scheduler's time, not at each cycle: between two
readings the owed accounts keep their places, so that cycles after submissions only keep
finding the queue's runs where the last cycle left them (`toposched.scheduler.incremental`).
"""

from __future__ import annotations

from collections.abc import Collection

from toposched.cluster.units import HOUR
from toposched.policy.budget import BudgetTree
from toposched.policy.owed_standing import OwedStanding
from toposched.policy.ranking import Ranking
from toposched.policy.usage import UsageTracker
from toposched.scheduler.ledger import Ledger
from toposched.scheduler.queueing import JobQueue
from toposched.scheduler.tally import PendingTally

REORDER_EVERY = HOUR
"""Seconds between two readings of the owed accounts' order."""


class LeastMetFirst:
    """The owed accounts in order of their decayed share of owed GPU-seconds received."""

    def __init__(
        self, tree: BudgetTree, ledger: Ledger, tally: PendingTally, half_life: float
    ) -> None:
        self.tree = tree
        self.ledger = ledger
        self.tally = tally
        self.standing = OwedStanding(half_life)
        self._met: dict[str, float] = {}
        """Each team's `OwedStanding.met` as last read (1 where it was owed nothing)."""
        self._read_at: float | None = None
        self._inputs: tuple[int, ...] | None = None

    def advance(self, now: float) -> None:
        """At a cycle's start: count what the rates set after the last cycle gave up to
        `now`, and read the teams' order again if an hour passed since it was read."""
        standing = self.standing
        standing.advance(now)
        if self._read_at is None or now >= self._read_at + REORDER_EVERY:
            self._met = {team: _met_or_whole(standing.met(team)) for team in standing.teams()}
            self._read_at = now

    def order(self, owed: frozenset[str], ranking: Ranking) -> tuple[str, ...]:
        """`owed` in order: least received first, then by Fair Tree standing."""
        met = self._met
        return tuple(sorted(owed, key=lambda team: (met.get(team, 1.0), ranking.sort_key(team))))

    def settle(self) -> None:
        """After a cycle: each budgeted team's rates from now on, read again only if the GPUs
        held or leaving, the pending jobs or the budgets moved."""
        ledger, tree, tally = self.ledger, self.tree, self.tally
        inputs = (ledger.usage.version, ledger.leaving_version, tally.demand_version, tree.version)
        if inputs == self._inputs:
            return
        self._inputs = inputs
        pending = tally.pending_gpus
        for team in tree.leaves():
            if not tree.has_budget(team):
                continue
            running = ledger.running_gpus(team)
            self.standing.set_rates(
                team, running, running + pending.get(team, 0.0), ledger.budget_gpus(team)
            )


def _met_or_whole(met: float | None) -> float:
    return 1.0 if met is None else met


class OwedAccounts:
    """The accounts with pending jobs that run fewer allocated GPUs than their budget: their
    allocated work goes first in the queue, since a budget is what an account is owed."""

    def __init__(
        self,
        tree: BudgetTree,
        ledger: Ledger,
        usage: UsageTracker,
        queue: JobQueue,
        least_met: LeastMetFirst | None,
    ) -> None:
        self.tree = tree
        self.ledger = ledger
        self.usage = usage
        self.queue = queue
        self.least_met = least_met
        self._last: tuple[tuple[object, ...], frozenset[str]] | None = None

    def accounts(self) -> frozenset[str]:
        """The owed accounts, read again only when the accounts waiting, the GPUs held or
        leaving, or the budgets moved (most cycles after submissions only move none of them)."""
        tree, ledger = self.tree, self.ledger
        waiting = tuple(self.queue.accounts())
        inputs = (waiting, self.usage.version, ledger.leaving_version, tree.version)
        if self._last is not None and self._last[0] == inputs:
            return self._last[1]
        owed = frozenset(
            account
            for account in waiting
            if account in tree
            and tree.is_leaf(account)
            and ledger.running_gpus(account) < ledger.budget_gpus(account) - 1e-9
        )
        self._last = (inputs, owed)
        return owed

    def in_order(self, now: float) -> Collection[str]:
        """`accounts` as the queue takes them: a set, or in `least_met`'s order."""
        owed = self.accounts()
        if self.least_met is None or len(owed) < 2:
            return owed
        return self.least_met.order(owed, self.queue.ranking(now))
