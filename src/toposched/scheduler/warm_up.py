"""Loading the scheduler's compiled loops before its first decision.

Numba compiles each loop once per set of argument types and keeps it in a cache on disk; a
process loads a loop from there the first time it calls it, a few milliseconds each. A
service's first decision after a restart would pay for every loop it needs (tens of them for a
large gang's reservation and victim search: about 60 ms on the 1,000,080-GPU fleet). A short
course of decisions on a small fleet of NVL72 racks calls the same loops with the same types
(the arrays' types do not depend on the fleet's size), so the service runs it before it says
it is ready, and the first decision is as fast as later ones.
"""

from __future__ import annotations

import sys

import numpy as np
from numba.core.dispatcher import Dispatcher

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import Allocation, ClusterState, Health
from toposched.jobs.spec import JobSpec
from toposched.policy.budget import BudgetTree
from toposched.scheduler.adoptions import Adoptions
from toposched.scheduler.core import Scheduler
from toposched.scheduler.decisions import Evict
from toposched.scheduler.jobs import JobState

__all__ = ["load_compiled_loops", "loops_loaded"]

_ZONES, _BLOCKS, _RACKS, _NODES, _GPUS = 2, 4, 30, 18, 4
_HOUR = 3600.0


def load_compiled_loops() -> None:
    """Run a course of decisions that calls the loops a large fleet's decisions call: a gang
    of two racks where the room lies scattered (its reservation, and the search for jobs to
    move), jobs adopted at once, a gang of rack slices too large to start or preempt for (its
    reservation and victim search), a one-rack job evicting unallocated work, a node failure
    under a running gang, ends of jobs. Nothing of it is kept."""
    _defragmenting()
    scheduler = Scheduler(ClusterState(nvl72_cluster(_ZONES, _BLOCKS, _RACKS)), _accounts())
    scheduler.adopt_many(_running(scheduler.state), now=0.0)
    now = 1.0
    # All but two racks of a zone: beyond the compiled loops' thresholds of nodes (a fence).
    scheduler.submit(_gang("warm-gang", "a", (_BLOCKS * _RACKS - 2) * _NODES), now)
    scheduler.submit(_gang("warm-rack", "a", _NODES, required="rack"), now)
    now = _settle(scheduler, now)
    gang = next(job for job in scheduler.running.values() if job.request.pods == 2 * _NODES)
    scheduler.set_health([int(scheduler.state.allocations[gang.job_id].nodes[0])], Health.DOWN, now)
    now = _settle(scheduler, now)
    for job_id in list(scheduler.running)[:4]:
        scheduler.finish(job_id, now)
    _settle(scheduler, now)


def loops_loaded() -> int:
    """The compiled loop versions this process holds, over the project's modules imported:
    a difference over a decision counts those it compiled or loaded from the cache."""
    loops = {
        id(value): value
        for name, module in list(sys.modules.items())
        if name.startswith("toposched.")
        for value in list(vars(module).values())
        if isinstance(value, Dispatcher)
    }
    return sum(len(loop.signatures) for loop in loops.values())


def _defragmenting() -> None:
    """A gang of two racks on a fleet with a node free in every rack: room enough in all,
    but in no rack, and every job protected: its reservation, and the search for jobs to move
    that would open a rack for it."""
    scheduler = Scheduler(ClusterState(nvl72_cluster(_ZONES, _BLOCKS, _RACKS)), _accounts())
    gpus = np.tile(np.arange(_GPUS, dtype=np.int64), (_NODES - 1, 1))
    racks = _ZONES * _BLOCKS * _RACKS
    scheduler.adopt_many(
        Adoptions(
            [_gang(f"warm-rack-{rack}", "b", _NODES - 1, "rack") for rack in range(racks)],
            [
                Allocation.of(np.arange(rack * _NODES, (rack + 1) * _NODES - 1), gpus)
                for rack in range(racks)
            ],
            [-_HOUR] * racks,
        ),
        now=0.0,
    )
    scheduler.submit(_gang("warm-pair", "a", 2 * _NODES), 1.0)
    _settle(scheduler, 1.0)


def _accounts() -> BudgetTree:
    return BudgetTree.from_dict({"accounts": {"a": {"share": 50}, "b": {"share": 50}}})


def _gang(
    name: str, account: str, pods: int, required: str = "zone", min_runtime: str = "2h"
) -> JobSpec:
    """A gang of 4-GPU pods; larger than a rack, in whole-rack slices, fewest blocks."""
    topology: dict[str, object] = {"required": required}
    if pods > _NODES:
        topology["preferred"] = "block"
        topology["slices"] = [{"level": "rack", "pods": _NODES}]
    return JobSpec.from_dict(
        {
            "name": name,
            "account": account,
            "pods": pods,
            "resources_per_pod": {"gpus": _GPUS},
            "topology": topology,
            "min_runtime": min_runtime,
            "expected_runtime": "6h",
            "resumable": True,
        }
    )


def _running(state: ClusterState) -> Adoptions:
    """Every rack but one held: protected two-rack gangs of account b, racks of unallocated
    work of one, two and six nodes."""
    specs: list[JobSpec] = []
    allocations: list[Allocation] = []
    starts: list[float] = []
    racks = _ZONES * _BLOCKS * _RACKS
    gpus = np.arange(_GPUS, dtype=np.int64)
    for rack in range(0, racks - 1, 3):
        nodes = np.arange(rack * _NODES, (rack + 2) * _NODES, dtype=np.int64)
        specs.append(_gang(f"warm-held-{rack}", "b", 2 * _NODES))
        allocations.append(Allocation.of(nodes, np.tile(gpus, (nodes.size, 1))))
        starts.append(-_HOUR)
        first = (rack + 2) * _NODES
        for offset, size in ((0, 1), (1, 2), (3, 6), (9, 6)):
            nodes = np.arange(first + offset, first + offset + size, dtype=np.int64)
            specs.append(_gang(f"warm-spare-{rack}-{offset}", "b", size, "rack", "0s"))
            allocations.append(Allocation.of(nodes, np.tile(gpus, (size, 1))))
            starts.append(-3 * _HOUR)
    return Adoptions(specs, allocations, starts)


def _settle(scheduler: Scheduler, now: float) -> float:
    """Cycles until nothing more changes: every eviction carried out at once."""
    for _ in range(4):
        result = scheduler.cycle(now)
        evictions = [d for d in result.decisions if isinstance(d, Evict)]
        now += 1.0
        for eviction in evictions:
            if scheduler.jobs[eviction.job_id].state is JobState.RUNNING:
                scheduler.evicted(eviction.job_id, now)
        if not evictions:
            break
    return now
