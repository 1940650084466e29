"""Many allocations taken at once (`allocate_many`, a restart's running jobs) leave the state
exactly as `allocate` one by one does; a batch with any allocation that does not fit is
refused whole, with `allocate`'s own message, and changes nothing."""

from __future__ import annotations

import numpy as np
import pytest

from toposched.cluster.batch_allocate import allocate_many
from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation, ClusterState


def cluster() -> ClusterState:
    """2 blocks x 4 racks x 6 nodes x 4 GPUs."""
    return ClusterState(nvl72_cluster(1, 2, 4, nodes_per_rack=6))


def assorted() -> dict[str, Allocation]:
    """Whole-GPU gangs of several widths, shared GPUs, CPU and memory, CPU-only pods."""
    return {
        "whole": Allocation.of([0, 1, 2], [[0, 1, 2, 3]] * 3),
        "two": Allocation.of([3, 3], [[0, 1], [2, 3]], cpu_milli=2000, memory_mib=1024),
        "one": Allocation.of([4], [[1]]),
        "share-a": Allocation.of([4, 5], [[2], [0]], gpu_milli=250),
        "share-b": Allocation.of([4], [[2]], gpu_milli=500, cpu_milli=1000),
        "cpu": Allocation.of([6, 7], np.zeros((2, 0), dtype=np.int64), cpu_milli=500),
        "wide": Allocation.of(np.arange(8, 40), np.tile(np.arange(4), (32, 1))),
    }


def test_taking_many_at_once_equals_taking_them_one_by_one() -> None:
    batch, single = cluster(), cluster()
    allocations = assorted()
    allocate_many(batch, list(allocations), list(allocations.values()))
    for owner, allocation in allocations.items():
        single.allocate(owner, allocation)
    assert batch.allocations.keys() == single.allocations.keys()
    expected = single.snapshot()
    for name, array in batch.snapshot().items():
        assert np.array_equal(array, expected[name]), name
    batch.release("wide")
    single.release("wide")
    assert batch.total_free_gpus == single.total_free_gpus


@pytest.mark.parametrize(
    ("owner", "allocation", "message"),
    [
        ("clash", Allocation.of([0], [[3]]), "needs 1000 milli-GPU, 0 free"),
        ("over", Allocation.of([4], [[2]], gpu_milli=500), "needs 500 milli-GPU, 250 free"),
        ("away", Allocation.of([500], [[0]]), "must be a node index"),
        ("gpu", Allocation.of([41], [[7]]), "has 4 GPUs"),
        ("whole", Allocation.of([41], [[0]]), "already holds an allocation"),
        # Amounts the quick checks do not vouch for: each left to `allocate`, which refuses it.
        ("bool", Allocation.of([41], [[0]], gpu_milli=True), "must be an integer milli-GPU"),
        ("none", Allocation.of([41], [[0]], gpu_milli=0), r"must be in \(0, 1000\]"),
        ("wide", Allocation.of([41], [[0, 1]], gpu_milli=500), "one GPU per pod"),
        ("less", Allocation.of([41], [[0]], cpu_milli=-5), "must be >= 0"),
        ("huge", Allocation.of([41], [[0]], memory_mib=2**70), "must be <= 1099511627776"),
    ],
)
def test_a_batch_with_one_that_does_not_fit_is_refused_whole(
    owner: str, allocation: Allocation, message: str
) -> None:
    state = cluster()
    state.allocate("whole", Allocation.of([0], [[3]]))
    state.allocate("shared", Allocation.of([4], [[2]], gpu_milli=750))
    before = state.snapshot()
    fine = Allocation.of([10, 11], [[0, 1, 2, 3]] * 2)
    with pytest.raises(InputError, match=message):
        allocate_many(state, ["fine", owner], [fine, allocation])
    assert set(state.allocations) == {"whole", "shared"}
    for name, array in state.snapshot().items():
        assert np.array_equal(array, before[name]), name


def test_the_same_gpu_asked_by_two_allocations_of_the_batch_is_refused() -> None:
    state = cluster()
    first = Allocation.of([2], [[0, 1]])
    second = Allocation.of([2], [[1, 2]])
    with pytest.raises(InputError, match="needs 1000 milli-GPU, 0 free"):
        allocate_many(state, ["a", "b"], [first, second])
    assert not state.allocations and state.total_free_gpus == 192
