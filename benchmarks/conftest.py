"""Shared fixtures of the benchmarks: one 1,000,080-GPU cluster state per session."""

from __future__ import annotations

import pytest

from toposched.cluster.builders import million_gpu_cluster
from toposched.cluster.state import ClusterState


@pytest.fixture(scope="session")
def million_state() -> ClusterState:
    """The reference GB300 fleet with nothing allocated (benchmarks must leave it so)."""
    return ClusterState(million_gpu_cluster())
