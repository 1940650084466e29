"""Slice-rounded capacities at and above the innermost slice level, counted in one compiled
pass, against their definition level by level; and a view's exact counts, asked at several
levels, against fresh views asked once."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from test_placement_oracle import ANY_CASE, SETTINGS, RandomCase, random_cases

from toposched.placement.capacity import CapacityView
from toposched.placement.request import GangRequest

SLICED = random_cases(large_jobs=True, spanning=True, sliced_above=True)


@SETTINGS
@given(case=SLICED)
def test_every_level_sums_its_children_rounded_to_its_granule(case: RandomCase) -> None:
    state, request, _ = case.build()
    if not request.slices or request.gpus_per_pod == 0 or request.is_fractional:
        return
    topology = state.topology
    slice_level = max(level for level, _ in request.slices)
    view = CapacityView(state, request, exact=False)
    # The definition: the innermost slice level's domains hold whole slices of their own pods;
    # each domain above holds its children's pods, rounded down to its own granule.
    granule = request.granule(slice_level)
    expected = view.without_slices_at(slice_level, 0, topology.n_domains(slice_level))
    expected = expected // granule * granule
    levels = {slice_level: expected}
    for level in range(slice_level - 1, -1, -1):
        bounds = topology.descendant_bounds(level, level + 1)
        below = levels[level + 1]
        sums = np.array(
            [below[bounds[d] : bounds[d + 1]].sum() for d in range(topology.n_domains(level))],
            dtype=np.int64,
        )
        levels[level] = sums // request.granule(level) * request.granule(level)
    for level, capacity in levels.items():
        assert view.at(level, 0, topology.n_domains(level)).tolist() == capacity.tolist()


@SETTINGS
@given(case=st.one_of(SLICED, ANY_CASE))
def test_exact_counts_at_several_levels_are_those_of_fresh_views(case: RandomCase) -> None:
    state, request, _ = case.build()
    topology = state.topology
    levels = range(len(topology.domain_levels))
    # What a search asks: the whole cluster, every level's domains, the first of each.
    questions: list[tuple[str, int, int]] = [("at", 0, 1)]
    questions += [("at", level, topology.n_domains(level)) for level in levels]
    questions += [("without_slices_at", level, 1) for level in levels]

    def answer(view: CapacityView, question: tuple[str, int, int]) -> list[int]:
        method, level, hi = question
        counts: list[int] = getattr(view, method)(level, 0, hi).tolist()
        return counts

    fresh = [answer(CapacityView(state, request, exact=True), q) for q in questions]
    # One view asked everything, the whole cluster first, or the first domains first.
    for order in (questions, questions[::-1]):
        view = CapacityView(state, request, exact=True)
        asked = {q: answer(view, q) for q in order}
        assert [asked[q] for q in questions] == fresh


def test_granules_by_level_are_each_levels_granule() -> None:
    request = GangRequest(
        name="sliced",
        pods=72,
        gpus_per_pod=4,
        gpu_milli=1000,
        cpu_milli=0,
        memory_mib=0,
        allowed_models=None,
        slices=((1, 36), (3, 18)),
        node_slice=2,
    )
    assert request.granules(3).tolist() == [36, 36, 18, 18]
    assert request.granules(4).tolist() == [36, 36, 18, 18, 2]
    assert not request.granules(3).flags.writeable
