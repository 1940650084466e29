"""The search across innermost domains, piece by piece, against plain numpy: the jobs met on
some domains' nodes and those domains' room with the allowed jobs gone (compiled loops), sums
per domain of a level, and the required domain cheapest to open."""

from __future__ import annotations

import numpy as np
import pytest

from toposched.scheduler.spread_kernels import allowed_room, owners_read, room_gained
from toposched.scheduler.victim_arrays import Nowhere, cheapest_required_domain, domain_sums


def random_fleet(rng: np.random.Generator, n_leaves: int, n_slots: int) -> dict[str, np.ndarray]:
    """Innermost domains of 1-5 nodes of 4-8 GPUs, GPUs held by slots or nobody (-1), some
    nodes closed, two GPU models."""
    sizes = rng.integers(1, 6, n_leaves)
    starts = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    n_nodes = int(starts[-1])
    gpu_count = rng.integers(4, 9, n_nodes).astype(np.int8)
    owner = rng.integers(-1, n_slots, (n_nodes, 8)).astype(np.int32)
    owner[np.arange(8) >= gpu_count[:, None]] = -1
    free = np.array([rng.integers(0, int(c) + 1) for c in gpu_count], dtype=np.int8)
    return {
        "starts": starts,
        "gpu_owner": owner,
        "gpu_count": gpu_count,
        "free": free,
        "closed": (rng.random(n_nodes) < 0.1).astype(np.uint8),
        "gpu_model": rng.integers(0, 2, n_nodes).astype(np.int8),
    }


@pytest.mark.parametrize("seed", range(20))
def test_domains_read_match_numpy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_leaves, n_slots = 40, 30
    fleet = random_fleet(rng, n_leaves, n_slots)
    starts, gpu_owner = fleet["starts"], fleet["gpu_owner"]
    leaves = np.sort(rng.choice(n_leaves, int(rng.integers(1, n_leaves)), replace=False))
    nodes, owners, marks, sizes = owners_read(starts, leaves, gpu_owner, n_slots)

    expected_nodes = np.concatenate([np.arange(starts[d], starts[d + 1]) for d in leaves])
    assert nodes.tolist() == expected_nodes.tolist()
    assert (owners == gpu_owner[expected_nodes]).all()
    expected_marks = np.zeros(n_slots + 1, dtype=bool)
    expected_marks[gpu_owner[expected_nodes].reshape(-1)] = True  # -1 marks the last entry
    assert marks.tolist() == expected_marks.tolist()
    assert sizes.tolist() == (starts[leaves + 1] - starts[leaves]).tolist()

    allowed = rng.random(n_slots + 1) < 0.5
    allowed[-1] = False  # GPUs nobody holds are never freed by evictions
    model_allowed = np.array([True, bool(rng.integers(0, 2))])
    per_pod, granule = int(rng.integers(1, 5)), int(rng.integers(1, 4))
    pods_per_free = np.arange(9, dtype=np.int64) // per_pod
    held, room = allowed_room(
        nodes,
        owners,
        allowed,
        sizes,
        fleet["free"],
        fleet["gpu_count"],
        fleet["closed"],
        fleet["gpu_model"],
        model_allowed,
        pods_per_free,
        granule,
    )
    assert (held == allowed[owners]).all()
    usable = (fleet["closed"][nodes] == 0) & model_allowed[fleet["gpu_model"][nodes]]
    gpus = np.minimum(fleet["free"][nodes] + held.sum(axis=1), fleet["gpu_count"][nodes])
    per_node = gpus * usable // per_pod
    offsets = np.cumsum(sizes) - sizes
    expected_room = np.add.reduceat(per_node, offsets) // granule * granule
    assert room.tolist() == expected_room.tolist()


def test_domain_sums_add_each_domain_s_run_and_give_empty_domains_zero() -> None:
    values = np.array([1, 2, 3, 4, 5], dtype=np.int64)
    bounds = np.array([0, 2, 2, 5], dtype=np.int64)  # domain 1 holds nothing
    assert domain_sums(values, bounds).tolist() == [3, 0, 12]
    assert domain_sums(values, np.array([0, 2, 5])).tolist() == [3, 12]
    assert domain_sums(values, np.array([0, 1, 2, 3, 4, 5])).tolist() == [1, 2, 3, 4, 5]
    assert domain_sums(np.zeros(0, dtype=np.int64), np.zeros(3, dtype=np.int64)).tolist() == [
        0,
        0,
    ]


def cheapest_by_bincount(
    domain_of_leaf: np.ndarray,
    pods: int,
    now_room: np.ndarray,
    gain: np.ndarray,
    helpful: np.ndarray,
    ratio: np.ndarray,
) -> tuple[np.ndarray, int] | Nowhere | None:
    """The same choice counted with a map of each innermost domain's domain (the oracle)."""
    n_domains = int(domain_of_leaf.max()) + 1
    room_now = np.bincount(domain_of_leaf, weights=now_room, minlength=n_domains)
    shortfall = pods - room_now.astype(np.int64)
    if (shortfall <= 0).any():
        return None
    room_most = room_now + np.bincount(
        domain_of_leaf[helpful], weights=gain[helpful], minlength=n_domains
    )
    if (room_most < pods).all():
        return Nowhere(int(room_most.max()))
    best_cost, best = np.inf, None
    for domain in range(n_domains):
        mine = np.flatnonzero(domain_of_leaf[helpful] == domain)
        order = mine[np.argsort(ratio[mine], kind="stable")]
        reach = np.cumsum(gain[helpful[order]])
        if not reach.size or reach[-1] < shortfall[domain]:
            continue
        count = int(np.searchsorted(reach, shortfall[domain])) + 1
        cost = float(np.sum(ratio[order[:count]] * gain[helpful[order[:count]]]))
        if cost < best_cost:
            best_cost, best = cost, (helpful[order], int(shortfall[domain]))
    assert best is not None
    return best


@pytest.mark.parametrize("seed", range(40))
def test_cheapest_required_domain_matches_the_per_domain_count(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_domains = int(rng.integers(1, 5))
    sizes = rng.integers(1, 8, n_domains)
    domain_of_leaf = np.repeat(np.arange(n_domains), sizes).astype(np.int64)
    bounds = np.searchsorted(domain_of_leaf, np.arange(n_domains + 1)).astype(np.int64)
    now_room = rng.integers(0, 4, domain_of_leaf.size).astype(np.int64) * 2
    gain = (rng.integers(-2, 6, domain_of_leaf.size) * 2).astype(np.int64)
    helpful = np.flatnonzero(gain > 0)
    # Ties in cost per pod keep the domains' order.
    ratio = rng.integers(1, 4, helpful.size).astype(np.float64)
    pods = int(rng.integers(1, 30))
    got = cheapest_required_domain(bounds, pods, now_room, gain, helpful, ratio)
    expected = cheapest_by_bincount(domain_of_leaf, pods, now_room, gain, helpful, ratio)
    if expected is None or isinstance(expected, Nowhere):
        assert got == expected
    else:
        assert isinstance(got, tuple)
        assert got[0].tolist() == expected[0].tolist()
        assert got[1] == expected[1]


@pytest.mark.parametrize("seed", range(20))
def test_room_gained_matches_the_count_over_every_node(seed: int) -> None:
    rng = np.random.default_rng(seed)
    fleet = random_fleet(rng, 30, 10)
    n_nodes = int(fleet["starts"][-1])
    leaf_of_node = np.repeat(np.arange(30), np.diff(fleet["starts"])).astype(np.int64)
    pod_nodes = rng.integers(0, n_nodes, int(rng.integers(0, 60))).astype(np.int64)
    freed = rng.integers(0, 5, pod_nodes.size).astype(np.int64)
    per_gpu, per_pod = (1, int(rng.integers(1, 5))) if seed % 2 else (int(rng.integers(1, 5)), 1)
    extra = np.zeros(n_nodes, dtype=np.int64)
    gained = room_gained(
        pod_nodes,
        freed,
        fleet["free"],
        fleet["gpu_count"],
        fleet["closed"],
        leaf_of_node,
        30,
        per_gpu,
        per_pod,
        extra,
    )
    assert not extra.any()  # left as found
    free = fleet["free"].astype(np.int64)
    after = np.minimum(
        free + np.bincount(pod_nodes, freed, n_nodes).astype(np.int64), fleet["gpu_count"]
    )
    more = (after * per_gpu // per_pod - free * per_gpu // per_pod) * (fleet["closed"] == 0)
    assert gained.tolist() == np.bincount(leaf_of_node, more, 30).astype(np.int64).tolist()
