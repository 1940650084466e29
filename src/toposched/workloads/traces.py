"""Where the public traces are: the traces folder, its ITP cluster files and openb pod lists.

Kept apart from the trace readers (`toposched.workloads.openb`, `toposched.workloads.replay`,
which load numpy) so that the command line finds a missing folder or trace file before they
load.
"""

from __future__ import annotations

import os
from pathlib import Path

from toposched.cluster.errors import InputError

__all__ = [
    "ITP_CLUSTER_NODES",
    "NODE_LIST",
    "POD_LIST_PREFIX",
    "TRACES_ENV",
    "available_traces",
    "check_openb_traces_dir",
    "default_traces_dir",
    "openb_traces_dir",
    "itp_trace_path",
    "pod_list_path",
]

TRACES_ENV = "TOPOSCHED_TRACES"
"""Environment variable naming the traces folder (default: ../shared/traces from the repo)."""
POD_LIST_PREFIX = "openb_pod_list_"
NODE_LIST = "openb_node_list_gpu_node.csv"

ITP_CLUSTER_NODES: dict[int, int] = {
    1: 16,
    2: 32,
    3: 64,
    4: 96,
    5: 9,
    6: 48,
    7: 48,
    8: 15,
    9: 7,
    10: 4,
}
"""8-GPU nodes per ITP cluster: the smallest count (one node at a time up to 16, then whole
16-node units) on which every job of the trace starts within 24 hours of its submission under
toposched, so peaks queue and the queue drains within a day; see docs/simulator.md."""


def default_traces_dir() -> Path:
    """The folder holding `itp/` and `openb/`: $TOPOSCHED_TRACES (that folder, or its `openb/`
    subfolder as the packing evaluation accepts), else ../shared/traces next to the project."""
    configured = os.environ.get(TRACES_ENV)
    if configured:
        folder = Path(configured)
        return folder.parent if (folder / NODE_LIST).is_file() else folder
    project = Path(__file__).resolve().parents[3]
    if not (project / "pyproject.toml").is_file():
        project = Path.cwd()
    return project.parent / "shared" / "traces"


def openb_traces_dir(path: str | Path | None = None) -> Path:
    """The openb traces folder `path` names: that folder, or its parent holding `openb/`;
    without `path`, $TOPOSCHED_TRACES read likewise, else ../shared/traces/openb next to the
    project (or the working folder)."""
    if path is None:
        configured = os.environ.get(TRACES_ENV)
        if not configured:
            return default_traces_dir() / "openb"
        path = configured
    folder = Path(path)
    if not (folder / NODE_LIST).is_file() and (folder / "openb" / NODE_LIST).is_file():
        return folder / "openb"
    return folder


def check_openb_traces_dir(folder: Path) -> None:
    """Refuse an openb traces folder that is missing or lacks the openb node list."""
    if not folder.is_dir():
        raise InputError(
            "traces folder",
            str(folder),
            f"not found; pass --traces-dir PATH or set {TRACES_ENV} to the openb traces folder",
        )
    if not (folder / NODE_LIST).is_file():
        raise InputError("traces folder", folder, f"has no {NODE_LIST} (the openb cluster)")


def itp_trace_path(traces_dir: str | Path, cluster: int) -> Path:
    """The trace file of ITP cluster `cluster` (1-10) in a traces folder, refused when it is
    not there."""
    if cluster not in ITP_CLUSTER_NODES:
        raise InputError("cluster", cluster, f"must be one of {sorted(ITP_CLUSTER_NODES)}")
    path = Path(traces_dir) / "itp" / f"cluster{cluster:02d}.csv"
    if not path.is_file():
        raise InputError("ITP trace", path, "file not found")
    return path


def pod_list_path(traces_dir: str | Path, trace: str) -> Path:
    """The pod list file of `trace` (e.g. `default`) in an openb traces folder."""
    folder = Path(traces_dir)
    path = folder / f"{POD_LIST_PREFIX}{trace}.csv"
    if not path.is_file():
        known = ", ".join(available_traces(folder)) or "none"
        raise InputError("trace", trace, f"no {path.name} in {folder}; available: {known}")
    return path


def available_traces(traces_dir: str | Path) -> list[str]:
    """Names of the pod lists in an openb traces folder, sorted."""
    folder = Path(traces_dir)
    if not folder.is_dir():
        return []
    return sorted(p.stem[len(POD_LIST_PREFIX) :] for p in folder.glob(f"{POD_LIST_PREFIX}*.csv"))
