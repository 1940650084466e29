"""A job of several pod sets resolved against one cluster, and its placement: every set or
none, all within one domain of the job's required level (`place_roles`).

Ranks: the job's pods are numbered set after set, in the order the job lists its sets, and
within a set in its placement's order (consecutive ranks share a node, then a rack, ...), so
each set's ranks are contiguous.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from toposched.cluster.errors import InputError, join_fields
from toposched.cluster.state import MILLI_PER_GPU, Allocation, ClusterState
from toposched.cluster.topology import Topology
from toposched.cluster.units import NODE_LEVEL
from toposched.jobs.spec import JobSpec
from toposched.placement.policies import PlacementPolicy
from toposched.placement.request import GangRequest
from toposched.placement.roles import RolesPlacement, place_roles
from toposched.placement.search import Placement, Unschedulable

__all__ = [
    "JobSets",
    "JobSetsPlacement",
    "check_sets_against_cluster",
    "place_job_sets",
    "set_ranks",
]


@dataclass(frozen=True)
class JobSets:
    """A job's pod sets as placement requests (`roles[i]` for the job's `pod_sets[i]`, named
    by the set), held together within one domain at `level` (0: anywhere), preferably one at
    `preferred`."""

    job: str
    roles: tuple[GangRequest, ...]
    level: int
    preferred: int | None

    @property
    def pods(self) -> int:
        return sum(role.pods for role in self.roles)

    @property
    def gpus(self) -> float:
        """GPUs every set holds together (shared pods count their fraction)."""
        return sum(role.pods * role.gpus_per_pod * role.gpu_milli for role in self.roles) / 1000

    @property
    def one_shape(self) -> bool:
        """Whether every set asks the same resources per pod."""
        first = _pod_shape(self.roles[0])
        return all(_pod_shape(role) == first for role in self.roles[1:])

    def gang(self, request: GangRequest) -> GangRequest:
        """The job as one gang, for what sees a job as one (preemption's victim search,
        reservations): `request` (the job's pods within its topology) unchanged when
        the sets share one shape. Else the job's whole GPUs in pods of the largest count that
        divides every set's GPUs per pod (8- and 4-GPU pods: 4-GPU pods), its CPU and memory
        spread over them, on the GPU models of the set asking the most; room for it is room
        for the job's GPUs, and every set is checked to fit there before the job is given it
        (`Placing.sets_after`). Sets of shared GPUs, or without GPUs at all, make a gang of
        the job's pods each asking the most any set asks, which holds every set."""
        if self.one_shape:
            return request
        roles = self.roles
        most = max(roles, key=lambda role: role.gpus_per_pod * role.gpu_milli)
        whole = [role.gpus_per_pod for role in roles if role.gpus_per_pod]
        if not whole or any(role.is_fractional for role in roles if role.gpus_per_pod):
            return replace(
                request,
                gpus_per_pod=most.gpus_per_pod,
                gpu_milli=most.gpu_milli,
                cpu_milli=max(role.cpu_milli for role in roles),
                memory_mib=max(role.memory_mib for role in roles),
                allowed_models=most.allowed_models,
            )
        unit = math.gcd(*whole)
        pods = sum(role.pods * role.gpus_per_pod for role in roles) // unit
        return replace(
            request,
            pods=pods,
            gpus_per_pod=unit,
            gpu_milli=MILLI_PER_GPU,
            cpu_milli=-(-sum(role.pods * role.cpu_milli for role in roles) // pods),
            memory_mib=-(-sum(role.pods * role.memory_mib for role in roles) // pods),
            allowed_models=most.allowed_models,
        )

    @property
    def shape(self) -> tuple[object, ...]:
        """What the job's placement depends on: each set's request but its name, and the
        levels holding them together."""
        return (
            tuple(_request_shape(role) for role in self.roles),
            self.level,
            self.preferred,
        )

    def own_topology(self) -> GangRequest | None:
        """The first set with topology of its own beyond the job's (a required level inner to
        the job's, a preference or slices), or None: then the job places as one gang of all
        its pods within the job's topology, when its sets share one pod shape (`one_shape`)."""
        for role in self.roles:
            if (
                role.required > self.level
                or role.preferred is not None
                or role.preferred_node
                or role.slices
                or role.on_one_node
                or role.node_slice != 1
            ):
                return role
        return None

    @staticmethod
    def from_spec(spec: JobSpec, topology: Topology) -> JobSets:
        """Resolve a job with `pod_sets` against `topology`; errors name the set's field
        (`pod_sets[1].topology.required`)."""
        check_sets_against_cluster(spec, topology.levels, [m.name for m in topology.gpu_models])
        assert spec.pod_sets is not None
        roles = []
        for index, pod_set in enumerate(spec.pod_sets):
            one_set = spec.model_copy(
                update={
                    "name": pod_set.name,
                    "pods": pod_set.pods,
                    "resources_per_pod": pod_set.resources_per_pod,
                    "topology": pod_set.topology,
                    "pod_sets": None,
                }
            )
            try:
                roles.append(GangRequest.from_spec(one_set, topology))
            except InputError as error:
                raise InputError(
                    join_fields(f"pod_sets[{index}]", error.field), error.value, error.rule
                ) from None
        required, preferred = spec.topology.required, spec.topology.preferred
        level = 0 if required is None else topology.level_index(required, "topology.required")
        inner = None if preferred is None else topology.level_index(preferred, "topology.preferred")
        return JobSets(spec.name, tuple(roles), level, inner)


def check_sets_against_cluster(
    spec: JobSpec, levels: Sequence[str], gpu_models: Sequence[str]
) -> None:
    """Refuse a job with `pod_sets` that names a level, or a set only GPU models, a cluster
    does not have, given its levels (outermost first) and GPU model catalogue: the errors
    `JobSets.from_spec` raises, each naming the set's field."""
    if spec.pod_sets is None:
        raise InputError("pod_sets", None, "the job lists no pod sets")
    spec.validate_topology(levels)
    for field in ("required", "preferred"):
        if getattr(spec.topology, field) == NODE_LEVEL:
            raise InputError(
                f"topology.{field}",
                NODE_LEVEL,
                "with pod_sets, the job's topology names a domain level (e.g. block, rack); "
                "to keep a set on one node give the set required: node",
            )
    for index, pod_set in enumerate(spec.pod_sets):
        resources = pod_set.resources_per_pod
        if resources.gpu_models is not None and resources.gpus > 0:
            if not any(name in gpu_models for name in resources.gpu_models):
                raise InputError(
                    f"pod_sets[{index}].resources_per_pod.gpu_models",
                    list(resources.gpu_models),
                    "no GPU of these models in this cluster; it has "
                    + ", ".join(name for name in gpu_models if name),
                )


def _pod_shape(request: GangRequest) -> tuple[object, ...]:
    """What one pod of a set asks for."""
    models = None if request.allowed_models is None else tuple(request.allowed_models.tolist())
    return (request.gpus_per_pod, request.gpu_milli, request.cpu_milli, request.memory_mib, models)


def _request_shape(request: GangRequest) -> tuple[object, ...]:
    models = None if request.allowed_models is None else tuple(request.allowed_models.tolist())
    return (
        request.pods,
        request.gpus_per_pod,
        request.gpu_milli,
        request.cpu_milli,
        request.memory_mib,
        models,
        request.required,
        request.preferred,
        request.slices,
        request.on_one_node,
        request.node_slice,
        request.preferred_node,
    )


@dataclass(frozen=True)
class JobSetsPlacement:
    """Where every set of a job runs: `placements[i]` for `sets.roles[i]`."""

    sets: JobSets
    roles: RolesPlacement

    @property
    def placements(self) -> tuple[Placement, ...]:
        return self.roles.placements

    def joined(self) -> Allocation:
        """Every set's pods in one allocation, set after set (the job's ranks): of one shape
        when the sets share it, else holding each set's pods (`Allocation.of_sets`)."""
        return Allocation.of_sets([placement.allocation for placement in self.placements])


def place_job_sets(
    state: ClusterState, sets: JobSets, policy: PlacementPolicy | None = None
) -> JobSetsPlacement | Unschedulable:
    """Place every set of the job, or none: `place_roles` at the job's required level,
    preferring one domain of its preferred level. The state is unchanged."""
    placed = place_roles(state, sets.roles, sets.level, policy, preferred=sets.preferred)
    if isinstance(placed, Unschedulable):
        return placed
    return JobSetsPlacement(sets, placed)


def set_ranks(sets: JobSets) -> list[tuple[str, int, int]]:
    """Each set's name and its ranks, first and last + 1, in the job's rank order."""
    ranges: list[tuple[str, int, int]] = []
    first = 0
    for role in sets.roles:
        ranges.append((role.name, first, first + role.pods))
        first += role.pods
    return ranges
