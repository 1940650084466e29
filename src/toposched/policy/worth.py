"""Whether an eviction is worth the work it destroys: the cost/benefit rule of preemption.

The contract says who *may* be evicted; this rule says whether doing it pays. Evicting a job
past its min runtime throws away its work since its last checkpoint (since its start when it
cannot resume), and the job runs that work again. What the preemptor buys is an earlier start:
its GPUs times the wait it avoids, the time until the victims would free their GPUs on their
own. An eviction of allocated work (and of unallocated work, with `unallocated`) goes ahead
only when

    lost GPU-seconds (+ restarts) <= max_lost_per_gained x preemptor GPUs x min(wait, horizon)

where `wait` is the latest expected end among the weighed victims (`horizon` when a victim
has no expected runtime, or is already past it). Unallocated victims are not weighed unless
`unallocated` asks: by default budgeted work always reclaims unallocated capacity, as the
contract promises. See docs/preemption.md.

The work lost may carry a restart cost (`restart_cost`): each weighed victim's GPUs idle that
long again when it starts over (loading its image and checkpoint, warming up), which an
eviction destroys as surely as the work since its checkpoint.

Three optional refinements: `owed_only` credits only the preemptor GPUs that bring its
account back up to its budget (the owed GPU-time bought, not borrowing beyond it);
`age_wait` expects a victim without an expected runtime to run on in proportion to how long it
has run; `loss_budget` caps the work all evictions may destroy in any 24 hours and asks more of
an eviction the less of the budget is left:

    lost <= left and lost <= max_lost_per_gained x gained x left / loss_budget
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from toposched.cluster.errors import InputError, checked_number
from toposched.cluster.units import HOUR

__all__ = [
    "DEFAULT_EVICTION_WORTH",
    "DEFAULT_WORTH_HORIZON",
    "LOSS_WINDOW",
    "EvictionWorth",
    "VictimCost",
    "WorthScope",
    "WorthVerdict",
]

DEFAULT_WORTH_HORIZON = 2 * HOUR
"""The longest wait an eviction is credited with avoiding."""
LOSS_WINDOW = 24 * HOUR
"""The span `EvictionWorth.loss_budget` counts lost work over."""


class WorthScope(StrEnum):
    """Which victims the rule weighs: allocated ones, and unallocated ones with
    `EvictionWorth.unallocated`."""

    ALL = "all"
    """Every allocated victim: the preemptor's own account's and other accounts'."""
    OWN_ACCOUNT = "own-account"
    """Only the preemptor's own account's lower-priority jobs: evictions that move no GPUs
    between accounts, so refusing them never keeps an account from its budget."""
    CANNOT_RESUME = "cannot-resume"
    """Only the jobs that cannot resume, whose eviction throws their whole run away: a
    resumable victim loses its work since its last checkpoint, and is evicted as the
    contract allows."""


@dataclass(frozen=True, slots=True)
class VictimCost:
    """One victim as the rule weighs it."""

    job_id: str
    gpus: float
    lost_gpu_seconds: float
    remaining: float | None
    """Seconds until its expected end; None when it declared no expected runtime."""
    ran: float = 0.0
    """Seconds it has run since its (last) start."""
    account: str = ""
    """The account whose work it is (for `EvictionWorth.account_loss_budget`)."""

    def destroyed(self, restart_cost: float) -> float:
        """GPU-seconds its eviction destroys: its work lost and its restart."""
        return self.lost_gpu_seconds + restart_cost * self.gpus


@dataclass(frozen=True, slots=True)
class WorthVerdict:
    """The rule's answer for one victim set, with the figures it compared."""

    worth_it: bool
    victims: int
    """Victims weighed (unallocated ones only with `EvictionWorth.unallocated`)."""
    lost_gpu_seconds: float
    gained_gpu_seconds: float
    reason: str
    restart_gpu_seconds: float = 0.0
    """The victims' restart cost (`EvictionWorth.restart_cost`), weighed with the work lost."""

    @property
    def cost_gpu_seconds(self) -> float:
        """What the eviction destroys: the work lost and the restarts."""
        return self.lost_gpu_seconds + self.restart_gpu_seconds


def _hours(gpu_seconds: float) -> str:
    hours = gpu_seconds / HOUR
    return f"{hours:,.0f}" if hours >= 10 else f"{hours:,.1f}"


@dataclass(frozen=True)
class EvictionWorth:
    """Evict allocated work (and, with `unallocated`, unallocated work) only when the
    preemptor's earlier start is worth the work lost.

    `max_lost_per_gained`: GPU-seconds an eviction may destroy per GPU-second of earlier start
    it buys (1.0: no more work lost than gained). `horizon`: the longest wait an eviction is
    credited with avoiding, in seconds; it also stands for the wait when a victim's end is not
    known. Lower either to evict less.
    """

    max_lost_per_gained: float = 1.0
    horizon: float = DEFAULT_WORTH_HORIZON
    shortfall_weight: float = 0.0
    """Extra credit for an account far below its budget: the earlier start counts
    1 + shortfall_weight x (budget - running) / budget times (0: no extra credit)."""
    owed_only: bool = False
    """Credit only the preemptor's GPUs that bring its account back up to its budget
    (min(GPUs, budget - running)): the owed GPU-time the eviction reclaims, not the GPUs the
    account would borrow beyond its budget."""
    loss_budget: float | None = None
    """GPU-seconds of weighed victims' work the evictions of any 24 hours may destroy (None: no
    budget). An eviction must fit in what is left of it, and the less is left the more it
    must buy: lost <= max_lost_per_gained x gained x left / loss_budget."""
    age_wait: float = 0.0
    """For a victim without an expected runtime: expect it to run `age_wait` x the time it
    has run so far (at most `horizon`), since a job's remaining time grows with its age on
    heavy-tailed runtimes; 0: `horizon`, whatever its age."""
    scope: WorthScope = WorthScope.CANNOT_RESUME
    """Which victims are weighed; the others are evicted as the contract allows. By default
    only those that cannot resume: the evictions that throw a whole run away."""
    restart_cost: float = 0.0
    """Seconds a victim's GPUs spend starting it over (image, checkpoint, warm-up) before it
    does new work: each weighed victim costs its GPUs x this on top of the work it loses, so
    a victim that checkpointed a moment ago is not free. 0: restarts cost nothing."""
    account_loss_budget: float | None = None
    """GPU-seconds of any one account's work (its weighed victims' work lost and restarts)
    the evictions of any 24 hours may destroy (None: no such budget): an eviction that would
    take an account past it waits, so that no team's work is thrown away day after day for
    others' earlier starts."""
    account_loss_budgets: tuple[tuple[str, float], ...] = ()
    """(account, GPU-seconds per 24 hours) pairs: each named account's own budget of lost
    work, in place of `account_loss_budget` (e.g. less for a team whose runs cannot resume
    cheaply, or for an account that none may take from). Kept sorted by account."""
    unallocated: bool = False
    """Whether unallocated victims are weighed too (within `scope`), so that budgeted work
    waits rather than throw away a long run of unallocated work for a short gain; False:
    budgeted work reclaims unallocated capacity whatever it destroys."""

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "scope", WorthScope(self.scope))
        except ValueError:
            choices = ", ".join(scope.value for scope in WorthScope)
            raise InputError("scope", self.scope, f"must be one of {choices}") from None
        if not isinstance(self.owed_only, bool):
            raise InputError("owed_only", self.owed_only, "must be true or false")
        for name in ("loss_budget", "account_loss_budget"):
            value = getattr(self, name)
            if value is not None:
                rule = "must be GPU-seconds per day > 0, or None"
                checked_number(value, name, rule, above=True)
        object.__setattr__(self, "account_loss_budgets", _budgets(self.account_loss_budgets))
        for name in (
            "max_lost_per_gained",
            "horizon",
            "shortfall_weight",
            "age_wait",
            "restart_cost",
        ):
            checked_number(getattr(self, name), name)

    def avoided_wait(self, victims: Sequence[VictimCost]) -> float:
        """Seconds the preemptor would otherwise wait for these victims, at most `horizon`."""
        wait = 0.0
        for victim in victims:
            remaining = victim.remaining
            if remaining is None and self.age_wait > 0:
                remaining = self.age_wait * victim.ran
            elif remaining is None or remaining <= 0:
                # Unknown, or overdue: its estimate says nothing more about when it ends.
                return float(self.horizon)
            wait = max(wait, remaining)
        return min(wait, float(self.horizon))

    def credit(self, budget: float, running: float) -> float:
        """How many times the earlier start counts for an account running `running` of its
        `budget` GPUs: 1 + shortfall_weight x its shortfall as a share of its budget."""
        if budget <= 0 or running >= budget:
            return 1.0
        return 1.0 + self.shortfall_weight * (budget - max(running, 0.0)) / budget

    @property
    def per_account(self) -> bool:
        """Whether some account's lost work is budgeted (`account_loss_budget` or
        `account_loss_budgets`)."""
        return self.account_loss_budget is not None or bool(self.account_loss_budgets)

    def loss_budget_of(self, account: str) -> float | None:
        """The account's budget of lost work, GPU-seconds per 24 hours (None: none)."""
        for named, budget in self.account_loss_budgets:
            if named == account:
                return budget
        return self.account_loss_budget

    def account_over_budget(
        self, victims: Sequence[VictimCost], spent_by_account: Mapping[str, float]
    ) -> tuple[str, float] | None:
        """The first account (by name) whose victims would take it past its budget of lost
        work (`loss_budget_of`), with the GPU-seconds it has left; None when none would."""
        if not self.per_account:
            return None
        costs: dict[str, float] = {}
        for victim in victims:
            cost = victim.destroyed(self.restart_cost)
            costs[victim.account] = costs.get(victim.account, 0.0) + cost
        for account in sorted(costs):
            budget = self.loss_budget_of(account)
            if budget is None:
                continue
            left = max(budget - spent_by_account.get(account, 0.0), 0.0)
            if costs[account] > left:
                return account, left
        return None

    def judge(
        self,
        preemptor_gpus: float,
        victims: Sequence[VictimCost],
        credit: float = 1.0,
        spent: float = 0.0,
        spent_by_account: Mapping[str, float] | None = None,
    ) -> WorthVerdict:
        """Whether evicting `victims` (those of a plan the rule weighs) for a preemptor holding
        `preemptor_gpus` GPUs is worth it; `credit`: `credit(...)` of its account; `spent`:
        GPU-seconds evictions of weighed victims destroyed in the last `LOSS_WINDOW` (work lost
        and restarts: `WorthVerdict.cost_gpu_seconds`); `spent_by_account`: the same by the
        victims' accounts (read with `account_loss_budget`)."""
        lost = sum(victim.lost_gpu_seconds for victim in victims)
        restart = self.restart_cost * sum(victim.gpus for victim in victims)
        cost = lost + restart
        if not victims or cost <= 0:
            return WorthVerdict(True, len(victims), lost, 0.0, "no weighed work lost")
        gained = preemptor_gpus * self.avoided_wait(victims) * credit
        ratio = self.max_lost_per_gained
        left = None if self.loss_budget is None else max(self.loss_budget - spent, 0.0)
        if left is not None and self.loss_budget:
            ratio *= left / self.loss_budget
        over = self.account_over_budget(victims, spent_by_account or {})
        worth_it = cost <= ratio * gained and (left is None or cost <= left) and over is None
        jobs = f"{len(victims)} job" + ("s" if len(victims) != 1 else "")
        bought = (
            f"gain {_hours(gained)} GPU-hours of budget"
            if self.owed_only
            else f"start {_hours(gained)} GPU-hours earlier"
        )
        losing = f"losing {_hours(lost)} GPU-hours"
        if restart > 0:
            losing += f" and {_hours(restart)} restarting"
        figures = f"would evict {jobs} {losing} to {bought}"
        verdict = f"{figures}: evicting"
        if not worth_it:
            limit = "" if ratio == 1 else f" (at most {ratio:.2g} lost per GPU-hour gained)"
            if left is not None:
                limit += f" with {_hours(left)} GPU-hours left of the day's budget of lost work"
            if over is not None:
                limit += (
                    f", {_hours(over[1])} GPU-hours left of {over[0]}'s day's budget of lost work"
                )
            verdict = f"{figures}{limit}: waiting"
        return WorthVerdict(worth_it, len(victims), lost, gained, verdict, restart)


def _budgets(pairs: object) -> tuple[tuple[str, float], ...]:
    """`EvictionWorth.account_loss_budgets` checked and sorted by account."""
    rule = "must be (account, GPU-seconds per day > 0) pairs, each account once"
    if not isinstance(pairs, tuple | list):
        raise InputError("account_loss_budgets", pairs, rule)
    checked: dict[str, float] = {}
    for pair in pairs:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise InputError("account_loss_budgets", pair, rule)
        account, budget = pair
        if not isinstance(account, str) or not account or account in checked:
            raise InputError("account_loss_budgets", account, rule)
        checked[account] = checked_number(budget, "account_loss_budgets", rule, above=True)
    return tuple(sorted(checked.items()))


DEFAULT_EVICTION_WORTH = EvictionWorth()
"""The contract's rule unless a site chooses another or none: a budgeted job that cannot
resume is evicted past its min runtime only when the preemptor's earlier start gains at least
the GPU-hours it loses."""
