"""Preemption benchmarks on the churned 1,000,080-GPU fleet, its jobs adopted as a restart
adopts them (`bench.mixes.churned_adoptions`) and the compiled loops loaded as `toposched
serve` loads them before it is ready (`scheduler.warm_up`; both timed), through the scheduler's
public path: a job is submitted and `Scheduler.cycle` decides (refusal memo, victim search and
the evictions' commit included). Every plan is checked: its victims, released on a statement,
leave room where the job is then placed validly. The fleet built is frozen out of the garbage
collector's sight first, as `toposched serve` freezes what it recovered: a full collection
over it (about 0.23 s) would otherwise fall inside the first cycle."""

from __future__ import annotations

import gc
import itertools
import time
from dataclasses import dataclass, field

from toposched.bench.checks import (
    InvalidResult,
    check_cycle,
    check_gpu_accounts,
    check_victims_free_room,
)
from toposched.bench.cycle import ReservationClock, gang_spec
from toposched.bench.harness import Measurement, freeze_built, measure
from toposched.bench.mixes import PRETRAINING, account_of, churned_adoptions, take_free_racks
from toposched.cluster.state import Health
from toposched.jobs.spec import JobSpec
from toposched.placement.search import Placement, place
from toposched.scheduler.adoptions import Adoptions
from toposched.scheduler.core import CycleResult, Scheduler
from toposched.scheduler.decisions import Evict
from toposched.scheduler.jobs import JobState
from toposched.scheduler.warm_up import load_compiled_loops, loops_loaded

__all__ = ["PreemptionRounds", "pretraining_job", "run_preempt_benchmarks"]


def pretraining_job(name: str = "pretraining-job") -> JobSpec:
    """The 200,016-GPU training run: 2,778 rack slices of 18 pods x 4 GPUs, one zone, fewest
    blocks, charged to the pretraining account of `bench.mixes.churned_tree` (40% of the
    fleet, running nothing)."""
    return gang_spec(
        name,
        PRETRAINING,
        2778 * 18,
        4,
        required="zone",
        preferred="block",
        slices=[{"level": "rack", "pods": 18}],
    )


@dataclass
class PreemptionRounds:
    """Preemptors submitted one after another, each decided by `Scheduler.cycle`: the last
    cycle to check and clean up after, and how many victims each round evicted."""

    scheduler: Scheduler
    last: CycleResult | None = None
    preemptor: str = ""
    victims: list[int] = field(default_factory=list)

    def settle(self, now: float) -> None:
        """Check the last cycle (the victims it chose for the preemptor free room for it), report
        every victim of the cycle gone, let the preemptor start in a cycle of its own, and
        withdraw the victims requeued: the next run finds no more room than this one did."""
        if self.last is None:
            return
        scheduler, result = self.scheduler, self.last
        self.last = None
        check_cycle(scheduler, result)
        evictions = [d for d in result.decisions if isinstance(d, Evict)]
        evicted = [d.job_id for d in evictions if d.preemptor == self.preemptor]
        bound = {d.job_id for d in result.bound}
        if not evicted and self.preemptor not in bound:
            raise InvalidResult(f"{self.preemptor} neither started nor preempted")
        if evicted:
            check_victims_free_room(
                scheduler.state, scheduler.jobs[self.preemptor].request, evicted
            )
        self.victims.append(len(evicted))
        for eviction in evictions:
            scheduler.evicted(eviction.job_id, now)
        for eviction in evictions:
            if scheduler.jobs[eviction.job_id].state is JobState.PENDING:
                scheduler.cancel(eviction.job_id, now)
        if evicted:
            started = scheduler.cycle(now)
            check_cycle(scheduler, started)
            if scheduler.jobs[self.preemptor].state is not JobState.RUNNING:
                raise InvalidResult(f"{self.preemptor} did not start where its victims left")


def run_preempt_benchmarks(quick: bool = False) -> list[Measurement]:
    scheduler, adoptions = churned_adoptions()
    freeze_built()
    adoption_s = _adopt(scheduler, adoptions)
    check_gpu_accounts(scheduler.state)
    # As `toposched serve` does before it says it is ready.
    began = time.perf_counter()
    load_compiled_loops()
    restart = {"adoption_s": round(adoption_s, 3), "loops_s": round(time.perf_counter() - began, 3)}
    freeze_built()
    clock = itertools.count(1.0)
    results = [_frontier_gang(scheduler, float(next(clock)), restart)]
    now = float(next(clock))
    taken = take_free_racks(scheduler, now)
    setting = (
        f"{len(scheduler.running):,} running, {len(scheduler.ledger.unallocated):,} unallocated;"
        f" {taken:,} free racks then taken by protected services"
    )
    results.append(_one_rack(scheduler, clock, setting, quick))
    results.append(_node_failure(scheduler, clock, quick))
    gc.unfreeze()  # what was built may be collected again once the scheduler is dropped
    return results


def _adopt(scheduler: Scheduler, adoptions: Adoptions) -> float:
    """Adopt the churned fleet's jobs at 0 as a restart does (`Scheduler.adopt_many`, with
    automatic collection off, as the service recovers); returns the seconds it took."""
    gc.disable()
    try:
        began = time.perf_counter()
        scheduler.adopt_many(adoptions, now=0.0)
        return time.perf_counter() - began
    finally:
        gc.enable()


def _frontier_gang(scheduler: Scheduler, now: float, restart: dict[str, float]) -> Measurement:
    """The 200,016-GPU job on the churned fleet, as found: the scheduler's first cycle after
    a restart's adoption and loading of compiled loops (their seconds in `restart`, reported
    beside it, with the loops the cycle itself loaded), timed once (it changes the fleet if
    it preempts), with what it decided."""
    spec = pretraining_job()
    job = scheduler.submit(spec, now)
    fits = place(scheduler.state, job.request)
    reservations = ReservationClock(scheduler)
    loops_before = loops_loaded()
    began = time.perf_counter()
    result = scheduler.cycle(now)
    elapsed = time.perf_counter() - began
    loops = loops_loaded() - loops_before
    reservations.cycle_ended()
    check_cycle(scheduler, result)
    evicted = [d.job_id for d in result.decisions if isinstance(d, Evict)]
    extra: dict[str, object] = {
        "fits_now": isinstance(fits, Placement),
        "reservation_cpu_ms": reservations.median_ms(),
        **restart,
        "loops_loaded": loops,
    }
    if evicted:
        check_victims_free_room(scheduler.state, job.request, evicted)
        extra["outcome"] = f"preempts {len(evicted):,} jobs"
    elif spec.name in {d.job_id for d in result.bound}:
        extra["outcome"] = "placed"
    elif result.reservation is not None and result.reservation.job_id == spec.name:
        extra["outcome"] = f"reserved from t+{result.reservation.start_time - now:,.0f} s"
        extra["why_not_now"] = job.reason
    else:
        extra["outcome"] = f"waits: {job.reason}"
    measured = Measurement(
        "200,016-GPU job on the churned fleet: one cycle deciding it",
        runs=1,
        median_s=elapsed,
        p90_s=elapsed,
        min_s=elapsed,
        first_s=elapsed,
        target_s=20e-3,
        note="one run: a preemption changes the fleet",
        extra=extra,
    )
    for name in evicted:
        scheduler.evicted(name, now + 0.5)
    for name in [spec.name, *evicted]:
        if scheduler.jobs[name].state in (JobState.PENDING, JobState.RUNNING):
            scheduler.cancel(name, now + 0.5)
    return measured


def _one_rack(
    scheduler: Scheduler, clock: itertools.count[float], setting: str, quick: bool
) -> Measurement:
    """A one-rack job (18 x 4 GPUs, `required: rack`) submitted where no rack is free, and the
    cycle that preempts for it; a new job each run, the last one's victims reported gone."""
    tracker = PreemptionRounds(scheduler)
    names = itertools.count()

    def submit() -> None:
        now = float(next(clock))
        tracker.settle(now)
        tracker.preemptor = f"rack-job-{next(names)}"
        spec = gang_spec(tracker.preemptor, account_of(0), 18, 4, required="rack")
        scheduler.submit(spec, now)

    def decide() -> None:
        tracker.last = scheduler.cycle(float(next(clock)))

    measured = measure(
        f"one-rack job: the cycle preempting for it ({setting})",
        decide,
        setup=submit,
        runs=5 if quick else 30,
        target_s=1e-3,
    )
    tracker.settle(float(next(clock)))
    victims = sorted(tracker.victims)
    measured.extra = {"victims_median": victims[len(victims) // 2], "runs_checked": len(victims)}
    return measured


@dataclass
class _FailingGang:
    """The gang whose node the failure benchmark takes down, that node, and when."""

    gang: str = ""
    node: int = -1
    time: float = 0.0
    replaced: int = 0
    runs: int = 0


def _node_failure(scheduler: Scheduler, clock: itertools.count[float], quick: bool) -> Measurement:
    """A node fails under a resumable 6-node gang: `set_health(DOWN)` and the cycle that
    requeues the gang and places it again (where room is left)."""
    gangs = iter(
        [
            job.job_id
            for job in scheduler.running.values()
            if job.request.pods == 6 and job.spec.resumable
        ]
    )
    failing = _FailingGang()
    last: list[CycleResult] = []

    def pick_gang() -> None:
        if last:
            check_cycle(scheduler, last.pop())
        if failing.node >= 0:
            scheduler.set_health([failing.node], Health.HEALTHY, failing.time)
        failing.gang = next(gangs)
        failing.node = int(scheduler.state.allocations[failing.gang].nodes[0])

    def fail_and_replace() -> None:
        when = float(next(clock))
        failing.time = when
        scheduler.set_health([failing.node], Health.DOWN, when)
        cycle = scheduler.cycle(when)
        last.append(cycle)
        failing.runs += 1
        failing.replaced += scheduler.jobs[failing.gang].state is JobState.RUNNING

    measured = measure(
        "node failure + re-placement of its 6-node gang (set_health + cycle)",
        fail_and_replace,
        setup=pick_gang,
        runs=5 if quick else 30,
        target_s=1e-3,
    )
    if last:
        check_cycle(scheduler, last.pop())
    measured.extra = {"gangs_placed_again": f"{failing.replaced} of {failing.runs}"}
    return measured
