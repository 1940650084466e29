"""Compiled loops of a reservation search's count of releases: per domain of the gang's
required level, the first release after which its leaves could hold the gang; per release,
the first count of releases after which a domain it holds something in could; the rows of
many slots read from a pool."""

from __future__ import annotations

import numpy as np
from numba import njit

_NEVER = np.iinfo(np.int64).max


@njit(cache=True, nogil=True)
def count_releases(
    order: np.ndarray,
    start: int,
    stop: int,
    pair_start: np.ndarray,
    pair_count: np.ndarray,
    leaves: np.ndarray,
    gpus: np.ndarray,
    domain_of_leaf: np.ndarray,
    leaf_gpus: np.ndarray,
    domain_pods: np.ndarray,
    enough_at: np.ndarray,
    granule: int,
    gpus_per_pod: int,
    pods: int,
) -> None:
    """Release by release from `start` to `stop` in release order (`order`: the slots), pair
    by pair of its slot (`pair_start`, `pair_count` into `leaves` and `gpus`): add the GPU
    slots to the leaf's `leaf_gpus`; each leaf's room in whole slices of `granule` pods of
    `gpus_per_pod` GPUs moves its domain's `domain_pods`, and a domain reaching `pods` pods
    gets `enough_at` = that release + 1 unless it had a smaller count already. The room only
    grows, so a domain's first count reaching `pods` is its earliest."""
    slice_gpus = granule * gpus_per_pod
    for release in range(start, stop):
        slot = order[release]
        first = pair_start[slot]
        for pair in range(first, first + pair_count[slot]):
            leaf = leaves[pair]
            before = leaf_gpus[leaf]
            after = before + gpus[pair]
            leaf_gpus[leaf] = after
            added = (after // slice_gpus - before // slice_gpus) * granule
            if added == 0:
                continue
            domain = domain_of_leaf[leaf]
            domain_pods[domain] += added
            if domain_pods[domain] >= pods and enough_at[domain] > release + 1:
                enough_at[domain] = release + 1


@njit(cache=True, nogil=True)
def first_enough(
    order: np.ndarray,
    releases: np.ndarray,
    pair_start: np.ndarray,
    pair_count: np.ndarray,
    leaves: np.ndarray,
    domain_of_leaf: np.ndarray,
    enough_at: np.ndarray,
) -> np.ndarray:
    """For each of `releases` (positions in release order), the least `enough_at` of the
    domains it holds something in (the largest int64 if it holds nothing)."""
    result = np.empty(releases.size, dtype=np.int64)
    for index in range(releases.size):
        slot = order[releases[index]]
        least = _NEVER
        first = pair_start[slot]
        for pair in range(first, first + pair_count[slot]):
            reached = enough_at[domain_of_leaf[leaves[pair]]]
            if reached < least:
                least = reached
        result[index] = least
    return result


@njit(cache=True, nogil=True)
def leaves_held(
    leaf_of_pod: np.ndarray, pods: np.ndarray, width: np.ndarray, n_leaves: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of allocations whose pods' leaves are `leaf_of_pod`, allocation after allocation
    (`pods[a]` pods of `width[a]` GPUs each): how many distinct leaves each holds pods in, then
    those leaves, allocation after allocation in the order their pods first reach them, and the
    GPU slots held in each."""
    sizes = np.zeros(pods.size, dtype=np.int64)
    leaves = np.empty(leaf_of_pod.size, dtype=np.int64)
    slots = np.empty(leaf_of_pod.size, dtype=np.int64)
    entry_of_leaf = np.full(n_leaves, -1, dtype=np.int64)
    pod = 0
    entries = 0
    for allocation in range(pods.size):
        first = entries
        for _ in range(pods[allocation]):
            leaf = leaf_of_pod[pod]
            pod += 1
            entry = entry_of_leaf[leaf]
            if entry < first:
                entry = entries
                entry_of_leaf[leaf] = entry
                leaves[entry] = leaf
                slots[entry] = 0
                entries += 1
            slots[entry] += width[allocation]
        sizes[allocation] = entries - first
    return sizes, leaves[:entries], slots[:entries]


@njit(cache=True, nogil=True)
def gather_rows(
    slots: np.ndarray, start: np.ndarray, count: np.ndarray, pool: np.ndarray
) -> np.ndarray:
    """The rows of `slots` (each `count[slot]` entries of `pool` from `start[slot]` on), slot
    after slot, in one array: one copy per row, without the index arrays of a numpy gather."""
    total = 0
    for slot in slots:
        total += count[slot]
    gathered = np.empty(total, dtype=pool.dtype)
    at = 0
    for slot in slots:
        first = start[slot]
        size = count[slot]
        gathered[at : at + size] = pool[first : first + size]
        at += size
    return gathered
