"""Placement benchmarks on the 1,000,080-GPU fleet at 70% occupancy."""

from __future__ import annotations

import numpy as np

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
    "occupied_fleet",
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


def infeasible_job() -> GangRequest:
    """400,000 GPUs in one zone: more than any zone has free."""
    return simple_request(100_000, 4, name="too-big", required=1)


def run_placement_benchmarks(quick: bool = False) -> list[Measurement]:
    state = occupied_fleet()
    free = state.total_free_gpus
    results: list[Measurement] = []
    jobs = small_jobs()
    cursor = iter(range(10**9))

    def place_small() -> None:
        result = place(state, jobs[next(cursor) % len(jobs)])
        assert isinstance(result, Placement)

    results.append(
        measure(
            "1-8 GPU job (1-2 pods)",
            place_small,
            runs=200 if quick else 2000,
            target_s=100e-6,
            note=f"free GPUs {free:,}",
        )
    )
    results.append(
        _measure_gang(
            state,
            "200,016-GPU job: 2,778 rack slices of 18x4, fewest blocks",
            frontier_job(),
            quick,
            target_s=5e-3,
        )
    )
    results.append(
        _measure_gang(
            state,
            "18,432-GPU job: 4 block slices of 2,304 x 2 GPUs, fewest racks",
            block_sliced_job(),
            quick,
        )
    )
    results.append(
        _measure_gang(
            state,
            "20,000-GPU job: 10,000 x 2 GPUs in one zone, fewest blocks then racks",
            block_preferring_job(),
            quick,
        )
    )
    results.append(
        _measure_gang(
            state,
            "40,000-GPU job: 40,000 x 1 GPU in block slices of 40, fewest racks",
            small_block_slices_job(),
            quick,
        )
    )
    too_big = infeasible_job()

    def reject() -> None:
        result = place(state, too_big)
        assert isinstance(result, Unschedulable)

    results.append(
        measure(
            "infeasible 400,000-GPU one-zone job, rejected",
            reject,
            runs=200 if quick else 2000,
            target_s=50e-6,
        )
    )
    reason = place(state, too_big)
    results[-1].note = str(reason)
    return results


def _measure_gang(
    state: ClusterState,
    name: str,
    request: GangRequest,
    quick: bool,
    target_s: float | None = None,
) -> Measurement:
    """Time placing a large gang that fits, with the blocks and racks it uses."""

    def place_gang() -> None:
        result = place(state, request)
        assert isinstance(result, Placement), result

    measured = measure(name, place_gang, runs=5 if quick else 30, target_s=target_s)
    placed = place(state, request)
    assert isinstance(placed, Placement)
    measured.extra = {
        "blocks_used": placed.domains_used(state, 2),
        "racks_used": placed.domains_used(state, RACK_LEVEL),
    }
    return measured
