"""Victims for gangs spread over many innermost domains, chosen from per-domain aggregates
without listing every candidate."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import take_rows
from toposched.cluster.statement import trial
from toposched.placement.capacity import pods_by_free, pods_per_free
from toposched.placement.request import GangRequest
from toposched.placement.search import Placement, place
from toposched.scheduler import spread_kernels
from toposched.scheduler.candidates import (
    LeastLostWork,
    PreemptionPlan,
    VictimList,
)
from toposched.scheduler.leaf_victims import DOMAINS_EXAMINED
from toposched.scheduler.preemptible import PreemptibleIndex
from toposched.scheduler.preemption import SPARE_CHECKS, VictimSearch
from toposched.scheduler.refusals import Refusal, RefusalCode
from toposched.scheduler.slot_verdicts import SlotVerdicts
from toposched.scheduler.victim_arrays import (
    AllowedRoom,
    Nowhere,
    distinct_slots,
    domain_sums,
    slot_marks,
)
from toposched.scheduler.victim_release import whole_gpu_parts

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class _Room:
    """Per innermost domain: the pods it holds `now` and the most it could `gain` (whole
    slices of `granule` pods); the pods held now in all, and the domains that gain. Shared
    by the searches of one pod shape while the cluster and the index stay as they are: the
    arrays are read-only."""

    now: IntArray
    gain: IntArray
    now_total: int
    helpful: IntArray
    gain_total: int
    granule: int


@dataclass
class _Known:
    """The `_Room`s found (by pod shape and victims taken) while `index` and the cluster stay
    as `stamp` says (versions of both), and the costs per pod gained of their helpful domains
    (by the same key) at time `at`."""

    index: PreemptibleIndex | None
    stamp: tuple[int, int]
    rooms: dict[tuple[object, ...], _Room] = field(default_factory=dict)
    at: float = -np.inf
    ratios: dict[tuple[object, ...], FloatArray] = field(default_factory=dict)


@dataclass
class _Read:
    """The domains read so far: per batch, the chosen domains' nodes (in node order), their
    owners and which GPUs allowed jobs hold; the verdicts learnt per slot (`allowed`, plus an
    entry for GPUs nobody holds); the pods covered; and the last batch's slot marks (when
    every one of its domains was chosen), slots and verdicts."""

    allowed: NDArray[np.bool_]
    pieces: list[tuple[IntArray, NDArray[np.int32], NDArray[np.bool_]]] = field(
        default_factory=list
    )
    covered: int = 0
    whole_batch_marks: NDArray[np.bool_] | None = None
    slots: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    verdicts: SlotVerdicts | None = None


@dataclass(frozen=True)
class _Chosen:
    """The victims: the nodes read on the chosen domains, their GPUs' owners and which GPUs
    the victims hold; the victims' slots and verdicts."""

    nodes: IntArray
    owners: NDArray[np.int32]
    held: NDArray[np.bool_]
    slots: IntArray
    verdicts: SlotVerdicts


class SpreadSearch:
    """`across_domains` for a `VictimSearch`: its state, policy, impact and innermost
    domains."""

    def __init__(self, search: VictimSearch) -> None:
        self.search = search
        self.state = search.state
        self.policy = search.policy
        self.impact = search.impact
        self.leaf_level = search.leaf_level
        self.leaf_starts = search.leaf_starts
        self.leaf_size = search.leaf_size
        self._known = _Known(None, (-1, -1))

    def across_domains(
        self,
        preemptor: str,
        request: GangRequest,
        index: PreemptibleIndex,
        verdicts_of: Callable[[IntArray], SlotVerdicts],
        now: float,
        only_unallocated: bool = False,
    ) -> PreemptionPlan | Refusal | None:
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
        pods elsewhere are not counted: a conservative check); of a set too large for `spare`,
        only the jobs on the nodes the gang takes are kept.
        `only_unallocated`: the contract lets the preemptor take unallocated work only, so only
        its GPUs count towards the most a domain could gain.
        """
        if request.is_fractional or request.gpus_per_pod == 0 or self.leaf_level == 0:
            return None
        index.refresh(now)
        shape = (
            request.gpus_per_pod,
            request.granule(self.leaf_level),
            None if request.allowed_models is None else tuple(request.allowed_models.tolist()),
            only_unallocated,
        )
        room = self._aggregates(shape, request, index, only_unallocated)
        helpful = room.helpful
        if helpful.size == 0:
            return None
        victims = "all unallocated work" if only_unallocated else "every unprotected job"
        gained, need = room.gain_total, request.pods - room.now_total
        if gained < need:
            return Refusal(
                RefusalCode.NO_ROOM,
                f"even evicting {victims} leaves too little room in whole slices",
                most_pods=room.now_total + gained,
            )
        ratio = self._ratio(shape, room, index, now)
        # Room the whole cluster has may lie in required domains other than the one the gang
        # can use: the shortfall is counted inside that one.
        within = self.search.within_required(request, room.now, room.gain, helpful, ratio)
        if isinstance(within, Nowhere):
            level = self.state.topology.domain_levels[request.required]
            return Refusal(
                RefusalCode.NO_ROOM,
                f"even evicting {victims} leaves no {level} with room for more than "
                f"{within.most:,} of its {request.pods:,} pods in whole slices",
                {"most": within.most, "pods": request.pods},
                most_pods=within.most,
            )
        if within is not None:
            order, need = within
        elif need <= 0:
            return None
        else:
            order = helpful[np.argsort(ratio, kind="stable")]
        read = self._read(request, index, verdicts_of, room, order, need)
        if read.covered < need:
            # Every domain where evictions could make room (in the one required domain chosen,
            # if any) was read with only the jobs the contract allows.
            return self._short_with_allowed(
                request,
                index,
                verdicts_of,
                read.allowed,
                room.now,
                room.gain,
                helpful,
                order,
                read.covered,
            )
        chosen = self._victims(read, index, verdicts_of)
        if self._beyond_caps(chosen, index):
            # Every allowed job in the chosen domains would go, and that takes some account
            # below its budget: the general search chooses within the caps.
            return self._short_within_caps(request, index, verdicts_of)
        return self._plan(preemptor, request, index, chosen, now)

    def _aggregates(
        self,
        shape: tuple[object, ...],
        request: GangRequest,
        index: PreemptibleIndex,
        only_unallocated: bool,
    ) -> _Room:
        """Per innermost domain, from the free-GPU histogram and the index's aggregates: the
        pods it holds now and the most it could gain, in whole slices (`shape`: what of the
        request and the victims taken enters them; remembered while the cluster and the index
        stay as they are, for the other searches of a cycle)."""
        stamp = (self.state.version, index.aggregates_version)
        known = self._known
        if known.index is not index or known.stamp != stamp:
            known = self._known = _Known(index, stamp)
        room = known.rooms.get(shape)
        if room is None:
            room = known.rooms[shape] = self._leaf_room(request, index, only_unallocated)
        return room

    def _ratio(
        self, shape: tuple[object, ...], room: _Room, index: PreemptibleIndex, now: float
    ) -> FloatArray:
        """Per helpful innermost domain of `room`, the work lost evicting every unprotected
        job touching it per pod it could gain (remembered as `_aggregates` are, at one time)."""
        known = self._known
        if known.at != now:
            known.at = now
            known.ratios.clear()
        ratio = known.ratios.get(shape)
        if ratio is None:
            helpful = room.helpful
            ratio = known.ratios[shape] = index.leaf_cost_bound(helpful, now) / room.gain[helpful]
            ratio.flags.writeable = False
        return ratio

    def _leaf_room(
        self, request: GangRequest, index: PreemptibleIndex, only_unallocated: bool
    ) -> _Room:
        """`_aggregates`, counted."""
        state, per_pod = self.state, request.gpus_per_pod
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
        helpful = np.flatnonzero(gain > 0)
        for array in (now_room, gain, helpful):
            array.flags.writeable = False
        return _Room(
            now_room, gain, int(now_room.sum()), helpful, int(gain[helpful].sum()), granule
        )

    def _read(
        self,
        request: GangRequest,
        index: PreemptibleIndex,
        verdicts_of: Callable[[IntArray], SlotVerdicts],
        room: _Room,
        order: IntArray,
        need: int,
    ) -> _Read:
        """Read the domains of `order` node by node, in growing batches, until the pods they
        gain with the allowed jobs gone cover `need`; keep the nodes of those that gain."""
        # The first batch: the domains whose upper bounds cover the shortfall, and a few more.
        # Domains are chosen in this order whatever the batches, so their size only trades
        # nodes read for rounds; a round costs far less than reading an eighth more nodes.
        batch = int(np.searchsorted(np.cumsum(room.gain[order]), need)) + 1 + DOMAINS_EXAMINED
        # Per slot, whether the contract allows evicting it; the extra last entry answers for
        # GPUs nobody holds (owner -1).
        read = _Read(allowed=np.zeros(index.ids.shape[0] + 1, dtype=bool))
        done = 0
        while read.covered < need and done < order.size:
            leaves = order[done : done + batch]
            done += leaves.size
            batch *= 2
            found = self._room_with_allowed(
                leaves, request, index, verdicts_of, read.allowed, room.granule
            )
            read.slots, read.verdicts = found.slots, found.verdicts
            gained = np.maximum(found.room - room.now[leaves], 0)
            reach = read.covered + np.cumsum(gained)
            count = min(int(np.searchsorted(reach, need)) + 1, leaves.size)
            read.covered = int(reach[count - 1])
            picked = np.zeros(leaves.size, dtype=bool)
            picked[:count] = gained[:count] > 0
            if picked.all():
                read.pieces.append((found.nodes, found.owners, found.held))
                read.whole_batch_marks = found.marks
            else:
                read.whole_batch_marks = None
                rows = np.flatnonzero(np.repeat(picked[found.by_node], found.sizes))
                read.pieces.append(
                    (found.nodes[rows], take_rows(found.owners, rows), take_rows(found.held, rows))
                )
        return read

    def _victims(
        self,
        read: _Read,
        index: PreemptibleIndex,
        verdicts_of: Callable[[IntArray], SlotVerdicts],
    ) -> _Chosen:
        """Every allowed job holding GPUs on the chosen domains, with their verdicts."""
        if len(read.pieces) == 1:
            # The victims are the batch's allowed slots that hold GPUs on the chosen domains,
            # with the batch's verdicts.
            nodes, owners, held = read.pieces[0]
            present = (
                read.whole_batch_marks
                if read.whole_batch_marks is not None
                else slot_marks(owners, index.ids.shape[0])
            )
            assert read.verdicts is not None
            rows = (present[read.slots] & read.verdicts.allowed).nonzero()[0]
            return _Chosen(nodes, owners, held, read.slots[rows], read.verdicts.rows(rows))
        nodes = np.concatenate([piece[0] for piece in read.pieces])
        in_order = np.argsort(nodes, kind="stable")
        nodes = nodes[in_order]
        owners = take_rows(np.concatenate([piece[1] for piece in read.pieces]), in_order)
        held = take_rows(np.concatenate([piece[2] for piece in read.pieces]), in_order)
        slots = distinct_slots(owners, index.ids.shape[0])
        victim_slots = slots[read.allowed[slots]]
        return _Chosen(nodes, owners, held, victim_slots, verdicts_of(victim_slots))

    @staticmethod
    def _beyond_caps(chosen: _Chosen, index: PreemptibleIndex) -> bool:
        """Whether evicting every chosen job takes some account below its budget."""
        verdicts, victim_slots = chosen.verdicts, chosen.slots
        bounded = np.flatnonzero(np.isfinite(verdicts.limit))
        if not bounded.size:
            return False
        accounts = index.account[victim_slots[bounded]]
        taken = np.bincount(accounts, weights=index.gpus[victim_slots[bounded]])
        cap = np.full(taken.size, np.inf)
        cap[accounts] = verdicts.limit[bounded]
        return bool((taken > cap).any())

    def _plan(
        self,
        preemptor: str,
        request: GangRequest,
        index: PreemptibleIndex,
        chosen: _Chosen,
        now: float,
    ) -> PreemptionPlan | None:
        """The plan evicting the chosen jobs, if the gang then places (None if not)."""
        state = self.state
        nodes, owners, held = chosen.nodes, chosen.owners, chosen.held
        victim_slots, verdicts = chosen.slots, chosen.verdicts
        with trial(state) as what_if:
            if index.cpu_milli[victim_slots].any() or index.memory_mib[victim_slots].any():
                what_if.free_parts(whole_gpu_parts(index, nodes, held))
            else:
                what_if.free_gpus(nodes, held)
            placed = place(state, request, self.policy)
        if not isinstance(placed, Placement):
            return None
        # Every allowed job on the chosen domains was released for the search, but only those
        # on the nodes the gang took need leave: on each of those nodes the same GPUs stay
        # free. Sets small enough for `spare` are left to it: it spares the costliest first,
        # which the gang's first choice of nodes does not.
        if victim_slots.size > SPARE_CHECKS:
            on_gang = np.isin(nodes, placed.allocation.nodes).nonzero()[0]
            touched = slot_marks(take_rows(owners, on_gang), index.ids.shape[0])
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
        impact: tuple[float, ...]
        if LeastLostWork.is_key_of(self.impact):
            impact = (float(victims.lost.sum()), float(len(victims)), float(victims.standing.sum()))
        else:
            impact = self.impact.key(victims)
        plan = PreemptionPlan(preemptor, victims, placed, impact, exact=False)
        return self.search.spare(preemptor, request, plan)

    def _room_with_allowed(
        self,
        leaves: IntArray,
        request: GangRequest,
        index: PreemptibleIndex,
        verdicts_of: Callable[[IntArray], SlotVerdicts],
        allowed: NDArray[np.bool_],
        granule: int,
    ) -> AllowedRoom:
        """Per innermost domain of `leaves`, the pods it holds in whole slices once every job
        the contract allows leaves its nodes, counted node by node; `allowed` (per slot of
        the index, plus an entry for GPUs nobody holds) learns the verdicts of the jobs met."""
        state, topology = self.state, self.state.topology
        # Nodes are read in node order (cheaper gathers, and sorted for the what-if).
        by_node = np.argsort(leaves, kind="stable")
        nodes, owners, marks, sizes = spread_kernels.owners_read(
            self.leaf_starts, leaves[by_node], index.gpu_owner, index.ids.shape[0]
        )
        slots = marks[:-1].nonzero()[0]
        verdicts = verdicts_of(slots)
        allowed[slots] = verdicts.allowed
        held, per_leaf = spread_kernels.allowed_room(
            nodes,
            owners,
            allowed,
            sizes,
            state.free_whole_gpus,
            topology.gpu_count,
            state.closed,
            topology.gpu_model,
            request.model_allowed(topology),
            pods_per_free(topology.max_gpus_per_node + 1, request.gpus_per_pod),
            granule,
        )
        room = np.empty(leaves.size, dtype=np.int64)
        room[by_node] = per_leaf
        return AllowedRoom(room, nodes, owners, held, marks, slots, verdicts, by_node, sizes)

    def _short_with_allowed(
        self,
        request: GangRequest,
        index: PreemptibleIndex,
        verdicts_of: Callable[[IntArray], SlotVerdicts],
        allowed: NDArray[np.bool_],
        now_room: IntArray,
        gain: IntArray,
        helpful: IntArray,
        read: IntArray,
        gained: int,
    ) -> Refusal | None:
        """Why no allowed victim set makes room, when the innermost domains `read` (of the
        `helpful` ones, where evictions could make room: by the aggregates, at most `gain`
        more pods than `now_room`) gained only `gained` pods with every allowed job gone, short
        of what the gang lacks (else None: the general search decides). Without a required
        level above them, `read` is every helpful domain: the shortfall is proven. With one,
        `read` lies in one of its domains: the others' helpful domains are read too (those
        that could make a difference), and the gang has no room if no such domain could hold
        it."""
        granule = request.granule(self.leaf_level)
        slices = f" in whole slices of {granule}" if granule > 1 else ""
        required = request.required
        if required <= 0 or required >= self.leaf_level:
            most = int(now_room.sum()) + gained
            return Refusal(
                RefusalCode.NO_ROOM,
                f"even evicting every job it may preempt leaves room for at most {most} of its "
                f"{request.pods} pods{slices}",
                {"most": most, "pods": request.pods},
                most_pods=most,
            )
        topology = self.state.topology
        bounds = self.search.leaf_bounds(required)
        room_most = domain_sums(now_room, bounds)
        if read.size:
            room_most[self.search.domain_of_leaf(required)[read[0]]] += gained
        # The helpful domains not read yet, in order (`helpful` increases), by domain.
        unread = np.ones(helpful.size, dtype=bool)
        unread[np.searchsorted(helpful, read)] = False
        rest = helpful[unread]
        split = np.searchsorted(rest, bounds)
        # A domain's room with every allowed job gone is at most its aggregates' bound (its
        # room now plus its helpful domains' gains): those whose bound does not exceed the
        # room of a domain already counted whole cannot raise the most, and are not read.
        partial = split[1:] > split[:-1]
        known = int(np.max(room_most, where=~partial, initial=-1))
        bound = room_most + domain_sums(gain[rest], split)
        rest = rest[np.repeat(partial & (bound > known), np.diff(split))]
        if rest.size:
            room = self._room_with_allowed(rest, request, index, verdicts_of, allowed, granule)
            rest_gained = np.maximum(room.room - now_room[rest], 0)
            room_most += domain_sums(rest_gained, np.searchsorted(rest, bounds))
        most = int(room_most.max())
        if most >= request.pods:
            return None
        level = topology.domain_levels[required]
        return Refusal(
            RefusalCode.NO_ROOM,
            f"even evicting every job it may preempt leaves no {level} with room for more than "
            f"{most:,} of its {request.pods:,} pods{slices}",
            {"most": most, "pods": request.pods},
            most_pods=most,
        )

    def _short_within_caps(
        self,
        request: GangRequest,
        index: PreemptibleIndex,
        verdicts_of: Callable[[IntArray], SlotVerdicts],
    ) -> Refusal | None:
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
        usable = self.search.usable(np.arange(state.topology.n_nodes, dtype=np.int64), request)
        free = state.free_whole_gpus.astype(np.int64) * usable
        leaf_free = np.add.reduceat(free, self.leaf_starts[:-1])
        # What the allowed jobs hold on usable nodes, pod by pod (each pod holds `whole` GPUs
        # of its node: checked above), not read from every GPU's owner.
        pod_starts, pod_nodes = index.pods_of(allowed)
        held = index.whole[allowed].repeat(np.diff(pod_starts)) * usable[pod_nodes]
        leaf_of_node = self.search.leaf_of_node
        leaf_held = np.bincount(leaf_of_node[pod_nodes], held, leaf_free.size).astype(np.int64)
        leaf_most = leaf_free + leaf_held
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
        return Refusal(
            RefusalCode.BUDGET_CAPS,
            "no victim set leaves every account at or above its budget and makes room: "
            f"within the budgets evictions free at most {most_freed:,} GPUs, and room for its "
            f"{room} needs at least {cheapest:,} more",
            {"most_freed_gpus": most_freed, "needed_gpus": cheapest},
        )
