"""Jobs this cluster can never run, told at submit from sums over the topology.

The sums are taken once when the service starts (GPUs per model for the cluster, the largest
node, and every domain); a check reads them in O(levels x models), never looping over nodes.
Health is ignored on purpose: a job that fits once the cluster is repaired is not refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.errors import InputError, join_fields
from toposched.cluster.topology import Topology
from toposched.jobs.spec import JobSpec
from toposched.placement.job_sets import least_spec
from toposched.placement.request import GangRequest
from toposched.policy.budget import BudgetTree
from toposched.service.errors import NeverFits


@dataclass(frozen=True)
class ClusterLimits:
    """What the largest parts of the cluster hold, by GPU model."""

    topology: Topology
    node_gpus: NDArray[np.int64]
    """Per model: GPUs of the largest node."""
    domain_gpus: list[NDArray[np.int64]]
    """Per level (0 = the cluster): per domain and model, the GPUs it holds."""
    max_cpu_milli: int
    max_memory_mib: int
    _largest: dict[tuple[int, tuple[int, ...] | None], int] = field(
        default_factory=dict, compare=False, repr=False
    )
    """Per (level, models): the GPUs of the level's largest domain (level -1: of the largest
    node), summed at the first check that asks (13,890 racks on the million-GPU fleet), so
    that a check costs dictionary look-ups."""
    _fitting: dict[tuple[int, ...], tuple[object, ...]] = field(
        default_factory=dict, compare=False, repr=False
    )
    """Shapes seen to fit: by the identities of a spec's resources, topology and pod sets
    (which `JobSpec.renamed` copies of one spec share) and its pods, those parts themselves,
    held so that their identities stay theirs."""

    @staticmethod
    def of(topology: Topology) -> ClusterLimits:
        n_models = max(len(topology.gpu_models), 1)
        gpus = topology.gpu_count.astype(np.int64)
        models = topology.gpu_model.astype(np.int64)
        node_gpus = np.zeros(n_models, dtype=np.int64)
        np.maximum.at(node_gpus, models, gpus)
        per_model = np.zeros((topology.n_nodes, n_models), dtype=np.int64)
        per_model[np.arange(topology.n_nodes), models] = gpus
        domain_gpus = [
            np.add.reduceat(per_model, starts[:-1].astype(np.int64), axis=0)
            for starts in topology.domain_starts
        ]
        return ClusterLimits(
            topology,
            node_gpus,
            domain_gpus,
            int(topology.cpu_milli.max(initial=0)),
            int(topology.memory_mib.max(initial=0)),
        )

    def check(self, spec: JobSpec, tree: BudgetTree) -> None:
        """Raise NeverFits (or InputError for names this cluster does not know) if the job can
        never run here."""
        check_ranges(spec)
        _check_account(spec.account, tree)
        resources, topology, sets = spec.resources_per_pod, spec.topology, spec.pod_sets
        key = (spec.pods, id(resources), id(topology), id(sets))
        seen = self._fitting.get(key)
        if seen is not None and seen[0] is resources and seen[1] is topology and seen[2] is sets:
            return
        spec = least_spec(spec)  # elastic pod sets need their minimums to start
        if not spec.has_one_shape:
            self._check_sets(spec)
        else:
            self._check_one_shape(spec)
        if len(self._fitting) >= _SHAPES_KEPT:
            self._fitting.clear()
        self._fitting[key] = (resources, topology, sets)

    def _check_sets(self, spec: JobSpec) -> None:
        """A job whose pod sets ask different resources per pod: each set as a job of its
        own (errors name `pod_sets[i]`), then their whole GPUs together in one domain of the
        job's required level."""
        assert spec.pod_sets is not None
        wanted = 0
        for index, pod_set in enumerate(spec.pod_sets):
            one_set = spec.model_copy(
                update={
                    "pods": pod_set.pods,
                    "resources_per_pod": pod_set.resources_per_pod,
                    "topology": pod_set.topology,
                    "pod_sets": None,
                }
            )
            try:
                self._check_one_shape(one_set)
            except InputError as error:
                field = join_fields(f"pod_sets[{index}]", error.field)
                raise type(error)(field, error.value, error.rule) from None
            wanted += pod_set.total_gpus
        required = spec.topology.required
        level = 0 if required is None else self.topology.level_index(required, "topology.required")
        largest = self._largest_domain(level, None)
        if wanted > largest:
            where = "the cluster" if level == 0 else f"one {required}"
            raise NeverFits(
                "pod_sets",
                f"{wanted} GPUs",
                f"every set in {where}; the largest has {largest} GPUs",
            )

    def _check_one_shape(self, spec: JobSpec) -> None:
        try:
            request = GangRequest.from_spec(spec, self.topology)
        except InputError as error:
            if error.field == "resources_per_pod.gpu_models":
                raise NeverFits(error.field, error.value, error.rule) from None
            raise
        models = request.allowed_models
        self._check_pod(request, models)
        self._check_gang(spec, request, models)

    def _check_pod(self, request: GangRequest, models: NDArray[np.int64] | None) -> None:
        largest = self._largest_domain(-1, models)
        if request.gpus_per_pod > largest:
            raise NeverFits(
                "resources_per_pod.gpus",
                request.gpus_per_pod,
                f"no node has that many GPUs{self._of_models(request)}; the largest has {largest}",
            )
        if request.cpu_milli > self.max_cpu_milli:
            raise NeverFits(
                "resources_per_pod.cpu",
                request.cpu_milli / 1000,
                f"no node has that many cores; the largest has {self.max_cpu_milli / 1000:g}",
            )
        if request.memory_mib > self.max_memory_mib:
            raise NeverFits(
                "resources_per_pod.memory",
                f"{request.memory_mib} MiB",
                f"no node has that much memory; the largest has {self.max_memory_mib} MiB",
            )

    def _check_gang(
        self, spec: JobSpec, request: GangRequest, models: NDArray[np.int64] | None
    ) -> None:
        if request.is_fractional or request.gpus_per_pod == 0:
            return
        wanted = request.pods * request.gpus_per_pod
        total = self._largest_domain(0, models)
        if wanted > total:
            raise NeverFits(
                "pods",
                request.pods,
                f"{wanted} GPUs{self._of_models(request)} is more than the cluster has ({total})",
            )
        if request.on_one_node:
            largest = self._largest_domain(-1, models)
            if wanted > largest:
                raise NeverFits(
                    "topology.required",
                    "node",
                    f"{wanted} GPUs on one node; the largest node has {largest}",
                )
        elif request.required > 0:
            largest = self._largest_domain(request.required, models)
            level = self.topology.domain_levels[request.required]
            if wanted > largest:
                raise NeverFits(
                    "topology.required",
                    spec.topology.required,
                    f"{wanted} GPUs in one {level}; the largest {level} has {largest}",
                )

    def _largest_domain(self, level: int, models: NDArray[np.int64] | None) -> int:
        """GPUs of `models` (None: every model) in the level's largest domain (-1: node)."""
        key = (level, None if models is None else tuple(int(m) for m in models))
        largest = self._largest.get(key)
        if largest is None:
            chosen = np.arange(self.node_gpus.size) if models is None else models
            if level < 0:
                largest = int(self.node_gpus[chosen].max(initial=0))
            else:
                largest = int(self.domain_gpus[level][:, chosen].sum(axis=1).max(initial=0))
            self._largest[key] = largest
        return largest

    def _of_models(self, request: GangRequest) -> str:
        if request.allowed_models is None:
            return ""
        names = "|".join(self.topology.gpu_models[int(m)].name for m in request.allowed_models)
        return f" of model {names}"


MAX_PRIORITY = 1_000_000_000
_SHAPES_KEPT = 4096
MAX_SECONDS = 10 * 365 * 86400.0
"""Durations past ten years are taken for mistakes (and would overflow times downstream)."""


def check_ranges(spec: JobSpec) -> None:
    """InputError for numbers no real job has: priorities past a billion, durations past ten
    years."""
    if abs(spec.priority) > MAX_PRIORITY:
        raise InputError(
            "priority", spec.priority, f"must be from -{MAX_PRIORITY:,} to {MAX_PRIORITY:,}"
        )
    for name in ("min_runtime", "expected_runtime", "grace_period"):
        seconds = getattr(spec, name)
        if seconds is not None and not seconds <= MAX_SECONDS:
            raise InputError(name, seconds, "must be at most ten years (315360000 s)")


def _check_account(account: str, tree: BudgetTree) -> None:
    if account not in tree:
        leaves = ", ".join(tree.leaves()[:8])
        raise NeverFits("account", account, f"no such account; accounts are {leaves}")
    if not tree.is_leaf(account):
        raise NeverFits(
            "account", account, "is not a leaf of the budget tree; jobs charge to a team"
        )
