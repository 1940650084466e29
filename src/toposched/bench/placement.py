"""Placement benchmarks on the 1,000,080-GPU fleet at 70% occupancy: churned by toposched's
own placements (the reported figures), churned by the FIFO baseline's first fit (a second
layout, the one a topology-blind scheduler leaves), and arranged by rack (the labelled best
case)."""

from __future__ import annotations

import numpy as np

from toposched.bench.checks import InvalidResult, check_placement
from toposched.bench.fleets import churned, churned_fifo
from toposched.bench.harness import Measurement, measure
from toposched.cluster.state import ClusterState
from toposched.placement.request import GangRequest, simple_request
from toposched.placement.search import Placement, Unschedulable, place
from toposched.workloads.fleet import RACK_LEVEL, occupied_fleet

__all__ = [
    "block_preferring_job",
    "block_sliced_job",
    "frontier_job",
    "infeasible_job",
    "node_preferring_jobs",
    "occupied_fleet",
    "rack_sliced_job",
    "run_placement_benchmarks",
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
    return results


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


def _measure_small_jobs(state: ClusterState, fleet: str, quick: bool) -> Measurement:
    """Time `place()` of the 1-8 GPU jobs in turn, each checked once first."""
    jobs = small_jobs()
    for request in jobs:
        found = place(state, request)
        if not isinstance(found, Placement):
            raise InvalidResult(f"a small job found no room on the {fleet}: {found}")
        check_placement(state, request, found)
    cursor = iter(range(10**9))
    return measure(
        f"{fleet}: 1-8 GPU job (1-2 pods)",
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
