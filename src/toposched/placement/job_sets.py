"""A job of several pod sets resolved against one cluster, and its placement: every set or
none, all within one domain of the job's required level (`place_roles`).

Ranks: the job's pods are numbered set after set, in the order the job lists its sets, and
within a set in its placement's order (consecutive ranks share a node, then a rack, ...), so
each set's ranks are contiguous.

A set with `min_pods` is elastic: the job starts with at least that many of its pods and takes
as many as fit up to its `pods` (`placement.elastic_roles`: greedy in the job's order, whole
outermost slices). What sees the job as one gang (preemption, reservations) sees it at its
minimums; once placed, the job holds the counts it got (`JobSets.at`, `JobSets.counts_in`).
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
from toposched.placement.elastic_roles import ElasticRoles, place_elastic_roles
from toposched.placement.policies import PlacementPolicy
from toposched.placement.request import GangRequest
from toposched.placement.roles import RolesPlacement, place_roles
from toposched.placement.search import Placement, Unschedulable

__all__ = [
    "JobSets",
    "JobSetsPlacement",
    "check_sets_against_cluster",
    "least_spec",
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
    minimums: tuple[int, ...] = ()
    """Each set's least pods (`min_pods`), in the roles' order; empty when every set starts
    with all of its pods."""

    @property
    def elastic(self) -> bool:
        """Whether some set may start with fewer pods than it asks."""
        return any(
            least < role.pods for role, least in zip(self.roles, self.minimums, strict=False)
        )

    def at(self, counts: Sequence[int]) -> JobSets:
        """These sets with `counts[i]` pods each, none elastic: the sets as placed."""
        if len(counts) != len(self.roles):
            raise InputError("pod_sets", list(counts), f"one count per set ({len(self.roles)})")
        roles = tuple(
            role if role.pods == count else replace(role, pods=count)
            for role, count in zip(self.roles, counts, strict=True)
        )
        return JobSets(self.job, roles, self.level, self.preferred)

    def least(self) -> JobSets:
        """The sets at their minimums (these sets when none is elastic)."""
        return self.at(self.minimums) if self.elastic else self

    def counts_in(self, allocation: Allocation) -> tuple[int, ...]:
        """Each set's pods in `allocation`, one of this job's: the parts of an elastic job's
        allocation (`JobSetsPlacement.joined` keeps them apart), each within the set's
        minimum and pods, or the minimums for the job placed as one gang; a job of fixed sets
        holds every pod."""
        if not self.elastic:
            return tuple(role.pods for role in self.roles)
        parts = allocation.parts
        if len(parts) == 1 < len(self.roles):
            # Placed as one gang (`gang`: the sets at their minimums), as the simulator's
            # baselines place a job of several sets.
            return self.minimums
        counts = tuple(part.pods for part in parts)
        fits = len(parts) == len(self.roles) and all(
            least <= count <= role.pods
            for role, least, count in zip(self.roles, self.minimums, counts, strict=True)
        )
        if not fits:
            raise InputError(
                "allocation",
                f"sets of {', '.join(map(str, counts))} pods",
                f"job {self.job} has {len(self.roles)} pod sets of "
                + ", ".join(
                    f"{least}-{role.pods}"
                    for role, least in zip(self.roles, self.minimums, strict=True)
                )
                + " pods",
            )
        return counts

    @property
    def pods(self) -> int:
        """Pods of every set together, at their minimums for elastic sets."""
        return sum(role.pods for role in self.least().roles)

    @property
    def gpus(self) -> float:
        """GPUs every set holds together (shared pods count their fraction), at their
        minimums for elastic sets: a job's sets as placed (`at`) count what they got."""
        roles = self.least().roles
        return sum(role.pods * role.gpus_per_pod * role.gpu_milli for role in roles) / 1000

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
        (`toposched.scheduler.placing.sets_after`). Sets of shared GPUs, or without GPUs at
        all, make a gang of the job's pods each asking the most any set asks, which holds
        every set. Elastic sets count their minimums: the room the job asks for to start."""
        if self.elastic:
            return self.least().gang(request)
        if self.one_shape:
            return request if request.pods == self.pods else replace(request, pods=self.pods)
        roles = self.roles
        most = max(roles, key=lambda role: role.gpus_per_pod * role.gpu_milli)
        whole = [role.gpus_per_pod for role in roles if role.gpus_per_pod]
        if not whole or any(role.is_fractional for role in roles if role.gpus_per_pod):
            return replace(
                request,
                pods=self.pods,
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
            self.minimums if self.elastic else (),
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
        minimums = tuple(pod_set.least_pods for pod_set in spec.pod_sets)
        elastic = any(pod_set.min_pods is not None for pod_set in spec.pod_sets)
        return JobSets(spec.name, tuple(roles), level, inner, minimums if elastic else ())


def least_spec(spec: JobSpec) -> JobSpec:
    """`spec` with each elastic set at its `min_pods` (and not elastic): what the job needs
    to start, for checks of whether it can ever run (`spec` itself when no set is elastic)."""
    if spec.pod_sets is None or all(s.min_pods is None for s in spec.pod_sets):
        return spec
    sets = tuple(
        s.model_copy(update={"pods": s.least_pods, "min_pods": None}) for s in spec.pod_sets
    )
    return spec.model_copy(update={"pod_sets": sets, "pods": sum(s.pods for s in sets)})


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
    """Where every set of a job runs: `placements[i]` for `sets.roles[i]` (an elastic set's
    with the pods it got, `counts[i]`)."""

    sets: JobSets
    roles: RolesPlacement

    @property
    def placements(self) -> tuple[Placement, ...]:
        return self.roles.placements

    @property
    def counts(self) -> tuple[int, ...]:
        """Each set's pods placed, in the job's order."""
        return tuple(placement.allocation.pods for placement in self.placements)

    @property
    def placed_sets(self) -> JobSets:
        """The job's sets at the pods each got (the sets as asked when none is elastic)."""
        return self.sets.at(self.counts) if self.sets.elastic else self.sets

    def joined(self) -> Allocation:
        """Every set's pods in one allocation, set after set (the job's ranks): of one shape
        when the sets share it, else holding each set's pods (`Allocation.of_sets`). An
        elastic job's keeps each set's pods apart whatever their shapes, so its counts
        survive a restart (`JobSets.counts_in`)."""
        parts = [placement.allocation for placement in self.placements]
        return Allocation.of_sets(parts, keep_sets=self.sets.elastic)


def place_job_sets(
    state: ClusterState, sets: JobSets, policy: PlacementPolicy | None = None
) -> JobSetsPlacement | Unschedulable:
    """Place every set of the job, or none: `place_roles` at the job's required level,
    preferring one domain of its preferred level; elastic sets take the most pods that fit
    (`place_elastic_roles`). The state is unchanged."""
    if sets.elastic:
        elastic = ElasticRoles(sets.roles, sets.minimums, sets.level, sets.preferred)
        placed = place_elastic_roles(state, elastic, policy)
    else:
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
