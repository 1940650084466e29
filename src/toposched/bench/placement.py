"""Placement benchmarks on the 1,000,080-GPU fleet at 70% occupancy: churned by toposched's
own placements (the reported figures), churned by the FIFO baseline's first fit (a second
layout, the one a topology-blind scheduler leaves), and arranged by rack (the labelled best
case)."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from toposched.bench.checks import InvalidResult, check_placement
from toposched.bench.fleets import churned, churned_fifo
from toposched.bench.harness import Measurement, measure
from toposched.cluster.state import ClusterState
from toposched.cluster.statement import Statement
from toposched.jobs.spec import JobSpec
from toposched.placement.job_sets import JobSets, JobSetsPlacement, place_job_sets
from toposched.placement.request import GangRequest, simple_request
from toposched.placement.search import Placement, Unschedulable, place
from toposched.workloads.fleet import RACK_LEVEL, occupied_fleet

__all__ = [
    "CpuRatio",
    "block_preferring_job",
    "block_sliced_job",
    "frontier_job",
    "infeasible_job",
    "node_preferring_jobs",
    "node_sliced_jobs",
    "occupied_fleet",
    "pod_set_cpu_ratios",
    "pod_set_job",
    "rack_sliced_job",
    "roomy_fleet",
    "run_placement_benchmarks",
    "run_pod_set_and_node_slice_benchmarks",
    "small_block_slices_job",
    "small_jobs",
]


def small_jobs(seed: int = 1) -> list[GangRequest]:
    """1-8 GPU jobs: one pod of 1, 2 or 4 GPUs, or two pods of 4 in one rack."""
    rng = np.random.default_rng(seed)
    shapes = [
        simple_request(1, 1, name="one-gpu"),
        simple_request(1, 2, name="two-gpus"),
        simple_request(1, 4, name="four-gpus"),
        simple_request(2, 4, name="eight-gpus", required=RACK_LEVEL),
    ]
    return [shapes[int(i)] for i in rng.integers(0, len(shapes), 64)]


def node_sliced_jobs(seed: int = 1) -> list[GangRequest]:
    """Small gangs in node slices (`slices: [{level: node, pods: K}]`): 4 one-GPU pods on one
    node, 8 on two nodes, 8 two-GPU pods in pairs, 16 one-GPU pods in groups of 4 in one rack."""
    rng = np.random.default_rng(seed)
    shapes = [
        simple_request(4, 1, name="one-node-of-4", node_slice=4),
        simple_request(8, 1, name="two-nodes-of-4", node_slice=4),
        simple_request(8, 2, name="pairs-of-2-gpus", node_slice=2),
        simple_request(16, 1, name="rack-of-4s", required=RACK_LEVEL, node_slice=4),
    ]
    return [shapes[int(i)] for i in rng.integers(0, len(shapes), 64)]


def pod_set_job() -> JobSpec:
    """200,016 GPUs in two sets within one zone, fewest blocks preferred: a trainer of 2,500
    rack slices of 18 pods x 4 GPUs (180,000 GPUs) and 5,004 rollout pods of 4 GPUs."""
    return JobSpec.from_dict(
        {
            "name": "rl-200k",
            "topology": {"required": "zone", "preferred": "block"},
            "pod_sets": [
                {
                    "name": "trainer",
                    "pods": 2500 * 18,
                    "resources_per_pod": {"gpus": 4},
                    "topology": {"preferred": "block", "slices": [{"level": "rack", "pods": 18}]},
                },
                {
                    "name": "rollout",
                    "pods": 5004,
                    "resources_per_pod": {"gpus": 4},
                    "topology": {"preferred": "block"},
                },
            ],
        }
    )


def roomy_fleet() -> ClusterState:
    """The arranged layout at 50% occupancy (35% of racks whole and busy, 20% partly, 45%
    free): each zone has room for a 200,016-GPU job, which no zone has at 70%."""
    return occupied_fleet(occupancy=0.50, whole_rack_share=0.35)


def frontier_job() -> GangRequest:
    """200,016 GPUs: 2,778 rack slices of 18 pods x 4 GPUs, fewest spine blocks preferred."""
    return simple_request(
        2778 * 18, 4, name="pretrain-200k", preferred=2, slices=[(RACK_LEVEL, 18)]
    )


def block_sliced_job() -> GangRequest:
    """18,432 GPUs: 9,216 pods of 2 GPUs in 4 slices of 2,304 per spine block, within one zone,
    fewest racks preferred: beyond the amount plan; of its two count plans the one over block
    slices (185 cells) is far cheaper than the one over rack counts (822,380) and settles it."""
    return simple_request(
        4 * 2304, 2, name="block-slices", required=1, preferred=RACK_LEVEL, slices=[(2, 2304)]
    )


def block_preferring_job() -> GangRequest:
    """20,000 GPUs: 10,000 pods of 2 GPUs within one zone, fewest spine blocks preferred, then
    fewest racks in them: beyond the amount plan; the compiled knapsack over runs of racks of
    equal room (76,736 cells) settles it, where the one over every count of racks takes 2M."""
    return simple_request(10_000, 2, name="block-preferring", required=1, preferred=2)


def small_block_slices_job() -> GangRequest:
    """40,000 GPUs: 40,000 one-GPU pods in slices of 40 per spine block, within one zone,
    fewest racks preferred: its cheaper count plan needs 2.3M cells, past the amount plans'
    limit (`fewest.MAX_CELLS`, 400,000) and within the count plans' (`MAX_COUNT_CELLS`,
    4,000,000); 556 racks, the least (a free rack holds 72 such pods), where the greedy
    placement takes 747."""
    return simple_request(
        40_000, 1, name="small-block-slices", required=1, preferred=RACK_LEVEL, slices=[(2, 40)]
    )


def node_preferring_jobs() -> list[tuple[str, GangRequest]]:
    """Gangs preferring the fewest nodes (then racks, then blocks), with their figures' names."""
    return [
        (
            "8 one-GPU pods, fewest nodes",
            simple_request(8, 1, name="few-nodes-small", preferred_node=True),
        ),
        (
            "800-GPU job: 200 x 4 GPUs in one zone, fewest nodes",
            simple_request(200, 4, name="few-nodes-zone", required=1, preferred_node=True),
        ),
        (
            "20,000-GPU job: 20,000 x 1 GPU, fewest nodes",
            simple_request(20_000, 1, name="few-nodes-large", preferred_node=True),
        ),
    ]


def infeasible_job() -> GangRequest:
    """400,000 GPUs in one zone: more than any zone has free."""
    return simple_request(100_000, 4, name="too-big", required=1)


def rack_sliced_job(racks: int, name: str) -> GangRequest:
    """`racks` rack slices of 18 pods x 4 GPUs, fewest spine blocks preferred."""
    return simple_request(racks * 18, 4, name=name, preferred=2, slices=[(RACK_LEVEL, 18)])


def run_placement_benchmarks(quick: bool = False) -> list[Measurement]:
    """Every figure on the churned fleet (`bench.fleets.churned`), then the 200,016-GPU job on the
    arranged layout (`occupied_fleet`) as the labelled best case. Each result is checked
    (`check_placement`) before its timing is taken."""
    busy = churned()
    state = busy.state
    fleet = "churned"
    results = [_measure_small_jobs(state, fleet, quick)]
    results[0].note = (
        f"churned fleet: {busy.occupancy:.1%} busy, {len(busy.jobs):,} jobs of 1-8 nodes, "
        f"{state.total_free_gpus:,} free GPUs"
    )
    gangs = [
        ("200,016-GPU job: 2,778 rack slices of 18x4, fewest blocks", frontier_job(), 5e-3),
        ("151,200-GPU job: 2,100 rack slices of 18x4, fewest blocks", _job_151k(), None),
        (
            "18,432-GPU job: 4 block slices of 2,304 x 2 GPUs, fewest racks",
            block_sliced_job(),
            None,
        ),
        (
            "20,000-GPU job: 10,000 x 2 GPUs in one zone, fewest blocks then racks",
            block_preferring_job(),
            None,
        ),
        (
            "40,000-GPU job: 40,000 x 1 GPU in block slices of 40, fewest racks",
            small_block_slices_job(),
            None,
        ),
    ]
    gangs += [(name, request, None) for name, request in node_preferring_jobs()]
    for name, request, target in gangs:
        results.append(_measure_gang(state, f"{fleet}: {name}", request, quick, target))
    too_big = infeasible_job()
    refusal = place(state, too_big)
    if not isinstance(refusal, Unschedulable):
        raise InvalidResult(f"the 400,000-GPU one-zone job was placed: {refusal}")
    results.append(
        measure(
            f"{fleet}: infeasible 400,000-GPU one-zone job, rejected",
            lambda: place(state, too_big),
            runs=200 if quick else 2000,
            target_s=50e-6,
            note=str(refusal),
        )
    )
    results.extend(_fifo_layout_figures(quick))
    best = occupied_fleet()
    results.append(
        _measure_gang(
            best,
            "arranged (best case; 25% of racks whole and free): 200,016-GPU job",
            frontier_job(),
            quick,
            5e-3,
        )
    )
    results.extend(run_pod_set_and_node_slice_benchmarks(quick, busy=state))
    return results


def run_pod_set_and_node_slice_benchmarks(
    quick: bool = False, busy: ClusterState | None = None
) -> list[Measurement]:
    """The 200,016-GPU job of two sets (`pod_set_job`) next to the one-set 200,016-GPU job, on
    the churned fleet (`busy`, loaded when not given) and on `roomy_fleet`, whose zones hold
    it, each with the target of twice the one-set job's median in the same run; then the
    node-sliced small gangs on the churned fleet, with the small jobs' target."""
    state = busy if busy is not None else churned().state
    roomy = roomy_fleet()
    results: list[Measurement] = []
    for fleet, where in (("churned", state), ("arranged at 50%", roomy)):
        one_set = _measure_gang(where, f"{fleet}: 200,016-GPU job, one set", frontier_job(), quick)
        two_sets = _measure_sets(
            where,
            f"{fleet}: 200,016-GPU job, trainer + rollout sets in one zone",
            quick,
            target_s=2 * one_set.median_s,
        )
        results += [one_set, two_sets]
    jobs = node_sliced_jobs()
    results.append(
        _measure_small_jobs(state, "churned", quick, jobs, "node-sliced gang (4-16 pods)")
    )
    return results


@dataclass(frozen=True)
class CpuRatio:
    """Median CPU seconds of the one-set and the two-set 200,016-GPU jobs' placements, over
    calls interleaved one by one, and the load average before and after."""

    one_set_s: float
    two_sets_s: float
    load: tuple[float, float]

    @property
    def ratio(self) -> float:
        return self.two_sets_s / self.one_set_s


def pod_set_cpu_ratios(
    runs: int = 5, calls: int = 60, state: ClusterState | None = None
) -> list[CpuRatio]:
    """`runs` comparisons of the two-set job (`pod_set_job`, `place_job_sets`) with the one-set
    job (`frontier_job`) on `state` (`roomy_fleet` when not given) in CPU time
    (`time.process_time`), each the medians of `calls` calls of each, interleaved call by
    call, their order alternating: on a loaded machine wall time stretches the longer call
    more, and calls timed in separate blocks meet different loads."""
    state = state if state is not None else roomy_fleet()
    sets = JobSets.from_spec(pod_set_job(), state.topology)
    job = frontier_job()
    pair: list[Callable[[], object]] = [
        lambda: place(state, job),
        lambda: place_job_sets(state, sets),
    ]
    for call in pair:
        call()  # warm: compiled loops loaded, caches filled
    ratios = []
    for _ in range(runs):
        before = os.getloadavg()[0]
        timings: list[list[float]] = [[], []]
        for index in range(calls):
            for which in (0, 1) if index % 2 == 0 else (1, 0):
                begin = time.process_time()
                pair[which]()
                timings[which].append(time.process_time() - begin)
        one, two = (statistics.median(times) for times in timings)
        ratios.append(CpuRatio(one, two, (before, os.getloadavg()[0])))
    return ratios


def _measure_sets(
    state: ClusterState, name: str, quick: bool, target_s: float | None = None
) -> Measurement:
    """Time `place_job_sets` of `pod_set_job` as it comes out: placed (every set checked first,
    on a statement, the later sets against what the earlier ones took) or refused."""
    sets = JobSets.from_spec(pod_set_job(), state.topology)
    found = place_job_sets(state, sets)
    if isinstance(found, JobSetsPlacement):
        statement = Statement(state)
        try:
            for role, placement in zip(sets.roles, found.placements, strict=True):
                check_placement(state, role, placement)
                statement.allocate(f"check-{role.name}", placement.allocation)
        finally:
            statement.discard()
        extra: dict[str, object] = {"outcome": "placed"}
        for role, placement in zip(sets.roles, found.placements, strict=True):
            extra[f"{role.name}_blocks"] = placement.domains_used(state, 2)
            extra[f"{role.name}_racks"] = placement.domains_used(state, RACK_LEVEL)
    else:
        extra = {"outcome": f"refused ({found.code})", "reason": found.reason}

    def place_sets() -> None:
        again = place_job_sets(state, sets)
        if type(again) is not type(found):
            raise InvalidResult(f"{sets.job}: the same search answered differently")

    measured = measure(name, place_sets, runs=5 if quick else 30, target_s=target_s)
    measured.extra = extra
    return measured


def _fifo_layout_figures(quick: bool) -> list[Measurement]:
    """The small jobs and the two rack-sliced gangs on the fleet the FIFO baseline churned
    (`bench.fleets.churned_fifo`): the same arrivals, placed without regard to racks."""
    fifo = churned_fifo()
    state = fifo.state
    fleet = "churned by FIFO"
    small = _measure_small_jobs(state, fleet, quick)
    small.note = (
        f"{fleet}: {fifo.occupancy:.1%} busy, {len(fifo.jobs):,} jobs of 1-8 nodes, "
        f"{state.total_free_gpus:,} free GPUs"
    )
    gangs = [
        ("200,016-GPU job: 2,778 rack slices of 18x4, fewest blocks", frontier_job(), 5e-3),
        ("151,200-GPU job: 2,100 rack slices of 18x4, fewest blocks", _job_151k(), None),
    ]
    return [small] + [
        _measure_gang(state, f"{fleet}: {name}", request, quick, target)
        for name, request, target in gangs
    ]


def _job_151k() -> GangRequest:
    return rack_sliced_job(2_100, "pretrain-151k")


def _measure_small_jobs(
    state: ClusterState,
    fleet: str,
    quick: bool,
    jobs: list[GangRequest] | None = None,
    what: str = "1-8 GPU job (1-2 pods)",
) -> Measurement:
    """Time `place()` of small jobs in turn (the 1-8 GPU jobs unless `jobs`), each checked
    once first."""
    jobs = small_jobs() if jobs is None else jobs
    for request in jobs:
        found = place(state, request)
        if not isinstance(found, Placement):
            raise InvalidResult(f"a small job found no room on the {fleet}: {found}")
        check_placement(state, request, found)
    cursor = iter(range(10**9))
    return measure(
        f"{fleet}: {what}",
        lambda: place(state, jobs[next(cursor) % len(jobs)]),
        runs=200 if quick else 2000,
        target_s=100e-6,
    )


def _measure_gang(
    state: ClusterState,
    name: str,
    request: GangRequest,
    quick: bool,
    target_s: float | None = None,
) -> Measurement:
    """Time `place()` of a large gang as it comes out: a placement (checked first, with the
    blocks and racks it uses) or a refusal (with its reason)."""
    found = place(state, request)
    if isinstance(found, Placement):
        check_placement(state, request, found)
        extra: dict[str, object] = {
            "outcome": "placed",
            "blocks_used": found.domains_used(state, 2),
            "racks_used": found.domains_used(state, RACK_LEVEL),
        }
    else:
        extra = {"outcome": f"refused ({found.code})", "reason": found.reason}

    def place_gang() -> None:
        again = place(state, request)
        if type(again) is not type(found):
            raise InvalidResult(f"{request.name}: the same search answered differently")

    measured = measure(name, place_gang, runs=5 if quick else 30, target_s=target_s)
    measured.extra = extra
    return measured
