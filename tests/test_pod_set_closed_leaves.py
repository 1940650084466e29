"""Whole racks an earlier pod set fills, read as full by the later sets' searches without a
take (`placement.closed_leaves`): every count a capacity view gives, and every placement or
refusal `place` gives, equals the one after `Statement.take` of the earlier set's pods, on
random busy clusters; a job's sets placed that way equal the sets placed one after another
on takes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_job_sets_take import topologies, whole_node_pods
from test_trial_take import busy_state, one_model

from toposched.cluster.state import MILLI_PER_GPU, Allocation, ClusterState
from toposched.cluster.statement import Statement
from toposched.cluster.topology import Topology
from toposched.placement.capacity import CapacityView
from toposched.placement.closed_leaves import ClosedLeaves, closed_leaves_of
from toposched.placement.policies import RandomFit
from toposched.placement.request import GangRequest, simple_request
from toposched.placement.roles import RolesPlacement, place_roles
from toposched.placement.search import Placement, Unschedulable, place


def rack_level(topology: Topology) -> int:
    return len(topology.domain_levels) - 1


def requests(topology: Topology) -> st.SearchStrategy[GangRequest]:
    """Gangs of whole-GPU pods of every kind a later set may be: CPU and memory, GPU models,
    slices of racks or nodes, a required level, a preferred one."""
    models = [None, *([[0], [1]] if len(topology.gpu_models) > 1 else [])]
    rack = rack_level(topology)
    return st.builds(
        lambda pods, gpus, resources, model, required, preferred, layer: simple_request(
            pods,
            gpus,
            cpu_milli=resources[0],
            memory_mib=resources[1],
            models=model,
            required=required,
            preferred=preferred,
            slices=[(rack, layer)] if layer > 1 and pods % layer == 0 else [],
            node_slice=2 if layer == 1 and gpus < 4 and pods % 2 == 0 else 1,
            name="rollout",
        ),
        st.sampled_from([1, 3, 8, 36, 200, 900]),
        st.sampled_from([1, 2, 4]),
        st.sampled_from([(0, 0), (1000, 0), (0, 4096), (3000, 6000)]),
        st.sampled_from(models),
        st.sampled_from([0, 1, rack]),
        st.sampled_from([None, 1, rack]),
        st.sampled_from([1, 2, 6]),
    )


def views(
    state: ClusterState, request: GangRequest, closed: ClosedLeaves | None
) -> list[np.ndarray]:
    """Every count a view of `request` gives: per level, aggregate and exact, with the free
    GPUs messages report; and each node's room."""
    topology = state.topology
    out: list[np.ndarray] = []
    for exact in (False, True):
        view = CapacityView(state, request, exact, closed=closed)
        for level in range(len(topology.domain_levels)):
            n = topology.n_domains(level)
            out += [view.at(level, 0, n), view.without_slices_at(level, 0, n)]
            out.append(view.free_gpu_equivalent(level, 0, n))
        out.append(view.node_capacity())
    return out


def same_result(left: Placement | Unschedulable, right: Placement | Unschedulable) -> None:
    assert type(left) is type(right), (left, right)
    if isinstance(left, Placement):
        assert isinstance(right, Placement)
        assert np.array_equal(left.allocation.nodes, right.allocation.nodes)
        assert np.array_equal(left.allocation.gpus, right.allocation.gpus)
    else:
        assert isinstance(right, Unschedulable)
        assert (left.code, left.reason) == (right.code, right.reason)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topologies(), st.integers(0, 2**32 - 1), st.sampled_from([0.3, 1.0]), st.data())
def test_closed_racks_read_as_after_a_take(
    topology: Topology, seed: int, share: float, data: st.DataObject
) -> None:
    rng = np.random.default_rng(seed)
    state = busy_state(topology, rng)
    resources = data.draw(st.sampled_from([(0, 0), (500, 0), (0, 256), (2000, 4096)]))
    earlier = whole_node_pods(state, rng, share, *resources)
    if earlier is None:
        return
    found = closed_leaves_of(state, earlier)
    assert found is not None
    closed, rest = found
    request = data.draw(requests(topology))
    statement = Statement(state)
    try:
        if rest is not None:
            statement.take(rest, fresh=True)
        read = views(state, request, closed)
        placed = place(state, request, closed=closed)
    finally:
        statement.discard()
    statement = Statement(state)
    try:
        statement.take(earlier, fresh=True)
        expected = views(state, request, None)
        expected_placed = place(state, request)
    finally:
        statement.discard()
    for got, want in zip(read, expected, strict=True):
        assert np.array_equal(got, want)
    same_result(placed, expected_placed)


def test_whole_free_racks_are_closed_and_the_rest_left_to_take() -> None:
    """Whole-node pods on two whole free racks and two nodes of a third: the two racks are
    closed, the two nodes are the pods left; a rack with a busy node is not closed."""
    state = ClusterState(one_model())
    starts = state.topology.domain_starts[-1]
    rack = rack_level(state.topology)
    busy = simple_request(1, 1, name="busy")
    one = place(state, replace(busy, within=(rack, 3), required=rack))
    assert isinstance(one, Placement)
    state.allocate("busy", one.allocation)
    racks = [0, 1]
    nodes = [n for rack in racks for n in range(int(starts[rack]), int(starts[rack + 1]))]
    nodes += [int(starts[2]), int(starts[2]) + 1]
    nodes += list(range(int(starts[3]), int(starts[4])))  # rack 3 holds the busy pod
    free = [n for n in nodes if state.free_whole_gpus[n] == 4]
    allocation = Allocation.of(free, np.tile(np.arange(4), (len(free), 1)), MILLI_PER_GPU)
    found = closed_leaves_of(state, allocation)
    assert found is not None
    closed, rest = found
    assert closed.leaves.tolist() == racks
    assert rest is not None
    assert sorted(set(state.topology.node_domain[-1][rest.nodes].tolist())) == [2, 3]


def test_pods_sharing_nodes_close_nothing() -> None:
    state = ClusterState(one_model())
    placed = place(state, simple_request(36, 2, name="halves"))
    assert isinstance(placed, Placement)
    assert closed_leaves_of(state, placed.allocation) is None


def test_a_policy_reading_the_state_refuses_closed_racks() -> None:
    state = ClusterState(one_model())
    request = simple_request(4, 4, name="rollout")
    slices = [(rack_level(state.topology), 18)]
    placed = place(state, simple_request(18, 4, name="trainer", slices=slices))
    assert isinstance(placed, Placement)
    found = closed_leaves_of(state, placed.allocation)
    assert found is not None
    with pytest.raises(ValueError, match="compiled"):
        place(state, request, RandomFit(0), closed=found[0])


def sets_one_after_another_in(
    state: ClusterState, roles: list[GangRequest], level: int, domain: int
) -> list[Placement]:
    """Each set placed within `domain` at `level`, largest first, the later ones on a take
    of the earlier ones' pods."""
    order = sorted(range(len(roles)), key=lambda i: -roles[i].gpus_total)
    placements: dict[int, Placement] = {}
    statement = Statement(state)
    try:
        for index in order:
            role = roles[index]
            inside = replace(role, required=max(role.required, level), within=(level, domain))
            placed = place(state, inside)
            assert isinstance(placed, Placement), placed
            placements[index] = placed
            statement.take(placed.allocation, fresh=True)
    finally:
        statement.discard()
    return [placements[i] for i in range(len(roles))]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from([4, 20, 60]),
    st.sampled_from([(4, 0), (2, 0), (4, 2000)]),
    st.sampled_from([None, 2, 3]),
)
def test_a_trainer_in_rack_slices_and_its_rollout_as_on_takes(
    seed: int, racks: int, rollout: tuple[int, int], preferred: int | None
) -> None:
    """A trainer of whole-node pods in rack slices, a rollout set and a third set, held in
    the cluster: the same placements as placed one after another on takes."""
    rng = np.random.default_rng(seed)
    state = busy_state(one_model(), rng)
    gpus, cpu = rollout
    rack = rack_level(state.topology)
    roles = [
        simple_request(racks * 18, 4, name="trainer", preferred=2, slices=[(rack, 18)]),
        simple_request(300, gpus, cpu_milli=cpu, name="rollout", preferred=preferred),
        simple_request(7, 1, name="evaluator", required=rack),
    ]
    placed = place_roles(state, roles, 0)
    if not isinstance(placed, RolesPlacement):
        return
    expected = sets_one_after_another_in(state, roles, 0, 0)
    for got, want in zip(placed.placements, expected, strict=True):
        same_result(got, want)


def test_on_a_free_cluster_the_trainer_closes_its_racks_and_the_rollout_goes_beside() -> None:
    """Every rack free: the trainer's 20 rack slices close 20 whole racks, and the rollout and
    evaluator sets land as on takes, in none of them."""
    state = ClusterState(one_model())
    rack = rack_level(state.topology)
    roles = [
        simple_request(20 * 18, 4, name="trainer", preferred=2, slices=[(rack, 18)]),
        simple_request(100, 2, name="rollout", preferred=2),
        simple_request(7, 1, name="evaluator", required=rack),
    ]
    placed = place_roles(state, roles, 1)
    assert isinstance(placed, RolesPlacement)
    trainer = placed.placements[0].allocation
    found = closed_leaves_of(state, trainer)
    assert found is not None and found[1] is None
    assert found[0].leaves.size == 20
    racks_of = state.topology.node_domain[rack]
    closed = set(found[0].leaves.tolist())
    for later in placed.placements[1:]:
        assert not closed & set(racks_of[later.allocation.nodes].tolist())
    expected = sets_one_after_another_in(state, roles, 1, placed.domain)
    for got, want in zip(placed.placements, expected, strict=True):
        same_result(got, want)


def test_a_node_sliced_set_lands_with_closed_racks_as_after_the_take() -> None:
    """8 one-GPU pods in node slices of 2 on a busy cluster whose closed racks leave racks
    tied on whole slices but not on free GPUs: read with closed racks or after the take, the
    set goes to the same nodes (the small gangs' compiled search ranks racks by whole slices,
    as the search does)."""
    rng = np.random.default_rng(1_000_000_000)
    state = busy_state(one_model(), rng)
    earlier = whole_node_pods(state, rng, 1.0, 0, 0)
    assert earlier is not None
    found = closed_leaves_of(state, earlier)
    assert found is not None
    closed, rest = found
    sliced = simple_request(8, 1, node_slice=2, name="rollout")
    statement = Statement(state)
    try:
        if rest is not None:
            statement.take(rest, fresh=True)
        placed = place(state, sliced, closed=closed)
    finally:
        statement.discard()
    statement = Statement(state)
    try:
        statement.take(earlier, fresh=True)
        expected = place(state, sliced)
    finally:
        statement.discard()
    same_result(placed, expected)
    assert isinstance(placed, Placement)
