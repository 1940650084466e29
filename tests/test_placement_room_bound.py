"""The bound from above of a gang's room in the whole cluster (`capacity.room_bound`), which
lets a job of several pod sets skip counting the cluster for a set that surely fits."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from test_placement_oracle import ANY_CASE, SETTINGS, RandomCase, random_cases

from toposched.placement.capacity import CapacityView, room_bound
from toposched.placement.capacity_kernels import whole_units


@SETTINGS
@given(
    free=st.lists(st.integers(0, 2**40), max_size=64),
    unit=st.integers(1, 2**20),
)
def test_whole_units_is_the_sum_of_integer_quotients(free: list[int], unit: int) -> None:
    array = np.array(free, dtype=np.int64)
    assert whole_units(array, unit) == sum(value // unit for value in free)


def test_whole_units_at_exact_multiples_and_just_below() -> None:
    units = [1, 2, 3, 4, 7, 18, 72, 144, 1296, 99_991]
    for unit in units:
        values = np.array(
            [
                k * unit + d
                for k in (0, 1, 17, 10**6, 2**40 // unit)
                for d in (-1, 0, 1)
                if k * unit + d >= 0
            ],
            dtype=np.int64,
        )
        assert whole_units(values, unit) == int((values // unit).sum())


@SETTINGS
@given(case=st.one_of(ANY_CASE, random_cases(large_jobs=True, spanning=True, sliced_above=True)))
def test_room_bound_is_at_least_every_count_of_the_cluster(case: RandomCase) -> None:
    state, request, _ = case.build()
    bound = room_bound(state, request)
    for exact in (False, True):
        assert CapacityView(state, request, exact).total() <= bound
