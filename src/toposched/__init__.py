"""toposched: a topology-aware GPU cluster scheduler.

The public API, importable from `toposched` itself (each name is loaded on first use, so that
`import toposched` stays cheap: numpy and the compiled loops load only with the names that need
them):

Inputs
    `JobSpec` (a validated job; `JobSpec.from_yaml`, `JobSpec.from_dict`), `load_jobs` (every
    job in a YAML/JSON file), `load_topology` (a cluster file: YAML/JSON or openb CSV),
    `InputError` (bad input: `field`, `value`, `rule`, and `file`, `line` when read from a file),
    `ToposchedError` (the base of every error toposched raises on purpose).
The cluster
    `Topology` (levels, domains, nodes), `million_gpu_cluster` (the 1,000,080-GPU GB300 fleet),
    `ClusterState` (free capacity as arrays), `Statement` (changes with checkpoint / rollback).
Placement and scheduling
    `place_job` (a gang's placement, or why not) and its `Placement` result; `BudgetTree`
    (budgets of accounts) and `Scheduler` (the cycle: order, place, preempt, defragment).

`__version__` is the version, the same as pyproject.toml's (a test checks that). Limits on
inputs are in `toposched.cluster.limits` and docs/limits.md.
"""

from __future__ import annotations

from importlib import import_module

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing, which is slow to import
if TYPE_CHECKING:
    from typing import Any

    from toposched.cluster.builders import million_gpu_cluster
    from toposched.cluster.errors import InputError, ToposchedError
    from toposched.cluster.loaders import load_topology
    from toposched.cluster.state import ClusterState
    from toposched.cluster.statement import Statement
    from toposched.cluster.topology import Topology
    from toposched.jobs.spec import JobSpec, load_jobs
    from toposched.placement.search import Placement, place_job
    from toposched.policy.budget import BudgetTree
    from toposched.scheduler.core import Scheduler

__all__ = [
    "BudgetTree",
    "ClusterState",
    "InputError",
    "JobSpec",
    "Placement",
    "Scheduler",
    "Statement",
    "ToposchedError",
    "Topology",
    "__version__",
    "load_jobs",
    "load_topology",
    "million_gpu_cluster",
    "place_job",
]

_HOMES = {
    "BudgetTree": "toposched.policy.budget",
    "ClusterState": "toposched.cluster.state",
    "InputError": "toposched.cluster.errors",
    "JobSpec": "toposched.jobs.spec",
    "Placement": "toposched.placement.search",
    "Scheduler": "toposched.scheduler.core",
    "Statement": "toposched.cluster.statement",
    "ToposchedError": "toposched.cluster.errors",
    "Topology": "toposched.cluster.topology",
    "load_jobs": "toposched.jobs.spec",
    "load_topology": "toposched.cluster.loaders",
    "million_gpu_cluster": "toposched.cluster.builders",
    "place_job": "toposched.placement.search",
}


__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'toposched' has no attribute {name!r}")
    value = getattr(import_module(_HOMES[name]), name)
    globals()[name] = value  # loaded once; later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
