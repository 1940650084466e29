"""Running jobs as arrays, with per-domain aggregates of the GPUs that preemption could free."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter, itemgetter

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import (
    MILLI_PER_GPU,
    Allocation,
    ClusterState,
    distinct,
)
from toposched.scheduler import preemptible_kernels

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

_NO_OWNER = -1
_POPPED_AT_MOST = 64
"""Protection ends `refresh` takes from the heap one at a time; beyond, the rest in one pass."""


_ROWS = (
    *("ids", "gpus", "since", "protected_until", "whole", "pods", "cpu_milli", "memory_mib"),
    *("account", "priority", "pair", "unallocated", "evicting", "counted", "pod_first"),
)
"""The index's per-slot arrays."""
_GPU_MILLI, _CPU_MILLI = attrgetter("gpu_milli"), attrgetter("cpu_milli")
_MEMORY_MIB, _NODES, _GPUS = attrgetter("memory_mib"), attrgetter("nodes"), attrgetter("gpus")
_GPUS_SHAPE = attrgetter("gpus.shape")
_SECOND = itemgetter(1)
"""Columns of many allocations, read in C (`add_many`)."""


@dataclass(frozen=True)
class Holdings:
    """Running jobs as `PreemptibleIndex.add_many` takes them, as columns (a restart adds a
    hundred thousand): the i-th job is `add`'s arguments, each the i-th of its column."""

    job_ids: Sequence[str]
    allocations: Sequence[Allocation]
    gpus: Sequence[float]
    since: Sequence[float]
    protected_until: Sequence[float] | NDArray[np.float64]
    unallocated: Sequence[bool]
    accounts: Sequence[str]
    priorities: Sequence[int]


class PreemptibleIndex:
    """Running jobs by slot (one row per job in parallel arrays) and, per innermost domain, the
    GPUs and work of the *unprotected* ones: unallocated work, and allocated jobs past their min
    runtime, not already being evicted (whatever their standing: the contract filters later).

    A preemption decision reads these instead of scanning nodes: per domain, free GPUs plus
    `leaf_freeable` bounds the room eviction could make, and `now * leaf_weight -
    leaf_weighted_since` is the work lost by evicting every unprotected job touching it (an upper
    bound of the cheapest set there). `gpu_owner` names the slot of the whole-GPU pod on each GPU,
    so the jobs on a set of nodes are one gather; shared-GPU pods are kept per node aside.
    Protection ends are applied lazily, in time order, by `refresh(now)`.
    """

    def __init__(self, state: ClusterState) -> None:
        topology = state.topology
        self.state = state
        self.leaf_level = len(topology.domain_levels) - 1
        self.leaf_starts: IntArray = topology.domain_starts[self.leaf_level].astype(np.int64)
        self.leaf_of_node: IntArray = topology.node_domain[self.leaf_level].astype(np.int64)
        n_leaves = topology.n_domains(self.leaf_level)
        width = max(topology.max_gpus_per_node, 1)
        self.gpu_owner: NDArray[np.int32] = np.full(
            (topology.n_nodes, width), _NO_OWNER, dtype=np.int32
        )
        self.shared_on_node: dict[int, set[int]] = {}
        # Pods without GPUs (CPU and memory only), by node: `holders_on` names them too.
        self.gpuless_on_node: dict[int, set[int]] = {}
        self.shared_in_leaf: IntArray = np.zeros(n_leaves, dtype=np.int64)
        self.leaf_freeable: IntArray = np.zeros(n_leaves, dtype=np.int64)
        # The same per node: whole GPUs of counted (unprotected) pods on it.
        self.node_freeable: NDArray[np.int32] = np.zeros(topology.n_nodes, dtype=np.int32)
        # Both again for unallocated work alone: all that a preemptor whose account already
        # runs its whole budget may take from other accounts under the budget rule.
        self.leaf_unallocated_freeable: IntArray = np.zeros(n_leaves, dtype=np.int64)
        self.node_unallocated_freeable: NDArray[np.int32] = np.zeros(
            topology.n_nodes, dtype=np.int32
        )
        self.leaf_weight: FloatArray = np.zeros(n_leaves, dtype=np.float64)
        self.leaf_weighted_since: FloatArray = np.zeros(n_leaves, dtype=np.float64)
        # One flag per innermost domain, all false between calls: the compiled loops mark the
        # domains a job touches with it, to count its work once in each.
        self._seen: BoolArray = np.zeros(n_leaves, dtype=bool)
        self.slot_of: dict[str, int] = {}
        self.version = 0
        """Moves whenever a job is added, removed, marked evicting or checkpointed (protection
        ends, applied by `refresh`, do not move it)."""
        self.aggregates_version = 0
        """Moves whenever the per-domain aggregates change (jobs counted in or out, protection
        ends included, or a counted job's work moved by a checkpoint)."""
        self.allocations: list[Allocation | None] = []
        self._free_slots: list[int] = []
        self._serial: list[int] = []
        self._protection: list[tuple[float, int, int]] = []  # (protected until, slot, serial)
        self.accounts: dict[str, int] = {}
        self.account_names: list[str] = []
        # (account code, priority) pairs by code: the contract's verdict on an unprotected
        # allocated victim depends on its pair (and size), so pairs are judged, not jobs.
        self.pairs: dict[tuple[int, int], int] = {}
        self.pair_members: list[tuple[int, int]] = []
        # Per pair, its counted (unprotected, not evicting) allocated jobs; per account code,
        # its (priority, pair) pairs: whether an account holds unprotected work below a
        # priority is a few lookups, not a pass over every running job.
        self.unprotected_in_pair: IntArray = np.zeros(16, dtype=np.int64)
        self.pairs_of_account: dict[int, list[tuple[int, int]]] = {}
        capacity = 1024
        self.ids: NDArray[np.object_] = np.empty(capacity, dtype=object)
        self.gpus: FloatArray = np.zeros(capacity)
        self.since: FloatArray = np.zeros(capacity)
        self.protected_until: FloatArray = np.zeros(capacity)
        self.whole: IntArray = np.zeros(capacity, dtype=np.int64)
        self.pods: IntArray = np.zeros(capacity, dtype=np.int64)
        self.cpu_milli: IntArray = np.zeros(capacity, dtype=np.int64)
        self.memory_mib: IntArray = np.zeros(capacity, dtype=np.int64)
        self.account: IntArray = np.zeros(capacity, dtype=np.int64)
        self.priority: IntArray = np.zeros(capacity, dtype=np.int64)
        self.pair: IntArray = np.zeros(capacity, dtype=np.int64)
        self.unallocated: BoolArray = np.zeros(capacity, dtype=bool)
        self.evicting: BoolArray = np.zeros(capacity, dtype=bool)
        self.counted: BoolArray = np.zeros(capacity, dtype=bool)
        self._leaves: dict[int, IntArray] = {}
        """Per slot of a job a checkpoint moved the work of, the innermost domains it touches
        (`preemptible_kernels.leaves_of`): its next checkpoints move those alone, not its
        pods' (a gang's nodes share racks), until it stops."""
        # Each job's pods' nodes, copied into one array the first time a search asks for them
        # (`pods_of`): thousands of jobs' nodes are then one gather, not a list of arrays
        # joined. `pod_first`: per slot, where its nodes start there (-1 while not copied);
        # the nodes of stopped jobs are dropped when the array is full.
        self.pod_first: IntArray = np.full(capacity, -1, dtype=np.int64)
        self._pod_nodes: IntArray = np.zeros(capacity, dtype=np.int64)
        self._pods_end = 0

    # --- jobs come and go ------------------------------------------------------------------------
    def _grow(self) -> None:
        for name in _ROWS:
            old = getattr(self, name)
            new = np.zeros(2 * old.shape[0], dtype=old.dtype)
            if old.dtype == object:
                new = np.empty(2 * old.shape[0], dtype=object)
            new[: old.shape[0]] = old
            setattr(self, name, new)

    def add(
        self,
        job_id: str,
        allocation: Allocation,
        gpus: float,
        since: float,
        protected_until: float,
        unallocated: bool,
        account: str,
        priority: int,
    ) -> None:
        """A job started (or was adopted) on `allocation`."""
        self.version += 1
        if self._free_slots:
            slot = self._free_slots.pop()
            self.allocations[slot] = allocation
            self._serial[slot] += 1
        else:
            slot = len(self.allocations)
            self.allocations.append(allocation)
            self._serial.append(0)
            if slot >= self.ids.shape[0]:
                self._grow()
        self.slot_of[job_id] = slot
        code = self.accounts.get(account)
        if code is None:
            code = self.accounts[account] = len(self.account_names)
            self.account_names.append(account)
        shared = allocation.gpu_milli != MILLI_PER_GPU
        self.ids[slot] = job_id
        self.gpus[slot] = gpus
        self.since[slot] = since
        self.protected_until[slot] = -np.inf if unallocated else protected_until
        # A shared-GPU pod may free its whole GPU (if alone on it): counted optimistically,
        # since every plan is verified by the placement engine before it is used.
        self.whole[slot] = 1 if shared else allocation.gpus.shape[1]
        self.pods[slot] = allocation.pods
        self.cpu_milli[slot] = allocation.cpu_milli
        self.memory_mib[slot] = allocation.memory_mib
        self.account[slot] = code
        self.priority[slot] = priority
        self.pair[slot] = self._pair_code(code, priority)
        self.unallocated[slot] = unallocated
        self.evicting[slot] = False
        self.counted[slot] = False
        self.pod_first[slot] = -1
        if allocation.gpus.size == 0:
            for node in set(allocation.nodes.tolist()):
                self.gpuless_on_node.setdefault(node, set()).add(slot)
        elif shared:
            for node in allocation.nodes.tolist():
                self.shared_on_node.setdefault(node, set()).add(slot)
            np.add.at(self.shared_in_leaf, self.leaf_of_node[allocation.nodes], 1)
        else:
            preemptible_kernels.set_owner(self.gpu_owner, allocation.nodes, allocation.gpus, slot)
        if unallocated:
            self._count(slot, +1)
        else:
            heapq.heappush(self._protection, (protected_until, slot, self._serial[slot]))

    def add_many(self, jobs: Holdings) -> None:
        """`add` each of many jobs in order (a restart's), with the same result: their rows
        and GPU owners written together, the unallocated ones counted together."""
        n = len(jobs.job_ids)
        if n == 0:
            return
        self.version += n
        allocations = list(jobs.allocations)
        slots = self._take_slots(allocations)
        ids = np.empty(n, dtype=object)
        ids[:] = jobs.job_ids
        self.slot_of.update(zip(jobs.job_ids, slots.tolist(), strict=True))
        accounts, priorities = jobs.accounts, list(jobs.priorities)
        for account in dict.fromkeys(accounts):
            if account not in self.accounts:
                self.accounts[account] = len(self.account_names)
                self.account_names.append(account)
        codes = list(map(self.accounts.__getitem__, accounts))
        for code, priority in dict.fromkeys(zip(codes, priorities, strict=True)):
            self._pair_code(code, priority)
        pairs = self.pairs
        unallocated = np.array(jobs.unallocated, dtype=bool).reshape(n)
        protected_until = np.asarray(jobs.protected_until, dtype=np.float64).reshape(n)
        milli = np.fromiter(map(_GPU_MILLI, allocations), np.int64, n)
        pods = np.fromiter(map(len, map(_NODES, allocations)), np.int64, n)
        width = np.fromiter(map(_SECOND, map(_GPUS_SHAPE, allocations)), np.int64, n)
        shared = milli != MILLI_PER_GPU
        self.ids[slots] = ids
        self.gpus[slots] = jobs.gpus
        self.since[slots] = jobs.since
        self.protected_until[slots] = np.where(unallocated, -np.inf, protected_until)
        self.whole[slots] = np.where(shared, 1, width)
        self.pods[slots] = pods
        self.cpu_milli[slots] = np.fromiter(map(_CPU_MILLI, allocations), np.int64, n)
        self.memory_mib[slots] = np.fromiter(map(_MEMORY_MIB, allocations), np.int64, n)
        self.account[slots] = codes
        self.priority[slots] = priorities
        self.pair[slots] = list(map(pairs.__getitem__, zip(codes, priorities, strict=True)))
        self.unallocated[slots] = unallocated
        self.evicting[slots] = False
        self.counted[slots] = False
        self.pod_first[slots] = -1
        held = pods * width > 0
        for row in np.flatnonzero(~held | shared).tolist():
            self._hold_apart(allocations[row], int(slots[row]))
        owning = held & ~shared
        owners = [allocations[row] for row in np.flatnonzero(owning).tolist()]
        self._set_owners(owners, slots[owning], pods[owning], width[owning])
        self._count_many(slots[unallocated], +1)
        protected = slots[~unallocated].tolist()
        self._protection.extend(
            zip(
                protected_until[~unallocated].tolist(),
                protected,
                map(self._serial.__getitem__, protected),
                strict=True,
            )
        )
        heapq.heapify(self._protection)

    def _take_slots(self, allocations: list[Allocation]) -> IntArray:
        """Slots for new rows, as `add` takes them one by one: freed ones first (last freed
        first), then new ones at the end."""
        free = self._free_slots
        reused = free[len(free) - min(len(free), len(allocations)) :][::-1]
        del free[len(free) - len(reused) :]
        for slot, allocation in zip(reused, allocations, strict=False):
            self.allocations[slot] = allocation
            self._serial[slot] += 1
        first = len(self.allocations)
        self.allocations.extend(allocations[len(reused) :])
        self._serial.extend([0] * (len(allocations) - len(reused)))
        while len(self.allocations) > self.ids.shape[0]:
            self._grow()
        return np.concatenate(
            [np.array(reused, dtype=np.int64), np.arange(first, len(self.allocations))]
        )

    def _hold_apart(self, allocation: Allocation, slot: int) -> None:
        """A pod without GPUs, or on a share of one, is kept per node (see `add`)."""
        if allocation.gpus.size == 0:
            for node in set(allocation.nodes.tolist()):
                self.gpuless_on_node.setdefault(node, set()).add(slot)
        else:
            for node in allocation.nodes.tolist():
                self.shared_on_node.setdefault(node, set()).add(slot)
            np.add.at(self.shared_in_leaf, self.leaf_of_node[allocation.nodes], 1)

    def _set_owners(
        self, allocations: list[Allocation], slots: IntArray, pods: IntArray, width: IntArray
    ) -> None:
        """Mark the whole GPUs of many allocations as their slots': one flat assignment."""
        if not allocations:
            return
        nodes = np.concatenate(list(map(_NODES, allocations)))
        if bool((width == width[0]).all()):  # pods of one width: rows of one table
            gpus = np.concatenate(list(map(_GPUS, allocations))).reshape(-1)
        else:
            gpus = np.concatenate([allocation.gpus.reshape(-1) for allocation in allocations])
        positions = np.repeat(nodes, np.repeat(width, pods)) * self.gpu_owner.shape[1] + gpus
        self.gpu_owner.reshape(-1)[positions] = np.repeat(slots, pods * width)

    def _pair_code(self, account_code: int, priority: int) -> int:
        """The code of an (account code, priority) pair, registered on first use."""
        pair = self.pairs.get((account_code, priority))
        if pair is None:
            pair = self.pairs[(account_code, priority)] = len(self.pair_members)
            self.pair_members.append((account_code, priority))
            self.pairs_of_account.setdefault(account_code, []).append((priority, pair))
            if pair >= self.unprotected_in_pair.size:
                grown = np.zeros(2 * self.unprotected_in_pair.size, dtype=np.int64)
                grown[: self.unprotected_in_pair.size] = self.unprotected_in_pair
                self.unprotected_in_pair = grown
        return pair

    def set_priority(self, job_id: str, priority: int) -> None:
        """A running job's priority changed: it is judged under its new (account, priority)
        pair from now on."""
        self.version += 1
        slot = self.slot_of[job_id]
        counted_allocated = bool(self.counted[slot]) and not bool(self.unallocated[slot])
        if counted_allocated:
            self.unprotected_in_pair[self.pair[slot]] -= 1
        self.priority[slot] = priority
        self.pair[slot] = self._pair_code(int(self.account[slot]), priority)
        if counted_allocated:
            self.unprotected_in_pair[self.pair[slot]] += 1

    def remove(self, job_id: str) -> None:
        """A job stopped (finished, failed, evicted, cancelled)."""
        self.version += 1
        slot = self.slot_of.pop(job_id)
        allocation = self.allocations[slot]
        assert allocation is not None
        if self.counted[slot]:
            self._count(slot, -1)
        gpus = allocation.gpus
        if gpus.size and allocation.gpu_milli == MILLI_PER_GPU:  # whole GPUs, the most common
            preemptible_kernels.set_owner(self.gpu_owner, allocation.nodes, gpus, _NO_OWNER)
        elif gpus.size == 0:
            for node in set(allocation.nodes.tolist()):
                holders = self.gpuless_on_node[node]
                holders.discard(slot)
                if not holders:
                    del self.gpuless_on_node[node]
        else:
            for node in set(allocation.nodes.tolist()):
                owners = self.shared_on_node[node]
                owners.discard(slot)
                if not owners:
                    del self.shared_on_node[node]
            np.subtract.at(self.shared_in_leaf, self.leaf_of_node[allocation.nodes], 1)
        self.allocations[slot] = None
        self.ids[slot] = None
        self.pod_first[slot] = -1
        self._leaves.pop(slot, None)
        self._free_slots.append(slot)

    def mark_evicting(self, job_id: str) -> None:
        """An eviction was decided: the job's GPUs are spoken for."""
        self.version += 1
        slot = self.slot_of[job_id]
        self.evicting[slot] = True
        if self.counted[slot]:
            self._count(slot, -1)

    def mark_evicting_many(self, job_ids: list[str]) -> None:
        """`mark_evicting` for thousands of jobs at once (a large preemptor's victims)."""
        self.version += 1
        slot_of = self.slot_of
        slots = np.array([slot_of[job_id] for job_id in job_ids], dtype=np.int64)
        self.evicting[slots] = True
        self._count_many(slots[self.counted[slots]], -1)

    def checkpoint(self, job_id: str, since: float) -> None:
        """The job's work is now lost only since `since`."""
        self.version += 1
        slot = self.slot_of[job_id]
        times = self.since
        if not self.counted[slot]:
            times[slot] = since
            return
        # Counted out and in again, but in one pass (its freeable GPUs stay as they are).
        before = times.item(slot)
        times[slot] = since
        leaves = self._leaves.get(slot)
        if leaves is None:
            allocation = self.allocations[slot]
            assert allocation is not None
            leaves = self._leaves[slot] = preemptible_kernels.leaves_of(
                allocation.nodes, self.leaf_of_node, self._seen
            )
        gpus = self.gpus.item(slot)
        self.aggregates_version += 1
        preemptible_kernels.move_since(
            leaves,
            gpus,
            gpus * before,
            gpus * times.item(slot),
            self.leaf_weight,
            self.leaf_weighted_since,
        )

    def refresh(self, now: float) -> None:
        """Count the jobs whose protection has ended by `now`, in the order of their ends
        (after a restart, thousands at once: taken from the heap in one pass and counted
        together)."""
        protection = self._protection
        entries: list[tuple[float, int, int]] = []
        while protection and protection[0][0] <= now:
            if len(entries) == _POPPED_AT_MOST:
                entries.extend(self._take_ended(now))
                break
            entries.append(heapq.heappop(protection))
        if not entries:
            return
        serials, allocations = self._serial, self.allocations
        counted, evicting = self.counted, self.evicting
        ended = [
            slot
            for _, slot, serial in entries
            if serials[slot] == serial
            and allocations[slot] is not None
            and not counted[slot]
            and not evicting[slot]
        ]
        if len(ended) == 1:
            self._count(ended[0], +1)
        elif ended:
            self._count_many(np.array(ended, dtype=np.int64), +1)

    def _take_ended(self, now: float) -> list[tuple[float, int, int]]:
        """Every protection end at or before `now` left in the heap, in the order the heap
        would give them (each entry is distinct), the heap rebuilt of the others: one pass,
        not one pop each."""
        protection = self._protection
        ended = sorted(entry for entry in protection if entry[0] <= now)
        protection[:] = [entry for entry in protection if entry[0] > now]
        heapq.heapify(protection)
        return ended

    def _count(self, slot: int, sign: int) -> None:
        self.aggregates_version += 1
        allocation = self.allocations[slot]
        assert allocation is not None
        weight = sign * float(self.gpus[slot])
        whole = sign * int(self.whole[slot])
        unallocated = bool(self.unallocated[slot])
        if not unallocated:
            self.unprotected_in_pair[self.pair[slot]] += sign
        preemptible_kernels.count_job(
            allocation.nodes,
            self.leaf_of_node,
            whole,
            unallocated,
            weight,
            weight * float(self.since[slot]),
            self.leaf_freeable,
            self.node_freeable,
            self.leaf_unallocated_freeable,
            self.node_unallocated_freeable,
            self.leaf_weight,
            self.leaf_weighted_since,
            self._seen,
        )
        self.counted[slot] = sign > 0

    def _count_many(self, slots: IntArray, sign: int) -> None:
        """`_count` of each of `slots` in turn, with the same result (one compiled pass)."""
        if slots.size == 0:
            return
        self.aggregates_version += 1
        allocations = self.allocations
        pods = [allocations[slot].nodes for slot in slots.tolist()]
        preemptible_kernels.count_jobs(
            np.concatenate(pods),
            np.fromiter(map(len, pods), np.int64, len(pods)),
            sign * self.whole[slots],
            self.unallocated[slots],
            sign * self.gpus[slots],
            self.since[slots],
            self.pair[slots],
            sign,
            self.leaf_of_node,
            self.leaf_freeable,
            self.node_freeable,
            self.leaf_unallocated_freeable,
            self.node_unallocated_freeable,
            self.leaf_weight,
            self.leaf_weighted_since,
            self.unprotected_in_pair,
            self._seen,
        )
        self.counted[slots] = sign > 0

    # --- queries ---------------------------------------------------------------------------------
    def pods_of(self, slots: IntArray) -> tuple[IntArray, IntArray]:
        """For `slots` (of running jobs), in that order: where each one's pods start in the
        second array (one more entry than slots) and their nodes, job after job."""
        first = self.pod_first[slots]
        if (first < 0).any():
            self._copy_pods(distinct(slots[first < 0]))
            first = self.pod_first[slots]
        counts = self.pods[slots]
        starts = np.zeros(slots.size + 1, dtype=np.int64)
        np.cumsum(counts, out=starts[1:])
        nodes: IntArray = self._pod_nodes[
            np.arange(starts[-1], dtype=np.int64) + (first - starts[:-1]).repeat(counts)
        ]
        return starts, nodes

    def _copy_pods(self, slots: IntArray) -> None:
        """Copy the pods' nodes of `slots` (distinct, not copied yet) to the end of the array
        `pods_of` reads, first dropping stopped jobs' and doubling it if it is full."""
        allocations = self.allocations
        nodes = [allocations[slot].nodes for slot in slots.tolist()]
        counts = self.pods[slots]
        size = int(counts.sum())
        if self._pods_end + size > self._pod_nodes.size:
            live = np.flatnonzero(self.pod_first[: len(allocations)] >= 0)
            live_starts, live_nodes = self.pods_of(live)
            self._pod_nodes = np.zeros(max(2 * (live_nodes.size + size), 1024), dtype=np.int64)
            self._pod_nodes[: live_nodes.size] = live_nodes
            self.pod_first[live] = live_starts[:-1]
            self._pods_end = live_nodes.size
        end = self._pods_end
        if size:
            self._pod_nodes[end : end + size] = np.concatenate(nodes)
        self.pod_first[slots] = end + np.cumsum(counts) - counts
        self._pods_end = end + size

    def leaf_cost_bound(self, leaves: IntArray, now: float) -> FloatArray:
        """Per innermost domain of `leaves`: work lost by evicting every unprotected job
        touching it."""
        bound: FloatArray = np.maximum(
            now * self.leaf_weight[leaves] - self.leaf_weighted_since[leaves], 0.0
        )
        return bound

    def unprotected(self, slots: IntArray, now: float) -> BoolArray:
        """Which of `slots` are unallocated or past their min runtime, and not being evicted."""
        free: BoolArray = (self.protected_until[slots] <= now) & ~self.evicting[slots]
        return free

    def holds_unprotected_below(self, account: str, priority: int) -> bool:
        """Whether `account` runs an unprotected allocated job (not being evicted) of a priority
        below `priority`, as of the last `refresh`."""
        code = self.accounts.get(account)
        if code is None:
            return False
        counts = self.unprotected_in_pair
        return any(
            counts[pair] > 0
            for pair_priority, pair in self.pairs_of_account.get(code, ())
            if pair_priority < priority
        )

    def holders_on(self, nodes: IntArray) -> IntArray:
        """Slots of every job holding anything on `nodes` (each once): a GPU, a share of one,
        or only CPU and memory."""
        slots = self.slots_on(nodes)
        if not self.gpuless_on_node:
            return slots
        gpuless: set[int] = set()
        for node in nodes.tolist():
            gpuless |= self.gpuless_on_node.get(node, set())
        if not gpuless:
            return slots
        return np.union1d(slots, np.array(sorted(gpuless), dtype=np.int64))

    def slots_on(self, nodes: IntArray) -> IntArray:
        """Slots of every job holding a GPU on `nodes` (each once)."""
        slots: IntArray = preemptible_kernels.owners_on(nodes, self.gpu_owner)
        if self.shared_on_node and self.shared_in_leaf[self.leaf_of_node[nodes]].any():
            shared: set[int] = set()
            for node in nodes.tolist():
                shared |= self.shared_on_node.get(node, set())
            if shared:
                slots = np.union1d(slots, np.array(sorted(shared), dtype=np.int64))
        return slots
