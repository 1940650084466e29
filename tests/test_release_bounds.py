"""Release bounds per domain, and the releases a search after k of them needs, against a
brute-force count on random holdings."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st
from sortedcontainers import SortedList

from toposched.cluster.state import Allocation
from toposched.scheduler.release_order import ReleaseOrder
from toposched.scheduler.releases import NEVER, LeafRoom, ReleaseBounds

Holdings = dict[str, dict[int, int]]


@st.composite
def holdings(draw: st.DrawFn) -> tuple[Holdings, LeafRoom]:
    """Up to 400 running jobs (enough for several chunks) holding GPU slots in 1-3 of a few
    leaves (1-3 pods of 0-3 GPUs in each), grouped into domains, and a gang's room in them
    now."""
    n_leaves = draw(st.integers(1, 8))
    n_domains = draw(st.integers(1, n_leaves))
    jobs = draw(st.integers(1, 400))
    held: Holdings = {}
    for index in range(jobs):
        leaves = draw(st.lists(st.integers(0, n_leaves - 1), min_size=1, max_size=3, unique=True))
        width = draw(st.integers(0, 3))
        held[f"job-{index:03d}"] = {leaf: width * draw(st.integers(1, 3)) for leaf in leaves}
    granule = draw(st.integers(1, 3))
    room = LeafRoom(
        free=np.array(draw(st.lists(st.integers(0, 40), min_size=n_leaves, max_size=n_leaves))),
        domain_of_leaf=np.array([leaf * n_domains // n_leaves for leaf in range(n_leaves)]),
        n_domains=n_domains,
        gpus_per_pod=draw(st.integers(1, 4)),
        granule=granule,
        pods=granule * draw(st.integers(1, 150)),
    )
    return held, room


def bounds_of(held: Holdings, room: LeafRoom) -> ReleaseBounds:
    """The bounds over `held` released in job order: one node per leaf, each job's pods
    there holding the GPU slots drawn (in the strategy, a multiple of the job's width)."""
    releases = SortedList()
    n_leaves = room.free.size
    order = ReleaseOrder(releases, np.arange(n_leaves, dtype=np.int64), n_leaves)
    for index, owner in enumerate(sorted(held)):
        # Pods of one width holding each leaf's slots (their greatest common divisor); a
        # job of no GPUs holds a pod per leaf.
        width = math.gcd(*held[owner].values())
        pods_per_leaf = {
            leaf: (slots // width if width else 1) for leaf, slots in held[owner].items()
        }
        nodes = np.repeat(list(pods_per_leaf), list(pods_per_leaf.values())).astype(np.int64)
        allocation = Allocation(nodes, np.zeros((nodes.size, width), dtype=np.int64))
        key = (float(index), owner)
        releases.add(key)
        order.add(key, allocation)
    return ReleaseBounds(order, room)


def brute_enough_at(held: Holdings, room: LeafRoom) -> list[int | None]:
    """Per domain, the fewest releases after which its leaves' free GPUs plus the slots
    released there hold the gang's pods in whole slices."""
    slice_gpus = room.granule * room.gpus_per_pod
    answer: list[int | None] = []
    owners = sorted(held)
    for domain in range(room.n_domains):
        leaves = [leaf for leaf, d in enumerate(room.domain_of_leaf.tolist()) if d == domain]
        gpus = {leaf: int(room.free[leaf]) for leaf in leaves}
        reached: int | None = None
        for count in range(len(owners) + 1):
            if count:
                for leaf, slots in held[owners[count - 1]].items():
                    if leaf in gpus:
                        gpus[leaf] += slots
            pods = sum(g // slice_gpus * room.granule for g in gpus.values())
            if pods >= room.pods:
                reached = count
                break
        answer.append(reached)
    return answer


@settings(max_examples=200, deadline=None)
@given(holdings(), st.lists(st.integers(0, 420), min_size=1, max_size=6))
def test_a_search_after_k_releases_needs_exactly_the_jobs_holding_something_where_the_gang_may_fit(
    case: tuple[Holdings, LeafRoom], counts: list[int]
) -> None:
    held, room = case
    owners = sorted(held)
    bounds = bounds_of(held, room)
    enough_at = brute_enough_at(held, room)
    reachable = [at for at in enough_at if at is not None]
    assert bounds.fewest() == (max(min(reachable), 1) if reachable else None)
    for count in counts:
        count = min(count, len(owners))
        needed = bounds.released_for(count)
        # Every domain the search may fill in has gained all it can from the first `count`.
        open_domains = {d for d, at in enumerate(enough_at) if at is not None and at <= count}
        expected = [
            o
            for o in owners[:count]
            if open_domains & {int(room.domain_of_leaf[leaf]) for leaf in held[o]}
        ]
        assert sorted(bounds.owners(0, needed)) == expected
        event("some skipped" if len(expected) < count else "none skipped")
        # Known exactly as far as releases were read, and not beyond.
        for domain, at in enumerate(enough_at):
            reached = at is not None and at <= bounds.read
            assert bounds.enough_at[domain] == (at if reached else NEVER)


@given(holdings(), st.lists(st.integers(0, 420), min_size=2, max_size=6))
@settings(max_examples=100, deadline=None)
def test_what_more_releases_need_extends_what_fewer_need(
    case: tuple[Holdings, LeafRoom], counts: list[int]
) -> None:
    """The releases a search needs only grow with k, in one order: a released prefix for a
    larger k adds jobs on top of the one for a smaller k."""
    held, room = case
    bounds = bounds_of(held, room)
    previous: list[str] = []
    for count in sorted(min(c, len(held)) for c in counts):
        now = bounds.owners(0, bounds.released_for(count))
        assert now[: len(previous)] == previous
        previous = now


def test_without_anything_known_every_release_up_to_k_is_needed() -> None:
    releases = SortedList()
    order = ReleaseOrder(releases, np.zeros(1, dtype=np.int64), 1)
    for i in range(5):
        releases.add((float(i), f"job-{i}"))
        order.add((float(i), f"job-{i}"), Allocation(np.zeros(1, np.int64), np.zeros((1, 1))))
    bounds = ReleaseBounds(order, None)
    assert bounds.fewest() == 1
    assert bounds.owners(0, bounds.released_for(3)) == ["job-0", "job-1", "job-2"]
