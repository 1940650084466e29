"""Whether a preemptor should wait for its victims' next checkpoints instead of evicting now.

A resumable victim evicted now loses its work since its last checkpoint; evicted just after its
next checkpoint it loses almost nothing. Waiting costs the preemptor its GPUs for the wait. With
`since` a victim's last checkpoint (its start if none), `every` the time between its
checkpoints and `next = since + every`, over the victims of a plan:

    until = the latest `next` among the resumable victims whose cadence is known
    saved = sum over those victims of GPUs x (now - since)            lost if evicted now
            - sum over them of GPUs x ((until - since) mod every)     lost if evicted at until
            - sum over the others of GPUs x (until - now)             the others' work grows
    cost  = the preemptor's GPUs x (until - now)
    wait when 0 < until - now <= max_wait and saved > 0 and saved >= min_saved_per_cost x cost

With `owed_only`, `cost` counts only the preemptor's GPUs that bring its account back up to its
budget, min(GPUs, budget - running): a wait delays no owed GPU-time for an account already
running its budget, so such a preemptor waits whenever the checkpoints save work.

Jobs of priority `urgent_priority` or above never wait (interactive work). The scheduler learns
a job's cadence from its checkpoint reports (the time between two of them, or from its start to
the first); with `first_checkpoint`, a resumable job that has reported none yet is expected to
checkpoint first that long after its start. See docs/preemption.md, *Waiting for checkpoints*.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from toposched.cluster.errors import InputError, checked_number
from toposched.cluster.units import HOUR

__all__ = ["CheckpointWait", "VictimCadence", "WaitVerdict"]


@dataclass(frozen=True, slots=True)
class VictimCadence:
    """One victim of a plan as the rule sees it."""

    gpus: float
    since: float
    """When its work at stake began: its last checkpoint if it can resume, else its start."""
    every: float | None
    """Seconds between its checkpoints; None when it cannot resume or its cadence is unknown."""


@dataclass(frozen=True, slots=True)
class WaitVerdict:
    """The rule's answer for one plan, with the figures it compared."""

    wait: bool
    until: float
    """When the last of the awaited checkpoints is due (the decision time when not waiting)."""
    lost_now_gpu_seconds: float
    saved_gpu_seconds: float
    cost_gpu_seconds: float


@dataclass(frozen=True)
class CheckpointWait:
    """Wait up to `max_wait` seconds for victims to checkpoint when that saves more work than
    the wait costs the preemptor: `saved >= cost x min_saved_per_cost`.

    `max_wait`: the longest a preemptor waits (an hour by default); `min_saved_per_cost`:
    GPU-seconds the wait must save per GPU-second it costs the preemptor (1: at least as much
    as it costs); `urgent_priority`: jobs of this priority or above never wait (None: all may);
    `owed_only`: the wait costs only the preemptor's GPUs within its account's budget;
    `max_total_wait`: the most a pending job's waits add up to.
    """

    max_wait: float = HOUR
    min_saved_per_cost: float = 1.0
    urgent_priority: int | None = None
    first_checkpoint: float | None = None
    """Seconds from a resumable job's start to its first checkpoint, assumed until it reports
    one (None: a job that has reported none is not waited for). Past that time without a
    report, its cadence is unknown again."""
    owed_only: bool = False
    """Count the wait's cost only for the preemptor's GPUs that bring its account back up to
    its budget (`costed_gpus`), the owed GPU-time the wait delays; GPUs beyond the budget are
    borrowed, and delaying them delays nothing the account is owed."""
    max_total_wait: float | None = None
    """Seconds a pending job's waits may add up to, from the first until it starts (None: no
    bound beyond `max_wait` for each). A wait that costs nothing (`owed_only`) may be taken
    again for a new victim set each time the awaited victims have left; this bounds the
    chain."""

    def __post_init__(self) -> None:
        for name in ("max_wait", "min_saved_per_cost"):
            checked_number(getattr(self, name), name)
        if self.max_total_wait is not None:
            rule = "must be seconds > 0, or None"
            checked_number(self.max_total_wait, "max_total_wait", rule, above=True)
        if self.first_checkpoint is not None:
            rule = "must be seconds > 0, or None"
            checked_number(self.first_checkpoint, "first_checkpoint", rule, above=True)
        urgent = self.urgent_priority
        if urgent is not None and (isinstance(urgent, bool) or not isinstance(urgent, int)):
            raise InputError("urgent_priority", urgent, "must be an integer priority or None")
        if not isinstance(self.owed_only, bool):
            raise InputError("owed_only", self.owed_only, "must be true or false")

    def applies_to(self, priority: int) -> bool:
        """Whether a preemptor of `priority` may be asked to wait."""
        return self.urgent_priority is None or priority < self.urgent_priority

    def cadence(
        self, resumable: bool, every: float | None, since: float, now: float
    ) -> float | None:
        """A victim's checkpoint cadence as the rule uses it: the one learned from its reports
        (`every`), else `first_checkpoint` while its first checkpoint is still due (`since`:
        its start, as it has reported none); None when it cannot resume or is not known."""
        if not resumable:
            return None
        if every is not None:
            return every
        first = self.first_checkpoint
        if first is None or since + first <= now:
            return None
        return first

    def costed_gpus(self, gpus: float, budget: float, running: float) -> float:
        """The preemptor's GPUs a wait costs: all `gpus`, or with `owed_only` those that bring
        its account, running `running` of its `budget` GPUs, back up to the budget."""
        if not self.owed_only:
            return gpus
        return min(gpus, max(budget - running, 0.0))

    def judge(
        self, preemptor_gpus: float, victims: Sequence[VictimCadence], now: float
    ) -> WaitVerdict:
        """Whether a preemptor whose wait costs `preemptor_gpus` GPUs (`costed_gpus`) should
        wait for `victims`."""
        lost_now = sum(victim.gpus * max(now - victim.since, 0.0) for victim in victims)
        due = [
            victim.since + victim.every
            for victim in victims
            if victim.every is not None and victim.every > 0
        ]
        until = max(due, default=now)
        if until <= now or until - now > self.max_wait or lost_now <= 0:
            return WaitVerdict(False, now, lost_now, 0.0, 0.0)
        saved = 0.0
        for victim in victims:
            every = victim.every
            if every is not None and every > 0:
                # Its checkpoints by `until`: at least the one due, `until` being the latest due.
                saves = max(1, math.floor((until - victim.since) / every + 1e-9))
                later = max(until - victim.since - saves * every, 0.0)
                saved += victim.gpus * (max(now - victim.since, 0.0) - later)
            else:
                saved -= victim.gpus * (until - now)
        cost = preemptor_gpus * (until - now)
        wait = saved > 0 and saved >= cost * self.min_saved_per_cost
        return WaitVerdict(wait, until if wait else now, lost_now, saved, cost)
