"""Scheduling-cycle benchmarks: 1,000,080 GPUs, 100,000 running jobs, 10,000 pending."""

from __future__ import annotations

import numpy as np

from toposched.bench.harness import Measurement, measure
from toposched.cluster.builders import million_gpu_cluster
from toposched.cluster.state import Allocation, ClusterState
from toposched.placement.jobspec import JobSpec
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import Scheduler

TEAMS = 15
NODES_PER_RACK = 18


def team_tree() -> BudgetTree:
    """Three programs of five teams each, shares summing to 100 at every level."""
    programs = {
        f"program-{p}": {
            "share": [40, 35, 25][p],
            "children": {f"team-{p}{t}": {"share": 20} for t in range(5)},
        }
        for p in range(3)
    }
    return BudgetTree.from_dict({"accounts": programs})


def team_name(i: int) -> str:
    return f"program-{(i // 5) % 3}/team-{(i // 5) % 3}{i % 5}"


def gang_spec(name: str, account: str, pods: int, gpus: int, **topology: object) -> JobSpec:
    data: dict[str, object] = {
        "name": name,
        "account": account,
        "pods": pods,
        "resources_per_pod": {"gpus": gpus},
        "min_runtime": "2h",
        "expected_runtime": "6h",
    }
    if topology:
        data["topology"] = topology
    return JobSpec.from_dict(data)


def busy_scheduler(
    running_jobs: int = 106_000, seed: int = 0, unallocated_share: float = 0.0
) -> Scheduler:
    """The 1M-GPU fleet nearly full with about `running_jobs` jobs; no rack is left whole.

    Racks are filled in order by jobs of one node (4 GPUs), two nodes (8) or six nodes (24),
    then one node in every rack is freed, so about 5.5% of the GPUs are free, scattered.
    Jobs starting in `unallocated_share` of the racks (chosen at random) run as unallocated
    work (min runtime 0), preemptible by any budgeted job.
    """
    rng = np.random.default_rng(seed)
    state = ClusterState(million_gpu_cluster())
    scheduler = Scheduler(state, team_tree())
    topology = state.topology
    # Job sizes drawn until every node is covered; the last job is cut to end on the last node.
    mean_nodes = topology.n_nodes / running_jobs
    weights = [0.5, 0.3, 0.2] if mean_nodes > 2 else [0.6, 0.3, 0.1]
    nodes_per_job = rng.choice([1, 2, 6], size=2 * running_jobs, p=weights)
    ends = np.cumsum(nodes_per_job)
    last = int(np.searchsorted(ends, topology.n_nodes))
    nodes_per_job, ends = nodes_per_job[: last + 1].copy(), ends[: last + 1].copy()
    nodes_per_job[-1] -= ends[-1] - topology.n_nodes
    ends[-1] = topology.n_nodes
    templates_needed = set(nodes_per_job.tolist())
    gpus = np.arange(4)
    # Validated once per shape; copies only change the name and account (already valid).
    templates = {count: gang_spec("template", team_name(0), count, 4) for count in templates_needed}
    unallocated = {
        count: template.model_copy(update={"min_runtime": 0.0, "resumable": True})
        for count, template in templates.items()
    }
    # Unallocated work fills whole racks' worth of idle capacity: decided per rack, so that
    # evicting it can open racks (as it does where idle racks are lent out).
    racks = topology.n_domains(len(topology.levels))
    unallocated_racks = rng.random(racks) < unallocated_share
    first_node = ends - nodes_per_job
    is_unallocated = unallocated_racks[first_node // NODES_PER_RACK]
    for index, (count, end) in enumerate(zip(nodes_per_job.tolist(), ends.tolist(), strict=True)):
        nodes = np.arange(end - count, end, dtype=np.int64)
        source = unallocated if is_unallocated[index] else templates
        spec = source[count].model_copy(
            update={"name": f"run-{index}", "account": team_name(index)}
        )
        allocation = Allocation.of(nodes, np.tile(gpus, (count, 1)))
        # Allocated jobs started within the last 1.5 h: inside their 2 h min runtime, so only
        # unallocated work is preemptible while the benchmarks run.
        start = -float(rng.uniform(0, 1.5 * 3600))
        scheduler.adopt(spec, allocation, start_time=start, now=0.0)
    # Free the first node of every rack whose first node starts a job, so racks stay broken.
    for job in list(scheduler.running.values()):
        first = int(state.allocations[job.job_id].nodes[0])
        if first % NODES_PER_RACK == 0:
            scheduler.finish(job.job_id, 0.0)
    return scheduler


def submit_blocked(scheduler: Scheduler, count: int = 10_000) -> None:
    """Jobs that cannot fit: whole racks (18 x 4 GPUs) and 8-node single-rack gangs."""
    for index in range(count):
        if index % 2:
            spec = gang_spec(f"rack-{index}", team_name(index), 18, 4, required="rack")
        else:
            spec = gang_spec(f"gang-{index}", team_name(index), 8, 4, required="rack")
        scheduler.submit(spec, 0.0)


def replace_a_running_job(scheduler: Scheduler, now: float) -> None:
    """The usual trigger of a cycle: a running job ends and the GPUs it frees go to a job
    already placed there (adopted). Nothing new fits, yet the cluster changed, so the cycle may
    not reuse the failures it remembered."""
    name = next(iter(scheduler.running))
    allocation = scheduler.state.allocations[name]
    spec = scheduler.jobs[name].spec
    scheduler.finish(name, now)
    copy = spec.model_copy(update={"name": f"replacement-{len(scheduler.jobs)}"})
    scheduler.adopt(copy, allocation, start_time=now, now=now)


def run_cycle_benchmarks(quick: bool = False) -> list[Measurement]:
    scheduler = busy_scheduler(30_000 if quick else 106_000)
    submit_blocked(scheduler, 2_000 if quick else 10_000)
    running, pending = len(scheduler.running), len(scheduler.queue)

    def a_job_ends() -> None:
        replace_a_running_job(scheduler, 1.0)

    results = [
        measure(
            f"cycle where nothing fits, after a job ended ({running:,} running, {pending:,} "
            "pending)",
            lambda: scheduler.cycle(1.0),
            setup=a_job_ends,
            runs=3 if quick else 10,
            target_s=50e-3,
        )
    ]
    a_job_ends()
    cycle = scheduler.cycle(1.0)
    results[-1].extra = {"searches": cycle.searches, "reserved": cycle.reservation is not None}
    results.append(
        measure(
            f"cycle where nothing fits, after a submission ({pending + 1:,} pending; earlier "
            "failures still hold)",
            lambda: scheduler.cycle(1.0),
            setup=lambda: scheduler.submit(
                gang_spec(f"late-{len(scheduler.jobs)}", team_name(0), 18, 4, required="rack"), 1.0
            ),
            runs=3 if quick else 10,
        )
    )
    small_names: list[str] = []

    def submit_small() -> None:
        for name in small_names:
            scheduler.finish(name, 2.0)
        small_names.clear()
        for index in range(1000):
            spec = gang_spec(f"small-{index}", team_name(index), 1, 1 + index % 2)
            scheduler.submit(spec, 2.0)
            small_names.append(spec.name)

    def place_small() -> None:
        placed = scheduler.cycle(2.0)
        assert len(placed.bound) == 1000, len(placed.bound)

    results.append(
        measure(
            f"cycle placing 1,000 small jobs ({running:,} running, {pending + 1000:,} pending)",
            place_small,
            setup=submit_small,
            runs=3 if quick else 10,
            target_s=200e-3,
        )
    )
    job = next(iter(scheduler.running.values()))

    def usage_update() -> None:
        scheduler.usage.stop(job.spec.account, job.gpus, 3.0)
        scheduler.usage.start(job.spec.account, job.gpus, 3.0)

    results.append(
        measure(
            "usage update when one job finishes (independent of pending jobs)",
            usage_update,
            runs=200 if quick else 2000,
        )
    )
    return results
