"""Placement policies: how to rank domains, nodes and GPUs; the search itself stays the same."""

from __future__ import annotations

from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.errors import checked_seed
from toposched.cluster.state import ClusterState
from toposched.placement.request import GangRequest

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


def _free_room(state: ClusterState, nodes: IntArray, request: GangRequest) -> IntArray:
    """How empty each node is: free milli-GPU for shared pods, free whole GPUs otherwise."""
    if request.is_fractional:
        milli: IntArray = state.gpu_free_milli[nodes].sum(axis=1, dtype=np.int64)
        return milli
    if request.gpus_per_pod == 0:
        return state.free_cpu_milli[nodes]
    whole: IntArray = state.free_whole_gpus[nodes].astype(np.int64)
    return whole


class PlacementPolicy(Protocol):
    """Scores where lower is better; ties go to the lower index (deterministic)."""

    name: str

    def domain_scores(self, capacity: IntArray, need: int) -> NDArray[np.floating] | IntArray:
        """Rank domains that can each hold `need` pods (all entries of `capacity` >= need)."""
        ...

    def node_scores(
        self, state: ClusterState, nodes: IntArray, capacity: IntArray, request: GangRequest
    ) -> NDArray[np.floating] | IntArray:
        """Rank candidate nodes (each can hold >= 1 pod); pods fill nodes in this order."""
        ...

    def gpu_choice(
        self, state: ClusterState, node: int, free_milli: IntArray, request: GangRequest
    ) -> int:
        """Which GPU of `node` a fractional pod takes (`free_milli` per GPU, after earlier pods)."""
        ...


class BestFit:
    """Fullest first at every level: the domain, node and GPU with the least room that fits.

    Keeps empty domains and nodes whole for the large jobs that need them.
    """

    name = "bestfit"

    def domain_scores(self, capacity: IntArray, need: int) -> IntArray:
        return capacity

    def node_scores(
        self, state: ClusterState, nodes: IntArray, capacity: IntArray, request: GangRequest
    ) -> IntArray:
        return _free_room(state, nodes, request)

    def gpu_choice(
        self, state: ClusterState, node: int, free_milli: IntArray, request: GangRequest
    ) -> int:
        fits = free_milli >= request.gpu_milli
        return int(np.argmin(np.where(fits, free_milli, np.iinfo(np.int64).max)))


class Spread:
    """Emptiest first: spreads load (lower interference, more fragmentation)."""

    name = "spread"

    def domain_scores(self, capacity: IntArray, need: int) -> IntArray:
        return -capacity

    def node_scores(
        self, state: ClusterState, nodes: IntArray, capacity: IntArray, request: GangRequest
    ) -> IntArray:
        return -_free_room(state, nodes, request)

    def gpu_choice(
        self, state: ClusterState, node: int, free_milli: IntArray, request: GangRequest
    ) -> int:
        return int(np.argmax(free_milli))


class RandomFit:
    """Uniformly random among feasible choices: the control every policy should beat."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(checked_seed(seed))

    def domain_scores(self, capacity: IntArray, need: int) -> FloatArray:
        return self.rng.random(len(capacity))

    def node_scores(
        self, state: ClusterState, nodes: IntArray, capacity: IntArray, request: GangRequest
    ) -> FloatArray:
        return self.rng.random(len(nodes))

    def gpu_choice(
        self, state: ClusterState, node: int, free_milli: IntArray, request: GangRequest
    ) -> int:
        candidates = np.flatnonzero(free_milli >= request.gpu_milli)
        return int(self.rng.choice(candidates))


def fills_emptiest_first(policy: PlacementPolicy) -> bool | None:
    """Whether `policy` ranks domains by capacity and nodes by free room, emptiest first
    (True) or fullest first (False), lowest index on ties: the orders a compiled search can
    follow. None for any other policy (subclasses included: they may rank otherwise)."""
    if type(policy) is BestFit:
        return False
    if type(policy) is Spread:
        return True
    return None


POLICIES: dict[str, type] = {"bestfit": BestFit, "spread": Spread, "random": RandomFit}


def policy_by_name(name: str, seed: int = 0) -> PlacementPolicy:
    """A policy from its name; a clear error lists the known ones."""
    from toposched.cluster.errors import InputError

    factory = POLICIES.get(name)
    if factory is None:
        raise InputError("policy", name, f"unknown policy; choose one of {', '.join(POLICIES)}")
    policy: PlacementPolicy = factory(seed) if factory is RandomFit else factory()
    return policy
