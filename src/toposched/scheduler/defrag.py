"""Defragmentation: moves of resumable jobs that open whole domains, and how fragmented we are."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import ClusterState
from toposched.cluster.statement import Statement
from toposched.placement.capacity import CapacityView
from toposched.placement.policies import PlacementPolicy
from toposched.placement.request import GangRequest
from toposched.placement.search import Placement, place
from toposched.scheduler.refusals import Refusal, RefusalCode

IntArray = NDArray[np.int64]

#: Domains examined per defragmentation decision, those closest to fitting first.
DOMAINS_EXAMINED = 8


@dataclass(frozen=True)
class Mover:
    """A running job that may be moved: resumable, and unprotected or unallocated."""

    job_id: str
    request: GangRequest
    lost_gpu_seconds: float
    gpus: float


@dataclass(frozen=True)
class MovePlan:
    """Move `movers` elsewhere so that `job_id` fits in `domain` (for compaction: no job)."""

    job_id: str
    movers: tuple[Mover, ...]
    domain: str
    placement: Placement | None
    cost_gpu_seconds: float
    value_gpu_seconds: float

    @property
    def nodes(self) -> IntArray:
        if self.placement is None:
            return np.zeros(0, dtype=np.int64)
        return np.unique(self.placement.allocation.nodes)


def fragmentation(state: ClusterState, shapes: Iterable[GangRequest]) -> float:
    """Share of free GPUs that no pending shape could use (0 = none wasted, 1 = all).

    A free GPU counts as usable when it sits on a node with room for a pod of some shape, in a
    domain (at the shape's required level, or its innermost slice level) with room for a whole
    gang or slice of that shape. Shared-GPU shapes count a GPU with any free share as usable.
    """
    topology = state.topology
    free = state.free_whole_gpus.astype(np.int64) * (state.closed == 0)
    total_free = int(free.sum())
    if total_free == 0:
        return 0.0
    usable = np.zeros(topology.n_nodes, dtype=bool)
    shapes = list(shapes)
    if not shapes:
        return 0.0
    for shape in shapes:
        view = CapacityView(state, shape, exact=True)
        pods_per_node = view.node_capacity()
        level = shape.required
        need = shape.pods
        if shape.slices:
            level, need = max(shape.slices)
        room = view.at(level, 0, topology.n_domains(level)) if level else None
        node_ok = pods_per_node > 0
        if room is not None:
            node_ok &= (room >= need)[topology.node_domain[level]]
        elif view.total() < need:
            continue
        usable |= node_ok
    return 1.0 - int(free[usable].sum()) / total_free


class Defragmenter:
    """Plans moves of resumable jobs: for a blocked gang (3a) and as background compaction (3b).

    A plan is made on a statement that is always rolled back: the movers are released, the
    gang is placed in the opened domain, and every mover must be placed again elsewhere at once
    (outside that domain); only then is the plan worth considering, and only if the value (the
    waiting job's GPUs x the wait it saves) exceeds the cost (work lost since each mover's last
    checkpoint, plus a restart cost per moved GPU).
    """

    def __init__(
        self,
        state: ClusterState,
        policy: PlacementPolicy,
        restart_cost_s: float = 300.0,
    ) -> None:
        self.state = state
        self.policy = policy
        self.restart_cost_s = restart_cost_s
        self.leaf_level = len(state.topology.domain_levels) - 1

    def _cost(self, movers: Sequence[Mover]) -> float:
        return sum(m.lost_gpu_seconds + m.gpus * self.restart_cost_s for m in movers)

    def for_blocked_job(
        self,
        job_id: str,
        request: GangRequest,
        wait_saved_s: float,
        movers_on: Callable[[IntArray], list[Mover]],
    ) -> MovePlan | Refusal:
        """Open a domain for a gang that fits the free capacity in total but not by topology."""
        state, topology = self.state, self.state.topology
        level, need = request.required, request.pods
        if request.slices:
            level, _ = max(request.slices)
        if level == 0:
            return Refusal(
                RefusalCode.NOT_TOPOLOGY, "not blocked by topology: no required level or slices"
            )
        loose = replace(request, required=0, slices=(), preferred=None)
        if CapacityView(state, loose, exact=False).total() < request.pods:
            return Refusal(
                RefusalCode.NO_FREE_CAPACITY,
                "not fragmentation: the cluster lacks the free GPUs in total",
            )
        view = CapacityView(state, request, exact=False)
        room = view.at(level, 0, topology.n_domains(level))
        if request.slices:
            need = request.granule(level)
        # Domains closest to holding what is missing first.
        order = np.argsort(np.maximum(need - room, 0), kind="stable")[:DOMAINS_EXAMINED]
        best: MovePlan | None = None
        value = request.pods * request.gpus_per_pod * wait_saved_s
        for domain in order.tolist():
            first, last = topology.domain_range(level, domain)
            movers = sorted(
                movers_on(np.arange(first, last, dtype=np.int64)),
                key=lambda m: m.lost_gpu_seconds + m.gpus * self.restart_cost_s,
            )
            plan = self._open(job_id, request, level, domain, movers, value)
            if plan is not None and (best is None or plan.cost_gpu_seconds < best.cost_gpu_seconds):
                best = plan
        if best is None:
            return Refusal(
                RefusalCode.NO_MOVABLE_SET, "no set of movable jobs opens a domain for it"
            )
        if best.cost_gpu_seconds >= best.value_gpu_seconds:
            return Refusal(
                RefusalCode.NOT_WORTH_IT,
                f"moving {len(best.movers)} job(s) would cost {best.cost_gpu_seconds / 3600:,.1f} "
                f"GPU-hours for {best.value_gpu_seconds / 3600:,.1f} gained: not worth it",
                {
                    "cost_gpu_seconds": best.cost_gpu_seconds,
                    "gain_gpu_seconds": best.value_gpu_seconds,
                },
            )
        return best

    def _open(
        self,
        job_id: str,
        request: GangRequest,
        level: int,
        domain: int,
        movers: list[Mover],
        value: float,
    ) -> MovePlan | None:
        state, topology = self.state, self.state.topology
        first, last = topology.domain_range(level, domain)
        statement = Statement(state)
        try:
            moved: list[Mover] = []
            placed: Placement | None = None
            for mover in [None, *movers]:
                if mover is not None:
                    statement.release(mover.job_id)
                    moved.append(mover)
                room = CapacityView(state, request, exact=False).at(level, domain, domain + 1)
                if int(room[0]) >= request.granule(level) or int(room[0]) >= request.pods:
                    outcome = place(state, request, self.policy, exact_reasons=False)
                    if isinstance(outcome, Placement):
                        placed = outcome
                        break
            if placed is None or not moved:
                return None
            statement.allocate(job_id, placed.allocation)
            # Every mover must land again at once, outside the opened domain.
            statement.close(np.arange(first, last, dtype=np.int64))
            for mover in moved:
                again = place(state, mover.request, self.policy, exact_reasons=False)
                if not isinstance(again, Placement):
                    return None
                statement.allocate(f"{mover.job_id}#moved", again.allocation)
        finally:
            statement.discard()
        name = f"{topology.domain_levels[level]} {topology.domain_name(level, domain)}"
        return MovePlan(job_id, tuple(moved), name, placed, self._cost(moved), value)

    def compaction(
        self,
        movers_on: Callable[[IntArray], list[Mover]],
        owners_on: Callable[[IntArray], set[str]],
        max_moves: int,
    ) -> MovePlan | None:
        """Empty the least used partly used innermost domain if every job in it can move into
        fuller ones, with at most `max_moves` moves; None when nothing qualifies."""
        if max_moves <= 0:
            return None
        state, topology = self.state, self.state.topology
        level = self.leaf_level
        if level == 0:
            return None
        sizes = np.add.reduceat(
            topology.gpu_count.astype(np.int64), topology.domain_starts[level][:-1]
        )
        free = state.free_gpus[level]
        partly = np.flatnonzero((free > 0) & (free < sizes))
        if partly.size == 0:
            return None
        # The emptiest partly used domains are the cheapest to empty.
        for domain in partly[np.argsort(-free[partly], kind="stable")][:DOMAINS_EXAMINED]:
            first, last = topology.domain_range(level, int(domain))
            inside = np.arange(first, last, dtype=np.int64)
            movers = movers_on(inside)
            if not movers or len(movers) > max_moves:
                continue
            if owners_on(inside) != {m.job_id for m in movers}:
                continue  # something unmovable would stay
            statement = Statement(state)
            try:
                for mover in movers:
                    statement.release(mover.job_id)
                statement.close(inside)
                fits = True
                for mover in movers:
                    again = place(state, mover.request, self.policy, exact_reasons=False)
                    if not isinstance(again, Placement):
                        fits = False
                        break
                    statement.allocate(f"{mover.job_id}#moved", again.allocation)
            finally:
                statement.discard()
            if fits:
                name = f"{topology.domain_levels[level]} {topology.domain_name(level, int(domain))}"
                return MovePlan("", tuple(movers), name, None, self._cost(movers), 0.0)
        return None
