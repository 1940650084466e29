"""The scheduler benchmarks' setting: the churned fleet's jobs adopted by a scheduler (some past
their min runtime, some unallocated, some accounts over budget), and pending jobs drawn from the
Ai2-like and frontier workloads' job mixes."""

from __future__ import annotations

import numpy as np

from toposched.bench.fleets import churned
from toposched.cluster.state import MILLI_PER_GPU, Allocation
from toposched.jobs.spec import JobSpec
from toposched.policy.budget import BudgetTree
from toposched.scheduler.adoptions import Adoptions
from toposched.scheduler.core import Scheduler
from toposched.workloads.ai2 import ai2_like
from toposched.workloads.fleet import NODES_PER_RACK
from toposched.workloads.frontier import frontier_lab
from toposched.workloads.model import SpecFactory

__all__ = [
    "PRETRAINING",
    "account_of",
    "churned_adoptions",
    "churned_scheduler",
    "churned_tree",
    "mixed_pending",
    "take_free_racks",
]

HOUR = 3600.0
PRETRAINING = "pretraining"
"""The account of the frontier mix's training runs: 40% of the fleet, running nothing at first."""
TEAM_SHARES = (25, 20, 15)
"""The three programs' shares; each holds five teams of equal share."""
TEAM_WEIGHTS = np.repeat([1.0, 1.0, 3.0], 5) / 25.0
"""How the churned fleet's jobs fall on the 15 teams: program 2's five teams hold three times
their share of them, so they run past their budget and their jobs past min runtime may be
preempted by the other teams."""


def churned_tree() -> BudgetTree:
    """A pretraining account with 40% of the fleet, and three programs of five teams."""
    programs: dict[str, object] = {
        f"program-{p}": {
            "share": TEAM_SHARES[p],
            "children": {f"team-{p}{t}": {"share": 20} for t in range(5)},
        }
        for p in range(3)
    }
    return BudgetTree.from_dict({"accounts": {PRETRAINING: {"share": 40}, **programs}})


def account_of(team: int) -> str:
    """The leaf account of team 0-14 (program team // 5)."""
    return f"program-{team // 5}/team-{team // 5}{team % 5}"


def churned_scheduler(seed: int = 0, unallocated_share: float = 0.3) -> Scheduler:
    """A scheduler that adopted every job of the churned fleet (`churned_adoptions`) at 0, as
    a restart adopts the jobs it finds running (`Scheduler.adopt_many`)."""
    scheduler, adoptions = churned_adoptions(seed, unallocated_share)
    scheduler.adopt_many(adoptions, now=0.0)
    return scheduler


def churned_adoptions(seed: int = 0, unallocated_share: float = 0.3) -> tuple[Scheduler, Adoptions]:
    """Every job of the churned fleet (`bench.fleets.churned`) as found running, and a new
    scheduler on the fleet emptied of them, for them to be adopted.

    Each job asks for its rack (`required: rack`), 4 GPUs per pod, resumable. About
    `unallocated_share` of them run as unallocated work (min runtime 0); the others have a 2 h
    min runtime and started 0-4 h before 0, so about half are past it at 0. Program 2's teams
    run over their budget (`TEAM_WEIGHTS`).
    """
    fleet = churned()
    state = fleet.state
    state.release_many(list(fleet.jobs))
    scheduler = Scheduler(state, churned_tree())
    rng = np.random.default_rng(seed)
    factory = SpecFactory()
    gpus = np.arange(int(state.topology.gpu_count[0]))
    owners = list(fleet.jobs)
    teams = rng.choice(TEAM_WEIGHTS.size, size=len(owners), p=TEAM_WEIGHTS)
    unallocated = rng.random(len(owners)) < unallocated_share
    starts = -rng.uniform(0.0, 4 * HOUR, len(owners))
    specs: list[JobSpec] = []
    allocations: list[Allocation] = []
    for index, owner in enumerate(owners):
        nodes = fleet.jobs[owner]
        spec = factory.make(
            owner,
            account_of(int(teams[index])),
            int(nodes.size),
            {"gpus": int(gpus.size)},
            topology={"required": "rack"},
            min_runtime=0.0 if unallocated[index] else 2 * HOUR,
            resumable=True,
            expected_runtime=8 * HOUR,
        )
        specs.append(spec)
        allocations.append(Allocation.of(nodes, np.tile(gpus, (nodes.size, 1))))
    return scheduler, Adoptions(specs, allocations, starts.tolist())


def take_free_racks(scheduler: Scheduler, now: float) -> int:
    """Adopt a protected one-rack job (an inference service of the pretraining account, min
    runtime 8 h, just started) on every rack with all its nodes free, so that a one-rack job
    finds room only by preemption. Returns the racks taken."""
    state = scheduler.state
    free = state.gpu_free_milli.sum(axis=1).reshape(-1, NODES_PER_RACK)
    full = state.topology.gpu_count.astype(np.int64).reshape(-1, NODES_PER_RACK) * MILLI_PER_GPU
    racks = np.flatnonzero((free == full).all(axis=1))
    factory = SpecFactory()
    gpus = np.arange(int(state.topology.gpu_count[0]))
    for rack in racks.tolist():
        nodes = np.arange(rack * NODES_PER_RACK, (rack + 1) * NODES_PER_RACK, dtype=np.int64)
        spec = factory.make(
            f"service-{rack}",
            PRETRAINING,
            NODES_PER_RACK,
            {"gpus": int(gpus.size)},
            topology={"required": "rack"},
            min_runtime=8 * HOUR,
            expected_runtime=48 * HOUR,
        )
        allocation = Allocation.of(nodes, np.tile(gpus, (NODES_PER_RACK, 1)))
        scheduler.adopt(spec, allocation, start_time=now, now=now)
    return int(racks.size)


def mixed_pending(count: int, seed: int = 0, frontier_share: float = 0.2) -> list[JobSpec]:
    """`count` pending jobs drawn at random from a week of the Ai2-like mix (3,072 GPUs) and
    two days of the frontier mix, `frontier_share` of them from the latter, each renamed and
    charged to a random team (the frontier's training runs to the pretraining account; its
    scavenger work stays unallocated, with min runtime 0).

    The frontier's jobs keep their shapes (whole racks; training runs of 10k-200k GPUs in rack
    slices, one zone, fewest blocks). The Ai2-like jobs are moved to 4-GPU nodes: an 8-GPU pod
    becomes two 4-GPU pods with half its CPU and memory; multi-node jobs prefer one rack (up to
    18 nodes) or one block, as they preferred their scalable unit or spine group."""
    rng = np.random.default_rng(seed)
    ai2 = [job.spec for job in ai2_like(seed=seed, days=7).jobs]
    frontier = [job for job in frontier_lab(seed=seed, days=2).jobs]
    from_frontier = rng.random(count) < frontier_share
    factory = SpecFactory()
    specs: list[JobSpec] = []
    for index in range(count):
        team = account_of(int(rng.integers(TEAM_WEIGHTS.size)))
        name = f"mix-{seed}-{index}"
        if from_frontier[index]:
            job = frontier[int(rng.integers(len(frontier)))]
            update: dict[str, object] = {"name": name, "account": team}
            if job.job_class == "training":
                update["account"] = PRETRAINING
            elif job.job_class == "unallocated":
                # The frontier's scavenger account has no share; a team's job runs unallocated
                # only with min runtime 0.
                update["min_runtime"] = 0.0
            specs.append(job.spec.model_copy(update=update))
        else:
            specs.append(_on_gb300(factory, ai2[int(rng.integers(len(ai2)))], name, team))
    return specs


def _on_gb300(factory: SpecFactory, spec: JobSpec, name: str, account: str) -> JobSpec:
    """An Ai2-like job moved to the 4-GPU nodes of the GB300 fleet (see `mixed_pending`)."""
    resources = spec.resources_per_pod
    split = 2 if resources.gpus > 4 else 1
    pods = spec.pods * split
    topology = None
    if pods > 1:
        topology = {"preferred": "rack" if pods <= NODES_PER_RACK else "block"}
    return factory.make(
        name,
        account,
        pods,
        {
            "gpus": resources.gpus // split,
            "cpu": f"{resources.cpu // split}m",
            "memory": f"{resources.memory // split}Mi",
        },
        topology=topology,
        min_runtime=spec.min_runtime,
        resumable=spec.resumable,
        expected_runtime=spec.expected_runtime,
        priority=spec.priority,
    )
