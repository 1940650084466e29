"""The search across racks remembers each pod shape's room per rack while the cluster and the
preemptible index stay as they are: through protections ending, jobs stopping and starting,
its answers are those of a search that remembers nothing."""

from __future__ import annotations

import numpy as np
from job_helpers import four_gpu_gang as spec

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import Allocation, ClusterState
from toposched.policy.budget import BudgetTree
from toposched.scheduler.candidates import PreemptionPlan
from toposched.scheduler.core import Scheduler
from toposched.scheduler.spread import SpreadSearch

HOUR = 3600.0
ZONES, RACKS, NODES = 2, 4, 3  # racks of 3 nodes x 4 GPUs in 2 zones
RACK_SLICES = {"required": "zone", "slices": [{"level": "rack", "pods": NODES}]}


def answer(search: SpreadSearch, sched: Scheduler, job_id: str, now: float) -> str:
    entry, ranking = sched.queue.get(job_id), sched.queue.ranking(now)
    found = search.across_domains(
        job_id,
        sched.jobs[job_id].request,
        sched.ledger.preemptible,
        lambda slots: sched.preemptor.verdicts.of(entry, ranking, now, slots),
        now,
    )
    if isinstance(found, PreemptionPlan):
        victims = sorted(victim.job_id for victim in found.victims)
        return f"plan {victims} on {sorted(found.placement.allocation.nodes.tolist())}"
    return repr(found)


def test_remembered_room_gives_the_answers_of_a_fresh_search() -> None:
    rng = np.random.default_rng(3)
    state = ClusterState(nvl72_cluster(ZONES, 1, RACKS, nodes_per_rack=NODES))
    sched = Scheduler(state, BudgetTree.from_dict({"accounts": {"team-a": 100}}))
    n_nodes = ZONES * RACKS * NODES
    # One-node jobs of team-a at priority 0 on most nodes, started over the first two hours
    # (protected for an hour each).
    running = []
    for node in range(n_nodes):
        if rng.random() < 0.8:
            name = f"j{node}"
            start = float(rng.uniform(0, 2 * HOUR))
            sched.adopt(spec(name, "team-a"), Allocation.of([node], [[0, 1, 2, 3]]), start, 0)
            running.append(name)
    sched.submit(spec("wide", "team-a", pods=2 * NODES, topology=RACK_SLICES, priority=5), 0)
    remembering = sched.preemptor.spread
    answers = set()
    moments = [0.5, 1.2, 1.2, 1.6, 2.1, 2.1, 2.6, 3.5]
    for step, hours in enumerate(moments):
        now = hours * HOUR
        if step == 3:  # a job stops
            sched.finish(running.pop(0), now)
        if step == 5:  # another starts on the freed node
            free = int(np.flatnonzero(state.free_whole_gpus == 4)[0])
            sched.adopt(spec("late", "team-a"), Allocation.of([free], [[0, 1, 2, 3]]), now, now)
        got = answer(remembering, sched, "wide", now)
        assert got == answer(SpreadSearch(sched.preemptor.victim_search), sched, "wide", now)
        answers.add(got)
    assert len(answers) >= 3  # the moments differ
