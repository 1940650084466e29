"""The fluid bound on occupancy: hand-computed cases, and no scheduler's run above it."""

from __future__ import annotations

import pytest

from toposched.cluster.units import HOUR, MINUTE
from toposched.sim.baselines import BASELINES
from toposched.sim.engine import SchedulerFactory, simulate, toposched_scheduler
from toposched.sim.metrics import summarize
from toposched.sim.occupancy_bound import occupancy_bound, whole_gpus
from toposched.workloads.ai2 import ai2_like
from toposched.workloads.model import SpecFactory, Workload, WorkloadJob, build_cluster

ONE_NODE = {"builder": "superpod", "spine_groups": 1, "units_per_group": 1, "nodes_per_unit": 1}
"""One 8-GPU node."""


def job(
    factory: SpecFactory,
    name: str,
    gpus: int,
    submit_h: float,
    runtime_h: float,
    cancel_after_h: float | None = None,
) -> WorkloadJob:
    spec = factory.make(name, "default", 1, {"gpus": gpus})
    return WorkloadJob(
        spec,
        submit_h * HOUR,
        runtime_h * HOUR,
        cancel_after=None if cancel_after_h is None else cancel_after_h * HOUR,
    )


def one_node(*jobs: tuple[str, int, float, float, float | None], hours: float = 10) -> Workload:
    factory = SpecFactory()
    return Workload(
        name="hand-made",
        topology=build_cluster(ONE_NODE),
        cluster=ONE_NODE,
        jobs=[job(factory, *spec) for spec in jobs],
        horizon=hours * HOUR,
    )


def test_a_job_no_faster_than_its_runtime_and_no_earlier_than_it_arrives() -> None:
    # 8 GPUs for 10 h (80 GPU-hours). A 2-GPU job runs all 10 h (20); a 4-GPU job arriving at
    # 6 h can use only its 4 GPUs for the 4 h left (16): 36 of 80, though 60 GPU-hours are
    # offered and the node is never full.
    workload = one_node(("a", 2, 0.0, 10.0, None), ("b", 4, 6.0, 10.0, None))
    bound = occupancy_bound(workload)
    assert bound.offered_gpu_seconds == pytest.approx(60 * HOUR)
    assert bound.occupancy == pytest.approx(36 / 80)
    assert bound.certified_gap == pytest.approx(0.0, abs=1e-12)


def test_the_cluster_caps_what_arrives_together() -> None:
    # Three 8-GPU jobs of 4 h arrive at once: the node does 8 x 10 = 80 GPU-hours of their 96,
    # full all the time.
    workload = one_node(*((name, 8, 0.0, 4.0, None) for name in "abc"))
    assert occupancy_bound(workload).occupancy == pytest.approx(1.0)
    # Arriving at 7 h, 3 h before the end, they can fill only those 3 h.
    late = one_node(*((name, 8, 7.0, 4.0, None) for name in "abc"))
    assert occupancy_bound(late).occupancy == pytest.approx(0.3)


def test_arrivals_move_to_the_start_of_their_step_only_loosening_the_bound() -> None:
    # A 1-GPU job for 1 h arriving at 9h30m: 0.5 GPU-hours fit before the end at 10 h; with
    # hour-long steps it counts as arrived at 9 h, and the bound says 1.
    workload = one_node(("a", 1, 9.5, 1.0, None))
    assert occupancy_bound(workload, step=MINUTE).bound_gpu_seconds == pytest.approx(0.5 * HOUR)
    assert occupancy_bound(workload, step=HOUR).bound_gpu_seconds == pytest.approx(1.0 * HOUR)


def test_windows_bound_work_to_withdrawal_plus_runtime() -> None:
    # Two 8-GPU jobs of 2 h, each withdrawn unless started within 1 h: a scheduler that never
    # suspends a run does all their work by 3 h, 24 GPU-hours of their 32. Without the windows,
    # all 32 fit in the 10 h.
    workload = one_node(("a", 8, 0.0, 2.0, 1.0), ("b", 8, 0.0, 2.0, 1.0))
    windowed = occupancy_bound(workload, windows=True)
    assert windowed.occupancy == pytest.approx(24 / 80)
    assert windowed.certified_gap == pytest.approx(0.0, abs=1e-12)
    assert occupancy_bound(workload).occupancy == pytest.approx(32 / 80)
    # Lost work is busy too: with half the GPU time lost, the bound on occupancy doubles.
    assert windowed.occupancy_with_loss(0.5) == pytest.approx(48 / 80)
    assert windowed.idle_gpu_seconds_between(0, 3 * HOUR) == pytest.approx(0.0, abs=1e-6)
    assert windowed.idle_gpu_seconds_between(3 * HOUR, 10 * HOUR) == pytest.approx(56 * HOUR)


def test_shared_gpus_count_whole() -> None:
    spec = SpecFactory().make("s", "default", 3, {"gpu_milli": 500})
    assert whole_gpus(spec) == 3


SCHEDULERS: dict[str, SchedulerFactory] = {**BASELINES, "toposched": toposched_scheduler}


@pytest.fixture(scope="module")
def draining() -> Workload:
    # A day of work on 128 GPUs (three days of it at full use) run for six days: the cluster
    # drains, so the bound is far below 100% and a run that broke it would show.
    return ai2_like(seed=3, days=1, gpus=128)


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_no_run_beats_the_bound(draining: Workload, name: str) -> None:
    horizon = 6 * 24 * HOUR
    bound = occupancy_bound(draining, horizon=horizon)
    windowed = occupancy_bound(draining, horizon=horizon, windows=True)
    assert windowed.bound_gpu_seconds <= bound.bound_gpu_seconds * (1 + 1e-12)
    assert bound.occupancy < 0.9
    result = simulate(draining, SCHEDULERS[name], scheduler_name=name, horizon=horizon)
    summary = summarize(result)
    occupancy = summary["utilisation"]["occupancy"]
    lost = sum(record.lost_gpu_seconds for record in result.records.values())
    useful = occupancy - lost / bound.capacity_gpu_seconds
    assert useful <= bound.occupancy + 1e-9
    assert occupancy <= bound.occupancy_with_loss(lost / result.integrals.delivered) + 1e-9
    if summary["disruption"]["preemptions"] == 0:
        # Runs never suspended: their work lies within the windows.
        assert occupancy <= windowed.occupancy + 1e-9
    # The runs come close enough for the check to mean something.
    assert occupancy > 0.5 * bound.occupancy
