"""The values of `toposched simulate`'s options (of the scheduling policy's, `toposched
serve`'s too), read as argparse reads them: each function takes the text given and returns the
value, or raises argparse.ArgumentTypeError with the rule (argparse prints it as a usage error,
exit code 2)."""

from __future__ import annotations

import argparse
import math
from enum import Enum
from typing import NamedTuple

from toposched.cluster.errors import InputError
from toposched.cluster.limits import MAX_NODES, MAX_TEAMS
from toposched.cluster.units import HOUR, parse_duration

__all__ = [
    "FULL_CYCLE_HELP",
    "WORTH_OFF",
    "FullCycleEvery",
    "TopologyPriceOption",
    "borrowed_duration",
    "cycle_interval",
    "full_cycle_every",
    "full_cycle_settings",
    "keep_duration",
    "loss_budget",
    "percentage",
    "process_count",
    "sample_interval",
    "seconds_option",
    "spares_option",
    "team_count",
    "topology_price_option",
    "worth_horizon",
    "worth_ratio",
]


def seconds_option(text: str, positive: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        rule = "> 0" if positive else ">= 0"
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of seconds {rule}")
    return value


class TopologyPriceOption(NamedTuple):
    """`--topology-price` as given: per-level slowdowns (None: the defaults) and a cap."""

    slowdown: dict[str, float] | None
    cap: float | None


def topology_price_option(text: str) -> TopologyPriceOption:
    if text.strip() == "default":
        return TopologyPriceOption(None, None)
    slowdown: dict[str, float] = {}
    cap: float | None = None
    for item in text.split(","):
        name, separator, value = item.strip().partition("=")
        try:
            number = float(value) if separator and name else math.nan
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or number < (1 if name == "cap" else 0):
            rule = "cap=FACTOR >= 1" if name == "cap" else "LEVEL=FRACTION with FRACTION >= 0"
            raise argparse.ArgumentTypeError(
                f"{item.strip()!r}: expected 'default' or comma-separated {rule} (e.g. rack=0.05)"
            )
        if name == "cap":
            cap = number
        else:
            slowdown[name] = number
    return TopologyPriceOption(slowdown, cap)


def sample_interval(text: str) -> float:
    return seconds_option(text, positive=True)


def cycle_interval(text: str) -> float:
    return seconds_option(text, positive=False)


def borrowed_duration(text: str) -> float | None:
    """Seconds, or None for 'none': no cap on a borrowing job's protection (the default)."""
    meaning = "to keep each job's declared min runtime"
    return _duration_or_word(text, "--borrowed-min-runtime", "none", meaning)


def _duration_or_word(text: str, option: str, word: str, meaning: str) -> float | None:
    """`text` read as a duration for `option`, or None for `word`; argparse's error otherwise,
    which says what `word` would mean."""
    if text.strip().lower() == word:
        return None
    try:
        return parse_duration(text, option)
    except InputError as error:
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r}: {error.rule}; or '{word}' {meaning}"
        ) from None


def team_count(text: str) -> int:
    if not text.isdigit() or not 2 <= int(text) <= MAX_TEAMS:
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r}: expected a whole number of teams from 2 to {MAX_TEAMS}"
        )
    return int(text)


def process_count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r}: expected a whole number of processes >= 1"
        )
    return int(text)


def percentage(text: str) -> float:
    try:
        value = float(text.removesuffix("%"))
    except ValueError:
        value = math.nan
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"{text[:80]!r}: expected a percentage from 0 to 100")
    return value / 100


def headroom_share(text: str) -> float:
    """`--unallocated-headroom`: a percentage of the cluster's GPUs, 0 to below 100."""
    try:
        value = float(text.removesuffix("%"))
    except ValueError:
        value = math.nan
    if not 0 <= value < 100:
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r}: expected a percentage of the cluster's GPUs, 0 to below 100"
        )
    return value / 100


WORTH_OFF = "off"
"""`--eviction-worth off`: no cost/benefit rule, every eviction the contract allows."""


def worth_ratio(text: str) -> float | str:
    """`--eviction-worth`: a number >= 0, or `off`."""
    if text.strip().lower() == WORTH_OFF:
        return WORTH_OFF
    return _nonnegative(text, "GPU-seconds lost per GPU-second gained", "1; or off, no rule")


def shortfall_weight(text: str) -> float:
    """`--eviction-worth-shortfall`: a number >= 0."""
    return _nonnegative(text, "extra credit per share of the budget a team lacks", "2")


def _nonnegative(text: str, expected: str, example: str) -> float:
    """`text` as a finite number >= 0, else an error saying what was `expected`."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r}: expected {expected}, a number >= 0 (e.g. {example})"
        )
    return value


class FullCycleEvery(Enum):
    """`--full-cycle-every`'s word beside a duration."""

    ALWAYS = "always"
    """Every cycle walks the whole queue: cycles that skip settled jobs are off."""


FULL_CYCLE_HELP = (
    "cycles after events that change little skip the pending jobs the last cycle settled, "
    "with the same decisions; as a safety net, a cycle walks the whole queue at least once "
    "per D of the scheduler's clock (simulated time in the simulator; default 5m; 0: only "
    "when an event needs it; always: every cycle, the shortcut off, e.g. to time or compare "
    "against it; docs/policy.md)"
)
"""`--full-cycle-every`'s help, `toposched simulate`'s and `toposched serve`'s."""


def full_cycle_every(text: str) -> float | FullCycleEvery:
    """`--full-cycle-every`: a duration >= 0 (0: no periodic full cycle), or 'always'."""
    always = FullCycleEvery.ALWAYS
    meaning = "to walk the whole queue every cycle"
    every = _duration_or_word(text, "--full-cycle-every", always.value, meaning)
    return always if every is None else every


def full_cycle_settings(every: float | FullCycleEvery | None) -> dict[str, float | bool]:
    """The scheduler settings `--full-cycle-every` asks for (none when not given)."""
    if every is None:
        return {}
    if every is FullCycleEvery.ALWAYS:
        return {"incremental": False}
    return {"full_cycle_every": every}


def worth_horizon(text: str) -> float:
    return _positive_duration(text, "--eviction-worth-horizon", "2h")


def owed_half_life(text: str) -> float:
    """`--owed-half-life`: a duration > 0."""
    return _positive_duration(text, "--owed-half-life", "1d")


def keep_duration(text: str) -> float:
    """`--keep-failed-nodes`: a duration > 0."""
    return _positive_duration(text, "--keep-failed-nodes", "30m")


def _positive_duration(text: str, option: str, example: str) -> float:
    """`text` read as a duration > 0 for `option`; argparse's error otherwise."""
    try:
        value = parse_duration(text, option)
    except InputError as error:
        raise argparse.ArgumentTypeError(f"{text[:80]!r}: {error.rule}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text[:80]!r}: expected a duration > 0, e.g. {example}")
    return value


def loss_budget(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r}: expected GPU-hours per 24 hours, a number > 0 (e.g. 100)"
        )
    return value * HOUR


def account_loss_budgets(text: str) -> tuple[tuple[str, float], ...]:
    """`--eviction-loss-budget-for`: ACCOUNT=GPU_HOURS pairs, comma-separated, as
    (account, GPU-seconds) pairs."""
    pairs: list[tuple[str, float]] = []
    for item in text.split(","):
        account, equals, hours = item.strip().partition("=")
        try:
            value = float(hours) if equals and account.strip() else math.nan
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0 or account.strip() in dict(pairs):
            raise argparse.ArgumentTypeError(
                f"{text[:80]!r}: expected ACCOUNT=GPU_HOURS pairs, comma-separated, each "
                "account once and each budget a number > 0 (e.g. team-a=5,team-b=50)"
            )
        pairs.append((account.strip(), value * HOUR))
    return tuple(pairs)


def spares_option(text: str) -> tuple[str, int]:
    level, _, count = text.partition(":")
    if not level or not count.isdigit() or not 1 <= int(count) <= MAX_NODES:
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r}: expected LEVEL:N with N >= 1 idle nodes per domain (at most "
            f"{MAX_NODES:,}), e.g. rack:1"
        )
    return level, int(count)
