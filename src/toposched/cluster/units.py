"""The project's units: GPU shares, time constants, and the parsers and formatters of the
quantities users write and read (durations, CPU and memory).

Every layer imports its units and duration formatting from here; this module imports nothing of
toposched's but the error type.
"""

from __future__ import annotations

import math
import re
import sys
from decimal import Decimal
from fractions import Fraction

from toposched.cluster.errors import InputError

__all__ = [
    "DAY",
    "HOUR",
    "MILLI_PER_GPU",
    "MINUTE",
    "NODE_LEVEL",
    "ROOT_LEVEL",
    "WEEK",
    "format_cpu_milli",
    "format_duration",
    "format_memory_mib",
    "format_span",
    "format_timing",
    "parse_cpu_milli",
    "parse_duration",
    "parse_memory_mib",
]

MILLI_PER_GPU = 1000
"""A whole GPU in milli-GPU, the unit of GPU shares (`gpu_milli`)."""

ROOT_LEVEL = "cluster"
"""The implicit outermost level of every topology: the whole cluster, one domain."""
NODE_LEVEL = "node"
"""The implicit innermost level below every topology's named levels: one node."""

MINUTE = 60.0
HOUR = 3_600.0
DAY = 86_400.0
WEEK = 7 * DAY
"""Seconds in a minute, an hour, a day and a week: every time in toposched is in seconds."""

SECONDS_PER_UNIT: dict[str, int] = {"d": int(DAY), "h": int(HOUR), "m": int(MINUTE), "s": 1}
BYTES_PER_MIB = 1 << 20
BYTES_PER_MEMORY_UNIT: dict[str, int] = {
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
    "Pi": 1 << 50,
    "k": 10**3,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
}

_DECIMAL = r"\d+(?:\.\d+)?"
_BARE_NUMBER = re.compile(rf"{_DECIMAL}")
# Units in descending order, each at most once ("1h30m", "3d", "1d 12h"): a fixed order rules
# out ambiguous spellings such as "30m1h".
_DURATION = re.compile(
    rf"(?:(?P<d>{_DECIMAL})d)?\s*(?:(?P<h>{_DECIMAL})h)?\s*"
    rf"(?:(?P<m>{_DECIMAL})m)?\s*(?:(?P<s>{_DECIMAL})s)?"
)
_MEMORY = re.compile(rf"(?P<number>{_DECIMAL})\s*(?P<unit>Ki|Mi|Gi|Ti|Pi|k|K|M|G|T|P)")
_CPU_MILLI = re.compile(r"(?P<milli>\d+)m")

DURATION_RULE = (
    "must be a duration >= 0: seconds as a number, or amounts with units d, h, m, s "
    "in that order (e.g. 90s, 30m, 4h, 3d, 1h30m)"
)
MEMORY_RULE = (
    "must be a memory size >= 0: a whole number of MiB, or an amount with a unit "
    "Ki, Mi, Gi, Ti, Pi (powers of 1024) or k, M, G, T, P (powers of 1000), e.g. 512Gi"
)
CPU_RULE = (
    "must be CPU cores >= 0 as a number (64, 0.5) or millicores as a string (500m), "
    "no finer than 1 millicore"
)


def _amount(digits: str) -> int | Fraction:
    """A decimal amount matched by a unit pattern, as an int when it has no fraction."""
    return int(digits) if digits.isdecimal() else Fraction(digits)


def _exact_number(value: object) -> Fraction | None:
    """The exact value of an int, a float (as written: 0.1 is one tenth) or a numeric string."""
    if isinstance(value, bool):  # True is an int to Python but never a quantity to a user
        return None
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        # repr is the shortest string that reads back as this float, so 0.1 becomes 1/10
        # rather than the binary fraction nearest to it.
        return Fraction(repr(value))
    if isinstance(value, str) and _BARE_NUMBER.fullmatch(value.strip()):
        return Fraction(value.strip())
    return None


# Plain numbers up to this take the direct paths below: ints convert to float exactly (2**53),
# and a decimal string this short cannot overflow a float. Larger ones take the exact path.
_DIRECT_INT_LIMIT = 1 << 53
_DIRECT_TEXT_LENGTH = 300
_MAX_SECONDS = sys.float_info.max


def _plain_seconds(value: object) -> float | None:
    """`parse_duration` of an int, a float or a decimal string (e.g. "3600", "0.5"), without
    the exact arithmetic of units; None for anything else, which the full parser judges.

    The same float as the exact path: ints are converted exactly, a float is already the
    number it reads as, and a decimal string is read correctly rounded either way.
    """
    # Exact types: bool, subclasses and numpy scalars take the full parser.
    if type(value) is float:
        if 0 <= value < math.inf:
            return value + 0.0  # -0.0 reads as 0.0, as its exact value does
        return None
    if type(value) is int:
        return float(value) if 0 <= value <= _DIRECT_INT_LIMIT else None
    if type(value) is str:
        text = value.strip()
        whole, dot, fraction = text.partition(".")
        # isdecimal holds for the digits `\d` matches, as in the exact path's pattern.
        if (
            whole.isdecimal()
            and (not dot or fraction.isdecimal())
            and len(text) <= _DIRECT_TEXT_LENGTH
        ):
            return float(text)
    return None


def parse_duration(value: object, field: str = "duration") -> float:
    """Seconds in `value`: a number of seconds, or a string such as "90s", "4h", "1h30m", "3d"."""
    plain = _plain_seconds(value)
    if plain is not None:
        return plain
    seconds: Fraction | int | None = _exact_number(value)
    if seconds is None and isinstance(value, str):
        text = value.strip()
        match = _DURATION.fullmatch(text)
        if text and match is not None:
            seconds = sum(
                (
                    _amount(amount) * SECONDS_PER_UNIT[unit]
                    for unit, amount in match.groupdict().items()
                    if amount
                ),
                0,
            )
    if seconds is None or seconds < 0:
        raise InputError(field, value, DURATION_RULE)
    if seconds > _MAX_SECONDS:
        raise InputError(
            field, value, f"must be at most {_MAX_SECONDS:.3g} seconds, the most a float holds"
        )
    return float(seconds)


def format_duration(seconds: float) -> str:
    """`seconds` in units ("1h30m", "0.5s") that `parse_duration` reads back exactly."""
    if not math.isfinite(seconds) or seconds < 0:
        raise InputError("duration", seconds, "must be a finite number of seconds >= 0")
    if not float(seconds).is_integer():
        # Fixed-point digits of repr (the shortest string that reads back as this float), since
        # the parser does not read an exponent form such as "5e-05".
        return f"{Decimal(repr(float(seconds))):f}s"
    remaining = int(seconds)
    parts: list[str] = []
    for unit, unit_seconds in SECONDS_PER_UNIT.items():
        amount, remaining = divmod(remaining, unit_seconds)
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts) or "0s"


def format_span(
    seconds: float,
    *,
    minutes_from: float = 1.5 * MINUTE,
    hours_from: float = 1.5 * HOUR,
    days_from: float = math.inf,
) -> str:
    """`seconds` rounded for a reader: "45 s", "20 min", "7.5 h", "3.2 d".

    Whole seconds below `minutes_from`, whole minutes below `hours_from`, hours to one decimal
    below `days_from`, days to one decimal beyond. Waits and runtimes in tables and
    explanations use the defaults (a unit from one and a half of it, no days); a table whose
    figures span days passes `days_from`.
    """
    if seconds < minutes_from:
        return f"{seconds:.0f} s"
    if seconds < hours_from:
        return f"{seconds / MINUTE:.0f} min"
    if seconds < days_from:
        return f"{seconds / HOUR:.1f} h"
    return f"{seconds / DAY:.1f} d"


def format_timing(seconds: float, digits: int = 2, *, microseconds: bool = True) -> str:
    """A measured time: "12.3 us", "4.56 ms", "1.23 s", with `digits` decimals (one fewer in
    microseconds). Without `microseconds`, times below 1 ms read in milliseconds ("0.09 ms")."""
    if microseconds and seconds < 1e-3:
        return f"{seconds * 1e6:.{max(digits - 1, 0)}f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.{digits}f} ms"
    return f"{seconds:.{digits}f} s"


def parse_memory_mib(value: object, field: str = "memory") -> int:
    """MiB in `value`: a whole number of MiB, or "512Gi", "16384Mi", "1Ti", "1G" (rounded up)."""
    if type(value) is int and value >= 0:
        return value  # bool and other int subclasses take the exact path, which refuses them
    if isinstance(value, str):
        text = value.strip()
        if text.isdecimal():
            return int(text)
        match = _MEMORY.fullmatch(text)
        if match is not None:
            size_bytes = _amount(match["number"]) * BYTES_PER_MEMORY_UNIT[match["unit"]]
            return -(-size_bytes // BYTES_PER_MIB)  # rounded up
    mib = _exact_number(value)
    if mib is None or mib < 0 or mib.denominator != 1:
        raise InputError(field, value, MEMORY_RULE)
    return int(mib)


def format_memory_mib(mib: int) -> str:
    """`mib` in the largest binary unit that holds it exactly ("512Gi"), for `parse_memory_mib`."""
    if isinstance(mib, bool) or not isinstance(mib, int) or mib < 0:
        raise InputError("memory", mib, "must be a whole number of MiB >= 0")
    for unit in ("Pi", "Ti", "Gi"):
        unit_mib = BYTES_PER_MEMORY_UNIT[unit] // BYTES_PER_MIB
        if mib and mib % unit_mib == 0:
            return f"{mib // unit_mib}{unit}"
    return f"{mib}Mi"


def parse_cpu_milli(value: object, field: str = "cpu") -> int:
    """Millicores in `value`: cores as a number or string (64, 0.5, "2") or "500m"."""
    if type(value) is int and value >= 0:
        return value * 1000  # bool and other int subclasses take the exact path
    if isinstance(value, str):
        text = value.strip()
        if text.isdecimal():
            return int(text) * 1000
        match = _CPU_MILLI.fullmatch(text)
        if match is not None:
            return int(match["milli"])
    cores = _exact_number(value)
    if cores is None or cores < 0 or (cores * 1000).denominator != 1:
        raise InputError(field, value, CPU_RULE)
    return int(cores * 1000)


def format_cpu_milli(milli: int) -> str:
    """`milli` as whole cores ("64") when exact, else millicores ("500m"), for `parse_cpu_milli`."""
    if isinstance(milli, bool) or not isinstance(milli, int) or milli < 0:
        raise InputError("cpu", milli, "must be a whole number of millicores >= 0")
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"
