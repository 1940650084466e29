"""Roles that may start with fewer pods than they ask (elastic pod sets, `min_pods`): the most
pods that fit, every role at least its minimum, all within one shared domain (`place_roles`).

The rule across several elastic roles: greedy in the job's order. Every role is first placed
at its minimum (none fits: the job does not start). Then every role at the most it could
take (its pods, or less where aggregates show no shared domain holds that many of its whole
slices), the common case settled in one try. Else the first elastic role takes the most
whole steps (its outermost slice, or one pod) that fit with the later roles at their
minimums, then the next role with the earlier ones at what they took, and so on. For each
role the room beside the other roles' pods (where the last placement found put them) is
tried first, then one step more; only when those two tries do not settle it, a binary search
on whole steps. Every try is one `place_roles`, with no loop over nodes: the cost is a few
placements of the job (docs/placement.md, "Elastic sets", for figures at 1M GPUs).

The answer is always a placement found at its counts, so it keeps every role's rules and the
shared domain. The search assumes more pods fit no better than fewer, which `place_roles`
(greedy across roles) nearly always keeps; where it does not, a role may take fewer pods than
could fit, never an invalid placement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from toposched.cluster.errors import InputError
from toposched.cluster.state import ClusterState
from toposched.cluster.statement import Statement
from toposched.placement.capacity import CapacityView
from toposched.placement.policies import PlacementPolicy
from toposched.placement.request import GangRequest
from toposched.placement.roles import RolesPlacement, place_roles
from toposched.placement.search import Unschedulable

__all__ = ["ElasticRoles", "place_elastic_roles"]


@dataclass(frozen=True)
class ElasticRoles:
    """Roles (each at the most pods it asks) with the least pods each starts with, all held
    in one domain at `level`, preferably one at `preferred` (as `place_roles`)."""

    roles: tuple[GangRequest, ...]
    minimums: tuple[int, ...]
    level: int
    preferred: int | None

    def __post_init__(self) -> None:
        if len(self.minimums) != len(self.roles):
            raise InputError("minimums", list(self.minimums), "one minimum per role")
        for role, least in zip(self.roles, self.minimums, strict=True):
            if not 1 <= least <= role.pods or least % step_of(role):
                raise InputError(
                    f"{role.name}.min_pods",
                    least,
                    f"must be from 1 to {role.pods} and a multiple of {step_of(role)}",
                )

    def at(self, counts: Sequence[int]) -> tuple[GangRequest, ...]:
        """The roles with `counts[i]` pods each."""
        return tuple(
            role if role.pods == count else replace(role, pods=count)
            for role, count in zip(self.roles, counts, strict=True)
        )


def step_of(role: GangRequest) -> int:
    """Pods an elastic role grows by: its outermost slice (node slices included), else 1."""
    return role.granule(0)


def place_elastic_roles(
    state: ClusterState, elastic: ElasticRoles, policy: PlacementPolicy | None = None
) -> RolesPlacement | Unschedulable:
    """The most pods of each role that fit, greedily in the roles' order, every role at least
    its minimum; Unschedulable (of the roles at their minimums) when the minimums do not fit.
    The state is unchanged."""
    counts = list(elastic.minimums)
    best = _try(state, elastic, counts, policy)
    if isinstance(best, Unschedulable):
        return best
    # The most each role could take, from aggregates: whole slices free in one shared domain.
    bounds = [
        max(least, _most_pods(state, role, elastic.level))
        for role, least in zip(elastic.roles, elastic.minimums, strict=True)
    ]
    if bounds == counts:
        return best
    together = _try(state, elastic, bounds, policy)
    if not isinstance(together, Unschedulable):
        return together
    for index, role in enumerate(elastic.roles):
        step = step_of(role)
        low, high = counts[index] // step, bounds[index] // step
        if low == high:
            continue
        # First the room beside the other roles where they are, then one step more: under
        # the rule's assumption two tries settle the role; else a binary search.
        guess = min(high, max(low, _room_beside(state, best, index) // step))
        probes = [guess, guess + 1]
        while low < high:
            probe = probes.pop(0) if probes else (low + high + 1) // 2
            if not low < probe <= high:
                continue
            trial = [*counts[:index], probe * step, *counts[index + 1 :]]
            placed = _try(state, elastic, trial, policy)
            if isinstance(placed, Unschedulable):
                high = probe - 1
            else:
                low, best = probe, placed
        counts[index] = low * step
    return best


def _try(
    state: ClusterState,
    elastic: ElasticRoles,
    counts: Sequence[int],
    policy: PlacementPolicy | None,
) -> RolesPlacement | Unschedulable:
    return place_roles(
        state, elastic.at(counts), elastic.level, policy, preferred=elastic.preferred
    )


def _room_beside(state: ClusterState, placed: RolesPlacement, index: int) -> int:
    """Pods of role `index` the shared domain of `placed` holds with the other roles' pods
    where `placed` puts them (its own freed): a first guess at the role's count."""
    statement = Statement(state)
    try:
        for other, placement in enumerate(placed.placements):
            if other != index:
                # Found together on this state, unchanged since: they fit beside each other.
                statement.take(placement.allocation, fresh=True)
        role = placed.placements[index].request
        view = CapacityView(state, _loose(role), exact=False)
        return int(view.at(placed.level, placed.domain, placed.domain + 1)[0])
    finally:
        statement.discard()


def _most_pods(state: ClusterState, role: GangRequest, level: int) -> int:
    """Pods of `role` one free domain at `level` could hold at most, in whole steps, up to
    its pods: room for its slices in the roomiest (`_loose`; a bound from above)."""
    domains = state.topology.n_domains(level)
    room = int(CapacityView(state, _loose(role), exact=False).at(level, 0, domains).max())
    step = step_of(role)
    return min(role.pods, room) // step * step


def _loose(role: GangRequest) -> GangRequest:
    """`role` for counting room from aggregates: its pods and slices anywhere, whatever its
    required level or preference; a role on one node counts room on any node."""
    loose = replace(role, required=0, preferred=None, preferred_node=False, within=None)
    if role.on_one_node:
        loose = replace(loose, slices=(), on_one_node=False, node_slice=1)
    return loose
