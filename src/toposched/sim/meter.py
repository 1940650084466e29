"""The cluster's rates between events, their time integrals, and the timeline's samples."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from toposched.cluster.state import ClusterState
from toposched.cluster.units import MILLI_PER_GPU
from toposched.sim.backend import SimulatedBackend
from toposched.sim.records import Integrals, Sample

__all__ = ["Meter", "Rates"]


class Rates(NamedTuple):
    """The piecewise-constant quantities that hold until the next event, in GPUs (read after
    every instant that changed something: a tuple, the cheapest record to make)."""

    delivered: float
    """GPUs held by running jobs."""
    unallocated: float
    """GPUs held by running unallocated work."""
    idle: float
    """Free GPUs on healthy nodes, and held spares."""
    unavailable: float
    """Free GPUs on nodes that are down."""
    busy: float
    """GPUs holding any allocation (a shared GPU counts whole)."""
    outstanding: float
    """GPUs asked for by pending and running jobs."""
    waiting: bool
    """Whether any job is pending."""


class Meter:
    """Reads the rates after each instant's events and integrates them up to the next instant.

    Rates are read from the cluster state (idle, unavailable, busy GPUs) and from the backend's
    running totals (delivered, unallocated, outstanding GPUs); nothing here changes either.
    """

    def __init__(self, state: ClusterState, backend: SimulatedBackend) -> None:
        self.state = state
        self.backend = backend
        self.capacity = backend.workload.topology.n_gpus
        self.integrals = Integrals()
        self.samples: list[Sample] = []
        self.rates = Rates(0.0, 0.0, float(self.capacity), 0.0, 0.0, 0.0, False)
        self.now = 0.0
        """The time the integrals run up to."""

    def measure(self) -> None:
        """Read the piecewise-constant quantities that hold until the next event."""
        state, backend = self.state, self.backend
        idle = int(state.free_milli[0][0]) / MILLI_PER_GPU
        free_whole = int(state.free_gpus[0][0])
        unavailable = 0.0
        nodes = backend.unhealthy_nodes
        if nodes.size:
            milli, whole = _free_on(nodes, state.gpu_free_milli, state.free_whole_gpus)
            unavailable = milli / MILLI_PER_GPU
            free_whole += whole
        spares = backend.scheduler.spares
        if spares is not None:
            # Held spare nodes are idle capacity kept out of service, not work.
            idle += spares.gpus
            free_whole += spares.gpus
        busy = float(self.capacity - free_whole)
        outstanding = backend.pending_gpus + backend.running_gpus
        self.rates = Rates(
            delivered=backend.running_gpus,
            unallocated=backend.unallocated_gpus,
            idle=idle,
            unavailable=unavailable,
            busy=busy,
            outstanding=outstanding,
            waiting=backend.pending_jobs > 0,
        )

    def integrate(self, now: float) -> None:
        elapsed = now - self.now
        if elapsed > 0:
            rates = self.rates
            integrals = self.integrals
            integrals.delivered += rates.delivered * elapsed
            integrals.unallocated += rates.unallocated * elapsed
            integrals.idle += rates.idle * elapsed
            integrals.unavailable += rates.unavailable * elapsed
            integrals.busy += rates.busy * elapsed
            integrals.outstanding += rates.outstanding * elapsed
            if rates.waiting:
                integrals.waiting_seconds += elapsed
                integrals.busy_while_waiting += rates.busy * elapsed
        self.now = max(self.now, now)

    def sample(self, now: float) -> None:
        rates, backend = self.rates, self.backend
        delivered = rates.delivered
        capacity = self.capacity or 1
        unhealthy_gpus = (
            int(backend.workload.topology.gpu_count[backend.unhealthy_nodes].sum())
            if backend.unhealthy_nodes.size
            else 0
        )
        self.samples.append(
            Sample(
                time=now,
                occupancy=rates.busy / capacity,
                allocation_ratio=delivered / capacity,
                unallocated_share=rates.unallocated / delivered if delivered > 0 else 0.0,
                running_jobs=backend.running_jobs,
                pending_jobs=backend.pending_jobs,
                pending_gpus=backend.pending_gpus,
                outstanding_ratio=rates.outstanding / capacity,
                unhealthy_gpus=unhealthy_gpus,
            )
        )


@njit(cache=True, nogil=True)
def _free_on(
    nodes: np.ndarray, gpu_free_milli: np.ndarray, free_whole_gpus: np.ndarray
) -> tuple[int, int]:
    """The free milli-GPU and the free whole GPUs of `nodes`, summed in one compiled pass: the
    down nodes of a frontier run are a few dozen, read after nearly every instant."""
    milli = 0
    whole = 0
    for node in nodes:
        for gpu in range(gpu_free_milli.shape[1]):
            milli += gpu_free_milli[node, gpu]
        whole += free_whole_gpus[node]
    return milli, whole
