"""Domains whose children each hold no pod or one granule: the fewest-children ranking is
skipped there, and the placement is the one the ranking would have chosen."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import Allocation, ClusterState
from toposched.jobs.spec import JobSpec
from toposched.placement.capacity import CapacityView
from toposched.placement.domains import DomainChoice
from toposched.placement.policies import BestFit
from toposched.placement.request import GangRequest
from toposched.placement.search import Placement, place

ZONES, BLOCKS, RACKS, NODES = 2, 3, 5, 18


def _fleet(taken: list[int]) -> ClusterState:
    """Two zones of three blocks of five NVL72 racks; `taken` nodes hold one GPU each."""
    state = ClusterState(nvl72_cluster(ZONES, BLOCKS, RACKS))
    for i, node in enumerate(sorted(set(taken))):
        nodes = np.array([node], dtype=np.int64)
        gpus = np.zeros((1, 1), dtype=np.int64)
        state.allocate(f"busy-{i}", Allocation(nodes, gpus, 1000, 0, 0))
    return state


def _request(state: ClusterState, racks: int, per_pod: int, slice_pods: int) -> GangRequest:
    spec = JobSpec.from_dict(
        {
            "name": "gang",
            "account": "a",
            "pods": racks * slice_pods,
            "resources_per_pod": {"gpus": per_pod},
            "topology": {
                "required": "zone",
                "preferred": "block",
                "slices": [{"level": "rack", "pods": slice_pods}],
            },
        }
    )
    return GangRequest.from_spec(spec, state.topology)


def _without_shortcut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DomainChoice, "children_alike", lambda self, level: False)


@settings(max_examples=60, deadline=None)
@given(
    taken=st.lists(st.integers(0, ZONES * BLOCKS * RACKS * NODES - 1), max_size=60),
    racks=st.integers(1, 9),
)
def test_whole_rack_slices_are_placed_as_the_ranking_places_them(
    taken: list[int], racks: int
) -> None:
    state = _fleet(taken)
    request = _request(state, racks, per_pod=4, slice_pods=NODES)
    view = CapacityView(state, request, exact=False)
    choice = DomainChoice(state.topology, view, request, BestFit())
    assert choice.children_alike(2)  # a rack holds one slice at most
    # What the shortcut assumes: a rack holds the slice whole or not at all, so every block
    # holding the gang needs as many racks as the gang has slices.
    assert set(view.at(3, 0, state.topology.n_domains(3)).tolist()) <= {0, NODES}
    placed = place(state, request, BestFit())
    with pytest.MonkeyPatch.context() as patch:
        _without_shortcut(patch)
        ranked = place(state, request, BestFit())
    assert type(placed) is type(ranked)
    if isinstance(placed, Placement) and isinstance(ranked, Placement):
        assert np.array_equal(placed.allocation.nodes, ranked.allocation.nodes)
        assert np.array_equal(placed.allocation.gpus, ranked.allocation.gpus)


def test_racks_that_hold_two_slices_are_ranked() -> None:
    """Slices of half a rack: a rack may hold two, so the blocks are told apart by the racks
    they need, and the shortcut does not apply."""
    state = _fleet([])
    request = _request(state, 2, per_pod=4, slice_pods=NODES // 2)
    view = CapacityView(state, request, exact=False)
    choice = DomainChoice(state.topology, view, request, BestFit())
    assert not choice.children_alike(2)
    # Two-GPU pods: a node holds two, so a rack holds two slices of 18.
    request = _request(state, 2, per_pod=2, slice_pods=NODES)
    view = CapacityView(state, request, exact=False)
    assert not DomainChoice(state.topology, view, request, BestFit()).children_alike(2)
