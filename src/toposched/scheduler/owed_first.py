"""The order of the owed accounts' allocated work at the head of the queue, under
`OwedOrder.LEAST_MET`: the teams that received the least of what they were owed lately first.

The teams' standing (`OwedStanding`) advances at each cycle, and each team's rates are read
again after it wherever what they depend on moved (GPUs held or leaving, pending work, budgets).
The order is read again once an hour of the scheduler's time, not at each cycle: between two
readings the owed accounts keep their places, so that cycles after submissions only keep
finding the queue's runs where the last cycle left them (`toposched.scheduler.incremental`).
"""

from __future__ import annotations

from toposched.cluster.units import HOUR
from toposched.policy.budget import BudgetTree
from toposched.policy.owed_standing import OwedStanding
from toposched.policy.ranking import Ranking
from toposched.scheduler.ledger import Ledger
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
