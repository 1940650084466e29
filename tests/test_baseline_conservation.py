"""GPU-time conservation for every baseline and for toposched, job by job and in total: the GPU
time each job held is its useful work plus the work it lost, its useful work never exceeds what
it needed (and equals it once it finished), and the jobs' GPU time adds up to the delivered
GPU time of the run, which with idle and unavailable GPU time makes capacity x duration.
The runs exercise what could break it: the Slurm-like baseline's evictions and requeues, and
the kube-like one's pods reserved at Permit (idle GPUs held from other jobs)."""

from __future__ import annotations

import pytest

from toposched.cluster.state import ClusterState
from toposched.policy.budget import BudgetTree
from toposched.sim.baselines import BASELINES, KubeLike
from toposched.sim.engine import SchedulerFactory, SchedulerLike, simulate, toposched_scheduler
from toposched.sim.metrics import conservation
from toposched.sim.records import RecordState, SimulationResult
from toposched.workloads.ai2 import ai2_like
from toposched.workloads.frontier import frontier_lab
from toposched.workloads.model import Workload

SCHEDULERS: dict[str, SchedulerFactory] = {**BASELINES, "toposched": toposched_scheduler}
RELATIVE = 1e-9


@pytest.fixture(scope="module")
def workloads() -> dict[str, Workload]:
    return {
        "ai2": ai2_like(seed=3, days=1, gpus=128),
        # A small frontier fleet (60 racks): whole-rack gangs, node failures and repairs.
        "frontier": frontier_lab(seed=1, days=2, racks_per_block=2),
    }


def check_jobs(result: SimulationResult) -> None:
    for name, record in result.records.items():
        needed = record.gpus * record.job.runtime
        useful = record.delivered_gpu_seconds - record.lost_gpu_seconds
        slack = RELATIVE * max(needed, 1.0)
        assert record.lost_gpu_seconds >= 0, name
        assert useful >= -slack, name
        if record.state is RecordState.FINISHED:
            assert useful == pytest.approx(needed, rel=RELATIVE), name
        elif record.state is RecordState.RUNNING:
            # `remaining` is brought up to date when a run ends; during one, only a bound holds.
            assert useful <= needed + slack, name
        else:
            left = record.gpus * record.remaining
            assert useful + left == pytest.approx(needed, rel=RELATIVE), name


@pytest.mark.parametrize("workload", ["ai2", "frontier"])
@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_gpu_time_is_conserved(workloads: dict[str, Workload], workload: str, name: str) -> None:
    built: list[SchedulerLike] = []

    def factory(state: ClusterState, tree: BudgetTree) -> SchedulerLike:
        built.append(SCHEDULERS[name](state, tree))
        return built[-1]

    result = simulate(workloads[workload], factory, scheduler_name=name)
    balance = conservation(result)
    assert balance.holds(RELATIVE), balance
    held = sum(record.delivered_gpu_seconds for record in result.records.values())
    assert held == pytest.approx(result.integrals.delivered, rel=RELATIVE)
    assert result.integrals.delivered <= result.capacity_gpus * result.duration * (1 + RELATIVE)
    # Work ran (FIFO on the frontier fleet blocks behind a training run that never fits, so
    # only its first jobs run); the job-by-job checks then cover every state.
    assert result.integrals.delivered > 0
    check_jobs(result)
    if name == "slurm_like_preempt":
        assert result.counts["evictions"] > 0
    scheduler = built[0]
    if isinstance(scheduler, KubeLike) and workload == "frontier":
        assert scheduler.permit_timeouts > 0 and scheduler.rejections > 0
