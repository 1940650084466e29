"""The contract's answers for slots of the preemptible index, as arrays."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]


@dataclass
class SlotVerdicts:
    """The contract's answer for each of some slots: allowed, by which rule, and standing."""

    allowed: BoolArray
    rule: IntArray
    """Index into `rule_names`, where allowed."""
    rule_names: list[str]
    standing: FloatArray
    limit: FloatArray
    """Where allowed by the budget rule, the most GPUs one preemption may take from the slot's
    account in all (what it runs beyond its budget); inf elsewhere."""

    def rows(self, rows: IntArray) -> SlotVerdicts:
        """The verdicts of some of these slots (`rows` index them), in that order."""
        return SlotVerdicts(
            allowed=self.allowed[rows],
            rule=self.rule[rows],
            rule_names=self.rule_names,
            standing=self.standing[rows],
            limit=self.limit[rows],
        )

    def rules_of(self, rows: IntArray) -> list[str]:
        if len(self.rule_names) == 1:
            return [self.rule_names[0]] * rows.size
        names: list[str] = np.array(self.rule_names, dtype=object)[self.rule[rows]].tolist()
        return names
