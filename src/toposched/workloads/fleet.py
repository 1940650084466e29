"""Busy reference fleets: the 1,000,080-GPU GB300 fleet with a job mix holding most of it.

`churned_fleet` gets busy the way a fleet does: filled by a scheduler's placement (toposched's
own by default), then thinned by jobs ending at random; the benchmarks report their figures on
it. `occupied_fleet`
is an arranged layout (whole racks held, whole racks free), the cluster `toposched place
--fleet` places on and the benchmarks' labelled best case."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.builders import million_gpu_cluster
from toposched.cluster.errors import InputError, checked_seed
from toposched.cluster.state import Allocation, ClusterState
from toposched.placement.request import GangRequest, simple_request
from toposched.placement.search import Placement, PlacementResult, place

__all__ = ["RACK_LEVEL", "ChurnedFleet", "Placer", "churned_fleet", "occupied_fleet"]

Placer = Callable[[ClusterState, GangRequest], PlacementResult]
"""Where a scheduler puts one job on the present state: a placement or a refusal."""

RACK_LEVEL = 3
"""The rack level of the NVL72 builder's topology (cluster=0, zone=1, block=2, rack=3)."""
NODES_PER_RACK = 18
"""Nodes of an NVL72 rack (four GPUs each)."""


def occupied_fleet(
    occupancy: float = 0.70,
    whole_rack_share: float = 0.55,
    small_rack_share: float = 0.20,
    seed: int = 0,
) -> ClusterState:
    """The 1M-GPU fleet with a random job mix holding `occupancy` of its GPUs.

    Laid out the way a packing scheduler leaves a busy fleet: `whole_rack_share` of the racks,
    chosen at random, are held whole by rack-slice training jobs; `small_rack_share` of the
    racks host small jobs that hold a random number of GPUs on every node, enough to reach
    `occupancy` overall; the other racks are free.
    """
    rng = np.random.default_rng(checked_seed(seed))
    state = ClusterState(million_gpu_cluster())
    topology = state.topology
    racks = topology.n_domains(RACK_LEVEL)
    order = rng.permutation(racks)
    n_whole = int(round(whole_rack_share * racks))
    n_small = int(round(small_rack_share * racks))
    starts = topology.domain_starts[RACK_LEVEL]
    gpus_per_node = int(topology.gpu_count[0])

    def rack_nodes(selected: NDArray[np.int64]) -> NDArray[np.int64]:
        first: NDArray[np.int64] = starts[np.sort(selected)]
        nodes: NDArray[np.int64] = (first[:, None] + np.arange(NODES_PER_RACK)[None, :]).reshape(-1)
        return nodes

    whole_nodes = rack_nodes(order[:n_whole])
    state.allocate(
        "training-mix",
        Allocation.of(whole_nodes, np.tile(np.arange(gpus_per_node), (whole_nodes.size, 1))),
    )
    small_nodes = rack_nodes(order[n_whole : n_whole + n_small])
    target_gpus = occupancy * topology.n_gpus - whole_nodes.size * gpus_per_node
    mean_per_node = target_gpus / max(small_nodes.size, 1)
    taken = np.clip(
        rng.binomial(gpus_per_node, min(mean_per_node / gpus_per_node, 1.0), small_nodes.size),
        0,
        gpus_per_node,
    )
    # One allocation per GPU count, so each is a uniform gang.
    for count in range(1, gpus_per_node + 1):
        nodes = small_nodes[taken == count]
        if nodes.size:
            state.allocate(
                f"small-mix-{count}",
                Allocation.of(nodes, np.tile(np.arange(count), (nodes.size, 1))),
            )
    return state


CHURN_NODE_WEIGHTS = (0.30, 0.20, 0.08, 0.15, 0.04, 0.04, 0.04, 0.15)
"""How often a churned fleet's jobs take 1, 2, ..., 8 nodes (4 GPUs each, one rack)."""


@dataclass
class ChurnedFleet:
    """A fleet made busy by jobs placed and ended: the state, and the jobs still running
    (owner to nodes, one pod of 4 GPUs per node, each job within one rack)."""

    state: ClusterState
    jobs: dict[str, NDArray[np.int64]] = field(default_factory=dict)
    placed: int = 0
    """Jobs placed while filling."""
    ended: int = 0
    """Jobs ended at random afterwards."""

    @property
    def occupancy(self) -> float:
        topology = self.state.topology
        return 1.0 - self.state.total_free_gpus / topology.n_gpus

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the running jobs' nodes (compressed npz, a few hundred KiB)."""
        owners = list(self.jobs)
        sizes = np.array([self.jobs[owner].size for owner in owners], dtype=np.int32)
        np.savez_compressed(
            path,
            job_ids=np.array([int(owner.rsplit("-", 1)[1]) for owner in owners], dtype=np.int32),
            sizes=sizes,
            nodes=np.concatenate([self.jobs[owner] for owner in owners]).astype(np.int32),
            counts=np.array([self.placed, self.ended], dtype=np.int64),
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ChurnedFleet:
        """The fleet `save` wrote, rebuilt on the 1M-GPU fleet (each job allocated again)."""
        with np.load(path) as data:
            job_ids, sizes = data["job_ids"], data["sizes"]
            nodes = data["nodes"].astype(np.int64)
            placed, ended = (int(v) for v in data["counts"])
        state = ClusterState(million_gpu_cluster())
        gpus = np.arange(int(state.topology.gpu_count[0]))
        fleet = cls(state, placed=placed, ended=ended)
        ends = np.cumsum(sizes)
        for job_id, end, size in zip(job_ids.tolist(), ends.tolist(), sizes.tolist(), strict=True):
            owner = f"churn-{job_id}"
            job_nodes = nodes[end - size : end]
            state.allocate(owner, Allocation.of(job_nodes, np.tile(gpus, (size, 1))))
            fleet.jobs[owner] = job_nodes
        return fleet


def churned_fleet(
    fill: float = 0.85, occupancy: float = 0.70, seed: int = 0, placer: Placer | None = None
) -> ChurnedFleet:
    """The 1M-GPU fleet after a busy period: jobs of 1-8 whole nodes (`CHURN_NODE_WEIGHTS`),
    each required in one rack, arrive in a random order and are placed by `placer` (default:
    `place()`, best fit, toposched's own) until `fill` of the GPUs are held; then jobs chosen
    at random end until `occupancy` is left. The same seed and placer give the same fleet.

    Best fit packs racks full, so the filling leaves about `1 - fill` of the racks whole and
    free; the endings then open holes of 1-8 nodes scattered over every busy rack, as a fleet
    running for weeks has them. A placer that ignores the rack constraint leaves jobs across
    racks and holes wherever jobs ended.
    """
    rng = np.random.default_rng(checked_seed(seed))
    if not 0.0 < occupancy <= fill < 1.0:
        raise InputError("occupancy", occupancy, f"must be > 0 and <= fill ({fill}) < 1")
    state = ClusterState(million_gpu_cluster())
    gpus_per_node = int(state.topology.gpu_count[0])
    requests = [
        simple_request(nodes, gpus_per_node, name=f"{nodes}-node", required=RACK_LEVEL)
        for nodes in range(1, len(CHURN_NODE_WEIGHTS) + 1)
    ]
    total = state.topology.n_gpus
    goal = int(fill * total)
    fleet = ChurnedFleet(state)
    held = 0
    sizes = rng.choice(len(requests), size=goal // gpus_per_node, p=CHURN_NODE_WEIGHTS)
    for size in sizes.tolist():
        if held >= goal:
            break
        request = requests[size]
        found = (
            place(state, request, exact_reasons=False) if placer is None else placer(state, request)
        )
        if not isinstance(found, Placement):
            continue
        owner = f"churn-{fleet.placed}"
        state.allocate(owner, found.allocation)
        fleet.jobs[owner] = found.allocation.nodes
        fleet.placed += 1
        held += (size + 1) * gpus_per_node
    owners = list(fleet.jobs)
    keep = int(occupancy * total)
    for index in rng.permutation(len(owners)).tolist():
        if held <= keep:
            break
        owner = owners[index]
        held -= fleet.jobs.pop(owner).size * gpus_per_node
        fleet.ended += 1
    state.release_many([owners[i] for i in range(len(owners)) if owners[i] not in fleet.jobs])
    return fleet
