"""Topology-aware preemption: the victim set with the least lost work that makes a gang fit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import MILLI_PER_GPU, ClusterState
from toposched.cluster.statement import Statement
from toposched.placement.policies import PlacementPolicy
from toposched.placement.request import GangRequest
from toposched.placement.search import Placement, place

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]

#: Up to this many candidate victims in one domain, every subset is tried (optimal choice).
EXACT_VICTIMS = 12
#: Candidate domains examined exactly per decision, cheapest first by an upper bound.
DOMAINS_EXAMINED = 16
#: Multi-domain victim sets up to this size are pruned victim by victim.
SPARE_CHECKS = 16


@dataclass(frozen=True)
class Candidate:
    """A running job the contract lets this preemptor evict, with what evicting it costs."""

    job_id: str
    rule: str
    """The contract rule that allows it (e.g. unallocated-victim, better-fair-share)."""
    lost_gpu_seconds: float
    """Work lost: GPUs x seconds since its last checkpoint (since start if none)."""
    standing: float
    """Lower = evicted first among equal costs (unallocated work lowest)."""
    nodes: IntArray
    """Its pods' nodes."""
    gpus_per_pod: float
    """Whole GPUs each pod frees (0 for shared-GPU pods, which free no whole GPU)."""


class ImpactPolicy(Protocol):
    """Orders victim sets: lower keys are preferred. Replace it to change what 'least' means."""

    def key(self, victims: Sequence[Candidate]) -> tuple[float, ...]: ...


class LeastLostWork:
    """GPU-seconds lost, then the number of jobs, then their standing (lowest first)."""

    def key(self, victims: Sequence[Candidate]) -> tuple[float, ...]:
        return (
            sum(v.lost_gpu_seconds for v in victims),
            float(len(victims)),
            sum(v.standing for v in victims),
        )


@dataclass(frozen=True)
class PreemptionPlan:
    """Evict `victims`, then the preemptor runs on `placement` (its nodes are nominated)."""

    preemptor: str
    victims: tuple[Candidate, ...]
    placement: Placement
    impact: tuple[float, ...]
    exact: bool
    """True when the victim set is optimal for its domain (every subset was tried)."""

    @property
    def nodes(self) -> IntArray:
        return np.unique(self.placement.allocation.nodes)


class VictimSearch:
    """Finds a victim set for one gang among the candidates the contract allows.

    One-domain gangs (those that fit in one innermost domain, e.g. a rack): each candidate
    domain's victims are examined exactly — every subset when there are at most
    `EXACT_VICTIMS`, else the cheapest-first prefix that frees enough, pruned until no victim
    can be spared — and the domain with the least impact wins. Larger gangs: innermost domains
    are chosen by impact per pod of room they would gain until the gang's need is covered, and
    every candidate in a chosen domain is evicted; then victims are spared, costliest first,
    while the gang still fits. The final set is always checked by the placement engine itself.
    """

    def __init__(
        self,
        state: ClusterState,
        policy: PlacementPolicy,
        impact: ImpactPolicy | None = None,
    ) -> None:
        self.state = state
        self.policy = policy
        self.impact = impact or LeastLostWork()
        topology = state.topology
        self.leaf_level = len(topology.domain_levels) - 1
        starts = topology.domain_starts[self.leaf_level]
        self.largest_leaf_gpus = int(
            np.add.reduceat(topology.gpu_count.astype(np.int64), starts[:-1]).max()
        )

    def plan(
        self, preemptor: str, request: GangRequest, candidates: Sequence[Candidate]
    ) -> PreemptionPlan | str:
        """A plan, or the reason no set of allowed victims makes room."""
        if not candidates:
            return "no running job may be preempted for it under the contract"
        # Gangs bound to one innermost domain (required there, or a single pod) are searched
        # domain by domain; others may combine free room and victims across domains.
        one_domain = request.pods == 1 or (
            request.required == self.leaf_level and self.leaf_level > 0
        )
        if one_domain:
            local = self._one_domain(preemptor, request, candidates)
            if local is not None:
                return local
        spread = self._many_domains(preemptor, request, candidates)
        if isinstance(spread, PreemptionPlan):
            return spread
        return self._explain(request, candidates, spread)

    def _explain(self, request: GangRequest, candidates: Sequence[Candidate], fallback: str) -> str:
        """Why no victim set works: what the job would still lack with every candidate gone."""
        statement = Statement(self.state)
        try:
            statement.release_many([c.job_id for c in candidates])
            everything = place(self.state, request, self.policy)
        finally:
            statement.discard()
        if isinstance(everything, Placement):
            return fallback
        return (
            f"even evicting all {len(candidates)} preemptible jobs leaves no room: "
            f"{everything.reason}"
        )

    # --- shared ---------------------------------------------------------------------------------
    def _freed_per_node(self, candidates: Sequence[Candidate]) -> tuple[IntArray, IntArray]:
        """(node, whole GPUs freed) pairs for every pod of every candidate, flattened."""
        nodes = np.concatenate([c.nodes for c in candidates])
        gpus = np.concatenate([np.full(c.nodes.size, int(c.gpus_per_pod)) for c in candidates])
        return nodes.astype(np.int64), gpus.astype(np.int64)

    def _pods_fit(self, free: IntArray, request: GangRequest) -> IntArray:
        """Pods each node could hold with `free` whole GPUs (GPU count only)."""
        if request.gpus_per_pod == 0:
            return free * 0 + request.pods
        if request.is_fractional:
            return free * (MILLI_PER_GPU // request.gpu_milli)
        return free // request.gpus_per_pod

    def _verify(
        self, preemptor: str, request: GangRequest, victims: Sequence[Candidate], exact: bool
    ) -> PreemptionPlan | None:
        statement = Statement(self.state)
        try:
            statement.release_many([v.job_id for v in victims])
            placed = place(self.state, request, self.policy)
        finally:
            statement.discard()
        if not isinstance(placed, Placement):
            return None
        return PreemptionPlan(preemptor, tuple(victims), placed, self.impact.key(victims), exact)

    # --- one innermost domain ------------------------------------------------------------------
    def _one_domain(
        self, preemptor: str, request: GangRequest, candidates: Sequence[Candidate]
    ) -> PreemptionPlan | None:
        state, topology = self.state, self.state.topology
        leaf_of_node = topology.node_domain[self.leaf_level]
        usable = (state.health == 0).astype(np.int64)
        if request.allowed_models is not None:
            usable &= np.isin(topology.gpu_model, request.allowed_models)
        # Room per leaf if every candidate touching it left: an upper bound to rank leaves.
        nodes, gpus = self._freed_per_node(candidates)
        potential = state.free_whole_gpus.astype(np.int64)
        np.add.at(potential, nodes, gpus)
        potential = np.minimum(potential, topology.gpu_count) * usable
        starts = topology.domain_starts[self.leaf_level]
        room = np.add.reduceat(self._pods_fit(potential, request), starts[:-1])
        leaves = np.flatnonzero(room >= request.pods)
        if leaves.size == 0:
            return None
        victims_by_leaf: dict[int, list[int]] = {}
        pod_owner = np.repeat(np.arange(len(candidates)), [c.nodes.size for c in candidates])
        for leaf, owner in set(zip(leaf_of_node[nodes].tolist(), pod_owner.tolist(), strict=True)):
            victims_by_leaf.setdefault(leaf, []).append(owner)
        costs = np.array([c.lost_gpu_seconds for c in candidates])
        bound = np.array(
            [costs[victims_by_leaf.get(int(leaf), [])].sum() for leaf in leaves], dtype=float
        )
        best: PreemptionPlan | None = None
        for leaf in leaves[np.argsort(bound, kind="stable")][:DOMAINS_EXAMINED]:
            members = sorted(victims_by_leaf.get(int(leaf), []))
            chosen = self._choose_in_leaf(int(leaf), request, [candidates[i] for i in members])
            if chosen is None:
                continue
            victims, exact = chosen
            if best is not None and self.impact.key(victims) >= best.impact:
                continue
            plan = self._verify(preemptor, request, victims, exact)
            if plan is not None and (best is None or plan.impact < best.impact):
                best = plan
        return best

    def _choose_in_leaf(
        self, leaf: int, request: GangRequest, victims: list[Candidate]
    ) -> tuple[list[Candidate], bool] | None:
        """The least-impact subset of `victims` that gives the leaf room for the gang."""
        state, topology = self.state, self.state.topology
        first, last = topology.domain_range(self.leaf_level, leaf)
        healthy = state.health[first:last] == 0
        free = state.free_whole_gpus[first:last].astype(np.int64)
        cap = topology.gpu_count[first:last].astype(np.int64)
        # freed[v, n]: whole GPUs victim v frees on node n of this leaf.
        freed = np.zeros((len(victims), last - first), dtype=np.int64)
        for row, victim in enumerate(victims):
            inside = victim.nodes[(victim.nodes >= first) & (victim.nodes < last)] - first
            np.add.at(freed[row], inside, int(victim.gpus_per_pod))

        def room(selection: NDArray[np.bool_]) -> IntArray:
            after = np.minimum(free[None, :] + selection.astype(np.int64) @ freed, cap[None, :])
            fits: IntArray = (self._pods_fit(after, request) * healthy[None, :]).sum(axis=1)
            return fits

        if len(victims) <= EXACT_VICTIMS:
            subsets = (np.arange(2 ** len(victims))[:, None] >> np.arange(len(victims))) & 1
            feasible = np.flatnonzero(room(subsets.astype(bool)) >= request.pods)
            if feasible.size == 0:
                return None
            if type(self.impact) is LeastLostWork:
                # The default key is a sum per victim: rank every subset with one matrix product.
                per_victim = np.array(
                    [(v.lost_gpu_seconds, 1.0, v.standing) for v in victims], dtype=float
                ).reshape(-1, 3)
                totals = subsets[feasible] @ per_victim
                winner = feasible[np.lexsort((totals[:, 2], totals[:, 1], totals[:, 0]))[0]]
            else:
                keys = [
                    self.impact.key([victims[i] for i in np.flatnonzero(subsets[s])])
                    for s in feasible
                ]
                winner = feasible[min(range(len(keys)), key=keys.__getitem__)]
            return [victims[i] for i in np.flatnonzero(subsets[winner])], True
        order = sorted(range(len(victims)), key=lambda i: self.impact.key([victims[i]]))
        selection = np.zeros((1, len(victims)), dtype=bool)
        for index in order:
            selection[0, index] = True
            if room(selection)[0] >= request.pods:
                break
        else:
            return None
        # Spare the costliest victims that are not needed, so that none can be spared.
        for index in reversed(order):
            if selection[0, index]:
                selection[0, index] = False
                if room(selection)[0] < request.pods:
                    selection[0, index] = True
        return [victims[i] for i in np.flatnonzero(selection[0])], False

    # --- many domains --------------------------------------------------------------------------
    def _many_domains(
        self, preemptor: str, request: GangRequest, candidates: Sequence[Candidate]
    ) -> PreemptionPlan | str:
        state, topology = self.state, self.state.topology
        leaf_of_node = topology.node_domain[self.leaf_level]
        starts = topology.domain_starts[self.leaf_level]
        nodes, gpus = self._freed_per_node(candidates)
        usable = (state.health == 0).astype(np.int64)
        now_room = np.add.reduceat(
            self._pods_fit(state.free_whole_gpus.astype(np.int64), request) * usable, starts[:-1]
        )
        potential = state.free_whole_gpus.astype(np.int64)
        np.add.at(potential, nodes, gpus)
        potential = np.minimum(potential, topology.gpu_count) * usable
        room = np.add.reduceat(self._pods_fit(potential, request), starts[:-1])
        granule = request.granule(self.leaf_level)
        now_room, room = now_room // granule * granule, room // granule * granule
        gain = room - now_room
        pod_owner = np.repeat(np.arange(len(candidates)), [c.nodes.size for c in candidates])
        costs = np.array([c.lost_gpu_seconds for c in candidates], dtype=float)
        leaf_pairs = np.unique(np.stack([leaf_of_node[nodes], pod_owner]), axis=1)
        leaf_cost = np.bincount(
            leaf_pairs[0],
            weights=costs[leaf_pairs[1]],
            minlength=topology.n_domains(self.leaf_level),
        )
        need = request.pods - int(now_room.sum())
        helpful = np.flatnonzero(gain > 0)
        # Cheapest room first; a domain's cost counts every candidate touching it.
        order = helpful[np.argsort(leaf_cost[helpful] / gain[helpful], kind="stable")]
        covered = np.cumsum(gain[order])
        if covered.size == 0 or covered[-1] < need:
            return "evicting every preemptible job still leaves too little room in whole slices"
        chosen_leaves = order[: int(np.searchsorted(covered, need)) + 1]
        in_chosen = np.isin(leaf_pairs[0], chosen_leaves)
        chosen = sorted(set(leaf_pairs[1][in_chosen].tolist()))
        victims = [candidates[i] for i in chosen]
        plan = self._verify(preemptor, request, victims, exact=False)
        if plan is None:
            # Topology above the leaves (required/preferred) may want other domains: fall back
            # to every candidate, then spare what is not needed.
            victims = list(candidates)
            plan = self._verify(preemptor, request, victims, exact=False)
            if plan is None:
                return "no victim set found that satisfies the job's topology"
        # Sparing costs one placement check per victim: done for small sets only.
        spare_candidates = [] if len(plan.victims) > SPARE_CHECKS else list(plan.victims)
        for victim in sorted(spare_candidates, key=lambda v: self.impact.key([v]), reverse=True):
            trial = [v for v in plan.victims if v.job_id != victim.job_id]
            smaller = self._verify(preemptor, request, trial, exact=False) if trial else None
            if smaller is not None:
                plan = smaller
        return plan
