"""The placement searches of a frontier-lab run, timed one by one and grouped by gang shape.

Runs the frontier workload (`toposched simulate --workload frontier`, one cycle per 10 minutes)
for a few simulated days and times every `place()` the scheduler calls, grouped by what the
search was for: one rack (18 pods, `required: rack`), rack slices of 2-4 racks, larger gangs
of rack slices, each split into placements and refusals. Per group: searches, their total,
mean and median time.

`--log FILE` also writes each search's outcome, one line per search in call order (the
request's shape and a digest of the placement's nodes and GPUs, or of the refusal's code and
reason): two trees' logs are equal when their searches decided alike.

    PYTHONPATH=src .venv/bin/python benchmarks/frontier_searches.py --days 2 --log a.txt
"""

from __future__ import annotations

import hashlib
import importlib
import time
from collections import defaultdict
from typing import Any

from grouped_times import frontier_options, frontier_run, report

import toposched.placement.search as search
from toposched.placement.request import GangRequest

# The scheduler's modules that call `place` by the name they imported.
CALLERS = (
    "toposched.scheduler.placing",
    "toposched.scheduler.reservations",
    "toposched.scheduler.defrag",
    "toposched.scheduler.preemption",
    "toposched.scheduler.spread",
    "toposched.placement.roles",
)


def shape(request: GangRequest, result: search.PlacementResult) -> str:
    """The group of a search: the gang's shape and whether it was placed."""
    if request.slices:
        size = "2-4 rack slices" if request.pods <= 72 else "more rack slices"
    elif request.pods == 18:
        size = "one rack"
    else:
        size = f"{request.pods} pods"
    return f"{size}, {'placed' if isinstance(result, search.Placement) else 'refused'}"


def outcome(request: GangRequest, result: search.PlacementResult) -> str:
    """One log line: the request's shape and a digest of what the search decided."""
    if isinstance(result, search.Placement):
        allocation = result.allocation
        decided = allocation.nodes.tobytes() + allocation.gpus.tobytes()
    else:
        decided = f"{result.code}:{result.reason}".encode()
    digest = hashlib.blake2b(decided, digest_size=8).hexdigest()
    return f"{request.pods} {request.required} {request.preferred} {request.slices} {digest}"


def run(days: float, seed: int, logged: bool) -> tuple[dict[str, list[float]], list[str], float]:
    """Every search's time by group, the log lines in call order (when `logged`), and the
    run's wall time."""
    timed: dict[str, list[float]] = defaultdict(list)
    log: list[str] = []
    place = search.place

    def timed_place(*args: Any, **kwargs: Any) -> search.PlacementResult:
        start = time.perf_counter()
        result = place(*args, **kwargs)
        elapsed = time.perf_counter() - start
        request: GangRequest = args[1] if len(args) > 1 else kwargs["request"]
        timed[shape(request, result)].append(elapsed)
        if logged:
            log.append(outcome(request, result))
        return result

    for name in CALLERS:
        module = importlib.import_module(name)
        if getattr(module, "place", None) is place:
            module.place = timed_place  # type: ignore[attr-defined]
    return timed, log, frontier_run(days, seed)


def main() -> None:
    args = frontier_options(__doc__.split("\n\n")[0], 2.0, "each search's outcome")
    timed, log, wall = run(args.days, args.seed, bool(args.log))
    report(args, wall, "searches", timed, "us", log)


if __name__ == "__main__":
    main()
