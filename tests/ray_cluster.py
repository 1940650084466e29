"""The Ray cluster the Ray backend's tests run on: three nodes on this machine, started once
for the module of those tests (about 20 s on two cores) and stopped after it, so that no Ray
process outlives them to print into the output of the tests that follow.

Nodes n1 (the head) and n2 are in rack r1, n3 in rack r2; each has 4 pretend GPUs. Tests
that remove a node add one of their own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from toposched.backends.ray_local import LocalRayCluster

RACKS = {"n1": "r1", "n2": "r1", "n3": "r2"}


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[LocalRayCluster]:
    """The running cluster, with this process connected to it as a Ray driver."""
    ray = pytest.importorskip("ray")
    from toposched.backends.ray_discovery import connect

    cluster = LocalRayCluster()
    try:
        for name, rack in RACKS.items():
            cluster.add_node(name, {"rack": rack})
        connect(cluster.address)
        yield cluster
    finally:
        ray.shutdown()
        cluster.stop()
