"""Where a simulated run's scheduler time goes, by what each cycle follows.

Runs toposched on the workload of the `toposched simulate` options given and times every cycle
(CPU time of the process), grouped by the events the scheduler was told since the cycle before
(submissions, completions, evictions' ends, checkpoints, node health, ...; none when only the
clock moved: a protection's end, a reservation's time), by whether the cycle skipped the
pending jobs the last one settled (docs/policy.md, *Cycles after submissions only*) or was a
full one, and by the kinds of decision it made (Bind, Evict, Reserve; "Reserve again" when the
cycle before reserved for the same job in the same domain). Prints, per group, the cycles,
their total, mean and median CPU time and their share of the whole; then, per group, what a
cycle walked on average: the pending jobs, those answered alike an earlier job, those a cycle
after submissions skipped, the turns left (the jobs that took one) and the placement searches;
then the cycles grouped by why each walked the whole queue (`CycleResult.full_because`); last,
the CPU time of the searches inside the cycles, call by call (victim and reservation searches,
placements, kept refusals judged again).

    .venv/bin/python benchmarks/cycle_costs.py --days 3
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grouped_times import print_groups

from toposched.cli.simulate_options import add_options, check_options
from toposched.cli.simulate_run import build_workload, scheduler_settings
from toposched.cluster.state import ClusterState
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import Scheduler
from toposched.scheduler.decisions import Reserve
from toposched.scheduler.turn import CycleResult
from toposched.sim.engine import simulate

EVENTS = {
    "submit": "submission",
    "submit_many": "submission",
    "finish": "completion",
    "fail": "job failure",
    "evicted": "eviction's end",
    "cancel": "cancellation",
    "report_checkpoint": "checkpoint",
    "set_health": "node health",
    "set_priority": "priority",
}
"""The scheduler's calls between cycles, and the event each tells it of."""


def group_of(told: set[str], result: CycleResult, reserved: Reserve | None) -> str:
    """A cycle's group: the events told since the last cycle, how it walked, what it decided
    (`reserved`: the reservation the cycle before made, if any: a reservation for the same
    job in the same domain is made again)."""
    events = " + ".join(sorted(told)) if told else "none (the clock only)"
    walked = "skipping" if result.incremental else "full"
    kinds = set()
    for decision in result.decisions:
        kind = type(decision).__name__
        if isinstance(decision, Reserve) and reserved is not None:
            if (decision.job_id, decision.domain) == (reserved.job_id, reserved.domain):
                kind = "Reserve again"
        kinds.add(kind)
    decided = " + ".join(sorted(kinds)) if kinds else "none"
    return f"{events} | {walked} | {decided}"


def reservation_of(result: CycleResult) -> Reserve | None:
    """The reservation a cycle made, if any."""
    made = [decision for decision in result.decisions if isinstance(decision, Reserve)]
    return made[-1] if made else None


@dataclass
class Walked:
    """What a group's cycles walked, summed."""

    cycles: int = 0
    pending: int = 0
    alike: int = 0
    skipped: int = 0
    searches: int = 0

    def add(self, result: CycleResult) -> None:
        self.cycles += 1
        self.pending += result.considered
        self.alike += result.alike
        self.skipped += result.skipped
        self.searches += result.searches


def print_walked(walked: dict[str, Walked], timed: dict[str, list[float]]) -> None:
    """Per group, largest total time first: the means per cycle of `Walked`'s counts."""
    width = max(len(name) for name in walked) + 2
    heads = ("pending", "alike", "skipped", "turns", "searches")
    print(f"\n{'cycle after | walk | decisions':<{width}}" + "".join(f"{h:>10}" for h in heads))
    for name in sorted(walked, key=lambda group: -sum(timed[group])):
        sums = walked[name]
        turns = sums.pending - sums.alike - sums.skipped
        means = (sums.pending, sums.alike, sums.skipped, turns, sums.searches)
        print(f"{name:<{width}}" + "".join(f"{value / sums.cycles:>10.1f}" for value in means))


@dataclass
class CycleTimes:
    """Each cycle's CPU seconds by group and by why it walked the whole queue, and what each
    group's cycles walked."""

    by_group: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    by_cause: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    by_part: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    """The CPU seconds of each call of the searches in `PARTS`."""
    walked: dict[str, Walked] = field(default_factory=lambda: defaultdict(Walked))


SKIPPED = "none: it skipped the settled jobs"

PARTS = {
    "victim searches": ("preemptor", "search"),
    "reservation searches": ("reservations", "earliest_fit"),
    "placements": ("placing", "place"),
    "kept refusals judged again": ("preemptor.kept", "find"),
}
"""The searches inside the cycles timed call by call: the scheduler's part and its method."""


def time_parts(scheduler: Scheduler, by_part: dict[str, list[float]]) -> None:
    """Time every call of the `PARTS` of `scheduler` into `by_part`."""
    for name, (path, method) in PARTS.items():
        part: Any = scheduler
        for attribute in path.split("."):
            part = getattr(part, attribute)
        setattr(part, method, timing(getattr(part, method), by_part[name]))


def timing(call: Callable[..., Any], times: list[float]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        began = time.process_time()
        try:
            return call(*args, **kwargs)
        finally:
            times.append(time.process_time() - began)

    return timed


def timed_cycles(args: argparse.Namespace) -> CycleTimes:
    """Simulate the workload of `args` under toposched, timing every cycle."""
    times = CycleTimes()
    timed, walked = times.by_group, times.walked
    told: set[str] = set()
    reserved: list[Reserve | None] = [None]

    def noting(call: Callable[..., Any], event: str) -> Callable[..., Any]:
        def noted(*args: Any, **kwargs: Any) -> Any:
            told.add(event)
            return call(*args, **kwargs)

        return noted

    def build(state: ClusterState, tree: BudgetTree) -> Scheduler:
        scheduler = Scheduler(state, tree, **scheduler_settings(args))
        for name, event in EVENTS.items():
            setattr(scheduler, name, noting(getattr(scheduler, name), event))
        time_parts(scheduler, times.by_part)
        cycle = scheduler.cycle

        def timed_cycle(now: float) -> CycleResult:
            began = time.process_time()
            result = cycle(now)
            spent = time.process_time() - began
            group = group_of(told, result, reserved[0])
            timed[group].append(spent)
            cause = result.full_because
            times.by_cause[SKIPPED if cause is None else cause.value].append(spent)
            walked[group].add(result)
            told.clear()
            reserved[0] = reservation_of(result)
            return result

        scheduler.cycle = timed_cycle  # type: ignore[method-assign]
        return scheduler

    simulate(
        build_workload(args), build, scheduler_name="toposched", cycle_interval=args.cycle_every
    )
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_options(parser)
    args = parser.parse_args()
    check_options(args)
    times = timed_cycles(args)
    print_groups("cycle after | walk | decisions", times.by_group, "ms")
    print_walked(times.walked, times.by_group)
    print()
    print_groups("why the cycle walked the whole queue", times.by_cause, "ms")
    print()
    print_groups("searches inside the cycles", times.by_part, "us")
    cycles = sum(sum(spent) for spent in times.by_group.values())
    searches = sum(sum(spent) for spent in times.by_part.values())
    print(f"the cycles {cycles:.3f} s, these searches {searches / cycles:.1%} of it")


if __name__ == "__main__":
    main()
