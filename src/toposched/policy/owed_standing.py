"""How much of what each team was owed lately it received: GPU-seconds owed and delivered within
owed, each second weighed down by half every `half_life` seconds of age.

Owed and delivered are counted as `toposched.policy.owed` counts them (a team is owed the smaller
of its budget and what its allocated jobs ask for, and delivered the smaller of what they hold
and what it is owed), but at each moment rather than per hour, and decayed rather than windowed:
the ratio of the two sums says which teams went short most lately, whatever their Fair Tree
standing, which also counts the GPUs they borrowed beyond their budget.

Rates are piecewise constant: `advance(now)` adds what the rates held since the last call gave,
then `set_rates` sets a team's rates from `now` on. Like the usage tracker it has no clock of
its own, and `now` must not go backwards.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import Enum

from toposched.cluster.errors import InputError

__all__ = ["OwedOrder", "OwedStanding", "owed_places"]


class OwedOrder(Enum):
    """How the queue orders the allocated work of the accounts running below their budget,
    which goes before every other account's."""

    STANDING = "standing"
    """By the accounts' Fair Tree standing, as the rest of the queue."""
    LEAST_MET = "least-met"
    """The account that received the least of its owed GPU-seconds lately first (decayed by a
    half-life; see `OwedStanding`), then by standing. Usage borrowed beyond a budget, which
    lowers an account's Fair Tree standing, does not make up for hours it went short."""


def owed_places(owed: Collection[str]) -> Mapping[str, int]:
    """Each owed account's place among the owed, as the queue reads them: all alike for a set
    (Fair Tree's standing orders them), their order for a sequence, as given for a mapping."""
    if isinstance(owed, Mapping):
        return owed
    if isinstance(owed, set | frozenset):
        return dict.fromkeys(owed, 0)
    return {account: place for place, account in enumerate(owed)}


@dataclass(slots=True)
class _Team:
    owed: float = 0.0
    """Decayed GPU-seconds owed, at the last `advance`."""
    delivered: float = 0.0
    """Decayed GPU-seconds delivered within owed, at the last `advance`."""
    owed_rate: float = 0.0
    delivered_rate: float = 0.0


class OwedStanding:
    """Each team's decayed owed and delivered GPU-seconds, and their ratio (`met`)."""

    def __init__(self, half_life: float) -> None:
        if isinstance(half_life, bool) or not isinstance(half_life, (int, float)):
            raise InputError("half_life", half_life, "must be a number of seconds")
        if not math.isfinite(half_life) or half_life <= 0:
            raise InputError("half_life", half_life, "must be a positive number of seconds")
        self.half_life = float(half_life)
        self.since: float | None = None
        """The time of the last `advance`."""
        self._teams: dict[str, _Team] = {}

    def teams(self) -> list[str]:
        """Every team whose rates were ever set."""
        return list(self._teams)

    def advance(self, now: float) -> None:
        """Add what each team's rates gave since the last call (the first call only starts
        the clock)."""
        since = self.since
        if since is not None and now < since:
            raise InputError("now", now, f"must not go backwards (last: {since})")
        self.since = now
        if since is None or now == since:
            return
        decay = 2.0 ** (-(now - since) / self.half_life)
        # A constant rate r over the span adds r times the integral of the decay over it.
        gain = self.half_life / math.log(2.0) * (1.0 - decay)
        for team in self._teams.values():
            team.owed = team.owed * decay + team.owed_rate * gain
            team.delivered = team.delivered * decay + team.delivered_rate * gain

    def set_rates(self, name: str, running: float, demand: float, budget: float) -> None:
        """From the last `advance` on, the team's allocated jobs hold `running` GPUs and ask for
        `demand` (pending or running), against a budget of `budget` GPUs."""
        team = self._teams.get(name)
        if team is None:
            team = self._teams[name] = _Team()
        owed = max(min(budget, demand), 0.0)
        team.owed_rate = owed
        team.delivered_rate = max(min(running, owed), 0.0)

    def met(self, name: str) -> float | None:
        """The share of the team's decayed owed GPU-seconds it received (0 to 1); None when it
        was owed nothing."""
        team = self._teams.get(name)
        if team is None or team.owed <= 0:
            return None
        return min(team.delivered / team.owed, 1.0)
