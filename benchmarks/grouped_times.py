"""The table the scripts that time a run's calls one by one print: per group, the calls, their
total, mean and median time, and a last line for every call; and the log they write."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

UNITS = {"us": 1e6, "ms": 1e3}


def print_groups(what: str, timed: Mapping[str, Sequence[float]], unit: str) -> None:
    """`timed`: seconds per call by group, printed largest total first in `unit` ("us", "ms")."""
    scale = UNITS[unit]
    width = max(len(what), *(len(name) for name in timed)) + 2
    print(f"{what:<{width}}{'count':>8}{'total s':>10}{'mean ' + unit:>10}{'median ' + unit:>11}")
    rows = sorted(timed.items(), key=lambda item: -sum(item[1]))
    every = np.concatenate([np.array(times, dtype=float) for _, times in rows])
    for name, times in [*rows, ("every call", every)]:
        values = np.array(times, dtype=float)
        print(
            f"{name:<{width}}{values.size:>8,}{values.sum():>10.3f}"
            f"{values.mean() * scale:>10.2f}{np.median(values) * scale:>11.2f}"
        )


def write_log(path: str, lines: Sequence[str]) -> None:
    """One line per call, in call order: two runs decided alike when their logs are equal."""
    with open(path, "w") as out:
        out.write("\n".join(lines) + "\n")
