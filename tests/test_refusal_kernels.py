"""The compiled loops of the kept-refusal check, on small hand-made clusters: room per node
from free GPUs and the jobs a preemptor may take, summed per domain, fenced nodes left out;
the jobs the budget rule lets it take; limits that grew past a job."""

from __future__ import annotations

import numpy as np

from toposched.scheduler.refusal_kernels import (
    add_touched,
    limits_reach_more,
    most_grown,
    most_pods,
    takeable_slots,
)

# Two domains of two 8-GPU nodes each.
STARTS = np.array([0, 2, 4], dtype=np.int64)
NODE_DOMAIN = np.array([0, 0, 1, 1], dtype=np.int32)
GPU_COUNT = np.array([8, 8, 8, 8], dtype=np.int8)
FREE = np.array([4, 0, 2, 2], dtype=np.int8)
NO_MARKS = np.zeros(0, dtype=bool)
NO_GPUS = np.zeros(0, dtype=np.int32)
NO_OWNERS = np.full((4, 8), -1, dtype=np.int32)
NO_DOMAINS = np.zeros(0, dtype=np.int64)


def pods(
    nodes: list[int],
    *,
    one_node: bool = False,
    held: np.ndarray = NO_GPUS,
    owners: np.ndarray = NO_OWNERS,
    takeable: np.ndarray = NO_MARKS,
    fenced: np.ndarray = NO_MARKS,
    counted: int = 100,
) -> int:
    return int(
        most_pods(
            np.array(nodes, dtype=np.int64),
            STARTS,
            NODE_DOMAIN,
            one_node,
            FREE,
            GPU_COUNT,
            held,
            owners,
            takeable,
            NO_MARKS,
            fenced,
            4,
            counted,
            -1,
        )
    )


def test_free_gpus_and_held_ones_count_per_domain_up_to_each_node_s_gpus() -> None:
    assert pods([0]) == 1  # domain 0: 4 free on node 0
    assert pods([0, 3]) == 1
    held = np.array([8, 4, 4, 0], dtype=np.int32)
    # Node 0 caps at 8 GPUs (2 pods), node 1 has 4 held (1 pod); domain 1: 6 + 2 GPUs.
    assert pods([1], held=held) == 3
    assert pods([2], held=held) == 1
    assert pods([2], one_node=True, held=held) == 1
    assert pods([1, 2], one_node=True, held=held) == 1


def test_takeable_owners_count_and_fenced_nodes_do_not() -> None:
    owners = NO_OWNERS.copy()
    owners[1, :4] = 0  # slot 0: four GPUs of node 1
    owners[1, 4:] = 1  # slot 1: the other four
    takeable = np.array([True, False, False])
    assert pods([1], owners=owners, takeable=takeable) == 2
    fenced = np.array([False, True, False, False])
    assert pods([1], owners=owners, takeable=takeable, fenced=fenced) == 1


def test_domains_too_large_to_count_answer_too_many() -> None:
    assert pods([0, 2], counted=3) == -1
    assert pods([0, 2], counted=4) == 1


def test_touched_domains_stay_sorted_and_distinct_with_their_counts() -> None:
    touched = np.array([1, 3], dtype=np.int64)
    counts = np.array([5, 7], dtype=np.int64)
    leaf_of_node = np.array([0, 0, 1, 1, 2, 2, 3, 3], dtype=np.int32)
    leaves, merged = add_touched(
        touched, counts, np.array([3, 0, 2, 1], dtype=np.int64), leaf_of_node
    )
    # Leaves holding the nodes are to be counted again (-1); the others keep their counts.
    assert leaves.tolist() == [0, 1, 3]
    assert merged.tolist() == [-1, -1, 7]
    no_nodes = np.zeros(0, dtype=np.int64)
    leaves, merged = add_touched(touched, counts, no_nodes, leaf_of_node)
    assert leaves.tolist() == [1, 3]
    assert merged.tolist() == [5, 7]
    leaves, merged = add_touched(
        NO_DOMAINS, NO_DOMAINS, np.array([7, 6], dtype=np.int64), leaf_of_node
    )
    assert leaves.tolist() == [3]
    assert merged.tolist() == [-1]


def grown_and_counts(
    leaves: list[int], domain_of_leaf: list[int], granule: int, counts: list[int] | None = None
) -> tuple[int, list[int]]:
    """`most_grown` with each domain of `STARTS` an innermost domain, 4-GPU pods, and the
    leaves' counts it leaves; every leaf counted unless `counts` are given."""
    known = np.array(counts if counts is not None else [-1] * len(leaves), dtype=np.int64)
    best = most_grown(
        np.array(leaves, dtype=np.int64),
        known,
        STARTS,
        np.array(domain_of_leaf, dtype=np.int64),
        max(domain_of_leaf) + 1,
        granule,
        FREE,
        GPU_COUNT,
        np.array([8, 4, 4, 0], dtype=np.int32),
        NO_OWNERS,
        NO_MARKS,
        NO_MARKS,
        NO_MARKS,
        4,
    )
    return int(best), known.tolist()


def grown(
    leaves: list[int], domain_of_leaf: list[int], granule: int, counts: list[int] | None = None
) -> int:
    return grown_and_counts(leaves, domain_of_leaf, granule, counts)[0]


def test_innermost_domains_sum_their_whole_slices_per_domain_of_the_gang_s_level() -> None:
    # Leaf 0 takes 3 pods (node 0: 2, node 1: 1), leaf 1 takes 1 (6 + 2 GPUs).
    assert grown([0, 1], [0, 1], 1) == 3
    assert grown([0, 1], [0, 0], 1) == 4  # both in one domain of the gang's level
    assert grown([0, 1], [0, 0], 2) == 2  # slices of 2 pods: 2 + 0
    assert grown([1], [0, 0], 1) == 1
    assert grown([], [0, 0], 1) == 0


def test_innermost_domains_counted_before_keep_their_counts() -> None:
    # Leaf 0 counted before at 9 pods, leaf 1 counted now (1 pod).
    assert grown([0, 1], [0, 0], 1, counts=[9, -1]) == 10
    assert grown([0, 1], [0, 1], 1, counts=[9, -1]) == 9
    # The leaf counted now keeps its count for later looks.
    assert grown_and_counts([0, 1], [0, 0], 1, counts=[-1, 2]) == (5, [3, 2])


def test_takeable_slots_follow_the_budget_rule() -> None:
    takeable = takeable_slots(
        np.array([True, True, True, True, False]),  # counted (slot 4 protected)
        np.array([False, True, False, False, False]),  # unallocated
        np.array([0, 1, 0, 1, 1]),  # account codes
        np.array([1, 5, 3, 0, 0]),  # priorities
        np.array([8.0, 64.0, 8.0, 16.0, 1.0]),  # GPUs
        0,
        2,
        np.array([-np.inf, 8.0]),
        1e-6,
    )
    assert takeable.tolist() == [True, True, False, False, False, False]


def test_limits_reach_more_only_when_a_grown_limit_passes_a_job() -> None:
    counted = np.array([True, True])
    unallocated = np.array([False, False])
    account = np.array([0, 1])
    gpus = np.array([8.0, 32.0])

    def reach(limits: list[float], before: list[float]) -> bool:
        return bool(
            limits_reach_more(
                np.array(limits), np.array(before), counted, unallocated, account, gpus, 1e-6
            )
        )

    assert not reach([4.0, 16.0], [2.0, -np.inf])
    assert reach([8.0, 16.0], [2.0, -np.inf])
    assert not reach([16.0, 16.0], [10.0, 16.0])  # job 0 was within reach already
    assert reach([4.0, 40.0], [4.0])  # an account first seen since: no limit then
