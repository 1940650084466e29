"""The simulated cost of a gang placed across more domains than its constraints ask for.

A job that declares topology (`required`, `preferred` or `slices`) says its pods talk a lot:
spread over more racks or blocks than it asked for, it runs slower. The simulator charges that
as a longer run: the job's work advances at `1 / factor` per second, where

    factor = min(1 + sum over constrained levels L of slowdown[L] * extra[L], cap)

and `extra[L]` counts the domains at L crossed beyond what the constraints ask:

- `required: L` asks for one domain at L: extra = domains at L spanned - 1;
- `slices: [{level: L, pods: K}]` asks for each group of K consecutive ranks in one domain at
  L: extra = the sum over groups of (domains at L the group spans - 1);
- `preferred: L` asks for the fewest domains at L the job could fill: extra = domains at L
  spanned - ceil(job GPUs / GPUs of the largest domain at L), never below 0.

Jobs without topology constraints never pay; a level without a slowdown costs nothing. A
scheduler that honours every constraint pays only for `preferred` placements it could not
keep minimal; one that ignores topology pays for every domain it crosses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation
from toposched.cluster.topology import Topology
from toposched.cluster.units import NODE_LEVEL
from toposched.jobs.spec import JobSpec

__all__ = [
    "DEFAULT_CAP",
    "DEFAULT_SLOWDOWN",
    "Pricing",
    "TopologyPrice",
]

DEFAULT_SLOWDOWN: tuple[float, ...] = (0.05, 0.10, 0.25)
"""Fraction of the run added per extra domain crossed, innermost domain level first (on the
frontier fleet: rack, block, zone): leaving a rack leaves NVLink, leaving a block crosses the
spine, leaving a zone the data-centre interconnect. Levels further out cost as the last."""
DEFAULT_CAP = 2.0


@dataclass(frozen=True, slots=True)
class TopologyPrice:
    """Per-level slowdowns and the largest factor a run can be slowed by."""

    slowdown: Mapping[str, float] | None = None
    """Per level name; None: `DEFAULT_SLOWDOWN` by position from the innermost domain level."""
    cap: float = DEFAULT_CAP

    def __post_init__(self) -> None:
        for level, fraction in (self.slowdown or {}).items():
            if not math.isfinite(fraction) or fraction < 0:
                raise InputError(f"topology price {level}", fraction, "must be a number >= 0")
        if not math.isfinite(self.cap) or self.cap < 1:
            raise InputError("topology price cap", self.cap, "must be a number >= 1")


class Pricing:
    """A `TopologyPrice` applied to one cluster: what each bind costs in run length."""

    def __init__(self, price: TopologyPrice, topology: Topology) -> None:
        self.price = price
        self.topology = topology
        self.slowdown = _slowdown_by_level(price, topology)
        self._largest: dict[str, int] = {}

    def factor(self, spec: JobSpec, allocation: Allocation) -> float:
        """How many times longer `spec`'s run takes on `allocation` (1.0 when it pays nothing)."""
        slowdown = self.slowdown
        extra = self.extra_domains(spec, allocation)
        added = sum(slowdown.get(level, 0.0) * count for level, count in extra.items())
        return min(1.0 + added, self.price.cap)

    def extra_domains(self, spec: JobSpec, allocation: Allocation) -> dict[str, int]:
        """Domains crossed beyond what `spec`'s constraints ask, per constrained level."""
        request, topology, nodes = spec.topology, self.topology, allocation.nodes
        extra: dict[str, int] = {}
        if request.required is not None:
            spanned = _distinct(_domains_of(nodes, request.required, topology))
            extra[request.required] = spanned - 1
        for group in request.slices:
            if group.pods <= 0 or nodes.size % group.pods:
                continue
            crossed = _crossed_per_group(_domains_of(nodes, group.level, topology), group.pods)
            extra[group.level] = max(extra.get(group.level, 0), crossed)
        if request.preferred is not None:
            level = request.preferred
            largest = self._largest_domain(level)
            gpus = sum(part.gpus.size for part in allocation.parts)
            fewest = max(math.ceil(gpus / largest), 1) if largest else 1
            crossed = max(_distinct(_domains_of(nodes, level, topology)) - fewest, 0)
            extra[level] = max(extra.get(level, 0), crossed)
        return extra

    def _largest_domain(self, level: str) -> int:
        """GPUs of the largest domain at `level`, computed once per level."""
        largest = self._largest.get(level)
        if largest is None:
            largest = _largest_domain_gpus(self.topology, level)
            self._largest[level] = largest
        return largest


def _slowdown_by_level(price: TopologyPrice, topology: Topology) -> dict[str, float]:
    """The price's slowdown for each level of `topology`, checking the levels it names."""
    if price.slowdown is None:
        inner_first = topology.levels[::-1]
        last = DEFAULT_SLOWDOWN[-1]
        return {
            level: DEFAULT_SLOWDOWN[i] if i < len(DEFAULT_SLOWDOWN) else last
            for i, level in enumerate(inner_first)
        }
    for level in price.slowdown:
        if level != NODE_LEVEL:
            topology.level_index(level, "--topology-price")
    return dict(price.slowdown)


def _domains_of(nodes: NDArray[np.int64], level: str, topology: Topology) -> NDArray[np.int64]:
    if level == NODE_LEVEL:
        return nodes
    return topology.node_domain[topology.level_index(level)][nodes].astype(np.int64)


def _distinct(domains: NDArray[np.int64]) -> int:
    return int(np.unique(domains).size)


def _crossed_per_group(domains: NDArray[np.int64], pods: int) -> int:
    """Sum over consecutive groups of `pods` ranks of the domains each spans, minus one each."""
    groups = domains.reshape(-1, pods)
    ordered = np.sort(groups, axis=1)
    changes = np.count_nonzero(ordered[:, 1:] != ordered[:, :-1])
    return int(changes)


def _largest_domain_gpus(topology: Topology, level: str) -> int:
    """GPUs of the largest domain at `level` (of the largest node for the node level)."""
    if level == NODE_LEVEL:
        return topology.max_gpus_per_node
    starts = topology.domain_starts[topology.level_index(level)]
    cumulative = np.concatenate(([0], np.cumsum(topology.gpu_count, dtype=np.int64)))
    per_domain = cumulative[starts[1:]] - cumulative[starts[:-1]]
    return int(per_domain.max()) if per_domain.size else 0
