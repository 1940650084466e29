"""Compiled loop of a reservation search's count of releases: per domain of the gang's
required level, the first release after which its leaves could hold the gang."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def count_releases(
    leaves: np.ndarray,
    gpus: np.ndarray,
    release: np.ndarray,
    domains: np.ndarray,
    leaf_gpus: np.ndarray,
    domain_pods: np.ndarray,
    enough_at: np.ndarray,
    granule: int,
    gpus_per_pod: int,
    pods: int,
) -> None:
    """Add, entry by entry in release order, `gpus` GPU slots to leaf `leaves[i]` (of domain
    `domains[i]`) released by release `release[i]`: `leaf_gpus` grows, each leaf's room in
    whole slices of `granule` pods of `gpus_per_pod` GPUs moves its domain's `domain_pods`, and
    a domain reaching `pods` pods gets `enough_at` = that release + 1 unless it had a smaller
    count already. The room only grows, so a domain's first count reaching `pods` is its
    earliest."""
    slice_gpus = granule * gpus_per_pod
    for entry in range(leaves.size):
        leaf = leaves[entry]
        before = leaf_gpus[leaf]
        after = before + gpus[entry]
        leaf_gpus[leaf] = after
        added = (after // slice_gpus - before // slice_gpus) * granule
        if added == 0:
            continue
        domain = domains[entry]
        domain_pods[domain] += added
        if domain_pods[domain] >= pods and enough_at[domain] > release[entry] + 1:
            enough_at[domain] = release[entry] + 1
