"""Ray discovery on Ray's node records, without a Ray cluster: nodes joining the model, and
the ones kept out of it with the reason, each reported once."""

from __future__ import annotations

from typing import Any

import pytest

from toposched.backends.ray_discovery import RayCluster


def record(node_id: str, alive: bool = True, **labels: str) -> dict[str, Any]:
    """A node as `ray.nodes()` lists it: 4 GPUs, 8 CPUs, 64 GiB."""
    return {
        "NodeID": node_id * 56,
        "Alive": alive,
        "NodeManagerAddress": "127.0.0.2",
        "Resources": {"GPU": 4.0, "CPU": 8.0, "memory": float(64 << 30)},
        "Labels": labels,
    }


def test_joining_nodes_grow_the_model_and_the_others_are_reported_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    records = [
        record("a", name="a", zone="z1", rack="r1"),
        record("b", name="b", zone="z2", rack="r2"),
    ]
    cluster = RayCluster(["zone", "rack"], min_interval_s=0.0, read_nodes=lambda: records)
    cluster.discover()
    records += [
        record("c", name="c", zone="z1", rack="r1"),
        record("d", name="d", zone="z1", rack="r2"),  # r2 is in z2
        record("e", name="twin", zone="z1", rack="r3"),
        record("f", name="twin", zone="z1", rack="r3"),
        record("g", name="g", zone="z2", rack="r2"),
    ]
    assert cluster.changes() == []
    grown = cluster.grown()
    assert grown is not None
    assert list(grown.node_names) == ["a", "c", "b", "g"]
    assert [grown.node_path(i)["zone"] for i in range(4)] == ["z1", "z1", "z2", "z2"]
    assert cluster.node("d") is None and cluster.node("twin") is None
    assert cluster.changes() == [] and cluster.grown() is None
    left_out = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert left_out == [
        "Ray node twin is left out: another live node has the same name",
        "Ray node d is left out: cannot join the model: domain names must be unique within a "
        "level (found under z2 and z1)",
    ]
    # Started again with the right labels (a new node id), a node is taken in.
    records.append(record("h", name="d", zone="z1", rack="r1"))
    assert cluster.changes() == []
    grown = cluster.grown()
    assert grown is not None and list(grown.node_names) == ["a", "c", "d", "b", "g"]
