"""Golden scenarios for the baselines' fidelity to the systems they stand for: Slurm's
preemption by partition priority with requeue and its `--switches` wait, kube-scheduler's
LeastAllocated scoring over CPU and memory, and the coscheduling plugin's Permit wait."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_sim_baselines import BUDGET, CLUSTER, spec, workload

from toposched.cli.main import main
from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation, ClusterState, Health
from toposched.policy.budget import BudgetTree
from toposched.scheduler.decisions import Bind, Evict
from toposched.scheduler.jobs import JobState
from toposched.sim.baseline_names import BASELINE_NAMES
from toposched.sim.baselines import (
    BASELINES,
    SLURM_MAX_SWITCH_WAIT,
    KubeLike,
    SlurmLike,
    SlurmOptions,
    SlurmPreemption,
    resource_scores,
    slurm_like,
    slurm_like_preempt,
)
from toposched.sim.compare import schedulers_named
from toposched.sim.engine import simulate, toposched_scheduler
from toposched.workloads.model import build_cluster

# One spine group, two units of two 8-GPU nodes (224 cores, 2048 GiB each): nodes 0-1 in unit
# su0, nodes 2-3 in unit su1.
GIB = 1024


def fresh_state() -> ClusterState:
    return ClusterState(build_cluster(CLUSTER))


# --- Slurm-like: preemption by partition priority, requeue ----------------------------------
# A job with min runtime 0 is work no budget pays for: the scavenger partition.
WHOLE_SCAVENGER = (
    (spec("scavenger", 4, min_runtime=0.0), 0.0, 1000.0),
    (spec("normal", 2, expected_runtime=100.0), 10.0, 100.0),
)


def test_slurm_like_without_preemption_makes_the_higher_tier_wait() -> None:
    result = simulate(workload(*WHOLE_SCAVENGER), slurm_like)
    assert result.records["normal"].first_start == 1000.0
    assert result.counts["evictions"] == 0


def test_slurm_like_preempts_the_lower_tier_and_requeues_it() -> None:
    result = simulate(workload(*WHOLE_SCAVENGER), slurm_like_preempt)
    scavenger, normal = result.records["scavenger"], result.records["normal"]
    # Evicted at 10 s with GraceTime 30 s: the normal job starts at 40 s on its nodes.
    assert normal.first_start == 40.0
    assert scavenger.preemptions == 1
    # Requeued, not failed: it starts again (from scratch, it cannot resume) once the whole
    # cluster is free, when the normal job ends, and runs its 1000 s.
    assert scavenger.attempt == 2
    assert scavenger.end_time == 140.0 + 1000.0
    assert scavenger.lost_gpu_seconds == 32 * 40.0


def test_slurm_like_preemption_decision_names_the_rule_and_grace() -> None:
    state = fresh_state()
    scheduler = slurm_like_preempt(state, BudgetTree.from_dict(BUDGET))
    scheduler.submit(spec("scavenger", 4, min_runtime=0.0), 0.0)
    scheduler.cycle(0.0)
    scheduler.submit(spec("normal", 1), 10.0)
    decisions = scheduler.cycle(10.0).decisions
    evictions = [d for d in decisions if isinstance(d, Evict)]
    assert [(e.job_id, e.preemptor, e.rule, e.grace_s) for e in evictions] == [
        ("scavenger", "normal", "partition-priority", 30.0)
    ]
    assert evictions[0].lost_gpu_seconds == 32 * 10.0
    # Its nodes are kept for the preemptor: nothing else starts there meanwhile.
    scheduler.submit(spec("another", 1, min_runtime=0.0), 11.0)
    assert not [d for d in scheduler.cycle(11.0).decisions if isinstance(d, Bind)]
    scheduler.evicted("scavenger", 40.0)
    bound = [d.job_id for d in scheduler.cycle(40.0).decisions if isinstance(d, Bind)]
    assert bound[0] == "normal"
    assert scheduler.jobs["scavenger"].state is JobState.PENDING


def test_slurm_like_evicts_the_youngest_lower_tier_job_first() -> None:
    state = fresh_state()
    scheduler = slurm_like_preempt(state, BudgetTree.from_dict(BUDGET))
    scheduler.submit(spec("older", 2, min_runtime=0.0), 0.0)
    scheduler.cycle(0.0)
    scheduler.submit(spec("younger", 2, min_runtime=0.0), 5.0)
    scheduler.cycle(5.0)
    scheduler.submit(spec("normal", 2), 10.0)
    evicted = [d.job_id for d in scheduler.cycle(10.0).decisions if isinstance(d, Evict)]
    assert evicted == ["younger"]


def test_slurm_like_never_preempts_within_a_tier() -> None:
    state = fresh_state()
    scheduler = slurm_like_preempt(state, BudgetTree.from_dict(BUDGET))
    scheduler.submit(spec("first", 4), 0.0)
    scheduler.cycle(0.0)
    scheduler.submit(spec("second", 1, account="b"), 10.0)
    assert not [d for d in scheduler.cycle(10.0).decisions if isinstance(d, Evict)]
    assert scheduler.jobs["second"].state is JobState.PENDING


def test_slurm_like_respects_preempt_exempt_time() -> None:
    state = fresh_state()
    options = SlurmOptions(preemption=SlurmPreemption(exempt_s=60.0))
    scheduler = SlurmLike(state, BudgetTree.from_dict(BUDGET), options)
    scheduler.submit(spec("scavenger", 4, min_runtime=0.0), 0.0)
    scheduler.cycle(0.0)
    scheduler.submit(spec("normal", 1), 10.0)
    assert not [d for d in scheduler.cycle(10.0).decisions if isinstance(d, Evict)]
    assert [d.job_id for d in scheduler.cycle(60.0).decisions if isinstance(d, Evict)] == [
        "scavenger"
    ]


# --- Slurm-like: --switches waits, then takes what it gets --------------------------------------
def cordoned_pair(options: SlurmOptions | None = None) -> SlurmLike:
    """Nodes 1 and 3 cordoned: no unit has two usable nodes for a pair required in one."""
    state = fresh_state()
    state.set_health(np.array([1, 3]), Health.CORDONED)
    scheduler = SlurmLike(state, BudgetTree.from_dict(BUDGET), options)
    scheduler.submit(spec("pair", 2, topology={"required": "su"}), 0.0)
    return scheduler


def bound_nodes(scheduler: SlurmLike, now: float) -> list[list[int]]:
    decisions = scheduler.cycle(now).decisions
    return [d.allocation.nodes.tolist() for d in decisions if isinstance(d, Bind)]


def test_switches_wait_then_take_any_nodes() -> None:
    scheduler = cordoned_pair()
    assert SLURM_MAX_SWITCH_WAIT == 300.0
    assert bound_nodes(scheduler, 0.0) == []
    assert bound_nodes(scheduler, 299.0) == []
    # The wait is over: the pair takes one node of each unit.
    assert bound_nodes(scheduler, 300.0) == [[0, 2]]
    assert "--switches wait over" in scheduler.jobs["pair"].history[-2][1]


def test_switches_without_a_max_wait_are_strict() -> None:
    scheduler = cordoned_pair(SlurmOptions(switch_wait=None))
    assert bound_nodes(scheduler, 0.0) == []
    assert bound_nodes(scheduler, 86400.0) == []


def test_switches_met_at_once_start_at_once() -> None:
    state = fresh_state()
    scheduler = SlurmLike(state, BudgetTree.from_dict(BUDGET))
    scheduler.submit(spec("pair", 2, topology={"required": "su"}), 0.0)
    nodes = bound_nodes(scheduler, 0.0)
    assert nodes in ([[0, 1]], [[2, 3]])


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"switch_wait": -1.0}, "switch_wait"),
        ({"preemption": "yes"}, "preemption"),
    ],
)
def test_slurm_options_are_checked(options: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as error:
        SlurmOptions(**options)
    assert error.value.field == field


def test_slurm_preemption_settings_are_checked() -> None:
    with pytest.raises(InputError) as error:
        SlurmPreemption(grace_s=float("nan"))
    assert error.value.field == "grace_s"
    with pytest.raises(InputError) as error:
        SlurmPreemption(max_preemptors=0)
    assert error.value.field == "max_preemptors"


# --- kube-like: LeastAllocated over CPU and memory, by hand -----------------------------------
# Already on each node (GPUs, cores, GiB): node 0 (2, 200, 128), node 1 (6, 32, 128),
# node 2 (4, 112, 1024), node 3 (4, 48, 256); capacity 224 cores and 2048 GiB. A pod asking
# 1 GPU, 24 cores and 128 GiB scores, with requested counting the pod:
#   node 0: cpu 224/224 -> 0, memory 256/2048 -> 1792*100//2048 = 87, LeastAllocated
#           (0+87)//2 = 43; balance |1 - 0.125|/2 = 0.4375 -> 56; total 99
#   node 1: cpu 56/224 -> 168*100//224 = 75, memory 87 -> 81; |0.25 - 0.125|/2 -> 93; 174
#   node 2: cpu 136/224 -> 39, memory 1152/2048 -> 43 -> 41; |0.607 - 0.5625|/2 -> 97; 138
#   node 3: cpu 72/224 -> 67, memory 384/2048 -> 81 -> 74; |0.321 - 0.1875|/2 -> 93; 167
# Node 1 wins, though node 0 has the most free GPUs (6).
LOADS = [(2, 200, 128), (6, 32, 128), (4, 112, 1024), (4, 48, 256)]


def loaded_state() -> ClusterState:
    state = fresh_state()
    for node, (gpus, cores, gib) in enumerate(LOADS):
        allocation = Allocation.of([node], [list(range(gpus))], 1000, cores * 1000, gib * GIB)
        state.allocate(f"load{node}", allocation)
    return state


def test_resource_scores_match_the_hand_computation() -> None:
    state = loaded_state()
    topology = state.topology
    scores = resource_scores(
        topology.cpu_milli.astype(np.int64),
        topology.memory_mib.astype(np.int64),
        state.free_cpu_milli.astype(np.int64),
        state.free_memory_mib.astype(np.int64),
        24_000,
        128 * GIB,
    )
    assert scores.tolist() == [99, 174, 138, 167]


def test_kube_like_places_by_cpu_and_memory_not_free_gpus() -> None:
    state = loaded_state()
    scheduler = KubeLike(state, BudgetTree.from_dict(BUDGET))
    pod = {"gpus": 1, "cpu": 24, "memory": "128Gi"}
    scheduler.submit(spec("pod", 1, resources_per_pod=pod), 0.0)
    bound = [d for d in scheduler.cycle(0.0).decisions if isinstance(d, Bind)]
    assert [d.allocation.nodes.tolist() for d in bound] == [[1]]
    assert int(np.argmax(state.free_whole_gpus)) == 0  # what a spread by free GPUs would pick


@pytest.mark.parametrize(("busy", "bound"), [([0], [[2, 3]]), ([2, 3], [])])
def test_kube_like_required_level_keeps_a_gang_in_its_first_pods_domain(
    busy: list[int], bound: list[list[int]]
) -> None:
    # `required: su` is a required pod affinity to the gang's own pods: the first pod goes to
    # the best-scored usable node (node 1 is cordoned; nodes running 100 cores score lower),
    # the second must join its unit. First on node 2 or 3: the pair binds in unit su1. First
    # on node 0: su0 has no other usable node, the pair (50% missing) is rejected, where a
    # placement that saw the whole gang would have taken nodes 2 and 3.
    state = fresh_state()
    state.set_health(np.array([1]), Health.CORDONED)
    for node in busy:
        state.allocate(f"busy{node}", Allocation.of([node], [], 1000, 100_000, 0))
    scheduler = KubeLike(state, BudgetTree.from_dict(BUDGET))
    scheduler.submit(spec("pair", 2, topology={"required": "su"}), 0.0)
    decisions = scheduler.cycle(0.0).decisions
    assert [d.allocation.nodes.tolist() for d in decisions if isinstance(d, Bind)] == bound
    assert not scheduler.waiting


def test_kube_like_preferred_level_draws_a_gangs_pods_together() -> None:
    # Pods asking 56 of 224 cores score 25 lower on a node already holding one, so the second
    # pod leaves the first's node; preferred pod affinity (weight 2, 100 for the unit holding
    # the gang's pod) keeps it in the first pod's unit, on the other node there.
    pod = {"gpus": 2, "cpu": 56}
    for seed in range(4):
        scheduler = KubeLike(fresh_state(), BudgetTree.from_dict(BUDGET), seed=seed)
        scheduler.submit(spec("pair", 2, resources_per_pod=pod, topology={"preferred": "su"}), 0.0)
        (bind,) = [d for d in scheduler.cycle(0.0).decisions if isinstance(d, Bind)]
        assert sorted(bind.allocation.nodes.tolist()) in ([0, 1], [2, 3])


# --- kube-like: the coscheduling Permit wait ---------------------------------------------------
# GPUs already taken per node (not by jobs of the scheduler): 0, 3, 3 and 5, leaving 21 free,
# enough for the gang's ten 2-GPU pods by count (PreFilter's check of the group's minimum
# resources passes), but in room for 9 of them only: 4 + 2 + 2 + 1.
TAKEN = [0, 3, 3, 5]


def fragmented() -> tuple[ClusterState, KubeLike]:
    state = fresh_state()
    for node, gpus in enumerate(TAKEN):
        if gpus:
            state.allocate(f"taken{node}", Allocation.of([node], [list(range(gpus))]))
    return state, KubeLike(state, BudgetTree.from_dict(BUDGET))


def test_permit_wait_holds_a_partial_gang_then_releases_it() -> None:
    state, scheduler = fragmented()
    scheduler.submit(spec("gang", 10, gpus=2), 0.0)
    scheduler.submit(spec("small", 1, gpus=2), 1.0)
    assert [d for d in scheduler.cycle(1.0).decisions if isinstance(d, Bind)] == []
    # One pod missing of ten (10%): the nine reserved pods wait at Permit, holding 18 GPUs,
    # so the small job behind the gang finds none of the 3 left where it fits... none at all:
    # the 3 free GPUs are one on each of nodes 1-3.
    wait = scheduler.waiting["gang"]
    assert wait.allocation.pods == 9 and wait.since == 1.0
    assert int(state.free_gpus[0][0]) == 21  # held only during cycles: idle in between
    assert [d for d in scheduler.cycle(30.0).decisions if isinstance(d, Bind)] == []
    assert "waiting at Permit: 9 of 10 pods" in scheduler.jobs["gang"].reason
    # The permit timeout (60 s) releases them; the small job takes 2 of the GPUs.
    bound = [d.job_id for d in scheduler.cycle(61.0).decisions if isinstance(d, Bind)]
    assert bound == ["small"]
    assert scheduler.permit_timeouts == 1 and "gang" not in scheduler.waiting
    # Tried again with 19 GPUs free for its 20: it reserves nothing.
    assert [d for d in scheduler.cycle(62.0).decisions if isinstance(d, Bind)] == []
    assert "gang" not in scheduler.waiting


def test_postfilter_releases_a_gang_missing_more_than_a_tenth() -> None:
    # One more GPU taken on node 0: 20 free, room for 3 + 2 + 2 + 1 = 8 pods (20% missing).
    state, scheduler = fragmented()
    state.allocate("one-more", Allocation.of([0], [[7]]))
    scheduler.submit(spec("gang", 10, gpus=2), 0.0)
    scheduler.submit(spec("small", 1, gpus=2), 0.0)
    bound = [d.job_id for d in scheduler.cycle(0.0).decisions if isinstance(d, Bind)]
    # The gang's pods are rejected at once, so the job behind it starts in the same cycle.
    assert bound == ["small"]
    assert scheduler.rejections == 1 and not scheduler.waiting
    assert "2 of its 10 pods fit nowhere" in scheduler.jobs["gang"].reason


def test_permit_wait_completes_a_gang_when_its_last_pods_fit() -> None:
    state, scheduler = fragmented()
    scheduler.submit(spec("gang", 10, gpus=2), 0.0)
    scheduler.cycle(0.0)
    assert scheduler.waiting["gang"].allocation.pods == 9
    state.release("taken3")
    bound = [d for d in scheduler.cycle(20.0).decisions if isinstance(d, Bind)]
    assert [d.job_id for d in bound] == ["gang"]
    assert bound[0].allocation.pods == 10 and not scheduler.waiting
    assert state.allocations["gang"].pods == 10


def test_permit_wait_ends_with_a_reserved_pods_node() -> None:
    _, scheduler = fragmented()
    scheduler.submit(spec("gang", 10, gpus=2), 0.0)
    scheduler.cycle(0.0)
    node = int(scheduler.waiting["gang"].allocation.nodes[0])
    scheduler.set_health(np.array([node]), Health.DOWN, 5.0)
    assert "gang" not in scheduler.waiting


def test_permit_timeout_is_checked() -> None:
    with pytest.raises(InputError) as error:
        KubeLike(fresh_state(), BudgetTree.from_dict(BUDGET), permit_timeout=-1.0)
    assert error.value.field == "permit_timeout"


# --- choosing the baselines of a comparison -------------------------------------------------
def test_schedulers_named_keeps_the_order_given() -> None:
    chosen = schedulers_named(toposched_scheduler, "kube_like, slurm_like_preempt")
    assert list(chosen) == ["toposched", "kube_like", "slurm_like_preempt"]
    assert list(schedulers_named(toposched_scheduler)) == [
        "toposched",
        "slurm_like",
        "kube_like",
        "fifo_first_fit",
    ]


@pytest.mark.parametrize("names", ["slurm", "kube_like,kube_like", ","])
def test_schedulers_named_refuses_bad_names(names: str) -> None:
    with pytest.raises(InputError) as error:
        schedulers_named(toposched_scheduler, names)
    assert error.value.field == "baselines"


def test_simulate_compare_runs_the_baselines_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["simulate", "--workload", "ai2", "--days", "0.1", "--gpus", "64", "--compare"]
    argv += ["--no-progress", "--json", "--out", str(out)]
    assert main([*argv, "--baselines", "fifo_first_fit,slurm_like_preempt"]) == 0
    summaries = json.loads((out / "summary.json").read_text())
    assert list(summaries) == ["toposched", "fifo_first_fit", "slurm_like_preempt"]
    capsys.readouterr()
    # An unknown name is refused before anything runs, naming the baselines there are.
    assert main([*argv, "--out", str(tmp_path / "none"), "--baselines", "slurm"]) == 2
    error = capsys.readouterr().err
    assert "unknown baseline" in error and "slurm_like_preempt" in error
    assert not (tmp_path / "none").exists()


def test_the_light_names_are_the_baselines() -> None:
    assert tuple(BASELINES) == BASELINE_NAMES
