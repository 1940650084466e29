"""Topology-aware preemption: the victim set with the least lost work that makes a gang fit."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import (
    MILLI_PER_GPU,
    ClusterState,
    distinct,
)
from toposched.cluster.statement import trial
from toposched.placement.policies import PlacementPolicy
from toposched.placement.request import GangRequest
from toposched.placement.search import Placement, PlacementResult, place, place_in_leaf
from toposched.scheduler import spread_kernels
from toposched.scheduler.candidates import (
    Candidate,
    CandidatePool,
    ImpactPolicy,
    LeastLostWork,
    PreemptionPlan,
)
from toposched.scheduler.domain_nodes import uniform_size
from toposched.scheduler.leaf_victims import UNOPENED, LeafVictims
from toposched.scheduler.refusals import Refusal, RefusalCode
from toposched.scheduler.victim_arrays import (
    Nowhere,
    cheapest_required_domain,
    touching_victims,
)
from toposched.scheduler.victim_release import free_candidates

__all__ = [
    "SPARE_CHECKS",
    "Candidate",
    "CandidatePool",
    "ImpactPolicy",
    "LeastLostWork",
    "PreemptionPlan",
    "Refusal",
    "RefusalCode",
    "VictimSearch",
]

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]

#: Multi-domain victim sets up to this size are pruned victim by victim.
SPARE_CHECKS = 16


class _Proven:
    """`_many_domains`'s word that the placement with every candidate gone was not tried: the
    aggregates prove it fails, and its reason already says what room there would be."""


_PROVEN = _Proven()


class VictimSearch:
    """Finds a victim set for one gang among the candidates the contract allows.

    One-domain gangs (those that fit in one innermost domain, e.g. a rack): each candidate
    domain's victims are examined exactly — every subset when there are at most
    `EXACT_VICTIMS`, else the cheapest-first prefix that frees enough, pruned until no victim
    can be spared — and the domain with the least impact wins. Larger gangs: innermost domains
    are chosen by impact per pod of room they would gain until the gang's need (inside the
    domain of its required level where that costs least) is covered, and every candidate in a
    chosen domain is a victim; then victims are spared, costliest first, while the gang still
    fits, or, for sets too large to spare one by one, only those on the gang's nodes are kept.
    The final set is always checked by the placement engine itself.
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
        self.leaf_starts: IntArray = topology.domain_starts[self.leaf_level].astype(np.int64)
        self.leaf_size = uniform_size(self.leaf_starts)
        self.leaf_of_node: IntArray = topology.node_domain[self.leaf_level].astype(np.int64)
        self._leaf_domains: dict[int, IntArray] = {}  # see `domain_of_leaf`
        self._leaf_bounds: dict[int, IntArray] = {}  # see `leaf_bounds`
        self._node_scratch: IntArray = np.zeros(0, dtype=np.int64)  # see `_room_now_and_after`
        self.largest_leaf_gpus = int(
            np.add.reduceat(topology.gpu_count.astype(np.int64), self.leaf_starts[:-1]).max()
        )
        self.leaves = LeafVictims(self)

    def plan(
        self,
        preemptor: str,
        request: GangRequest,
        candidates: Sequence[Candidate] | CandidatePool,
        known_not_to_fit: bool = False,
    ) -> PreemptionPlan | Refusal:
        """A plan, or why no set of allowed victims makes room.

        `known_not_to_fit` says the caller has just seen the gang not fit without evictions
        (a scheduling cycle plans preemption only then); otherwise a gang bound to one domain
        is first placed as things are, and needs no victim if it fits.
        """
        if not len(candidates):
            return Refusal(
                RefusalCode.NO_ALLOWED_VICTIM,
                "no running job may be preempted for it under the contract",
            )
        pool = candidates if isinstance(candidates, CandidatePool) else CandidatePool.of(candidates)
        # Gangs bound to one innermost domain (required there, or a single pod) are searched
        # domain by domain; others may combine free room and victims across domains.
        if self.is_one_domain(request):
            if not known_not_to_fit:
                # Each domain is checked with its own victims gone, not for room elsewhere.
                as_is = place(self.state, request, self.policy, exact_reasons=False)
                if isinstance(as_is, Placement):
                    return PreemptionPlan(preemptor, (), as_is, self.impact.key([]), True)
            local = self.leaves.best(preemptor, request, pool)
            if isinstance(local, PreemptionPlan):
                return local
            unopened = local is UNOPENED
        else:
            unopened = False
        spread = self._many_domains(preemptor, request, pool, unopened)
        if isinstance(spread, PreemptionPlan):
            return spread
        fallback, everything = spread
        if isinstance(everything, _Proven):
            return fallback
        if pool.caps_bind and not self.is_one_domain(request):
            # Within budget caps, evicting whole domains may take too much from one account:
            # a set chosen exactly to open one innermost domain may stay within them.
            local = self.leaves.best(preemptor, request, pool, confined=False)
            if isinstance(local, PreemptionPlan):
                return self.spare(preemptor, request, local)
        return self._explain(request, pool, fallback, everything)

    def within_required(
        self,
        request: GangRequest,
        now_room: IntArray,
        gain: IntArray,
        helpful: IntArray,
        ratio: FloatArray,
    ) -> tuple[IntArray, int] | Nowhere | None:
        """With a required level above the innermost domains, the innermost domains to open
        (cheapest first) and the shortfall to cover inside the one required domain where that
        costs least (`cheapest_required_domain`): room opened in other domains of that level
        would not help the gang. `Nowhere` when no such domain can be opened enough; None
        without such a level, or when that does not apply."""
        required = request.required
        if required <= 0 or required >= self.leaf_level:
            return None
        return cheapest_required_domain(
            self.leaf_bounds(required), request.pods, now_room, gain, helpful, ratio
        )

    def domain_of_leaf(self, level: int) -> IntArray:
        """Each innermost domain's domain at `level` (remembered per level)."""
        known = self._leaf_domains.get(level)
        if known is None:
            domains = self.state.topology.node_domain[level][self.leaf_starts[:-1]]
            known = self._leaf_domains[level] = domains.astype(np.int64)
        return known

    def leaf_bounds(self, level: int) -> IntArray:
        """Where each domain of `level` starts among the innermost domains, and their count
        last: the innermost domains of domain d are `bounds[d]` to `bounds[d + 1] - 1`
        (remembered per level; domains are runs of nodes, so of innermost domains too)."""
        known = self._leaf_bounds.get(level)
        if known is None:
            every = np.arange(self.state.topology.n_domains(level) + 1)
            known = self._leaf_bounds[level] = np.searchsorted(self.domain_of_leaf(level), every)
        return known

    def is_one_domain(self, request: GangRequest) -> bool:
        return request.pods == 1 or (request.required == self.leaf_level and self.leaf_level > 0)

    def _explain(
        self,
        request: GangRequest,
        pool: CandidatePool,
        fallback: Refusal,
        everything: PlacementResult | None = None,
    ) -> Refusal:
        """Why no victim set works: what the job would still lack with every candidate gone
        (`everything`: the placement with every candidate gone, when already tried)."""
        if everything is None:
            held = self.state.allocations
            with trial(self.state) as what_if:
                what_if.free_parts([held[job_id] for job_id in pool.job_ids])
                everything = place(self.state, request, self.policy)
        if isinstance(everything, Placement):
            return fallback
        return Refusal(
            RefusalCode.NO_ROOM,
            f"even evicting all {len(pool)} preemptible jobs leaves no room: {everything.reason}",
            {"candidates": len(pool)},
        )

    # --- shared ---------------------------------------------------------------------------------
    def pods_fit(self, free: IntArray, request: GangRequest) -> IntArray:
        """Pods each node could hold with `free` whole GPUs (GPU count only)."""
        if request.gpus_per_pod == 0:
            return free * 0 + request.pods
        if request.is_fractional:
            return free * (MILLI_PER_GPU // request.gpu_milli)
        return free // request.gpus_per_pod

    def usable(self, nodes: IntArray, request: GangRequest) -> NDArray[np.bool_]:
        usable: NDArray[np.bool_] = self.state.closed[nodes] == 0
        if request.allowed_models is not None:
            usable &= np.isin(self.state.topology.gpu_model[nodes], request.allowed_models)
        return usable

    def verify(
        self,
        preemptor: str,
        request: GangRequest,
        victims: Sequence[Candidate],
        exact: bool,
        leaf: int | None = None,
    ) -> PreemptionPlan | None:
        """The plan if the gang fits once `victims` left: inside innermost domain `leaf` when
        the victims were chosen to open it (a what-if on that domain's nodes alone), else
        anywhere the placement search picks."""
        placed: PlacementResult | None
        if leaf is not None:
            state, held = self.state, self.state.allocations
            first, last = state.topology.domain_range(self.leaf_level, leaf)
            with trial(state) as what_if:
                what_if.free_on_nodes([held[v.job_id] for v in victims], first, last)
                placed = place_in_leaf(state, request, leaf, self.policy)
        else:
            # Only whether it fits matters here: a failure's reason is never shown.
            placed = self._place_without(request, victims, exact_reasons=False)
        return self._plan_if_placed(preemptor, victims, exact, placed)

    def _place_without(
        self, request: GangRequest, victims: Sequence[Candidate], exact_reasons: bool = True
    ) -> PlacementResult:
        """Where the gang would go with `victims` gone (`exact_reasons`: as for `place`)."""
        held = self.state.allocations
        with trial(self.state) as what_if:
            what_if.free_parts([held[v.job_id] for v in victims])
            return place(self.state, request, self.policy, exact_reasons=exact_reasons)

    def _plan_from_rows(
        self, preemptor: str, request: GangRequest, pool: CandidatePool, rows: IntArray
    ) -> tuple[PreemptionPlan | None, PlacementResult]:
        """Where the gang would go with the candidates of `rows` gone, and the plan if it
        places: evicting those of them on its nodes (the others need not leave, as in
        `_plan_if_placed`). `Candidate` objects are made for those victims alone, since a
        what-if of every candidate gone may release thousands of jobs."""
        with trial(self.state) as what_if:
            free_candidates(what_if, self.state, pool, rows)
            placed = place(self.state, request, self.policy)
        if not isinstance(placed, Placement):
            return None, placed
        return self._plan_placed(preemptor, pool, rows, placed), placed

    def _plan_within_caps(
        self, preemptor: str, request: GangRequest, pool: CandidatePool, within: IntArray
    ) -> tuple[PreemptionPlan | None, PlacementResult | None]:
        """`_plan_from_rows` of the candidates `within` the budget caps, and when it finds no
        plan, the placement with every candidate gone (what `_explain` reads), found on the
        same what-if by freeing the others too: the state is the same as freeing them all at
        once, for the cost of the others alone."""
        state = self.state
        everything: PlacementResult | None = None
        with trial(state) as what_if:
            free_candidates(what_if, state, pool, within)
            placed = place(state, request, self.policy)
            beyond = np.setdiff1d(np.arange(len(pool)), within, assume_unique=True)
            if not isinstance(placed, Placement):
                everything = placed
            if everything is not None and beyond.size:
                free_candidates(what_if, state, pool, beyond)
                everything = place(state, request, self.policy)
        if not isinstance(placed, Placement):
            return None, everything
        return self._plan_placed(preemptor, pool, within, placed), None

    def _plan_placed(
        self, preemptor: str, pool: CandidatePool, rows: IntArray, placed: Placement
    ) -> PreemptionPlan:
        """The plan of a gang placed with the candidates of `rows` gone: those of them on its
        nodes are the victims."""
        victims = pool.take(pool.touching(rows, placed.allocation.nodes))
        return PreemptionPlan(preemptor, tuple(victims), placed, self.impact.key(victims), False)

    def _plan_if_placed(
        self,
        preemptor: str,
        victims: Sequence[Candidate],
        exact: bool,
        placed: PlacementResult | None,
    ) -> PreemptionPlan | None:
        if not isinstance(placed, Placement):
            return None
        if victims:
            # The engine may place the gang where some victims never were (room elsewhere):
            # those need not leave, and the placement stands without them, since on every
            # node it uses the same jobs' GPUs are released.
            touching = touching_victims(
                [v.nodes for v in victims], placed.allocation.nodes
            ).nonzero()[0]
            if touching.size < len(victims):
                victims = [victims[i] for i in touching.tolist()]
        return PreemptionPlan(preemptor, tuple(victims), placed, self.impact.key(victims), exact)

    # --- many domains --------------------------------------------------------------------------
    def _room_now_and_after(
        self, request: GangRequest, pool: CandidatePool, pod_owner: IntArray
    ) -> tuple[IntArray, IntArray]:
        """Per innermost domain, the gang's pods its healthy nodes' free whole GPUs take now,
        and with every candidate gone (GPU counts only)."""
        state, topology = self.state, self.state.topology
        if request.gpus_per_pod == 0:
            # Every node counts as room for all pods then, healthy or not, when freed.
            starts = self.leaf_starts
            usable = (state.closed == 0).astype(np.int64)
            free = state.free_whole_gpus.astype(np.int64)
            room_now = np.add.reduceat(self.pods_fit(free, request) * usable, starts[:-1])
            np.add.at(free, pool.pod_nodes, pool.whole[pod_owner])
            potential = np.minimum(free, topology.gpu_count) * usable
            return room_now, np.add.reduceat(self.pods_fit(potential, request), starts[:-1])
        # Now: from each domain's count of healthy nodes by free whole GPUs. With the
        # candidates gone: that plus the change on the nodes they hold, not a pass over every
        # node of the cluster.
        nodes_by_free = state.free_hist[self.leaf_level].sum(axis=1, dtype=np.int64)
        fit_by_free = self.pods_fit(np.arange(nodes_by_free.shape[1], dtype=np.int64), request)
        now_room: IntArray = nodes_by_free @ fit_by_free
        if request.is_fractional:
            pods_per_gpu, gpus_per_pod = MILLI_PER_GPU // request.gpu_milli, 1
        else:
            pods_per_gpu, gpus_per_pod = 1, request.gpus_per_pod
        # The GPUs freed per node are added up on a zeroed array of the nodes, read back only
        # where pods are: a pass over the pods, not over every node of the cluster.
        if self._node_scratch.size != topology.n_nodes:
            self._node_scratch = np.zeros(topology.n_nodes, dtype=np.int64)
        room = now_room + spread_kernels.room_gained(
            pool.pod_nodes,
            pool.whole[pod_owner],
            state.free_whole_gpus,
            topology.gpu_count,
            state.closed,
            self.leaf_of_node,
            now_room.size,
            pods_per_gpu,
            gpus_per_pod,
            self._node_scratch,
        )
        return now_room, room

    def _many_domains(
        self, preemptor: str, request: GangRequest, pool: CandidatePool, unopened: bool = False
    ) -> PreemptionPlan | tuple[Refusal, PlacementResult | _Proven | None]:
        """A plan, or why none was found with the placement tried with every candidate gone
        (None when not tried, `_PROVEN` when the aggregates prove it fails). `unopened`: the
        gang is bound to one innermost domain and `LeafVictims.best` found that none can hold it."""
        topology = self.state.topology
        pod_owner = pool.pod_owner
        now_room, room = self._room_now_and_after(request, pool, pod_owner)
        granule = request.granule(self.leaf_level)
        now_room, room = now_room // granule * granule, room // granule * granule
        gain = room - now_room
        need = request.pods - int(now_room.sum())
        helpful = np.flatnonzero(gain > 0)
        if helpful.size == 0 or int(gain[helpful].sum()) < need:
            return self._no_room(request, pool, int(room.sum()), granule, "")
        if unopened and not 0 < request.required < self.leaf_level:
            # No set chosen below places it (nor would every candidate gone): the placement
            # with every candidate gone is tried for its reason alone.
            return self._with_every_candidate(preemptor, request, pool, 0, None)
        # (leaf, candidate) pairs, each once, as one code per pair.
        n_candidates = len(pool)
        pair_codes = distinct(self.leaf_of_node[pool.pod_nodes] * n_candidates + pod_owner)
        pair_leaf, pair_owner = pair_codes // n_candidates, pair_codes % n_candidates
        leaf_cost = np.bincount(
            pair_leaf, weights=pool.lost[pair_owner], minlength=topology.n_domains(self.leaf_level)
        )
        # Cheapest room first; a domain's cost counts every candidate touching it.
        ratio = leaf_cost[helpful] / gain[helpful]
        within = self.within_required(request, now_room, gain, helpful, ratio)
        if isinstance(within, Nowhere):
            level = topology.domain_levels[request.required]
            return self._no_room(request, pool, within.most, granule, level)
        if within is not None:
            order, need = within
        else:
            order = helpful[np.argsort(ratio, kind="stable")]
        covered = np.cumsum(gain[order])
        chosen_leaves = order[: int(np.searchsorted(covered, need)) + 1]
        in_chosen = np.isin(pair_leaf, chosen_leaves)
        # Within each account's budget cap: the cheapest of its victims per GPU are kept.
        rows = pool.capped(distinct(pair_owner[in_chosen]))
        plan, placed = self._plan_from_rows(preemptor, request, pool, rows)
        if plan is None:
            return self._with_every_candidate(preemptor, request, pool, rows.size, placed)
        return self.spare(preemptor, request, plan)

    @staticmethod
    def _no_room(
        request: GangRequest, pool: CandidatePool, most: int, granule: int, level: str
    ) -> tuple[Refusal, _Proven | None]:
        """Why evicting every candidate leaves room for at most `most` pods (in any one domain
        of `level`, if given). Counted from whole free GPUs on every healthy node, an upper
        bound of what the placement engine could place with every candidate gone: proven for
        whole-GPU pods, so the job's reason says so without placing it. Shared GPUs' free
        fractions are not counted: the placement engine answers for such pods."""
        where = f"no {level} with room for more than" if level else "room for at most"
        text = (
            f"even evicting all {len(pool):,} preemptible jobs leaves {where} {most:,} of its "
            f"{request.pods:,} pods"
        )
        if granule > 1:
            text += f" in whole slices of {granule}"
        proven = not (request.is_fractional or request.gpus_per_pod == 0)
        refusal = Refusal(
            RefusalCode.NO_ROOM,
            text,
            {"most": most, "pods": request.pods},
            most_pods=most if proven else None,
        )
        return refusal, (_PROVEN if proven else None)

    def _with_every_candidate(
        self,
        preemptor: str,
        request: GangRequest,
        pool: CandidatePool,
        tried: int,
        placed: PlacementResult | None,
    ) -> PreemptionPlan | tuple[Refusal, PlacementResult | _Proven | None]:
        """After `tried` victims chosen by domain did not make the gang fit: topology above the
        leaves (required/preferred) may want other domains, so every candidate goes (unless
        those were every candidate), then what is not needed is spared."""
        everyone = pool.capped(np.arange(len(pool)))
        plan, everything = None, None
        if tried < everyone.size and pool.caps_bind:
            plan, everything = self._plan_within_caps(preemptor, request, pool, everyone)
        elif tried < everyone.size:
            plan, placed = self._plan_from_rows(preemptor, request, pool, everyone)
        if plan is not None:
            return self.spare(preemptor, request, plan)
        if pool.caps_bind:
            refusal = Refusal(
                RefusalCode.BUDGET_CAPS,
                "no victim set found that satisfies the job's topology and leaves every account "
                "at or above its budget",
            )
            return refusal, everything
        refusal = Refusal(
            RefusalCode.TOPOLOGY, "no victim set found that satisfies the job's topology"
        )
        return refusal, placed

    # --- across many domains, from the aggregates ----------------------------------------------
    def spare(self, preemptor: str, request: GangRequest, plan: PreemptionPlan) -> PreemptionPlan:
        """Drop victims, costliest first, while the gang still places. Each costs one placement
        check, so this is done for sets of up to `SPARE_CHECKS` victims only."""
        spare_candidates = [] if len(plan.victims) > SPARE_CHECKS else list(plan.victims)
        for victim in sorted(spare_candidates, key=lambda v: self.impact.key([v]), reverse=True):
            trial = [v for v in plan.victims if v.job_id != victim.job_id]
            smaller = self.verify(preemptor, request, trial, exact=False) if trial else None
            if smaller is not None:
                plan = smaller
        return plan
