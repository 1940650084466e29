"""Victims for gangs that fit one innermost domain: only the domains where evicting
unprotected work could make room are examined, cheapest first."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import ClusterState
from toposched.placement.request import GangRequest
from toposched.scheduler import victim_kernels
from toposched.scheduler.domain_nodes import domain_nodes
from toposched.scheduler.jobs import Job
from toposched.scheduler.leaf_victims import DOMAINS_EXAMINED
from toposched.scheduler.ledger import Ledger
from toposched.scheduler.preemption import VictimSearch

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]


@dataclass(frozen=True)
class LocalCandidates:
    """Running jobs (slots of the preemptible index) in the innermost domains where evicting
    unprotected work could fit a one-domain gang."""

    slots: IntArray
    complete: bool
    """Every domain that could hold the gang was included."""
    lasting: bool
    """Fewer than `DOMAINS_EXAMINED` domains had room, so the answer does not depend on
    which of them were cheapest."""


class LocalDomains:
    """Finds the running jobs a one-domain gang's preemption may take (see `candidates`)."""

    def __init__(self, state: ClusterState, ledger: Ledger, search: VictimSearch) -> None:
        self.state = state
        self.ledger = ledger
        self.victim_search = search

    def candidates(
        self, job: Job, now: float, only_unallocated: bool = False
    ) -> LocalCandidates | None:
        """Running jobs in the innermost domains where evicting unprotected work could fit
        `job`, for gangs that fit in one such domain; None when that shortcut does not apply.
        With `only_unallocated`, the only work counted and listed is unallocated (all the
        contract lets the job take).

        Unprotected work is unallocated work and allocated jobs past their min runtime,
        whatever their standing (the contract filters later). The per-domain aggregates of free
        and unprotected GPUs bound each domain's room from above; the domains within that bound
        are taken by the work lost evicting all their unprotected jobs, cheapest first, and
        their room is counted node by node until `DOMAINS_EXAMINED` of them have room.
        """
        request = job.request
        search = self.victim_search
        if request.is_fractional or request.gpus_per_pod == 0:
            return None
        need = request.pods * request.gpus_per_pod
        if need > search.largest_leaf_gpus:
            return None
        state, index = self.state, self.ledger.preemptible
        index.refresh(now)
        leaf_free = state.free_gpus[search.leaf_level]
        freeable = index.leaf_unallocated_freeable if only_unallocated else index.leaf_freeable
        # With each such domain, the work lost evicting every unprotected job touching it.
        possible, cost = victim_kernels.reaching(
            leaf_free, freeable, need, index.leaf_weight, index.leaf_weighted_since, now
        )
        one_domain = search.is_one_domain(request)
        nothing = LocalCandidates(np.zeros(0, dtype=np.int64), True, True)
        if possible.size == 0:
            return nothing if one_domain else None
        picked, examined, found = self._cheapest_with_room(
            possible, cost, need - leaf_free[possible], request, only_unallocated
        )
        complete = one_domain and examined == possible.size and found <= DOMAINS_EXAMINED
        if picked.size == 0:
            return nothing if one_domain else None
        slots = index.slots_on(domain_nodes(search.leaf_starts, picked, search.leaf_size))
        if only_unallocated:
            slots = slots[index.unallocated[slots]]
        # In job-name order, so that ties between equal victim sets always break the same way.
        ordered = slots[index.ids[slots].argsort(kind="stable")]
        return LocalCandidates(ordered, complete, found < DOMAINS_EXAMINED)

    def _cheapest_with_room(
        self,
        possible: IntArray,
        cost: FloatArray,
        lacking: IntArray,
        request: GangRequest,
        only_unallocated: bool,
    ) -> tuple[IntArray, int, int]:
        """Up to `DOMAINS_EXAMINED` of the `possible` innermost domains with room, cheapest
        first by `cost` (then by the GPUs each lacks now, `lacking`); with how many domains
        were examined and how many had room.

        The cheapest few first without sorting every domain: those up to the batch-th cost
        (ties included), then, if they do not give enough domains with room, all the rest."""
        chosen: list[IntArray] = []
        found = examined = 0
        batch = 2 * DOMAINS_EXAMINED
        cheapest: BoolArray | None = None
        if possible.size > batch:
            cheapest = cost <= np.partition(cost, batch - 1)[batch - 1]
        for stage_number in range(1 if cheapest is None else 2):
            if found >= DOMAINS_EXAMINED:
                break
            if cheapest is None:
                stage, stage_cost, stage_lacking = possible, cost, lacking
            else:
                # The rest only when the cheapest few fall short (rarely on a busy fleet).
                kept = cheapest if stage_number == 0 else ~cheapest
                stage, stage_cost, stage_lacking = possible[kept], cost[kept], lacking[kept]
            ranked = stage[np.lexsort((stage_lacking, stage_cost))]
            done = 0
            while done < ranked.size and found < DOMAINS_EXAMINED:
                leaves = ranked[done : done + batch]
                done += leaves.size
                examined += leaves.size
                batch *= 2
                fits = self._leaves_with_room(leaves, request, only_unallocated)
                chosen.append(fits[: DOMAINS_EXAMINED - found])
                found += fits.size
        return np.concatenate(chosen), examined, found

    def _leaves_with_room(
        self, leaves: IntArray, request: GangRequest, only_unallocated: bool = False
    ) -> IntArray:
        """Those of `leaves` (innermost domains) where free GPUs plus those of unprotected pods
        (with `only_unallocated`, of unallocated pods) give room for the gang, counted node by
        node."""
        state, topology = self.state, self.state.topology
        index = self.ledger.preemptible
        room = victim_kernels.pods_in_domains(
            leaves,
            self.victim_search.leaf_starts,
            state.free_whole_gpus,
            index.node_unallocated_freeable if only_unallocated else index.node_freeable,
            topology.gpu_count,
            state.closed,
            topology.gpu_model,
            request.model_allowed(topology),
            request.gpus_per_pod,
        )
        fits: IntArray = leaves[room >= request.pods]
        return fits
