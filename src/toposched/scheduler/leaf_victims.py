"""The victim search of a gang bound to one innermost domain (a rack, say): only the domains
some candidate touches are looked at, cheapest first by an upper bound of the work their
candidates lose; in each, every subset of up to `EXACT_VICTIMS` candidates is tried (for a
single pod, every subset of one node's candidates), or more are taken cheapest first and spared
costliest first; the placement engine checks each choice, and the one with the least impact
wins."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import MILLI_PER_GPU
from toposched.placement.request import GangRequest
from toposched.scheduler import victim_kernels
from toposched.scheduler.candidates import (
    Candidate,
    CandidatePool,
    LeastLostWork,
    PreemptionPlan,
)
from toposched.scheduler.victim_arrays import all_subsets, one_node_subsets, subset_sums

if TYPE_CHECKING:
    from toposched.scheduler.preemption import VictimSearch

__all__ = [
    "DOMAINS_EXAMINED",
    "EXACT_VICTIMS",
    "ONE_NODE_FROM",
    "UNOPENED",
    "LeafVictims",
    "Unopened",
]

IntArray = NDArray[np.int64]

#: Up to this many candidate victims in one domain, every subset is tried (optimal choice).
EXACT_VICTIMS = 12
#: Candidate domains examined exactly per decision, cheapest first by an upper bound.
DOMAINS_EXAMINED = 16
#: From this many candidates in a domain on, a one-pod gang's exact search tries only the
#: subsets of one node's candidates (below it, trying every subset costs less than listing those).
ONE_NODE_FROM = 8


class Unopened:
    """`LeafVictims.best`'s word that no innermost domain could hold the gang even with every
    candidate in it gone (counted in whole GPUs, an upper bound of what the placement engine
    finds): with the gang not fitting as things are, no victim set lets a gang bound to one
    innermost domain run."""


UNOPENED = Unopened()


class LeafVictims:
    """The one-domain part of a `VictimSearch`: it reads the search's state, innermost domains,
    impact policy and placement checks."""

    def __init__(self, search: VictimSearch) -> None:
        self.search = search

    def best(
        self, preemptor: str, request: GangRequest, pool: CandidatePool, confined: bool = True
    ) -> PreemptionPlan | Unopened | None:
        """Only the innermost domains some candidate touches are looked at: a domain without
        candidates cannot gain room. `confined`: the gang must stay in the domain opened for it
        (else the placement search may place it anywhere once the victims left). `UNOPENED`
        when no such domain could hold a gang of whole-GPU pods with all its candidates gone;
        None when none was found otherwise."""
        state, topology = self.search.state, self.search.state.topology
        whole_gpus = not request.is_fractional and request.gpus_per_pod > 0
        if pool.pod_nodes.size == 0:
            return UNOPENED if whole_gpus else None
        if whole_gpus and request.pods * request.gpus_per_pod > self.search.largest_leaf_gpus:
            return UNOPENED  # larger than any innermost domain, emptied
        # Per innermost domain a candidate touches: room if every candidate there left (an
        # upper bound to rank domains), the work that loses, and a lower bound of it.
        with_lower = LeastLostWork.is_key_of(self.search.impact) and whole_gpus
        if request.gpus_per_pod == 0:
            per_gpu, per_pod, per_node = 0, 1, request.pods
        elif request.is_fractional:
            per_gpu, per_pod, per_node = MILLI_PER_GPU // request.gpu_milli, 1, 0
        else:
            per_gpu, per_pod, per_node = 1, request.gpus_per_pod, 0
        leaves, room, bound, lower_bounds, pair_leaf, pair_owner = victim_kernels.domains_opened_by(
            pool.pod_starts,
            pool.pod_nodes,
            pool.whole,
            pool.lost,
            self.search.leaf_of_node,
            self.search.leaf_starts,
            state.free_whole_gpus,
            topology.gpu_count,
            state.closed,
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
            return UNOPENED if whole_gpus else None
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
            chosen = self._choose(int(leaves[position]), request, pool, members)
            if chosen is None:
                continue
            victims, exact = chosen
            if best is not None and self.search.impact.key(victims) >= best.impact:
                continue
            leaf = int(leaves[position]) if confined else None
            plan = self.search.verify(preemptor, request, victims, exact and confined, leaf)
            if plan is not None and (best is None or plan.impact < best.impact):
                best = plan
        return best

    def _choose(
        self, leaf: int, request: GangRequest, pool: CandidatePool, members: IntArray
    ) -> tuple[list[Candidate], bool] | None:
        """The least-impact subset of the `members` rows of `pool` that gives the leaf room."""
        state, topology = self.search.state, self.search.state.topology
        first, last = topology.domain_range(self.search.leaf_level, leaf)
        healthy = self.search.usable(np.arange(first, last), request)
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

        def room_with(gained: NDArray[np.int64]) -> IntArray:
            """Pods the leaf holds with `gained` whole GPUs freed per node (one row each)."""
            after = np.minimum(free[None, :] + gained, cap[None, :])
            fits: IntArray = (self.search.pods_fit(after, request) * healthy[None, :]).sum(axis=1)
            return fits

        def room(selection: NDArray[np.int64]) -> IntArray:
            return room_with(selection @ freed)

        if count <= EXACT_VICTIMS:
            least_lost = LeastLostWork.is_key_of(self.search.impact)
            if least_lost and request.pods == 1 and count >= ONE_NODE_FROM:
                # One pod lands on one node, so the least-impact set takes candidates of one
                # node only (a victim elsewhere frees nothing there and adds work lost or a
                # job): only the subsets of each node's candidates are tried, in the same order.
                subsets = all_subsets(count)[one_node_subsets(freed)]
                gained = subsets @ freed
            else:
                subsets = all_subsets(count)
                gained = subset_sums(freed)
            feasible = (
                (room_with(gained) >= request.pods) & pool.within_caps(subsets, members)
            ).nonzero()[0]
            if feasible.size == 0:
                return None
            if least_lost:
                # The default key is a sum per victim: rank every subset with one matrix product.
                per_victim = np.array(
                    [pool.lost[members], np.ones(count), pool.standing[members]]
                ).T
                totals = subsets[feasible] @ per_victim
                winner = feasible[np.lexsort((totals[:, 2], totals[:, 1], totals[:, 0]))[0]]
            else:
                keys = [
                    self.search.impact.key(pool.take(members[np.flatnonzero(subsets[s])]))
                    for s in feasible
                ]
                winner = feasible[min(range(len(keys)), key=keys.__getitem__)]
            return pool.take(members[subsets[winner].nonzero()[0]]), True
        victims = pool.take(members)
        order = sorted(range(count), key=lambda i: self.search.impact.key([victims[i]]))
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
