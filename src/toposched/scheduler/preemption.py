"""Topology-aware preemption: the victim set with the least lost work that makes a gang fit."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, overload

import numpy as np
from numpy.typing import NDArray

from toposched.cluster import kernels
from toposched.cluster.state import (
    MILLI_PER_GPU,
    Allocation,
    ClusterState,
    distinct,
    distinct_inverse,
    row_sums,
    take_rows,
)
from toposched.placement.capacity import pods_by_free
from toposched.placement.policies import PlacementPolicy
from toposched.placement.request import GangRequest
from toposched.placement.search import Placement, PlacementResult, place, place_in_leaf
from toposched.scheduler.preemptible import (
    PreemptibleIndex,
    SlotVerdicts,
    domain_nodes,
    uniform_size,
)

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
    budget_account: str | None = None
    """The account whose budget bounds this eviction (allowed by the budget rule), else None."""
    gpus: float = 0.0
    """GPUs the job holds as the budget rule counts them (a shared pod counts its fraction)."""
    budget_cap: float = math.inf
    """The most GPUs one preemption may take from `budget_account` in all: what it runs beyond
    its budget. Victims of one account together stay within it."""


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
    victims: Sequence[Candidate]
    placement: Placement
    impact: tuple[float, ...]
    exact: bool
    """True when the victim set is optimal for its domain (every subset was tried)."""

    @property
    def nodes(self) -> IntArray:
        return distinct(self.placement.allocation.nodes)


@dataclass(frozen=True)
class CandidatePool:
    """Candidates as arrays, one row per job: what the search reads. `Candidate` objects are
    made only for the victims chosen, so thousands of candidates cost no Python object each."""

    job_ids: Sequence[str]
    rules: Sequence[str]
    lost: FloatArray
    """GPU-seconds lost per candidate."""
    standing: FloatArray
    whole: IntArray
    """Whole GPUs each pod frees (a shared-GPU pod counts one)."""
    pod_starts: IntArray
    """Candidate i's pods are `pod_nodes[pod_starts[i]:pod_starts[i + 1]]`."""
    pod_nodes: IntArray
    cap_group: IntArray | None = None
    """Per candidate, the budget whose cap bounds its eviction (an index into `caps`), or -1;
    None when no candidate is bounded."""
    caps: FloatArray = field(default_factory=lambda: np.zeros(0))
    """Per budget, the most GPUs the victims bounded by it may hold together."""
    cap_accounts: Sequence[str] = ()
    """Per budget, its account."""
    held: FloatArray = field(default_factory=lambda: np.zeros(0))
    """Per candidate, the GPUs it holds as the budget rule counts them (when capped)."""

    def __len__(self) -> int:
        return len(self.job_ids)

    @property
    def caps_bind(self) -> bool:
        """Whether evicting every candidate would break some account's budget cap."""
        if self.cap_group is None:
            return False
        bounded = self.cap_group >= 0
        totals = np.bincount(
            self.cap_group[bounded], weights=self.held[bounded], minlength=self.caps.size
        )
        return bool((totals > self.caps).any())

    def within_caps(self, subsets: NDArray[np.int64], rows: IntArray) -> NDArray[np.bool_]:
        """For each 0/1 row of `subsets` over the candidates `rows`, whether its victims keep
        every account within its cap."""
        if self.cap_group is None:
            return np.ones(subsets.shape[0], dtype=bool)
        groups = self.cap_group[rows]
        bounded = (groups >= 0).nonzero()[0]
        if bounded.size == 0:
            return np.ones(subsets.shape[0], dtype=bool)
        # held[v, g]: GPUs candidate v counts against budget g.
        held = np.zeros((rows.size, self.caps.size))
        held[bounded, groups[bounded]] = self.held[rows[bounded]]
        within: NDArray[np.bool_] = np.all(subsets @ held <= self.caps[None, :], axis=1)
        return within

    def capped(self, rows: IntArray) -> IntArray:
        """`rows` without the victims that would break a cap: within each capped account the
        cheapest per GPU held are kept while they fit under it (the others keep their order)."""
        if self.cap_group is None or rows.size == 0:
            return rows
        groups = self.cap_group[rows]
        bounded = np.flatnonzero(groups >= 0)
        if bounded.size == 0:
            return rows
        held = self.held[rows[bounded]]
        cost = self.lost[rows[bounded]] / np.maximum(held, 1e-9)
        order = np.lexsort((cost, groups[bounded]))
        sorted_groups, sorted_held = groups[bounded][order], held[order]
        total = np.cumsum(sorted_held)
        group_first = np.searchsorted(sorted_groups, sorted_groups)
        before = total[group_first] - sorted_held[group_first]
        within = total - before <= self.caps[sorted_groups]
        keep = np.ones(rows.size, dtype=bool)
        keep[bounded[order[~within]]] = False
        kept: IntArray = rows[keep]
        return kept

    @property
    def pod_owner(self) -> IntArray:
        starts = self.pod_starts
        owner: IntArray = np.arange(len(self), dtype=np.int64).repeat(starts[1:] - starts[:-1])
        return owner

    def take(self, rows: Sequence[int] | IntArray) -> list[Candidate]:
        """The candidates of `rows`, each column read once as Python values (a handful of
        victims: numpy scalar reads would cost more than the rest of their making)."""
        picked = np.asarray(rows, dtype=np.int64)
        if picked.size == 0:
            return []
        starts = self.pod_starts[picked].tolist()
        ends = self.pod_starts[picked + 1].tolist()
        groups = [-1] * picked.size if self.cap_group is None else self.cap_group[picked].tolist()
        held, caps = self.held[picked].tolist(), self.caps.tolist()
        return [
            Candidate(
                job_id=self.job_ids[row],
                rule=self.rules[row],
                lost_gpu_seconds=lost,
                standing=standing,
                nodes=self.pod_nodes[start:end],
                gpus_per_pod=float(whole),
                budget_account=None if group < 0 else self.cap_accounts[group],
                gpus=0.0 if group < 0 else gpus,
                budget_cap=math.inf if group < 0 else caps[group],
            )
            for row, lost, standing, whole, start, end, group, gpus in zip(
                picked.tolist(),
                self.lost[picked].tolist(),
                self.standing[picked].tolist(),
                self.whole[picked].tolist(),
                starts,
                ends,
                groups,
                held,
                strict=True,
            )
        ]

    @staticmethod
    def of(candidates: Sequence[Candidate]) -> CandidatePool:
        counts = np.array([c.nodes.size for c in candidates], dtype=np.int64)
        nodes = (
            np.concatenate([c.nodes for c in candidates]).astype(np.int64)
            if candidates
            else np.zeros(0, dtype=np.int64)
        )
        accounts: dict[str, int] = {}
        caps: list[float] = []
        groups: list[int] = []
        for c in candidates:
            if c.budget_account is None:
                groups.append(-1)
                continue
            if c.budget_account not in accounts:
                accounts[c.budget_account] = len(caps)
                caps.append(c.budget_cap)
            groups.append(accounts[c.budget_account])
        return CandidatePool(
            cap_group=np.array(groups, dtype=np.int64) if accounts else None,
            caps=np.array(caps, dtype=np.float64),
            cap_accounts=list(accounts),
            held=np.array([c.gpus for c in candidates], dtype=np.float64),
            job_ids=[c.job_id for c in candidates],
            rules=[c.rule for c in candidates],
            lost=np.array([c.lost_gpu_seconds for c in candidates], dtype=np.float64),
            standing=np.array([c.standing for c in candidates], dtype=np.float64),
            whole=np.array([int(c.gpus_per_pod) for c in candidates], dtype=np.int64),
            pod_starts=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            pod_nodes=nodes,
        )


class VictimList(Sequence[Candidate]):
    """Thousands of victims as arrays; each `Candidate` is made when it is read."""

    def __init__(
        self,
        job_ids: Sequence[str] | NDArray[np.object_],
        rules: list[str],
        lost: FloatArray,
        standing: FloatArray,
        whole: IntArray,
        allocations: dict[str, Allocation],
    ) -> None:
        self.job_ids = job_ids
        self.rules = rules
        self.lost = lost
        self.standing = standing
        self.whole = whole
        self.allocations = allocations
        """Who holds what (the cluster state's): a victim's nodes are read when it is."""

    def __len__(self) -> int:
        return len(self.job_ids)

    @overload
    def __getitem__(self, row: int) -> Candidate: ...

    @overload
    def __getitem__(self, row: slice) -> list[Candidate]: ...

    def __getitem__(self, row: int | slice) -> Candidate | list[Candidate]:
        if isinstance(row, slice):
            return [self[i] for i in range(*row.indices(len(self)))]
        job_id = str(self.job_ids[row])
        allocation = self.allocations.get(job_id)
        nodes = allocation.nodes if allocation is not None else np.zeros(0, dtype=np.int64)
        return Candidate(
            job_id=job_id,
            rule=self.rules[row],
            lost_gpu_seconds=float(self.lost[row]),
            standing=float(self.standing[row]),
            nodes=nodes,
            gpus_per_pod=float(self.whole[row]),
        )


def _slot_marks(owners: NDArray[np.integer], bound: int) -> NDArray[np.bool_]:
    """Per slot in [0, bound), whether it is among `owners`; the extra last entry marks -1
    (nobody)."""
    seen = np.zeros(bound + 1, dtype=bool)
    seen[owners.reshape(-1)] = True
    return seen


def _distinct_slots(owners: NDArray[np.integer], bound: int) -> IntArray:
    """Sorted distinct slots in [0, bound) among `owners` (-1 for nobody, ignored), by marking
    rather than sorting: the values are many and bounded."""
    distinct: IntArray = _slot_marks(owners, bound)[:-1].nonzero()[0]
    return distinct


def _touching(victim_nodes: Sequence[IntArray], gang_nodes: IntArray) -> NDArray[np.bool_]:
    """Per victim (its pods' nodes), whether any of its pods is on one of `gang_nodes`."""
    sizes = np.fromiter((nodes.size for nodes in victim_nodes), dtype=np.int64)
    owner = np.repeat(np.arange(sizes.size), sizes)
    touched = np.zeros(sizes.size, dtype=bool)
    touched[owner[np.isin(np.concatenate(victim_nodes), gang_nodes)]] = True
    return touched


@dataclass(frozen=True)
class _Nowhere:
    """No domain of the gang's required level can hold it with every candidate gone, by the
    aggregates' upper bounds: `most` pods in the best one."""

    most: int


@dataclass(frozen=True)
class _AllowedRoom:
    """Innermost domains read node by node with the jobs the contract allows gone: each
    one's `room` in pods (in the order asked), and what was read, in node order: the `nodes`,
    their GPUs' `owners`, which GPUs allowed jobs hold (`held`), the slots met (`marks`, one
    per slot plus one for GPUs nobody holds; `slots`, those held) and their `verdicts`;
    `by_node` and `sizes` map the domains to the nodes."""

    room: IntArray
    nodes: IntArray
    owners: NDArray[np.int32]
    held: NDArray[np.bool_]
    marks: NDArray[np.bool_]
    slots: IntArray
    verdicts: SlotVerdicts
    by_node: IntArray
    sizes: IntArray


def _cheapest_required_domain(
    domain_of_leaf: IntArray,
    pods: int,
    now_room: IntArray,
    gain: IntArray,
    helpful: IntArray,
    ratio: FloatArray,
) -> tuple[IntArray, int] | _Nowhere | None:
    """For a gang that must lie in one domain of a level above the innermost (`domain_of_leaf`
    maps each innermost domain to it): the domain whose shortfall (its pods beyond the room its
    innermost domains have now) the `helpful` ones cover at the least cost, taken by `ratio`
    (cost per pod gained, aligned with `helpful`) cheapest first. Returns that domain's helpful
    innermost domains in that order and its shortfall; `_Nowhere` when no domain's shortfall
    can be covered (with `now_room + gain` an upper bound of each innermost domain's room, no
    victim set can work); None when some domain has no shortfall (the aggregates cannot tell
    why the gang does not fit)."""
    n_domains = int(domain_of_leaf.max()) + 1 if domain_of_leaf.size else 0
    room_now = np.bincount(domain_of_leaf, weights=now_room, minlength=n_domains)
    shortfall = pods - room_now.astype(np.int64)
    if (shortfall <= 0).any():
        return None
    room_most = room_now + np.bincount(
        domain_of_leaf[helpful], weights=gain[helpful], minlength=n_domains
    )
    if (room_most < pods).all():
        return _Nowhere(int(room_most.max()))
    domains = domain_of_leaf[helpful]
    order = np.lexsort((ratio, domains))
    leaves, domains = helpful[order], domains[order]
    gains = gain[leaves]
    reach = np.cumsum(gains)
    spent = np.cumsum(ratio[order] * gains)
    every = np.arange(n_domains)
    first = np.searchsorted(domains, every, side="left")
    last = np.searchsorted(domains, every, side="right")
    reach_before = np.where(first > 0, reach[np.maximum(first - 1, 0)], 0)
    spent_before = np.where(first > 0, spent[np.maximum(first - 1, 0)], 0.0)
    # Gains are positive, so the running sums grow: one search finds each domain's prefix.
    enough = np.searchsorted(reach, reach_before + shortfall, side="left")
    covered = enough < last
    cost = np.where(covered, spent[np.minimum(enough, reach.size - 1)] - spent_before, np.inf)
    best = int(np.argmin(cost))
    return leaves[first[best] : last[best]], int(shortfall[best])


def _subsets(count: int) -> NDArray[np.int64]:
    """Every subset of `count` items as 0/1 rows, the empty set first."""
    cached = _SUBSETS.get(count)
    if cached is None:
        cached = (np.arange(2**count)[:, None] >> np.arange(count)) & 1
        _SUBSETS[count] = cached
    return cached


_SUBSETS: dict[int, NDArray[np.int64]] = {}


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
        self.largest_leaf_gpus = int(
            np.add.reduceat(topology.gpu_count.astype(np.int64), self.leaf_starts[:-1]).max()
        )

    def plan(
        self,
        preemptor: str,
        request: GangRequest,
        candidates: Sequence[Candidate] | CandidatePool,
        known_not_to_fit: bool = False,
    ) -> PreemptionPlan | str:
        """A plan, or the reason no set of allowed victims makes room.

        `known_not_to_fit` says the caller has just seen the gang not fit without evictions
        (a scheduling cycle plans preemption only then); otherwise a gang bound to one domain
        is first placed as things are, and needs no victim if it fits.
        """
        if not len(candidates):
            return "no running job may be preempted for it under the contract"
        pool = candidates if isinstance(candidates, CandidatePool) else CandidatePool.of(candidates)
        # Gangs bound to one innermost domain (required there, or a single pod) are searched
        # domain by domain; others may combine free room and victims across domains.
        if self.is_one_domain(request):
            if not known_not_to_fit:
                # Each domain is checked with its own victims gone, not for room elsewhere.
                as_is = place(self.state, request, self.policy, exact_reasons=False)
                if isinstance(as_is, Placement):
                    return PreemptionPlan(preemptor, (), as_is, self.impact.key([]), True)
            local = self._one_domain(preemptor, request, pool)
            if local is not None:
                return local
        spread = self._many_domains(preemptor, request, pool)
        if isinstance(spread, PreemptionPlan):
            return spread
        fallback, everything = spread
        if isinstance(everything, _Proven):
            return fallback
        if pool.caps_bind and not self.is_one_domain(request):
            # Within budget caps, evicting whole domains may take too much from one account:
            # a set chosen exactly to open one innermost domain may stay within them.
            local = self._one_domain(preemptor, request, pool, confined=False)
            if local is not None:
                return self._spare(preemptor, request, local)
        return self._explain(request, pool, fallback, everything)

    def _within_required(
        self,
        request: GangRequest,
        now_room: IntArray,
        gain: IntArray,
        helpful: IntArray,
        ratio: FloatArray,
    ) -> tuple[IntArray, int] | _Nowhere | None:
        """With a required level above the innermost domains, the innermost domains to open
        (cheapest first) and the shortfall to cover inside the one required domain where that
        costs least (`_cheapest_required_domain`): room opened in other domains of that level
        would not help the gang. `_Nowhere` when no such domain can be opened enough; None
        without such a level, or when that does not apply."""
        required = request.required
        if required <= 0 or required >= self.leaf_level:
            return None
        return _cheapest_required_domain(
            self.domain_of_leaf(required), request.pods, now_room, gain, helpful, ratio
        )

    def domain_of_leaf(self, level: int) -> IntArray:
        """Each innermost domain's domain at `level` (remembered per level)."""
        known = self._leaf_domains.get(level)
        if known is None:
            domains = self.state.topology.node_domain[level][self.leaf_starts[:-1]]
            known = self._leaf_domains[level] = domains.astype(np.int64)
        return known

    def is_one_domain(self, request: GangRequest) -> bool:
        return request.pods == 1 or (request.required == self.leaf_level and self.leaf_level > 0)

    def _explain(
        self,
        request: GangRequest,
        pool: CandidatePool,
        fallback: str,
        everything: PlacementResult | None = None,
    ) -> str:
        """Why no victim set works: what the job would still lack with every candidate gone
        (`everything`: the placement with every candidate gone, when already tried)."""
        if everything is None:
            held = self.state.allocations
            with self.state.parts_released([held[job_id] for job_id in pool.job_ids]):
                everything = place(self.state, request, self.policy)
        if isinstance(everything, Placement):
            return fallback
        return f"even evicting all {len(pool)} preemptible jobs leaves no room: {everything.reason}"

    # --- shared ---------------------------------------------------------------------------------
    def _pods_fit(self, free: IntArray, request: GangRequest) -> IntArray:
        """Pods each node could hold with `free` whole GPUs (GPU count only)."""
        if request.gpus_per_pod == 0:
            return free * 0 + request.pods
        if request.is_fractional:
            return free * (MILLI_PER_GPU // request.gpu_milli)
        return free // request.gpus_per_pod

    def _usable(self, nodes: IntArray, request: GangRequest) -> NDArray[np.bool_]:
        usable: NDArray[np.bool_] = self.state.health[nodes] == 0
        if request.allowed_models is not None:
            usable &= np.isin(self.state.topology.gpu_model[nodes], request.allowed_models)
        return usable

    def _verify(
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
            with state.released_on_nodes([held[v.job_id] for v in victims], first, last):
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
        with self.state.parts_released([held[v.job_id] for v in victims]):
            return place(self.state, request, self.policy, exact_reasons=exact_reasons)

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
            touching = _touching([v.nodes for v in victims], placed.allocation.nodes).nonzero()[0]
            if touching.size < len(victims):
                victims = [victims[i] for i in touching.tolist()]
        return PreemptionPlan(preemptor, tuple(victims), placed, self.impact.key(victims), exact)

    # --- one innermost domain ------------------------------------------------------------------
    def _one_domain(
        self, preemptor: str, request: GangRequest, pool: CandidatePool, confined: bool = True
    ) -> PreemptionPlan | None:
        """Only the innermost domains some candidate touches are looked at: a domain without
        candidates cannot gain room. `confined`: the gang must stay in the domain opened for it
        (else the placement search may place it anywhere once the victims left)."""
        state, topology = self.state, self.state.topology
        if pool.pod_nodes.size == 0:
            return None
        # Per innermost domain a candidate touches: room if every candidate there left (an
        # upper bound to rank domains), the work that loses, and a lower bound of it.
        with_lower = (
            type(self.impact) is LeastLostWork
            and not request.is_fractional
            and request.gpus_per_pod > 0
        )
        if request.gpus_per_pod == 0:
            per_gpu, per_pod, per_node = 0, 1, request.pods
        elif request.is_fractional:
            per_gpu, per_pod, per_node = MILLI_PER_GPU // request.gpu_milli, 1, 0
        else:
            per_gpu, per_pod, per_node = 1, request.gpus_per_pod, 0
        leaves, room, bound, lower_bounds, pair_leaf, pair_owner = kernels.domains_opened_by(
            pool.pod_starts,
            pool.pod_nodes,
            pool.whole,
            pool.lost,
            self.leaf_of_node,
            self.leaf_starts,
            state.free_whole_gpus,
            topology.gpu_count,
            state.health,
            topology.gpu_model,
            request.model_allowed(topology),
            per_gpu,
            per_pod,
            per_node,
            request.pods * request.gpus_per_pod,
            with_lower,
        )
        qualifying = (room >= request.pods).nonzero()[0]
        if qualifying.size == 0:
            return None
        lower = lower_bounds if with_lower else None
        order = qualifying[bound[qualifying].argsort(kind="stable")][:DOMAINS_EXAMINED]
        best: PreemptionPlan | None = None
        for position in order.tolist():
            if best is not None and lower is not None:
                # Least lost work first: a domain whose every victim set loses more than the
                # best found cannot win (a small tolerance keeps float ties examined).
                if lower[position] > best.impact[0] * (1 + 1e-9) + 1e-9:
                    continue
            members = pair_owner[pair_leaf == position]
            chosen = self._choose_in_leaf(int(leaves[position]), request, pool, members)
            if chosen is None:
                continue
            victims, exact = chosen
            if best is not None and self.impact.key(victims) >= best.impact:
                continue
            leaf = int(leaves[position]) if confined else None
            plan = self._verify(preemptor, request, victims, exact and confined, leaf)
            if plan is not None and (best is None or plan.impact < best.impact):
                best = plan
        return best

    def _choose_in_leaf(
        self, leaf: int, request: GangRequest, pool: CandidatePool, members: IntArray
    ) -> tuple[list[Candidate], bool] | None:
        """The least-impact subset of the `members` rows of `pool` that gives the leaf room."""
        state, topology = self.state, self.state.topology
        first, last = topology.domain_range(self.leaf_level, leaf)
        healthy = self._usable(np.arange(first, last), request)
        free = state.free_whole_gpus[first:last].astype(np.int64)
        cap = topology.gpu_count[first:last].astype(np.int64)
        # freed[v, n]: whole GPUs victim v frees on node n of this leaf. Built in Python: a
        # leaf holds a few candidates of a few pods each, fewer items than numpy calls.
        count = members.size
        freed_rows = [[0] * (last - first) for _ in range(count)]
        pod_starts, pod_nodes = pool.pod_starts, pool.pod_nodes
        for row, member in enumerate(members.tolist()):
            gpus = int(pool.whole[member])
            freed_row = freed_rows[row]
            for node in pod_nodes[pod_starts[member] : pod_starts[member + 1]].tolist():
                if first <= node < last:
                    freed_row[node - first] += gpus
        freed = np.array(freed_rows, dtype=np.int64).reshape(count, last - first)

        def room(selection: NDArray[np.int64]) -> IntArray:
            after = np.minimum(free[None, :] + selection @ freed, cap[None, :])
            fits: IntArray = (self._pods_fit(after, request) * healthy[None, :]).sum(axis=1)
            return fits

        if count <= EXACT_VICTIMS:
            subsets = _subsets(count)
            feasible = (
                (room(subsets) >= request.pods) & pool.within_caps(subsets, members)
            ).nonzero()[0]
            if feasible.size == 0:
                return None
            if type(self.impact) is LeastLostWork:
                # The default key is a sum per victim: rank every subset with one matrix product.
                per_victim = np.array(
                    [pool.lost[members], np.ones(count), pool.standing[members]]
                ).T
                totals = subsets[feasible] @ per_victim
                winner = feasible[np.lexsort((totals[:, 2], totals[:, 1], totals[:, 0]))[0]]
            else:
                keys = [
                    self.impact.key(pool.take(members[np.flatnonzero(subsets[s])]))
                    for s in feasible
                ]
                winner = feasible[min(range(len(keys)), key=keys.__getitem__)]
            return pool.take(members[subsets[winner].nonzero()[0]]), True
        victims = pool.take(members)
        order = sorted(range(count), key=lambda i: self.impact.key([victims[i]]))
        selection = np.zeros((1, count), dtype=np.int64)
        for index in order:
            selection[0, index] = 1
            if not pool.within_caps(selection, members)[0]:
                # Its account would fall below its budget with the victims taken so far.
                selection[0, index] = 0
                continue
            if room(selection)[0] >= request.pods:
                break
        else:
            return None
        # Spare the costliest victims that are not needed, so that none can be spared.
        for index in reversed(order):
            if selection[0, index]:
                selection[0, index] = 0
                if room(selection)[0] < request.pods:
                    selection[0, index] = 1
        return [victims[i] for i in np.flatnonzero(selection[0])], False

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
            usable = (state.health == 0).astype(np.int64)
            free = state.free_whole_gpus.astype(np.int64)
            now_room = np.add.reduceat(self._pods_fit(free, request) * usable, starts[:-1])
            np.add.at(free, pool.pod_nodes, pool.whole[pod_owner])
            potential = np.minimum(free, topology.gpu_count) * usable
            return now_room, np.add.reduceat(self._pods_fit(potential, request), starts[:-1])
        # Now: from each domain's count of healthy nodes by free whole GPUs. With the
        # candidates gone: that plus the change on the nodes they hold, not a pass over every
        # node of the cluster.
        nodes_by_free = state.free_hist[self.leaf_level].sum(axis=1, dtype=np.int64)
        fit_by_free = self._pods_fit(np.arange(nodes_by_free.shape[1], dtype=np.int64), request)
        now_room: IntArray = nodes_by_free @ fit_by_free
        freed_per_pod = pool.whole[pod_owner]
        if pool.pod_nodes.size * 16 >= topology.n_nodes:
            # Pods on as many as a sixteenth of the nodes: counted over every node, cheaper
            # than sorting them (a node whose pods free no whole GPU gains no room).
            freed_everywhere = np.bincount(
                pool.pod_nodes, weights=freed_per_pod, minlength=topology.n_nodes
            )
            nodes = np.flatnonzero(freed_everywhere)
            freed = freed_everywhere[nodes]
        else:
            nodes, inverse = distinct_inverse(pool.pod_nodes)
            freed = np.bincount(inverse, weights=freed_per_pod, minlength=nodes.size)
        free = state.free_whole_gpus[nodes].astype(np.int64)
        usable = state.health[nodes] == 0
        potential = np.minimum(free + freed.astype(np.int64), topology.gpu_count[nodes])
        gained = (self._pods_fit(potential, request) - self._pods_fit(free, request)) * usable
        room = now_room + np.bincount(
            self.leaf_of_node[nodes], weights=gained, minlength=now_room.size
        ).astype(np.int64)
        return now_room, room

    def _many_domains(
        self, preemptor: str, request: GangRequest, pool: CandidatePool
    ) -> PreemptionPlan | tuple[str, PlacementResult | _Proven | None]:
        """A plan, or why none was found with the placement tried with every candidate gone
        (None when not tried, `_PROVEN` when the aggregates prove it fails)."""
        topology = self.state.topology
        pod_owner = pool.pod_owner
        now_room, room = self._room_now_and_after(request, pool, pod_owner)
        granule = request.granule(self.leaf_level)
        now_room, room = now_room // granule * granule, room // granule * granule
        gain = room - now_room
        need = request.pods - int(now_room.sum())
        helpful = np.flatnonzero(gain > 0)
        if helpful.size == 0 or int(gain[helpful].sum()) < need:
            most = int(room.sum())
            text = (
                f"even evicting all {len(pool)} preemptible jobs leaves room for at most "
                f"{most} of its {request.pods} pods"
            )
            if granule > 1:
                text += f" in whole slices of {granule}"
            if request.is_fractional or request.gpus_per_pod == 0:
                # Shared GPUs' free fractions are not counted above: the placement engine
                # answers for such pods.
                return text, None
            # Counted from whole free GPUs on every healthy node, an upper bound of what the
            # placement engine could place with every candidate gone: the job's reason says so
            # without placing it.
            return text, _PROVEN
        # (leaf, candidate) pairs, each once, as one code per pair.
        n_candidates = len(pool)
        pair_codes = distinct(self.leaf_of_node[pool.pod_nodes] * n_candidates + pod_owner)
        pair_leaf, pair_owner = pair_codes // n_candidates, pair_codes % n_candidates
        leaf_cost = np.bincount(
            pair_leaf, weights=pool.lost[pair_owner], minlength=topology.n_domains(self.leaf_level)
        )
        # Cheapest room first; a domain's cost counts every candidate touching it.
        ratio = leaf_cost[helpful] / gain[helpful]
        within = self._within_required(request, now_room, gain, helpful, ratio)
        if isinstance(within, _Nowhere):
            level = topology.domain_levels[request.required]
            text = (
                f"even evicting all {len(pool)} preemptible jobs leaves no {level} with room for "
                f"more than {within.most} of its {request.pods} pods"
            )
            if granule > 1:
                text += f" in whole slices of {granule}"
            # Upper bounds as above: proven for whole-GPU pods only.
            proven = not (request.is_fractional or request.gpus_per_pod == 0)
            return text, (_PROVEN if proven else None)
        if within is not None:
            order, need = within
        else:
            order = helpful[np.argsort(ratio, kind="stable")]
        covered = np.cumsum(gain[order])
        chosen_leaves = order[: int(np.searchsorted(covered, need)) + 1]
        in_chosen = np.isin(pair_leaf, chosen_leaves)
        # Within each account's budget cap: the cheapest of its victims per GPU are kept.
        rows = pool.capped(distinct(pair_owner[in_chosen]))
        victims = pool.take(rows)
        placed = self._place_without(request, victims)
        plan = self._plan_if_placed(preemptor, victims, False, placed)
        if plan is None:
            # Topology above the leaves (required/preferred) may want other domains: fall back
            # to every candidate (unless those were every candidate), then spare what is not
            # needed.
            everyone = pool.capped(np.arange(len(pool)))
            if len(victims) < everyone.size:
                victims = pool.take(everyone)
                placed = self._place_without(request, victims)
                plan = self._plan_if_placed(preemptor, victims, False, placed)
            if plan is None:
                if pool.caps_bind:
                    return (
                        "no victim set found that satisfies the job's topology and leaves "
                        "every account at or above its budget",
                        None,
                    )
                return "no victim set found that satisfies the job's topology", placed
        return self._spare(preemptor, request, plan)

    # --- across many domains, from the aggregates ----------------------------------------------
    def across_domains(
        self,
        preemptor: str,
        request: GangRequest,
        index: PreemptibleIndex,
        verdicts_of: Callable[[IntArray], SlotVerdicts],
        now: float,
        only_unallocated: bool = False,
    ) -> PreemptionPlan | str | None:
        """Victims for a gang of whole-GPU pods spread over innermost domains, without a list
        of every candidate: None when this path does not apply or finds nothing (the general
        search then runs), a reason when the aggregates prove that nothing can work.

        Per domain, the pods it holds now (in whole slices) come from the free-GPU histogram,
        and the most it could gain from its free plus unprotected GPUs. Domains are taken by
        the work lost evicting all their unprotected jobs per pod gained; their room is then
        counted node by node with only the jobs the contract allows, in growing batches, until
        the gang's shortfall is covered (inside one domain of its required level, if that lies
        above these). Every allowed job on a chosen domain is a victim. The placement engine
        checks the set on the state with those jobs' GPUs in the chosen domains freed (their
        pods elsewhere are not counted: a conservative check); of a set too large for `_spare`,
        only the jobs on the nodes the gang takes are kept.
        `only_unallocated`: the contract lets the preemptor take unallocated work only, so only
        its GPUs count towards the most a domain could gain.
        """
        if request.is_fractional or request.gpus_per_pod == 0 or self.leaf_level == 0:
            return None
        state, topology = self.state, self.state.topology
        per_pod = request.gpus_per_pod
        index.refresh(now)
        hist = state.free_hist[self.leaf_level]
        if request.allowed_models is not None:
            hist = hist[:, request.allowed_models, :]
        pods_for_k = np.arange(hist.shape[2], dtype=np.int64) // per_pod
        granule = request.granule(self.leaf_level)
        one_model = hist[:, 0, :] if hist.shape[1] == 1 else hist.sum(axis=1, dtype=np.int64)
        now_room = pods_by_free(one_model, pods_for_k) // granule * granule
        freeable = index.leaf_unallocated_freeable if only_unallocated else index.leaf_freeable
        most = (state.free_gpus[self.leaf_level] + freeable) // per_pod
        gain = most // granule * granule - now_room
        need = request.pods - int(now_room.sum())
        helpful = np.flatnonzero(gain > 0)
        if helpful.size == 0:
            return None
        if int(gain[helpful].sum()) < need:
            victims = "all unallocated work" if only_unallocated else "every unprotected job"
            return f"even evicting {victims} leaves too little room in whole slices"
        cost = index.leaf_cost_bound(helpful, now)
        ratio = cost / gain[helpful]
        # Room the whole cluster has may lie in required domains other than the one the gang
        # can use: the shortfall is counted inside that one.
        within = self._within_required(request, now_room, gain, helpful, ratio)
        if isinstance(within, _Nowhere):
            victims = "all unallocated work" if only_unallocated else "every unprotected job"
            level = topology.domain_levels[request.required]
            return (
                f"even evicting {victims} leaves no {level} with room for more than "
                f"{within.most} of its {request.pods} pods in whole slices"
            )
        if within is not None:
            order, need = within
        elif need <= 0:
            return None
        else:
            order = helpful[np.argsort(ratio, kind="stable")]
        # The first batch: the domains whose upper bounds cover the shortfall, and a few more.
        # Domains are chosen in this order whatever the batches, so their size only trades
        # nodes read for rounds; a round costs far less than reading an eighth more nodes.
        batch = int(np.searchsorted(np.cumsum(gain[order]), need)) + 1 + DOMAINS_EXAMINED
        covered = done = 0
        # Per batch, the chosen domains' nodes (in node order), their owners and which of
        # those the contract allows.
        pieces: list[tuple[IntArray, NDArray[np.int32], NDArray[np.bool_]]] = []
        # Per slot, whether the contract allows evicting it; the extra last entry answers for
        # GPUs nobody holds (owner -1).
        allowed = np.zeros(index.ids.shape[0] + 1, dtype=bool)
        # The last batch's slot marks, when every one of its domains was chosen.
        whole_batch_marks: NDArray[np.bool_] | None = None
        while covered < need and done < order.size:
            leaves = order[done : done + batch]
            done += leaves.size
            batch *= 2
            read = self._room_with_allowed(leaves, request, index, verdicts_of, allowed, granule)
            nodes, owners, held = read.nodes, read.owners, read.held
            unique, verdicts = read.slots, read.verdicts
            gained = np.maximum(read.room - now_room[leaves], 0)
            reach = covered + np.cumsum(gained)
            count = min(int(np.searchsorted(reach, need)) + 1, leaves.size)
            covered = int(reach[count - 1])
            picked = np.zeros(leaves.size, dtype=bool)
            picked[:count] = gained[:count] > 0
            if picked.all():
                pieces.append((nodes, owners, held))
                whole_batch_marks = read.marks
            else:
                whole_batch_marks = None
                rows = np.flatnonzero(np.repeat(picked[read.by_node], read.sizes))
                pieces.append((nodes[rows], take_rows(owners, rows), take_rows(held, rows)))
        if covered < need:
            # Every domain where evictions could make room (in the one required domain chosen,
            # if any) was read with only the jobs the contract allows.
            return self._short_with_allowed(
                request, index, verdicts_of, allowed, now_room, helpful, order, covered
            )
        if len(pieces) == 1:
            # The victims are the batch's allowed slots that hold GPUs on the chosen domains,
            # with the batch's verdicts.
            nodes, owners, held = pieces[0]
            present = (
                whole_batch_marks
                if whole_batch_marks is not None
                else _slot_marks(owners, index.ids.shape[0])
            )
            rows = (present[unique] & verdicts.allowed).nonzero()[0]
            victim_slots, verdicts = unique[rows], verdicts.rows(rows)
        else:
            nodes = np.concatenate([piece[0] for piece in pieces])
            in_order = np.argsort(nodes, kind="stable")
            nodes = nodes[in_order]
            owners = take_rows(np.concatenate([piece[1] for piece in pieces]), in_order)
            held = take_rows(np.concatenate([piece[2] for piece in pieces]), in_order)
            slots = _distinct_slots(owners, index.ids.shape[0])
            victim_slots = slots[allowed[slots]]
            verdicts = verdicts_of(victim_slots)
        bounded = np.flatnonzero(np.isfinite(verdicts.limit))
        if bounded.size:
            # Every allowed job in the chosen domains would go: if that takes some account
            # below its budget, the general search chooses within the caps.
            accounts = index.account[victim_slots[bounded]]
            taken = np.bincount(accounts, weights=index.gpus[victim_slots[bounded]])
            cap = np.full(taken.size, np.inf)
            cap[accounts] = verdicts.limit[bounded]
            if (taken > cap).any():
                return self._short_within_caps(request, index, verdicts_of)
        if index.cpu_milli[victim_slots].any() or index.memory_mib[victim_slots].any():
            released = state.parts_released(index.whole_gpu_parts(nodes, held))
        else:
            released = state.gpus_released(nodes, held)
        with released:
            placed = place(state, request, self.policy)
        if not isinstance(placed, Placement):
            return None
        # Every allowed job on the chosen domains was released for the search, but only those
        # on the nodes the gang took need leave: on each of those nodes the same GPUs stay
        # free. Sets small enough for `_spare` are left to it: it spares the costliest first,
        # which the gang's first choice of nodes does not.
        if victim_slots.size > SPARE_CHECKS:
            on_gang = np.isin(nodes, placed.allocation.nodes).nonzero()[0]
            touched = _slot_marks(take_rows(owners, on_gang), index.ids.shape[0])
            keep = touched[victim_slots].nonzero()[0]
            if keep.size < victim_slots.size:
                victim_slots, verdicts = victim_slots[keep], verdicts.rows(keep)
        victims = VictimList(
            job_ids=index.ids[victim_slots],
            rules=verdicts.rules_of(np.arange(victim_slots.size)),
            lost=index.gpus[victim_slots] * np.maximum(now - index.since[victim_slots], 0.0),
            standing=verdicts.standing,
            whole=index.whole[victim_slots],
            allocations=state.allocations,
        )
        if type(self.impact) is LeastLostWork:
            impact = (float(victims.lost.sum()), float(len(victims)), float(victims.standing.sum()))
        else:
            impact = self.impact.key(victims)
        plan = PreemptionPlan(preemptor, victims, placed, impact, exact=False)
        return self._spare(preemptor, request, plan)

    def _room_with_allowed(
        self,
        leaves: IntArray,
        request: GangRequest,
        index: PreemptibleIndex,
        verdicts_of: Callable[[IntArray], SlotVerdicts],
        allowed: NDArray[np.bool_],
        granule: int,
    ) -> _AllowedRoom:
        """Per innermost domain of `leaves`, the pods it holds in whole slices once every job
        the contract allows leaves its nodes, counted node by node; `allowed` (per slot of
        the index, plus an entry for GPUs nobody holds) learns the verdicts of the jobs met."""
        state, topology = self.state, self.state.topology
        starts = self.leaf_starts
        # Nodes are read in node order (cheaper gathers, and sorted for the what-if).
        by_node = np.argsort(leaves, kind="stable")
        in_node_order = leaves[by_node]
        nodes = domain_nodes(starts, in_node_order, self.leaf_size)
        owners = take_rows(index.gpu_owner, nodes)
        marks = _slot_marks(owners, index.ids.shape[0])
        slots = marks[:-1].nonzero()[0]
        verdicts = verdicts_of(slots)
        allowed[slots] = verdicts.allowed
        held = allowed[owners]
        potential = np.minimum(
            state.free_whole_gpus[nodes] + row_sums(held), topology.gpu_count[nodes]
        ) * self._usable(nodes, request)
        sizes = starts[in_node_order + 1] - starts[in_node_order]
        offsets = np.cumsum(sizes) - sizes
        room = np.empty(leaves.size, dtype=np.int64)
        per_leaf = np.add.reduceat(potential // request.gpus_per_pod, offsets)
        room[by_node] = per_leaf // granule * granule
        return _AllowedRoom(room, nodes, owners, held, marks, slots, verdicts, by_node, sizes)

    def _short_with_allowed(
        self,
        request: GangRequest,
        index: PreemptibleIndex,
        verdicts_of: Callable[[IntArray], SlotVerdicts],
        allowed: NDArray[np.bool_],
        now_room: IntArray,
        helpful: IntArray,
        read: IntArray,
        gained: int,
    ) -> str | None:
        """Why no allowed victim set makes room, when the innermost domains `read` (of the
        `helpful` ones, where evictions could make room) gained only `gained` pods with every
        allowed job gone, short of what the gang lacks (else None: the general search decides).
        Without a required level above them, `read` is every helpful domain: the shortfall
        is proven. With one, `read` lies in one of its domains: the others' helpful domains
        are read too, and the gang has no room if no such domain could hold it."""
        granule = request.granule(self.leaf_level)
        slices = f" in whole slices of {granule}" if granule > 1 else ""
        required = request.required
        if required <= 0 or required >= self.leaf_level:
            most = int(now_room.sum()) + gained
            return (
                f"even evicting every job it may preempt leaves room for at most {most} of its "
                f"{request.pods} pods{slices}"
            )
        topology = self.state.topology
        domain_of_leaf = self.domain_of_leaf(required)
        n_domains = topology.n_domains(required)
        room_most = np.bincount(domain_of_leaf, weights=now_room, minlength=n_domains)
        if read.size:
            room_most[domain_of_leaf[read[0]]] += gained
        rest = np.setdiff1d(helpful, read, assume_unique=True)
        if rest.size:
            room = self._room_with_allowed(rest, request, index, verdicts_of, allowed, granule)
            rest_gained = np.maximum(room.room - now_room[rest], 0)
            room_most += np.bincount(domain_of_leaf[rest], weights=rest_gained, minlength=n_domains)
        most = int(room_most.max())
        if most >= request.pods:
            return None
        level = topology.domain_levels[required]
        return (
            f"even evicting every job it may preempt leaves no {level} with room for more than "
            f"{most} of its {request.pods} pods{slices}"
        )

    def _short_within_caps(
        self,
        request: GangRequest,
        index: PreemptibleIndex,
        verdicts_of: Callable[[IntArray], SlotVerdicts],
    ) -> str | None:
        """Under budget caps, why no allowed victim set can make room, when GPU counts prove it
        (else None: the general search decides). Evictions free at most what each account
        runs beyond its budget (its cap), plus every uncapped allowed job; an innermost domain
        holds whole slices only of GPUs free on its usable nodes, so each slice it gains costs
        at least the GPUs it lacks for one more (a whole slice's worth after the first). If the
        cheapest slices the gang still lacks cost more GPUs than the caps let free, no set
        within the caps fits, wherever the required level puts the gang.
        """
        slots = np.fromiter(index.slot_of.values(), dtype=np.int64, count=len(index.slot_of))
        verdicts = verdicts_of(slots)
        allowed, limit = slots[verdicts.allowed], verdicts.limit[verdicts.allowed]
        gpus = index.gpus[allowed]
        if (index.whole[allowed] * index.pods[allowed] != gpus).any():
            return None  # shared GPUs freed are not counted below
        capped = np.isfinite(limit)
        accounts = index.account[allowed[capped]]
        taken = np.bincount(accounts, weights=gpus[capped])
        cap = np.full(taken.size, np.inf)
        cap[accounts] = limit[capped]
        most_freed = int(np.minimum(taken, cap).sum() + gpus[~capped].sum())
        state = self.state
        usable = self._usable(np.arange(state.topology.n_nodes, dtype=np.int64), request)
        marks = np.zeros(index.ids.shape[0] + 1, dtype=bool)  # the last answers for owner -1
        marks[allowed] = True
        held = row_sums(marks[index.gpu_owner]) * usable
        free = state.free_whole_gpus.astype(np.int64) * usable
        starts = self.leaf_starts[:-1]
        leaf_free = np.add.reduceat(free, starts)
        leaf_most = leaf_free + np.add.reduceat(held, starts)
        granule = request.granule(self.leaf_level)
        slice_gpus = granule * request.gpus_per_pod
        slices_now, slices_most = leaf_free // slice_gpus, leaf_most // slice_gpus
        lacking = -(-(request.pods - int(slices_now.sum()) * granule) // granule)  # slices
        gaining = np.flatnonzero(slices_most > slices_now)
        if lacking <= 0 or int((slices_most - slices_now).sum()) < lacking:
            return None  # nothing to prove here, or proven by the aggregates before
        # The first slice a domain gains costs what it lacks of one; any later, a whole one.
        first = np.sort((slices_now[gaining] + 1) * slice_gpus - leaf_free[gaining])
        cheapest = int(first[:lacking].sum()) + max(lacking - first.size, 0) * slice_gpus
        if cheapest <= most_freed:
            return None
        room = f"{request.pods} pods"
        if granule > 1:
            room += f" in whole slices of {granule}"
        return (
            "no victim set leaves every account at or above its budget and makes room: "
            f"within the budgets evictions free at most {most_freed:,} GPUs, and room for its "
            f"{room} needs at least {cheapest:,} more"
        )

    def _spare(self, preemptor: str, request: GangRequest, plan: PreemptionPlan) -> PreemptionPlan:
        """Drop victims, costliest first, while the gang still places. Each costs one placement
        check, so this is done for sets of up to `SPARE_CHECKS` victims only."""
        spare_candidates = [] if len(plan.victims) > SPARE_CHECKS else list(plan.victims)
        for victim in sorted(spare_candidates, key=lambda v: self.impact.key([v]), reverse=True):
            trial = [v for v in plan.victims if v.job_id != victim.job_id]
            smaller = self._verify(preemptor, request, trial, exact=False) if trial else None
            if smaller is not None:
                plan = smaller
        return plan
