"""A what-if of many candidates evicted at once, read from the running jobs' index.

A victim search that tries the gang with every candidate gone releases thousands of jobs on
the million-GPU fleet. Read allocation by allocation, that costs a Python step per job several
times over; the index already names the job holding each whole GPU (`gpu_owner`), so the GPUs
to free are one gather over the candidates' nodes, and the state moves them in one compiled
pass (`Statement.free_gpus`), the same change `Statement.free_parts` makes from the
allocations."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import Allocation, ClusterState, distinct
from toposched.cluster.statement import Statement
from toposched.scheduler.candidates import CandidatePool, IntArray
from toposched.scheduler.preemptible import PreemptibleIndex
from toposched.scheduler.victim_arrays import slot_marks

COLUMNS_FROM = 64
"""From this many candidates on, their GPUs are found through the index's GPU owners."""


def free_candidates(
    what_if: Statement, state: ClusterState, pool: CandidatePool, rows: IntArray
) -> None:
    """Free what the candidates of `rows` of `pool` hold, as their eviction would, on
    `what_if` (a statement on `state`)."""
    index, slots = pool.index, pool.slots
    if index is not None and slots is not None and rows.size >= COLUMNS_FROM:
        held = _held_gpus(index, state, pool, rows, slots[rows])
        if held is not None:
            what_if.free_gpus(*held)
            cpu_and_memory = _cpu_and_memory(index, pool, rows, slots[rows])
            if cpu_and_memory:
                what_if.free_parts(cpu_and_memory)
            return
    allocations, job_ids = state.allocations, pool.job_ids
    what_if.free_parts([allocations[job_ids[row]] for row in rows.tolist()])


def _held_gpus(
    index: PreemptibleIndex,
    state: ClusterState,
    pool: CandidatePool,
    rows: IntArray,
    chosen: IntArray,
) -> tuple[IntArray, NDArray[np.bool_]] | None:
    """The nodes the candidates of `rows` (slots `chosen`) hold GPUs on, sorted, and which of
    their GPUs they hold; None unless that is all they hold: pods of whole GPUs, one shape
    each. The index names only whole-GPU pods' owners, so a job holding shared GPUs shows
    fewer GPUs there than its pods hold, which the count catches."""
    whole = index.whole[chosen]
    if state.holds_sets or not bool((whole > 0).all()):
        return None
    pods, _ = pool.pods_of(rows)
    nodes = distinct(pool.pod_nodes[pods])
    marked = slot_marks(chosen, index.ids.shape[0])[index.gpu_owner[nodes]]
    if int(marked.sum()) != int((whole * index.pods[chosen]).sum()):
        return None
    return nodes, marked


def _cpu_and_memory(
    index: PreemptibleIndex, pool: CandidatePool, rows: IntArray, chosen: IntArray
) -> list[Allocation]:
    """The CPU and memory the pods of the candidates of `rows` (slots `chosen`) hold, as
    pieces of no GPUs: one per distinct request, listing the nodes of the pods asking it."""
    cpu, memory = index.cpu_milli[chosen].astype(np.int64), index.memory_mib[chosen]
    if not (cpu.any() or memory.any()):
        return []
    pods, owner = pool.pods_of(rows)
    codes = (cpu * (int(memory.max()) + 1) + memory)[owner]
    order = np.argsort(codes, kind="stable")
    codes, pod_nodes = codes[order], pool.pod_nodes[pods[order]]
    starts = np.flatnonzero(np.concatenate(([True], codes[1:] != codes[:-1])))
    ends = np.append(starts[1:], codes.size)
    pieces = []
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        pod = int(owner[order[start]])
        share_cpu, share_memory = int(cpu[pod]), int(memory[pod])
        if share_cpu or share_memory:
            nodes = pod_nodes[start:end]
            pieces.append(Allocation.of(nodes, [], cpu_milli=share_cpu, memory_mib=share_memory))
    return pieces


def whole_gpu_parts(
    index: PreemptibleIndex, nodes: IntArray, held: NDArray[np.bool_]
) -> list[Allocation]:
    """What the whole-GPU pods of `index` marked in `held` (rows: `nodes`, columns: GPUs)
    hold there, as allocation pieces for `ClusterState.release_parts`: the GPUs one per piece,
    and the CPU and memory of those pods per node."""
    rows, gpus = np.nonzero(held)
    if rows.size == 0:
        return []
    owners = index.gpu_owner[nodes[rows], gpus].astype(np.int64)
    parts = [Allocation(nodes[rows], gpus[:, None].astype(np.int64))]
    cpu, memory = index.cpu_milli[owners], index.memory_mib[owners]
    if cpu.any() or memory.any():
        # A pod of w GPUs holds its CPU and memory once: charge them to its GPUs in equal
        # shares, so each GPU row below carries 1/w of them (exact for whole pods).
        per_gpu = index.whole[owners]
        # Each distinct (CPU, memory) request in turn, the first one left each time: a
        # large gang's evicted GPUs number in the tens of thousands, their requests a few.
        left = np.ones(cpu.size, dtype=bool)
        while left.any():
            first = int(left.argmax())
            share_cpu, share_memory = int(cpu[first]), int(memory[first])
            same = (cpu == share_cpu) & (memory == share_memory)
            left &= ~same
            pods_on = np.bincount(rows[same], weights=1.0 / per_gpu[same])
            counts = np.rint(pods_on).astype(np.int64)
            pod_nodes = np.repeat(nodes[: counts.size], counts)
            if pod_nodes.size and (share_cpu or share_memory):
                parts.append(
                    Allocation.of(pod_nodes, [], cpu_milli=share_cpu, memory_mib=share_memory)
                )
    return parts
