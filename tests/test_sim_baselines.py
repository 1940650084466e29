"""Baseline schedulers: determinism, conservation, and the behaviour each one stands for."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from toposched.cluster.state import ClusterState, Health
from toposched.jobs.spec import JobSpec
from toposched.policy.budget import BudgetTree
from toposched.scheduler.decisions import Bind
from toposched.sim.baselines import (
    BASELINES,
    MultifactorQueue,
    fifo_first_fit,
    kube_like,
    slurm_like,
)
from toposched.sim.engine import SchedulerFactory, simulate, toposched_scheduler
from toposched.sim.metrics import conservation, summarize
from toposched.sim.records import SimulationResult
from toposched.workloads.ai2 import ai2_like
from toposched.workloads.model import Workload, WorkloadJob, build_cluster

# One spine group, two units of two 8-GPU nodes: nodes 0-1 in unit 0, nodes 2-3 in unit 1.
CLUSTER = {"builder": "superpod", "spine_groups": 1, "units_per_group": 2, "nodes_per_unit": 2}
BUDGET = {"accounts": {"a": {"share": 50}, "b": {"share": 50}}}


def spec(name: str, pods: int, gpus: int = 8, account: str = "a", **fields: Any) -> JobSpec:
    data: dict[str, Any] = {
        "name": name,
        "account": account,
        "pods": pods,
        "resources_per_pod": {"gpus": gpus},
        "min_runtime": 60.0,
    }
    data.update(fields)
    return JobSpec.from_dict(data)


def workload(*jobs: tuple[JobSpec, float, float]) -> Workload:
    """(spec, submit time, actual runtime) per job, on the 32-GPU cluster."""
    return Workload(
        name="tiny",
        topology=build_cluster(CLUSTER),
        cluster=dict(CLUSTER),
        budget=BUDGET,
        jobs=[WorkloadJob(s, submit, runtime) for s, submit, runtime in jobs],
    )


def starts(result: SimulationResult) -> dict[str, float | None]:
    return {name: record.first_start for name, record in result.records.items()}


def binds(factory: SchedulerFactory, *specs: JobSpec) -> dict[str, list[int]]:
    """Submit every spec at time 0, run one cycle; the nodes of each bound job's pods."""
    state = ClusterState(build_cluster(CLUSTER))
    scheduler = factory(state, BudgetTree.from_dict(BUDGET))
    for job in specs:
        scheduler.submit(job, 0.0)
    decisions = scheduler.cycle(0.0).decisions
    return {d.job_id: d.allocation.nodes.tolist() for d in decisions if isinstance(d, Bind)}


# A 24-GPU job runs until t=100; a 16-GPU job cannot start before then; an 8-GPU job that
# would fit at once arrives behind it and declares it ends (t=52) before t=100.
HEAD_OF_LINE = (
    (spec("big", 3, expected_runtime=100.0), 0.0, 100.0),
    (spec("blocked", 2, expected_runtime=100.0), 1.0, 100.0),
    (spec("small", 1, expected_runtime=50.0), 2.0, 50.0),
)


def test_fifo_blocks_behind_the_head_of_the_queue() -> None:
    result = simulate(workload(*HEAD_OF_LINE), fifo_first_fit)
    # "small" fits at t=2 but waits for "blocked", which starts when "big" ends.
    assert starts(result) == {"big": 0.0, "blocked": 100.0, "small": 100.0}


def test_kube_like_starts_what_fits_without_waiting_for_the_head() -> None:
    result = simulate(workload(*HEAD_OF_LINE), kube_like)
    assert starts(result) == {"big": 0.0, "blocked": 100.0, "small": 2.0}


def test_slurm_like_backfills_a_short_job_without_delaying_the_reservation() -> None:
    result = simulate(workload(*HEAD_OF_LINE), slurm_like)
    assert starts(result) == {"big": 0.0, "blocked": 100.0, "small": 2.0}
    assert result.records["small"].backfilled
    assert result.counts["reservations"] >= 1


def test_slurm_like_keeps_a_long_job_off_the_reserved_nodes() -> None:
    # The head needs the whole cluster once "half" ends at t=100. A job declaring it runs past
    # t=100 would delay it: Slurm keeps it waiting; kube-like starts it and the head starves.
    jobs = (
        (spec("half", 2, expected_runtime=100.0), 0.0, 100.0),
        (spec("whole", 4, expected_runtime=100.0), 1.0, 100.0),
        (spec("long", 1, expected_runtime=500.0), 2.0, 500.0),
    )
    slurm = starts(simulate(workload(*jobs), slurm_like))
    assert slurm == {"half": 0.0, "whole": 100.0, "long": 200.0}
    kube = starts(simulate(workload(*jobs), kube_like))
    assert kube == {"half": 0.0, "whole": 502.0, "long": 2.0}


def test_kube_like_spreads_pods_and_fifo_packs_them() -> None:
    # Pods asking 56 of a node's 224 cores: a node holding one scores 50 for CPU against 75 for
    # an empty one, so kube-like puts one per node; FIFO fills node 0 first.
    jobs = [spec(f"j{i}", 1, gpus=2, resources_per_pod={"gpus": 2, "cpu": 56}) for i in range(4)]
    assert sorted(nodes[0] for nodes in binds(kube_like, *jobs).values()) == [0, 1, 2, 3]
    assert binds(fifo_first_fit, *jobs) == {"j0": [0], "j1": [0], "j2": [0], "j3": [0]}
    # One gang of four such pods: one pod per node under kube, all on node 0 under FIFO.
    gang = spec("gang", 4, resources_per_pod={"gpus": 2, "cpu": 56})
    assert binds(kube_like, gang) == {"gang": [0, 1, 2, 3]}
    assert binds(fifo_first_fit, gang) == {"gang": [0, 0, 0, 0]}


def test_gangs_bind_all_or_nothing() -> None:
    # 40 GPUs asked of a 32-GPU cluster: nothing of the gang binds, the next job does (kube).
    assert list(binds(kube_like, spec("huge", 5), spec("one", 1))) == ["one"]
    assert binds(fifo_first_fit, spec("huge", 5), spec("one", 1)) == {}


def test_which_baselines_keep_topology_constraints() -> None:
    # Nodes 1 and 3 are cordoned: no unit has two usable nodes for a gang required in one.
    # toposched and Slurm (within its --switches wait) keep the pair waiting; kube's pod
    # affinity rejects it once its first pod's unit has no room for the second; FIFO drops the
    # constraint.
    constrained = spec("pair", 2, topology={"required": "su"})
    bound = {}
    for name, factory in {"toposched": toposched_scheduler, **BASELINES}.items():
        state = ClusterState(build_cluster(CLUSTER))
        state.set_health(np.array([1, 3]), Health.CORDONED)
        scheduler = factory(state, BudgetTree.from_dict(BUDGET))
        scheduler.submit(constrained, 0.0)
        decisions = scheduler.cycle(0.0).decisions
        bound[name] = [d.allocation.nodes.tolist() for d in decisions if isinstance(d, Bind)]
    assert bound == {
        "toposched": [],
        "slurm_like": [],
        "slurm_like_preempt": [],
        "kube_like": [],
        "fifo_first_fit": [[0, 2]],
    }


def test_slurm_fair_share_puts_the_idle_account_first() -> None:
    state = ClusterState(build_cluster(CLUSTER))
    scheduler = slurm_like(state, BudgetTree.from_dict(BUDGET))
    scheduler.submit(spec("a-first", 4, account="a"), 0.0)
    scheduler.cycle(0.0)
    scheduler.finish("a-first", 3600.0)
    scheduler.submit(spec("a-next", 4, account="a"), 3600.0)
    scheduler.submit(spec("b-next", 4, account="b"), 3601.0)
    queue = scheduler.queue
    assert isinstance(queue, MultifactorQueue)
    assert queue.fairshare_factor("b", 3601.0) == 1.0
    assert queue.fairshare_factor("a", 3601.0) == pytest.approx(0.25)  # 2 ** (-1 / 0.5)
    bound = [d.job_id for d in scheduler.cycle(4000.0).decisions if isinstance(d, Bind)]
    assert bound == ["b-next"]


@pytest.fixture(scope="module")
def small_ai2() -> Workload:
    return ai2_like(seed=3, days=0.5, gpus=128)


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_baseline_runs_are_deterministic_and_conserve_gpu_seconds(
    small_ai2: Workload, name: str
) -> None:
    factory = BASELINES[name]
    first = simulate(small_ai2, factory, scheduler_name=name)
    second = simulate(small_ai2, factory, scheduler_name=name)
    assert conservation(first).holds(1e-9)
    assert starts(first) == starts(second)
    assert {n: r.end_time for n, r in first.records.items()} == {
        n: r.end_time for n, r in second.records.items()
    }
    one, two = summarize(first), summarize(second)
    for measured in (one, two):
        measured.pop("scheduler_speed")
    assert one == two
    assert one["scheduler"] == name
    assert one["jobs"]["finished"] > 0
    if name != "slurm_like_preempt":
        assert one["disruption"]["preemptions"] == 0
