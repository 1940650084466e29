"""Roles that may start with fewer pods than they ask (elastic pod sets, `min_pods`): the most
pods that fit, every role at least its minimum, all within one shared domain (`place_roles`).

The rule across several elastic roles: greedy in the job's order. Every role is first placed
at its minimum (none fits: the job does not start); then all at their full count, the
common case, in one try; else the first elastic role takes the most whole steps (its outermost
slice, or one pod) that fit with the later roles at their minimums, then the next role with
the earlier ones at what they took, and so on. Each count is found by a binary search on
whole steps, each try one `place_roles`, so the cost is that of a few placements of the job
(about log2 of the steps between a role's minimum and its pods), with no loop over nodes.

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
    full = [role.pods for role in elastic.roles]
    if full == counts:
        return best
    whole = _try(state, elastic, full, policy)
    if not isinstance(whole, Unschedulable):
        return whole
    for index, role in enumerate(elastic.roles):
        step = step_of(role)
        low, high = counts[index] // step, _most_steps(state, role, step)
        while low < high:
            middle = (low + high + 1) // 2
            trial = [*counts[:index], middle * step, *counts[index + 1 :]]
            placed = _try(state, elastic, trial, policy)
            if isinstance(placed, Unschedulable):
                high = middle - 1
            else:
                low, best = middle, placed
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


def _most_steps(state: ClusterState, role: GangRequest, step: int) -> int:
    """Whole steps of `role` the free cluster could hold at most, up to its pods: room for
    its pods anywhere, whatever its topology (a bound from above, from aggregates)."""
    loose = replace(
        role,
        required=0,
        preferred=None,
        slices=(),
        on_one_node=False,
        node_slice=1,
        preferred_node=False,
        within=None,
    )
    room = CapacityView(state, loose, exact=False).total()
    return min(role.pods, room) // step
