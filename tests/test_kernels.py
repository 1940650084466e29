"""The compiled loops against plain-Python counts on random node arrays."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from toposched.cluster import kernels


@st.composite
def domains_of_nodes(draw: st.DrawFn) -> dict[str, np.ndarray | int]:
    sizes = draw(st.lists(st.integers(0, 6), min_size=1, max_size=6))
    n_nodes = sum(sizes)
    node = st.lists(st.integers(0, 8), min_size=n_nodes, max_size=n_nodes)
    gpu_count = np.array(draw(node), dtype=np.int8)
    free = np.array([draw(st.integers(0, int(c))) for c in gpu_count], dtype=np.int8)
    n_models = draw(st.integers(1, 3))
    return {
        "starts": np.concatenate(([0], np.cumsum(sizes))).astype(np.int64),
        "free": free,
        "extra": np.array(draw(node), dtype=np.int64),
        "gpu_count": gpu_count,
        "health": np.array(
            draw(st.lists(st.sampled_from([0, 0, 1, 2]), min_size=n_nodes, max_size=n_nodes)),
            dtype=np.uint8,
        ),
        "model": np.array(
            draw(st.lists(st.integers(0, n_models - 1), min_size=n_nodes, max_size=n_nodes)),
            dtype=np.int16,
        ),
        "allowed": np.array(
            draw(st.lists(st.booleans(), min_size=n_models, max_size=n_models)), dtype=np.bool_
        ),
        "gpus_per_pod": draw(st.integers(1, 8)),
    }


@settings(max_examples=200, deadline=None)
@given(case=domains_of_nodes(), data=st.data())
def test_pods_in_domains_counts_healthy_allowed_nodes_capped_at_their_gpus(
    case: dict[str, np.ndarray | int], data: st.DataObject
) -> None:
    starts = np.asarray(case["starts"])
    n_domains = starts.size - 1
    domains = np.array(
        data.draw(st.lists(st.integers(0, n_domains - 1), max_size=2 * n_domains)),
        dtype=np.int64,
    )
    per_pod = int(case["gpus_per_pod"])  # type: ignore[arg-type]
    free, extra = np.asarray(case["free"]), np.asarray(case["extra"])
    count, health = np.asarray(case["gpu_count"]), np.asarray(case["health"])
    model, allowed = np.asarray(case["model"]), np.asarray(case["allowed"])
    expected = [
        sum(
            min(int(free[node]) + int(extra[node]), int(count[node])) // per_pod
            for node in range(int(starts[domain]), int(starts[domain + 1]))
            if health[node] == 0 and allowed[model[node]]
        )
        for domain in domains.tolist()
    ]
    pods = kernels.pods_in_domains(
        domains, starts, free, extra, count, health, model, allowed, per_pod
    )
    assert pods.tolist() == expected
