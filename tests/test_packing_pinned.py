"""The packing evaluation's figures pinned exactly for fixed seeds on a small openb trace: every
tenth GPU node of the openb cluster (626 GPUs) and every tenth task of the default trace (816
tasks). A change in the protocol (arrival sequence, checkpoints, the allocated share) or in a
policy's choices moves these numbers; a bound would let a wrong ratio through."""

from __future__ import annotations

from pathlib import Path

import pytest

from toposched.cluster.loaders import load_openb_nodes
from toposched.evaluation.packing import run_packing
from toposched.workloads.openb import NODE_LIST, load_openb_pods
from toposched.workloads.replay import default_traces_dir

OPENB = default_traces_dir() / "openb"
GPU_NODES = OPENB / "openb_node_list_gpu_node.csv"
DEFAULT_PODS = OPENB / "openb_pod_list_default.csv"
needs_traces = pytest.mark.skipif(
    not (GPU_NODES.is_file() and DEFAULT_PODS.is_file()),
    reason=f"the openb traces are not at {OPENB} (outside the repository; $TOPOSCHED_TRACES "
    "names their folder)",
)

# (policy, seed): tasks arrived, tasks placed, allocated GPU share at 90 / 100 / 130% arrived.
PINNED = {
    ("random", 42): (1071, 809, (85.07827476038337, 86.49420926517573, 87.98722044728434)),
    ("random", 43): (1047, 777, (84.13806481058876, 85.12939297124602, 85.72044728434504)),
    ("bestfit", 42): (1071, 799, (89.97364217252397, 90.81629392971246, 91.02076677316295)),
    ("bestfit", 43): (1047, 774, (89.65244180739388, 89.7076677316294, 89.86741214057508)),
    ("fgd", 42): (1071, 815, (89.97364217252397, 92.60543130990415, 92.89776357827476)),
    ("fgd", 43): (1047, 808, (89.90871748060248, 94.04472843450479, 94.20447284345047)),
    ("fgd-balanced", 42): (1071, 835, (89.97364217252397, 94.93610223642173, 95.4408945686901)),
    ("fgd-balanced", 43): (1047, 820, (89.90871748060248, 95.45047923322683, 95.45047923322684)),
}
ARRIVED = {42: 129.91054313099042, 43: 129.96166134185304}


@pytest.fixture(scope="module")
def small_openb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("openb-small")
    nodes = GPU_NODES.read_text().splitlines()
    (folder / NODE_LIST).write_text("\n".join([nodes[0], *nodes[1::10]]) + "\n")
    pods = DEFAULT_PODS.read_text().splitlines()
    (folder / "openb_pod_list_small.csv").write_text("\n".join([pods[0], *pods[1::10]]) + "\n")
    return folder


@needs_traces
@pytest.mark.parametrize(("policy", "seed"), sorted(PINNED))
def test_packing_figures_are_pinned(small_openb: Path, policy: str, seed: int) -> None:
    topology = load_openb_nodes(small_openb / NODE_LIST)
    trace = load_openb_pods(small_openb / "openb_pod_list_small.csv")
    assert (topology.n_gpus, len(trace)) == (626, 816)
    result = run_packing(topology, trace, policy, seed=seed)
    tasks, placed, allocation = PINNED[(policy, seed)]
    assert (result.tasks, result.placed) == (tasks, placed)
    assert result.arrived_pct == pytest.approx(ARRIVED[seed], abs=1e-9)
    assert result.allocation_pct == pytest.approx(allocation, abs=1e-9)
