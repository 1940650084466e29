"""Timing harness: repeated runs, medians, and a calibration figure from the same run."""

from __future__ import annotations

import gc
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

WARMUP_RUNS = 10
"""Untimed runs before each benchmark's timed ones."""


@dataclass
class Measurement:
    """One benchmark's timings in seconds, and what the number is next to a target."""

    name: str
    runs: int
    median_s: float
    p90_s: float
    min_s: float
    target_s: float | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    first_s: float | None = None
    """The first, cold run (one-time allocations and caches), before the warm-up ended."""

    @property
    def meets_target(self) -> bool | None:
        return None if self.target_s is None else self.median_s <= self.target_s

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["meets_target"] = self.meets_target
        return data


def measure(
    name: str,
    run: Callable[[], object],
    runs: int = 50,
    setup: Callable[[], object] | None = None,
    target_s: float | None = None,
    note: str = "",
    max_seconds: float = 20.0,
    warmup: int = WARMUP_RUNS,
) -> Measurement:
    """Time `run` (after `setup`, untimed, before each run) up to `runs` times or `max_seconds`,
    after `warmup` untimed runs (at most `runs`): a decision repeated on a live scheduler runs
    warm, while the first few runs of a process pay one-time costs (page faults, allocator
    pools, caches). The first run's time is kept as `first_s`."""
    first: float | None = None
    for _ in range(min(warmup, runs)):
        if setup is not None:
            setup()
        begin = time.perf_counter()
        run()
        if first is None:
            first = time.perf_counter() - begin
    timings: list[float] = []
    started = time.perf_counter()
    for _ in range(runs):
        if setup is not None:
            setup()
        begin = time.perf_counter()
        run()
        timings.append(time.perf_counter() - begin)
        if time.perf_counter() - started > max_seconds and len(timings) >= 3:
            break
    if first is None:
        first = timings[0]
    timings.sort()
    return Measurement(
        name=name,
        runs=len(timings),
        median_s=statistics.median(timings),
        p90_s=nearest_rank(timings, 0.9),
        min_s=timings[0],
        target_s=target_s,
        note=note,
        first_s=first,
    )


def nearest_rank(ordered: list[float], fraction: float) -> float:
    """The value at rank ceil(fraction * n) of `ordered` (sorted ascending): of 10 runs the p90
    is the 9th, of 20 the 18th."""
    return ordered[max(math.ceil(fraction * len(ordered)) - 1, 0)]


def freeze_built() -> None:
    """Take everything built so far (a fleet, a scheduler, its queue) out of the garbage
    collector's sight, as the service does once it has rebuilt its scheduler (`service.loop`):
    collections during the timed runs then scan what the runs make, not the million objects
    built before them, whose full scans (seconds each) fell on a run now and then."""
    gc.collect()
    gc.freeze()


def calibration(runs: int = 15, warmup: int = WARMUP_RUNS) -> Measurement:
    """One `numpy.sort` of 1M float32: a yardstick readers can time on their own machine."""
    values = np.random.default_rng(0).random(1_000_000, dtype=np.float32)
    return measure(
        "calibration: numpy.sort of 1M float32",
        lambda: np.sort(values),
        runs=runs,
        warmup=warmup,
    )


INTERPRETER_ROUNDS = 20_000
"""Rounds of `interpreter_calibration`'s loop."""


def _interpreter_rounds() -> int:
    values = np.arange(16, dtype=np.int64)
    counts: dict[tuple[int, int], int] = {}
    for round_number in range(INTERPRETER_ROUNDS):
        key = (int(values.sum()), round_number & 255)
        counts[key] = counts.get(key, 0) + 1
    return len(counts)


def interpreter_calibration(runs: int = 15, warmup: int = WARMUP_RUNS) -> Measurement:
    """A loop of small numpy calls and dictionary updates: a yardstick for interpreter-bound
    work. Most of a scheduling decision is numpy's cost per call and Python's own, which a
    large sort does not track: its SIMD path differs from one CPU to another far more."""
    return measure(
        f"calibration: {INTERPRETER_ROUNDS:,} rounds of a 16-integer numpy sum and a dict update",
        _interpreter_rounds,
        runs=runs,
        warmup=warmup,
    )


def machine() -> dict[str, Any]:
    """What the figures ran on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
    }
