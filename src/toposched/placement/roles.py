"""Jobs of several roles that share one domain: e.g. a launcher and its workers in one block.

Each role is a gang of identical pods with its own constraints (a `GangRequest`: required,
preferred and slices inside the shared domain); the job places every role or none, all within
one domain of the shared level. Roles are placed one after another on a what-if of the state
(a `Statement` rolled back before returning), each confined to the candidate domain by
`GangRequest.within`, so later roles see the room earlier ones took. Whole racks a role of
whole-node pods fills are not taken: the later roles' searches read them as full
(`placement.closed_leaves`).

A `preferred` level inner to the shared one keeps the roles together in one domain of that
level when one holds them all (any shared domain's, tried in the policy's order), and else
lets them spread over one shared domain, each role by its own preferences.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation, ClusterState
from toposched.cluster.statement import Statement
from toposched.placement.capacity import CapacityView, room_bound
from toposched.placement.closed_leaves import ClosedLeaves, closed_leaves_of
from toposched.placement.policies import BestFit, PlacementPolicy, fills_emptiest_first
from toposched.placement.request import GangRequest
from toposched.placement.search import (
    Placement,
    Unschedulable,
    UnschedulableCode,
    place,
    refuse_from_total,
)

__all__ = ["RolesPlacement", "place_roles"]


@dataclass(frozen=True)
class RolesPlacement:
    """Where every pod of every role runs: `placements[i]` for `roles[i]`, all within
    `domain` of the shared `level`."""

    placements: tuple[Placement, ...]
    level: int
    domain: int
    preferred_domain: int | None = None
    """The domain of the preferred level that holds every role, when one does."""


def place_roles(
    state: ClusterState,
    roles: Sequence[GangRequest],
    level: int,
    policy: PlacementPolicy | None = None,
    preferred: int | None = None,
) -> RolesPlacement | Unschedulable:
    """Place every role within one domain at `level` (0: anywhere), or say why none holds them;
    with `preferred` (a level inner to `level`), within one domain of it where one holds them.

    A role the whole cluster lacks room for is refused first, as `place` refuses it alone
    (`_short_of_room`). Candidate domains are those where each role fits on its own (from
    aggregates), in the policy's order for the roles' GPUs together; in each, the roles are
    placed largest first (by GPUs) on a what-if, and the first domain that holds them all is
    the answer. A role's own `required` level outer than `level` is implied by the shared
    domain and raised to it. The state is unchanged on return. Unschedulable names the role
    that did not fit (its request) with code `required` (or `capacity` or `slices` when a role
    does not fit the cluster at all).
    """
    if not roles:
        raise InputError("roles", [], "a job needs at least one role")
    policy = policy or BestFit()
    topology = state.topology
    order = sorted(range(len(roles)), key=lambda i: -roles[i].gpus_total)
    short = _short_of_room(state, roles, order, level, policy)
    if short is not None:
        return short
    candidates = _candidates(state, roles, level, 0, topology.n_domains(level), policy)
    if not candidates:
        return _explain(state, roles, order, level, policy)
    if (
        preferred is not None
        and preferred > level
        and _may_hold_each(state, roles, preferred, 0, topology.n_domains(preferred)).any()
    ):
        # One domain of the preferred level anywhere first, then any shared domain.
        for domain in candidates:
            together = _place_in_one_inner(state, roles, order, level, domain, preferred, policy)
            if together is not None:
                return together
    failure: Unschedulable | None = None
    for domain in candidates:
        placed = _place_in(state, roles, order, level, domain, policy)
        if isinstance(placed, RolesPlacement):
            return placed
        failure = failure or placed
    assert failure is not None
    return _with_shared_reason(failure, topology.domain_levels[level], level)


def _short_of_room(
    state: ClusterState,
    roles: Sequence[GangRequest],
    order: Sequence[int],
    level: int,
    policy: PlacementPolicy,
) -> Unschedulable | None:
    """The first role (in `order`) the whole cluster has too little room for, refused as
    `place` refuses it alone, before any search confined to a shared domain (which would
    count the domain's room, then the cluster's, to say the same); None when the cluster
    holds each role on its own. The cluster is counted only for a role whose bound from one
    aggregate (`room_bound`) falls short: a job that fits pays that bound alone."""
    for index in order:
        role = roles[index]
        if role.on_one_node or room_bound(state, role) >= role.pods:
            continue
        whole = replace(role, required=max(role.required, level), within=None)
        refusal = refuse_from_total(state, whole, policy)
        if refusal is not None:
            return _with_shared_reason(refusal, state.topology.domain_levels[level], level)
    return None


def _candidates(
    state: ClusterState,
    roles: Sequence[GangRequest],
    level: int,
    first: int,
    last: int,
    policy: PlacementPolicy,
) -> list[int]:
    """Domains `first` to `last` (exclusive) at `level` where each role fits on its own (from
    aggregates), in the policy's order for the roles' GPUs together."""
    fits_each = _may_hold_each(state, roles, level, first, last)
    if not fits_each.any():
        return []
    for role in roles:
        # Room in the domain is needed whatever the role's slices or node: a bound from above.
        capacity = CapacityView(state, role, exact=False).without_slices_at(level, first, last)
        fits_each &= capacity >= role.pods
    candidates = fits_each.nonzero()[0] + first
    if candidates.size == 0:
        return []
    gpus = sum(role.gpus_total for role in roles)
    scores = policy.domain_scores(state.free_gpus[level][candidates].astype(np.int64), gpus)
    ordered: list[int] = candidates[np.argsort(scores, kind="stable")].tolist()
    return ordered


def _may_hold_each(
    state: ClusterState, roles: Sequence[GangRequest], level: int, first: int, last: int
) -> NDArray[np.bool_]:
    """Of domains `first` to `last` (exclusive) at `level`, those with the free whole GPUs of
    each whole-GPU role on its own: a bound from above of where each role fits, read from one
    aggregate before any capacity is counted (with slices, over every domain of a level)."""
    free = state.free_gpus[level][first:last]
    may: NDArray[np.bool_] = np.ones(last - first, dtype=np.bool_)
    for role in roles:
        if role.gpus_per_pod and not role.is_fractional:
            may &= free >= role.pods * role.gpus_per_pod
    return may


def _place_in_one_inner(
    state: ClusterState,
    roles: Sequence[GangRequest],
    order: Sequence[int],
    level: int,
    domain: int,
    preferred: int,
    policy: PlacementPolicy,
) -> RolesPlacement | None:
    """Every role in one domain at `preferred` inside `domain` at `level`, or None."""
    topology = state.topology
    first_node, last_node = topology.domain_range(level, domain)
    inner = topology.node_domain[preferred]
    first, last = int(inner[first_node]), int(inner[last_node - 1]) + 1
    raised = [replace(role, required=max(role.required, preferred)) for role in roles]
    for sub in _candidates(state, raised, preferred, first, last, policy):
        placed = _place_in(state, raised, order, preferred, sub, policy)
        if isinstance(placed, RolesPlacement):
            return RolesPlacement(placed.placements, level, domain, preferred_domain=sub)
    return None


def _place_in(
    state: ClusterState,
    roles: Sequence[GangRequest],
    order: Sequence[int],
    level: int,
    domain: int,
    policy: PlacementPolicy,
) -> RolesPlacement | Unschedulable:
    """Every role within `domain` at `level`, in `order`, each seeing the room the roles
    before it took: on a what-if, but for whole innermost domains a role of whole-node pods
    fills, which the later roles' searches read as full without taking them
    (`placement.closed_leaves`) when they can."""
    statement = Statement(state)
    placements: dict[int, Placement] = {}
    closed: ClosedLeaves | None = None
    last = order[-1]
    try:
        for position, index in enumerate(order):
            role = roles[index]
            inside = replace(role, required=max(role.required, level), within=(level, domain))
            result = place(state, inside, policy, closed=closed)
            if isinstance(result, Unschedulable):
                return result
            placements[index] = result
            if index == last:  # only the roles placed after it need to see its room taken
                continue
            later = [roles[i] for i in order[position + 1 :]]
            found = _closing(state, result.allocation) if _read_closed(later, policy) else None
            if found is None:
                statement.take(result.allocation, fresh=True)
                continue
            filled, rest = found
            closed = filled if closed is None else closed.joined(filled)
            if rest is not None:
                statement.take(rest, fresh=True)
    finally:
        statement.discard()
    return RolesPlacement(tuple(placements[i] for i in range(len(roles))), level, domain)


def _read_closed(roles: Sequence[GangRequest], policy: PlacementPolicy) -> bool:
    """Whether searches for `roles` read innermost domains as full without a take (`place`'s
    `closed`): pods of whole GPUs, not preferring the fewest nodes, placed in an order the
    compiled searches follow."""
    return fills_emptiest_first(policy) is not None and all(
        role.gpus_per_pod > 0 and not role.is_fractional and not role.preferred_node
        for role in roles
    )


# Whole innermost domains are read as closed rather than taken from this fraction of the
# cluster's on (1/64: about 200 racks of the 1M-GPU fleet's 13,890): below, the take and its
# undo cost less than the closed view's rows per level and its subtraction in each count.
CLOSED_FROM_SHARE = 64


def _closing(
    state: ClusterState, allocation: Allocation
) -> tuple[ClosedLeaves, Allocation | None] | None:
    """The whole innermost domains `allocation` (a placement a search just found) fills and
    its other pods (`closed_leaves_of`), when they are enough domains to read as closed
    (`CLOSED_FROM_SHARE`); else None, and the allocation is taken."""
    leaves = state.topology.n_domains(len(state.topology.domain_levels) - 1)
    if allocation.pods * CLOSED_FROM_SHARE < leaves:
        return None  # too few pods to fill enough domains (one pod per node)
    found = closed_leaves_of(state, allocation)
    if found is None or found[0].leaves.size * CLOSED_FROM_SHARE < leaves:
        return None
    return found


def _explain(
    state: ClusterState,
    roles: Sequence[GangRequest],
    order: Sequence[int],
    level: int,
    policy: PlacementPolicy,
) -> Unschedulable:
    """No domain holds every role on its own: the first role that fits none, by itself."""
    for index in order:
        role = roles[index]
        alone = place(state, replace(role, required=max(role.required, level)), policy)
        if isinstance(alone, Unschedulable):
            return _with_shared_reason(alone, state.topology.domain_levels[level], level)
    name = state.topology.domain_levels[level]
    return Unschedulable(
        roles[order[0]],
        UnschedulableCode.REQUIRED,
        f"roles {', '.join(role.name for role in roles)} must share one {name}; "
        f"no {name} holds each of them",
    )


def _with_shared_reason(result: Unschedulable, name: str, level: int) -> Unschedulable:
    if level == 0:
        return replace(result, reason=f"role {result.request.name}: {result.reason}")
    return replace(
        result,
        code=result.code,
        reason=f"role {result.request.name}: {result.reason} (the roles share one {name})",
    )
