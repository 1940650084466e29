"""Under the budget rule, which unprotected running jobs a budgeted job may take: for each
account of the preemptible index, the GPUs a victim of that account may hold (what the account
runs beyond its budget), and from those the index's slots a job of an account and priority may
take. Remembered while the loads, the budgets and the index stay the same: kept refusals ask
for them at every look (`KeptRefusals`)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from toposched.policy.budget import BudgetTree
from toposched.policy.contract import Contract
from toposched.policy.queue_entry import QueueEntry
from toposched.policy.usage import UsageTracker
from toposched.scheduler.ledger import Ledger
from toposched.scheduler.refusal_kernels import takeable_slots

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

#: GPUs by which limits are widened when compared with jobs' sizes (more than any slack the
#: contract allows for rounding).
LIMIT_SLACK = 1e-6


class BudgetLimits:
    """The budget rule's limits on victims and the slots they leave takeable, remembered."""

    def __init__(
        self, tree: BudgetTree, usage: UsageTracker, contract: Contract, ledger: Ledger
    ) -> None:
        self.tree = tree
        self.usage = usage
        self.contract = contract
        self.ledger = ledger
        self._takeable_by: dict[tuple[str, int, bool], BoolArray] = {}
        self._takeable_stamp: tuple[int, float, int, int, int] = (-1, -1.0, -1, -1, -1)
        self.takeable_generation = 0
        """Counts the times the remembered `takeable` answers were dropped: an answer for one
        account and priority is the same array while it stays."""
        self._beyond: FloatArray = np.zeros(0)
        self._limits_by: dict[str, FloatArray] = {}
        self._beyond_stamp: tuple[int, int, int, int] = (-1, -1, -1, -1)

    def takeable(self, entry: QueueEntry, refreshed: float, own_only: bool = False) -> BoolArray:
        """Per slot of the preemptible index, whether the contract lets `entry` take that
        unprotected job now under the budget rule: its account's jobs of lower priority,
        unallocated work, and other accounts' jobs no larger than what their account runs
        beyond its budget (none while `entry`'s account runs its own; widened by
        `LIMIT_SLACK`); with `own_only` (the borrowing rule holds it to its own account), its
        account's jobs of lower priority alone. One last entry, False, for GPUs no whole-GPU
        pod holds (`gpu_owner` -1). Remembered by account, priority and `own_only` while the
        index, its refresh (`refreshed`, when the index was last refreshed) and the loads stay
        the same."""
        ledger = self.ledger
        index = ledger.preemptible
        stamp = (
            index.version,
            refreshed,
            self.usage.version,
            ledger.leaving_version,
            self.tree.version,
        )
        if self._takeable_stamp != stamp:
            self._takeable_by.clear()
            self._takeable_stamp = stamp
            self.takeable_generation += 1
        key = (entry.account, entry.priority, own_only)
        known = self._takeable_by.get(key)
        if known is not None:
            return known
        size = len(index.allocations)
        limits = self.limits(entry.account)
        if own_only or not np.isfinite(limits).any():
            limits = np.full(limits.size, -np.inf)
        unallocated = index.unallocated[:size]
        known = self._takeable_by[key] = takeable_slots(
            index.counted[:size],
            np.zeros_like(unallocated) if own_only else unallocated,
            index.account[:size],
            index.priority[:size],
            index.gpus[:size],
            index.accounts.get(entry.account, -1),
            entry.priority,
            limits,
            LIMIT_SLACK,
        )
        return known

    def limits(self, account: str) -> FloatArray:
        """Per account code of the preemptible index, the budget rule's limit on a victim's
        GPUs for a job of `account`, up to the contract's slack: what the victim's account
        runs beyond its budget; -inf for `account`'s own, and for all while `account` runs
        its own. Remembered by account while the loads and budgets stay the same."""
        beyond = self._beyond_budgets()
        known = self._limits_by.get(account)
        if known is None:
            if self.contract.runs_its_budget(account, self.ledger):
                known = np.full(beyond.size, -np.inf)
            else:
                known = beyond.copy()
                code = self.ledger.preemptible.accounts.get(account)
                if code is not None:
                    known[code] = -np.inf
            self._limits_by[account] = known
        return known

    def _beyond_budgets(self) -> FloatArray:
        """Per account code of the preemptible index, the GPUs it runs beyond its budget;
        remembered (with `limits`) while the loads and budgets stay the same."""
        ledger = self.ledger
        names = ledger.preemptible.account_names
        stamp = (self.usage.version, ledger.leaving_version, self.tree.version, len(names))
        if self._beyond_stamp != stamp:
            self._beyond = np.array(
                [ledger.running_gpus(name) - ledger.budget_gpus(name) for name in names],
                dtype=np.float64,
            )
            self._limits_by.clear()
            self._beyond_stamp = stamp
        return self._beyond
