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
then the cycles grouped by why each walked the whole queue (`CycleResult.full_because`); then
the CPU time of the searches inside the cycles, call by call (victim and reservation searches,
placements, kept refusals judged again); and for the costliest groups, a cycle piece by piece
(`PIECE_HEADS`): its searches, its turns' own bookkeeping, the releases read, the reference
left and the rest.

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
    by_piece: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    """The CPU seconds of each call of the `PIECES`."""
    pieces: dict[str, dict[str, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float))
    )
    """Per group, the CPU seconds of its cycles' searches and `PIECES`, summed."""

    def counted(self) -> dict[str, int]:
        """How many calls of each search and piece were timed so far."""
        calls = {**self.by_part, **self.by_piece}
        return {name: len(times) for name, times in calls.items()}

    def add_pieces(self, group: str, before: dict[str, int]) -> None:
        """The searches' and pieces' calls since `before` (`counted`), summed into `group`."""
        sums = self.pieces[group]
        for name, times in self.by_part.items():
            sums["searches"] += sum(times[before.get(name, 0) :])
        for name, times in self.by_piece.items():
            sums[name] += sum(times[before.get(name, 0) :])


def print_pieces(times: CycleTimes, most: int = 8) -> None:
    """The `most` costliest groups, piece by piece (`PIECE_HEADS`), in ms per cycle."""
    timed = times.by_group
    width = max(len(name) for name in timed) + 2
    print(f"{'cycle after | walk | decisions':<{width}}" + "".join(f"{h:>10}" for h in PIECE_HEADS))
    for name in sorted(timed, key=lambda group: -sum(timed[group]))[:most]:
        cycles, sums = len(timed[name]), times.pieces[name]
        total = sum(timed[name])
        searches, walk = sums["searches"], sums["walk"]
        read, left = sums["releases read"], sums["reference left"]
        rest = total - walk - read - left
        figures = (total, searches, walk - searches, read, left, rest)
        print(f"{name:<{width}}" + "".join(f"{value / cycles * 1e3:>10.3f}" for value in figures))


SKIPPED = "none: it skipped the settled jobs"

PARTS = {
    "victim searches": ("preemptor", "search"),
    "reservation searches": ("reservations", "earliest_fit"),
    "placements": ("placing", "place"),
    "kept refusals judged again": ("preemptor.kept", "find"),
}
"""The searches inside the cycles timed call by call: the scheduler's part and its method."""


PIECES = {
    "walk": ("walker", "walk"),
    "releases read": ("between_cycles", "before_cycle"),
    "reference left": ("walker", "leave_reference"),
}
"""The pieces of a cycle timed call by call besides the searches: the walk of the queue (the
jobs' turns, the searches among them), what the releases since the last cycle undo, and the
reference left for the next cycle."""

PIECE_HEADS = ("mean", "searches", "turns", "releases", "reference", "the rest")
"""The columns of the piece-by-piece table (ms per cycle): the cycle; its searches; the walk
less its searches (the turns' and the walk's own bookkeeping); the releases read; the reference
left; the rest (ordering the queue and comparing the order, the fence, the owed accounts)."""


def time_parts(
    scheduler: Scheduler,
    by_part: dict[str, list[float]],
    parts: dict[str, tuple[str, str]] = PARTS,
) -> None:
    """Time every call of the `parts` of `scheduler` into `by_part`."""
    for name, (path, method) in parts.items():
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
        time_parts(scheduler, times.by_piece, PIECES)
        cycle = scheduler.cycle

        def timed_cycle(now: float) -> CycleResult:
            before = times.counted()
            began = time.process_time()
            result = cycle(now)
            spent = time.process_time() - began
            group = group_of(told, result, reserved[0])
            timed[group].append(spent)
            times.add_pieces(group, before)
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
    print()
    print_pieces(times)


if __name__ == "__main__":
    main()
