"""Tests of the fragmentation measure and the fragmentation-aware policies (FGD and balanced)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toposched.cluster.errors import InputError
from toposched.cluster.loaders import topology_from_dict
from toposched.cluster.state import Allocation, ClusterState
from toposched.cluster.topology import Topology
from toposched.placement.fragmentation import (
    FGD,
    FRAGMENTATION_POLICIES,
    BalancedFragmentation,
    FragmentationModel,
    TargetWorkload,
    fgd_level,
)
from toposched.placement.policies import BestFit
from toposched.placement.request import simple_request
from toposched.placement.search import Placement, place

GIB = 1024


def cluster(*nodes: tuple[int, str, int, int]) -> Topology:
    """A flat cluster of (GPUs, model, cores, GiB) nodes n0, n1, ...; models T4=0, A100=1."""
    return topology_from_dict(
        {
            "levels": [],
            "gpu_models": {"T4": 16, "A100": 80},
            "nodes": [
                {"name": f"n{i}", "gpus": g, "gpu_model": m, "cpu": c, "memory": f"{mem}Gi"}
                for i, (g, m, c, mem) in enumerate(nodes)
            ],
        }
    )


def workload(topology: Topology, *shapes: tuple[int, int, int, int, str, int]) -> TargetWorkload:
    """Tasks given as (count, cores, GPUs, milli per GPU, models "A|B", GiB) rows."""
    cpu: list[int] = []
    gpus: list[int] = []
    milli: list[int] = []
    models: list[tuple[str, ...]] = []
    memory: list[int] = []
    for count, cores, g, m, spec, gib in shapes:
        for _ in range(count):
            cpu.append(cores * 1000)
            gpus.append(g)
            milli.append(m)
            models.append(tuple(name for name in spec.split("|") if name))
            memory.append(gib * GIB)
    return TargetWorkload.from_tasks(topology, cpu, gpus, milli, models, memory)


ONE_T4_NODE = cluster((2, "T4", 8, 64))
T4 = 0


def frag(model: FragmentationModel, free: list[int], cores: int, gib: int | None = None) -> float:
    memory = None if gib is None else np.array([gib * GIB])
    value = model.fragmentation(np.array([free]), np.array([cores * 1000]), np.array([T4]), memory)
    return float(value[0])


# --- the measure, worked by hand --------------------------------------------------------------


def test_fragmentation_of_hand_worked_nodes() -> None:
    # Shapes: A = 0.5 GPU and 2 cores (3 tasks), B = 1 GPU and 4 cores (1 task): p = .75 / .25.
    tasks = workload(ONE_T4_NODE, (3, 2, 1, 500, "", 0), (1, 4, 1, 1000, "", 0))
    model = FragmentationModel(tasks, tasks.counts)
    # [1000, 300], 8 cores: A fits, its unusable part is the 300 GPU; B fits, same 300.
    # .75 x 300 + .25 x 300 = 300
    assert frag(model, [1000, 300], 8) == pytest.approx(300)
    # [600, 300]: A fits (300 unusable); B finds no whole GPU, all 900 unusable for it.
    # .75 x 300 + .25 x 900 = 450
    assert frag(model, [600, 300], 8) == pytest.approx(450)
    # [1000, 1000] with 3 cores: A fits with nothing left over; B lacks CPU, all 2000 unusable.
    # .75 x 0 + .25 x 2000 = 500
    assert frag(model, [1000, 1000], 3) == pytest.approx(500)
    # A full node has nothing to fragment.
    assert frag(model, [0, 0], 8) == 0


def test_cpu_only_tasks_wrong_models_and_memory_make_all_free_gpu_unusable() -> None:
    # Weights 3 (A: 0.5 GPU, 2 cores), 1 (B: 1 GPU), 4 (C: CPU only): total 8.
    tasks = workload(
        ONE_T4_NODE, (3, 2, 1, 500, "", 0), (1, 4, 1, 1000, "", 0), (4, 1, 0, 0, "", 0)
    )
    model = FragmentationModel(tasks, tasks.counts)
    # [1000, 300]: A 300, B 300, C all 1300: (3 x 300 + 1 x 300 + 4 x 1300) / 8 = 800
    assert frag(model, [1000, 300], 8) == pytest.approx(800)
    # One shape allowed only on A100 (this node is a T4) and one that needs 64 GiB.
    others = workload(ONE_T4_NODE, (1, 1, 1, 500, "A100", 0), (1, 1, 1, 500, "", 64))
    model = FragmentationModel(others, others.counts)
    # With 32 GiB neither fits: both count the whole 1500 free. With 64 GiB the second fits
    # and nothing of [1000, 500] is below its 500 share: (1500 + 0) / 2 = 750.
    assert frag(model, [1000, 500], 8, gib=32) == pytest.approx(1500)
    assert frag(model, [1000, 500], 8, gib=64) == pytest.approx(750)


def test_fgd_score_levels() -> None:
    # int(100 x sigmoid(-increase / 1000)): 50 at no change, more for decreases.
    increases = np.array([0.0, -1000.0, 1000.0, 265.0, -205.0])
    # 100 / (1 + e^-1) = 73.1; 100 / (1 + e) = 26.9; 43.4; 55.1
    assert fgd_level(increases).tolist() == [50, 73, 26, 43, 55]


def test_workload_counts_orders_and_cuts_like_fgd() -> None:
    tasks = workload(
        ONE_T4_NODE,
        (5, 2, 1, 500, "", 8),
        (3, 2, 1, 500, "", 16),  # same as the first but for memory
        (1, 4, 1, 1000, "T4", 0),
        (1, 1, 0, 0, "", 0),
    )
    assert tasks.counts.tolist() == [5, 3, 1, 1]
    # Equal counts order by CPU descending: the 4-core shape before the 1-core one.
    assert tasks.cpu_milli.tolist()[2:] == [4000, 1000]
    merged = tasks.ignoring_memory()
    assert merged.counts.tolist() == [8, 1, 1]
    # 95% of 10 tasks needs all three shapes; 80% only the first.
    assert merged.most_popular(0.95).n_shapes == 3
    assert merged.most_popular(0.8).n_shapes == 1
    assert merged.allowed[1].tolist() == [True, False]  # "T4" only


# --- choices ----------------------------------------------------------------------------------


def test_fgd_puts_a_share_where_fragmentation_falls() -> None:
    topology = cluster((2, "T4", 64, 256), (2, "T4", 64, 256))
    tasks = workload(topology, (1, 0, 1, 470, "", 0), (1, 0, 1, 1000, "", 0))
    state = ClusterState(topology)
    state.allocate("earlier", Allocation.of([1], [[1]], gpu_milli=470))  # n1 = [1000, 530]
    # n0 [1000, 1000] -> [530, 1000]: 1000-share loses 530: +0.5 x 530 = +265 (level 43).
    # n1 GPU1 530 -> 60: before 0.5 x 530 = 265, after 60 for both shapes: -205 (level 55).
    placement = place(state, simple_request(1, 1, 470), FGD(tasks))
    assert isinstance(placement, Placement)
    assert placement.allocation.nodes.tolist() == [1]
    assert placement.allocation.gpus.tolist() == [[1]]


def test_fgd_ties_go_to_the_lowest_node_index() -> None:
    topology = cluster((4, "T4", 64, 256), (4, "T4", 64, 256), (4, "T4", 64, 256))
    tasks = workload(topology, (1, 1, 1, 1000, "", 0))
    state = ClusterState(topology)
    for owner in range(3):
        placement = place(state, simple_request(1, 1, 1000, cpu_milli=1000), FGD(tasks))
        assert isinstance(placement, Placement)
        assert placement.allocation.nodes.tolist() == [0]  # packs n0 first
        state.allocate(f"t{owner}", placement.allocation)


def test_balanced_sends_cpu_hungry_work_to_the_cpu_rich_node() -> None:
    # n0: 8 GPUs with 96 cores; n1: 8 GPUs with 400 cores. Tasks: 3 of (1 GPU, 12 cores) and
    # 1 of (1 GPU, 40 cores): 19 cores per GPU on average.
    topology = cluster((8, "T4", 96, 1024), (8, "T4", 400, 1024))
    tasks = workload(topology, (3, 12, 1, 1000, "", 1), (1, 40, 1, 1000, "", 1))
    heavy = simple_request(1, 1, 1000, cpu_milli=40_000)
    state = ClusterState(topology)
    # Both nodes still fit every shape afterwards, so FGD sees no difference and takes n0.
    fgd = place(state, heavy, FGD(tasks))
    assert isinstance(fgd, Placement) and fgd.allocation.nodes.tolist() == [0]
    # n0's 96 cores feed only 96 / 19 = 5.05 of its GPUs; taking 40 cores strands 1.1 more
    # GPUs there, while n1 has cores to spare for all of its GPUs.
    balanced = place(state, heavy, BalancedFragmentation(tasks))
    assert isinstance(balanced, Placement) and balanced.allocation.nodes.tolist() == [1]


def test_balanced_leaves_a_scarce_model_to_the_tasks_that_need_it() -> None:
    # n0: 2 x A100, n1: 4 x T4. Tasks: 3 A100-only, 3 T4-only, 1 anywhere (1 GPU each). The
    # A100-only demand (3/7 of it) meets a third of the GPUs: pressure min(1, 3/7 / (1/3)) = 1;
    # on T4 it is 3/7 / (2/3) = 0.64.
    topology = cluster((2, "A100", 64, 256), (4, "T4", 64, 256))
    tasks = workload(
        topology, (3, 1, 1, 1000, "A100", 1), (3, 1, 1, 1000, "T4", 1), (1, 1, 1, 1000, "", 1)
    )
    anywhere = simple_request(1, 1, 1000, cpu_milli=1000)
    state = ClusterState(topology)
    # FGD: either node frees 3/7 x 1000 = 429 of capacity only the other model's tasks could
    # not use (both level 60), so the tie goes to n0 and an A100 is spent.
    fgd = place(state, anywhere, FGD(tasks))
    assert isinstance(fgd, Placement) and fgd.allocation.nodes.tolist() == [0]
    # Balanced adds 1000 x pressure: n0 -429 + 1000 = 571 (level 36), n1 -429 + 643 = 214
    # (level 44): the T4 is taken.
    balanced = place(state, anywhere, BalancedFragmentation(tasks))
    assert isinstance(balanced, Placement) and balanced.allocation.nodes.tolist() == [1]
    # A task that may only use A100 still gets one.
    only_a100 = simple_request(1, 1, 1000, cpu_milli=1000, models=[1])
    placed = place(state, only_a100, BalancedFragmentation(tasks))
    assert isinstance(placed, Placement) and placed.allocation.nodes.tolist() == [0]


def test_a_workload_for_another_cluster_is_refused() -> None:
    tasks = workload(ONE_T4_NODE, (1, 1, 1, 500, "", 0))
    other = topology_from_dict(
        {"levels": [], "nodes": [{"name": "x", "gpus": 1, "gpu_model": "H100", "cpu": 8}]}
    )
    with pytest.raises(InputError, match="different number of GPU models"):
        place(ClusterState(other), simple_request(1, 1, 500), FGD(tasks))


def test_registry_builds_both_policies() -> None:
    tasks = workload(ONE_T4_NODE, (1, 1, 1, 500, "", 0))
    assert {name: factory(tasks, 42).name for name, factory in FRAGMENTATION_POLICIES.items()} == {
        "fgd": "fgd",
        "fgd-balanced": "fgd-balanced",
    }


# --- properties -------------------------------------------------------------------------------

NODE = st.tuples(
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from(["T4", "A100"]),
    st.integers(4, 96),
    st.integers(16, 512),
)
TASK = st.tuples(
    st.integers(1, 3),  # count
    st.integers(0, 24),  # cores
    st.sampled_from([0, 1, 1, 1, 2, 4]),  # GPUs
    st.sampled_from([100, 250, 470, 810, 1000]),  # milli per GPU (shares only for 1 GPU)
    st.sampled_from(["", "", "T4", "A100"]),
    st.integers(0, 64),  # GiB
)


def normalised(task: tuple[int, int, int, int, str, int]) -> tuple[int, int, int, int, str, int]:
    count, cores, gpus, milli, spec, gib = task
    if gpus != 1:
        milli = 1000 if gpus else 0
    return count, cores, gpus, milli, spec if gpus else "", gib


@settings(max_examples=100, deadline=None)
@given(
    nodes=st.lists(NODE, min_size=1, max_size=6),
    tasks=st.lists(TASK, min_size=1, max_size=6),
    order=st.randoms(use_true_random=False),
    policy_name=st.sampled_from(sorted(FRAGMENTATION_POLICIES)),
)
def test_never_over_allocates_and_places_whenever_anything_fits(
    nodes: list[tuple[int, str, int, int]],
    tasks: list[tuple[int, int, int, int, str, int]],
    order: Any,
    policy_name: str,
) -> None:
    topology = cluster(*nodes)
    shapes = [normalised(task) for task in tasks]
    target = workload(topology, *shapes)
    policy = FRAGMENTATION_POLICIES[policy_name](target, 0)
    arrivals = [shape for shape in shapes for _ in range(shape[0] * 3)]
    order.shuffle(arrivals)
    state = ClusterState(topology)
    model_index = {"T4": 0, "A100": 1}
    for position, (_, cores, gpus, milli, spec, gib) in enumerate(arrivals):
        request = simple_request(
            1,
            gpus,
            milli if gpus else 1000,
            cpu_milli=cores * 1000,
            memory_mib=gib * GIB,
            models=[model_index[spec]] if spec else None,
        )
        feasible = isinstance(place(state, request, BestFit()), Placement)
        result = place(state, request, policy)
        # The policy ranks; it never changes whether a task fits.
        assert isinstance(result, Placement) == feasible
        if isinstance(result, Placement):
            state.allocate(f"t{position}", result.allocation)  # validates every resource
        assert (state.gpu_free_milli >= 0).all()
        assert (state.free_cpu_milli >= 0).all() and (state.free_memory_mib >= 0).all()
    # After releases, the policy's view agrees with one built from scratch on the same state.
    for owner in list(state.allocations)[::2]:
        state.release(owner)
    probe = simple_request(1, 1, 250)
    fresh = FRAGMENTATION_POLICIES[policy_name](target, 0)
    candidates = np.flatnonzero(state.gpu_free_milli.max(axis=1) >= 250).astype(np.int64)
    if candidates.size:
        capacity = np.ones(candidates.size, dtype=np.int64)
        assert np.array_equal(
            policy.node_scores(state, candidates, capacity, probe),
            fresh.node_scores(state, candidates, capacity, probe),
        )
