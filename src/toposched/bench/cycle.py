"""Scheduling-cycle benchmarks: the churned 1,000,080-GPU fleet's 50,000 running jobs adopted
by a scheduler (`bench.mixes`), and 10,000 pending jobs from the Ai2-like and frontier mixes.
`busy_scheduler` is the earlier arranged setting (every rack broken, all work protected), kept
for `benchmarks/test_scheduler_bench.py`.

The timed cycles run as `toposched serve` runs them (`scheduler.collection`): automatic garbage
collection off, the young generations collected and frozen before each cycle's events. Python's
own collector would otherwise run a pass over everything the runs made now and then inside a
cycle (about 150 ms, one cycle in twenty of those placing 1,000 small jobs)."""

from __future__ import annotations

import gc
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from toposched.bench.checks import check_cycle, check_gpu_accounts
from toposched.bench.harness import Measurement, freeze_built, measure
from toposched.bench.mixes import account_of, churned_scheduler, mixed_pending
from toposched.cluster.builders import million_gpu_cluster
from toposched.cluster.state import Allocation, ClusterState
from toposched.jobs.spec import JobSpec
from toposched.policy.budget import BudgetTree
from toposched.scheduler.collection import TurnCollector
from toposched.scheduler.core import CycleResult, Scheduler
from toposched.scheduler.decisions import Evict
from toposched.scheduler.jobs import JobState

TEAMS = 15
CYCLE_RUNS = 20
"""Timed cycles of each kind: enough for a p90 that is not the slowest run."""
NODES_PER_RACK = 18


def team_tree() -> BudgetTree:
    """Three programs of five teams each, shares summing to 100 at every level."""
    programs = {
        f"program-{p}": {
            "share": [40, 35, 25][p],
            "children": {f"team-{p}{t}": {"share": 20} for t in range(5)},
        }
        for p in range(3)
    }
    return BudgetTree.from_dict({"accounts": programs})


def team_name(i: int) -> str:
    return f"program-{(i // 5) % 3}/team-{(i // 5) % 3}{i % 5}"


def gang_spec(name: str, account: str, pods: int, gpus: int, **topology: object) -> JobSpec:
    data: dict[str, object] = {
        "name": name,
        "account": account,
        "pods": pods,
        "resources_per_pod": {"gpus": gpus},
        "min_runtime": "2h",
        "expected_runtime": "6h",
    }
    if topology:
        data["topology"] = topology
    return JobSpec.from_dict(data)


def busy_scheduler(
    running_jobs: int = 106_000, seed: int = 0, unallocated_share: float = 0.0
) -> Scheduler:
    """The 1M-GPU fleet nearly full with about `running_jobs` jobs; no rack is left whole.

    Racks are filled in order by jobs of one node (4 GPUs), two nodes (8) or six nodes (24),
    then one node in every rack is freed, so about 5.5% of the GPUs are free, scattered.
    Jobs starting in `unallocated_share` of the racks (chosen at random) run as unallocated
    work (min runtime 0), preemptible by any budgeted job.
    """
    rng = np.random.default_rng(seed)
    state = ClusterState(million_gpu_cluster())
    scheduler = Scheduler(state, team_tree())
    topology = state.topology
    # Job sizes drawn until every node is covered; the last job is cut to end on the last node.
    mean_nodes = topology.n_nodes / running_jobs
    weights = [0.5, 0.3, 0.2] if mean_nodes > 2 else [0.6, 0.3, 0.1]
    nodes_per_job = rng.choice([1, 2, 6], size=2 * running_jobs, p=weights)
    ends = np.cumsum(nodes_per_job)
    last = int(np.searchsorted(ends, topology.n_nodes))
    nodes_per_job, ends = nodes_per_job[: last + 1].copy(), ends[: last + 1].copy()
    nodes_per_job[-1] -= ends[-1] - topology.n_nodes
    ends[-1] = topology.n_nodes
    templates_needed = set(nodes_per_job.tolist())
    gpus = np.arange(4)
    # Validated once per shape; copies only change the name and account (already valid).
    templates = {count: gang_spec("template", team_name(0), count, 4) for count in templates_needed}
    unallocated = {
        count: template.model_copy(update={"min_runtime": 0.0, "resumable": True})
        for count, template in templates.items()
    }
    # Unallocated work fills whole racks' worth of idle capacity: decided per rack, so that
    # evicting it can open racks (as it does where idle racks are lent out).
    racks = topology.n_domains(len(topology.levels))
    unallocated_racks = rng.random(racks) < unallocated_share
    first_node = ends - nodes_per_job
    is_unallocated = unallocated_racks[first_node // NODES_PER_RACK]
    for index, (count, end) in enumerate(zip(nodes_per_job.tolist(), ends.tolist(), strict=True)):
        nodes = np.arange(end - count, end, dtype=np.int64)
        source = unallocated if is_unallocated[index] else templates
        spec = source[count].model_copy(
            update={"name": f"run-{index}", "account": team_name(index)}
        )
        allocation = Allocation.of(nodes, np.tile(gpus, (count, 1)))
        # Allocated jobs started within the last 1.5 h: inside their 2 h min runtime, so only
        # unallocated work is preemptible while the benchmarks run.
        start = -float(rng.uniform(0, 1.5 * 3600))
        scheduler.adopt(spec, allocation, start_time=start, now=0.0)
    # Free the first node of every rack whose first node starts a job, so racks stay broken.
    for job in list(scheduler.running.values()):
        first = int(state.allocations[job.job_id].nodes[0])
        if first % NODES_PER_RACK == 0:
            scheduler.finish(job.job_id, 0.0)
    return scheduler


def submit_blocked(scheduler: Scheduler, count: int = 10_000) -> None:
    """Jobs that cannot fit: whole racks (18 x 4 GPUs) and 8-node single-rack gangs."""
    for index in range(count):
        if index % 2:
            spec = gang_spec(f"rack-{index}", team_name(index), 18, 4, required="rack")
        else:
            spec = gang_spec(f"gang-{index}", team_name(index), 8, 4, required="rack")
        scheduler.submit(spec, 0.0)


def replace_a_running_job(scheduler: Scheduler, now: float) -> None:
    """The usual trigger of a cycle: a running job ends and the GPUs it frees go to a job
    already placed there (adopted). Nothing new fits, yet the cluster changed, so the cycle may
    not reuse the failures it remembered."""
    name = next(iter(scheduler.running))
    allocation = scheduler.state.allocations[name]
    spec = scheduler.jobs[name].spec
    scheduler.finish(name, now)
    copy = spec.model_copy(update={"name": f"replacement-{len(scheduler.jobs)}"})
    scheduler.adopt(copy, allocation, start_time=now, now=now)


class ReservationClock:
    """The CPU time a scheduler's reservation searches take, cycle by cycle: its
    `ReservationSearch.reserve` timed in place (what the walk calls), so that a cycle's
    figure says how much of it the reservation is."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.spent = 0.0
        self.per_cycle: list[float] = []
        search = scheduler.reservations
        untimed = search.reserve

        def reserve(*args: Any, **kwargs: Any) -> Any:
            began = time.process_time()
            try:
                return untimed(*args, **kwargs)
            finally:
                self.spent += time.process_time() - began

        search.reserve = reserve  # type: ignore[method-assign]

    def cycle_ended(self) -> None:
        self.per_cycle.append(self.spent)
        self.spent = 0.0

    def median_ms(self) -> float:
        """The median over the cycles counted since asked last (warm-ups included), in ms."""
        counted, self.per_cycle, self.spent = self.per_cycle, [], 0.0
        return round(1e3 * float(np.median(counted)), 1) if counted else 0.0


@dataclass
class _Trigger:
    """What the timed cycles of one benchmark left to check and to clean up."""

    last: CycleResult | None = None
    cycles: int = 0
    bound: int = 0
    evicted: int = 0
    searches: int = 0
    reserved: int = 0

    def settle(self, scheduler: Scheduler, now: float) -> None:
        """Check the last timed cycle's decisions, then report its victims gone."""
        if self.last is None:
            return
        result, self.last = self.last, None
        check_cycle(scheduler, result)
        self.cycles += 1
        self.bound += len(result.bound)
        self.searches += result.searches
        self.reserved += result.reservation is not None
        for decision in result.decisions:
            if isinstance(decision, Evict):
                self.evicted += 1
                if scheduler.jobs[decision.job_id].state is JobState.RUNNING:
                    scheduler.evicted(decision.job_id, now)

    def summary(self) -> dict[str, object]:
        cycles = max(self.cycles, 1)
        return {
            "binds_per_cycle": round(self.bound / cycles, 1),
            "evictions_per_cycle": round(self.evicted / cycles, 1),
            "searches_per_cycle": round(self.searches / cycles, 1),
            "reservations": self.reserved,
        }


def run_cycle_benchmarks(quick: bool = False) -> list[Measurement]:
    """Cycles on the churned fleet with pending jobs from the Ai2-like and frontier mixes;
    every cycle's decisions are checked (`check_cycle`) before its figure is reported."""
    scheduler = churned_scheduler()
    check_gpu_accounts(scheduler.state)
    pending = 2_000 if quick else 10_000
    specs = mixed_pending(pending + 200)
    for spec in specs[:pending]:
        scheduler.submit(spec, 0.0)
    running = len(scheduler.running)
    freeze_built()
    setting = f"{running:,} running, {pending:,} pending from the Ai2-like and frontier mixes"
    began = time.perf_counter()
    first = scheduler.cycle(1.0)
    first_s = time.perf_counter() - began
    trigger = _Trigger(first)
    trigger.settle(scheduler, 1.0)
    freeze_built()  # the fleet as the first cycle left it: the setting of the timed cycles
    results = [
        Measurement(
            f"first cycle over the queue ({setting})",
            runs=1,
            median_s=first_s,
            p90_s=first_s,
            min_s=first_s,
            first_s=first_s,
            note="one run: it changes the fleet",
            extra=trigger.summary(),
        )
    ]
    collector = TurnCollector()
    collector.start()
    try:
        results.extend(
            _timed_cycles(scheduler, specs[pending:], collector, ReservationClock(scheduler), quick)
        )
    finally:
        collector.stop()
    gc.unfreeze()  # what was built may be collected again once the scheduler is dropped
    return results


def _timed_cycles(
    scheduler: Scheduler,
    specs: list[JobSpec],
    collector: TurnCollector,
    reservations: ReservationClock,
    quick: bool,
) -> list[Measurement]:
    """The cycles after a job ended, after a submission (of `specs`, in turn) and placing 1,000
    small jobs, and a usage update; with the median CPU time of their reservation searches."""
    clock = itertools.count(2.0)
    rng = np.random.default_rng(1)
    late = iter(specs)
    results: list[Measurement] = []

    def job_ends() -> None:
        collector.between_turns(idle=True)
        now = float(next(clock))
        trigger.settle(scheduler, now)
        names = list(scheduler.running)
        scheduler.finish(names[int(rng.integers(len(names)))], now)

    def submit_late() -> None:
        collector.between_turns(idle=True)
        now = float(next(clock))
        trigger.settle(scheduler, now)
        scheduler.submit(next(late), now)

    def run() -> None:
        trigger.last = scheduler.cycle(float(next(clock)))
        reservations.cycle_ended()

    for name, setup in (
        ("cycle after a running job ended", job_ends),
        ("cycle after a submission from the mixes", submit_late),
    ):
        trigger = _Trigger()
        reservations.median_ms()  # the cycles of this kind only
        measured = measure(
            f"{name} ({len(scheduler.queue):,} pending)",
            run,
            setup=setup,
            runs=3 if quick else CYCLE_RUNS,
            warmup=2,
            target_s=50e-3,
        )
        trigger.settle(scheduler, float(next(clock)))
        measured.extra = trigger.summary()
        measured.extra["reservation_cpu_ms"] = reservations.median_ms()
        results.append(measured)
    results.append(_small_jobs(scheduler, clock, collector, reservations, quick))
    reservations.median_ms()
    job = next(iter(scheduler.running.values()))
    later = float(next(clock))

    def usage_update() -> None:
        scheduler.usage.stop(job.spec.account, job.gpus, later)
        scheduler.usage.start(job.spec.account, job.gpus, later)

    results.append(
        measure(
            "usage update when one job finishes (independent of pending jobs)",
            usage_update,
            runs=200 if quick else 2000,
        )
    )
    return results


def _small_jobs(
    scheduler: Scheduler,
    clock: Iterator[int | float],
    collector: TurnCollector,
    reservations: ReservationClock,
    quick: bool,
) -> Measurement:
    """A cycle binding 1,000 one- and two-GPU jobs submitted together, checked."""
    small_names: list[str] = []
    trigger = _Trigger()

    def submit_small() -> None:
        collector.between_turns(idle=True)
        now = float(next(clock))
        trigger.settle(scheduler, now)
        for name in small_names:
            if scheduler.jobs[name].state is JobState.RUNNING:
                scheduler.finish(name, now)
        small_names.clear()
        for index in range(1000):
            spec = gang_spec(f"small-{now}-{index}", account_of(index % 15), 1, 1 + index % 2)
            scheduler.submit(spec, now)
            small_names.append(spec.name)

    def place_small() -> None:
        trigger.last = scheduler.cycle(float(next(clock)))
        reservations.cycle_ended()

    measured = measure(
        f"cycle placing 1,000 small jobs ({len(scheduler.queue) + 1000:,} pending)",
        place_small,
        setup=submit_small,
        runs=3 if quick else CYCLE_RUNS,
        warmup=2,
        target_s=200e-3,
    )
    trigger.settle(scheduler, float(next(clock)))
    measured.extra = trigger.summary()
    measured.extra["reservation_cpu_ms"] = reservations.median_ms()
    return measured
