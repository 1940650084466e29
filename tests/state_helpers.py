"""Checks shared by the cluster-state tests: every incremental aggregate against the state
recomputed from its node arrays."""

from __future__ import annotations

import numpy as np

from toposched.cluster.allocation import MILLI_PER_GPU
from toposched.cluster.state import ClusterState


def assert_aggregates_recomputed(state: ClusterState) -> None:
    """Per node, free whole GPUs as counted from each GPU's free share; then every aggregate
    at every level, as `ClusterState.compute_aggregates` counts them."""
    whole = (state.gpu_free_milli == MILLI_PER_GPU).sum(axis=1)
    assert np.array_equal(state.free_whole_gpus, whole), "free_whole_gpus"
    fresh = state.compute_aggregates()
    for name, ours in (
        ("free_hist", state.free_hist),
        ("free_gpus", state.free_gpus),
        ("free_milli", state.free_milli),
        ("idle_nodes", state.idle_nodes),
        ("cpu", state.domain_free_cpu),
        ("memory", state.domain_free_memory),
    ):
        for level, (array, expected) in enumerate(zip(ours, fresh[name], strict=True)):
            assert np.array_equal(array, expected), (name, level)
