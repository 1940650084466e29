"""Golden scenarios for preemption: victim choice, contract, nomination, grace, node health."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from job_specs import spec
from numpy.typing import NDArray

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import MILLI_PER_GPU, Allocation, ClusterState, Health
from toposched.cluster.statement import Statement
from toposched.jobs.spec import JobSpec
from toposched.placement.policies import BestFit
from toposched.placement.request import GangRequest
from toposched.placement.search import Placement, place
from toposched.policy.budget import BudgetTree
from toposched.policy.contract import Contract
from toposched.policy.usage import UsageTracker
from toposched.scheduler.core import CycleResult, Scheduler
from toposched.scheduler.decisions import Evict
from toposched.scheduler.jobs import EvictionRecord, JobState
from toposched.scheduler.preemption import (
    Candidate,
    LeastLostWork,
    PreemptionPlan,
    Refusal,
    VictimSearch,
)

HOUR = 3600.0
GRACE = 30.0
# scratch has no budget: its jobs are unallocated work, preemptible by any allocated request.
TEAMS = {"team-a": 30, "team-b": 30, "team-c": 30, "scratch": 0}
RACK = {"required": "rack"}
BARE = Contract(worth=None)
"""The contract's own rules, without the cost/benefit rule (tests/test_preemption_worth.py)."""
FAIR_SHARE = Contract(cross_account="fair_share", worth=None)
"""Across accounts, the fair-share ranking decides (the default is the budget rule)."""


def racks(count: int, nodes_per_rack: int) -> ClusterState:
    """`count` racks of `nodes_per_rack` nodes x 4 GPUs; rack r holds nodes r*n .. r*n + n-1."""
    return ClusterState(nvl72_cluster(1, 1, count, nodes_per_rack=nodes_per_rack))


def scheduler(state: ClusterState, **options: Any) -> Scheduler:
    options.setdefault("contract", BARE)
    return Scheduler(state, BudgetTree.from_dict({"accounts": TEAMS}), **options)


def run(
    sched: Scheduler,
    job: JobSpec,
    nodes: Sequence[int],
    start: float,
    gpu_ids: Sequence[int] | None = None,
) -> None:
    """`job` has run since `start` with one pod on each of `nodes`, on GPUs `gpu_ids`."""
    per_pod = job.resources_per_pod.gpus
    ids = list(gpu_ids) if gpu_ids is not None else list(range(per_pod))
    allocation = Allocation.of(list(nodes), [ids] * len(nodes))
    sched.adopt(job, allocation, start_time=start, now=start)


def evictions(result: CycleResult) -> list[Evict]:
    return [d for d in result.decisions if isinstance(d, Evict)]


def evicted_ids(result: CycleResult) -> list[str]:
    return sorted(d.job_id for d in evictions(result))


def bound(result: CycleResult) -> dict[str, list[int]]:
    return {d.job_id: sorted(d.allocation.nodes.tolist()) for d in result.bound}


def fits_without(sched: Scheduler, job_id: str, owners: Sequence[str]) -> bool:
    """Whether the engine places `job_id` once `owners` have released their GPUs."""
    statement = Statement(sched.state)
    try:
        statement.release_many(list(owners))
        return isinstance(place(sched.state, sched.jobs[job_id].request), Placement)
    finally:
        statement.discard()


def assert_minimal(sched: Scheduler, job_id: str, victims: Sequence[str]) -> None:
    """The victims make room, and none of them can be spared."""
    assert victims, "a victim set was expected"
    assert fits_without(sched, job_id, victims)
    for spared in victims:
        rest = [v for v in victims if v != spared]
        assert not fits_without(sched, job_id, rest), f"{spared} could be spared"


def assert_consistent(state: ClusterState) -> None:
    """No GPU is given out twice, and every aggregate equals a recomputation from scratch."""
    topology = state.topology
    used = np.zeros_like(state.gpu_free_milli, dtype=np.int64)
    for allocation in state.allocations.values():
        for node, gpus in zip(allocation.nodes.tolist(), allocation.gpus.tolist(), strict=True):
            for gpu in gpus:
                used[node, gpu] += allocation.gpu_milli
    exists = np.arange(used.shape[1])[None, :] < topology.gpu_count[:, None]
    assert (used <= MILLI_PER_GPU).all(), "a GPU is over-allocated"
    assert np.array_equal(np.where(exists, MILLI_PER_GPU - used, 0), state.gpu_free_milli)
    fresh = state.compute_aggregates()
    incremental: dict[str, Sequence[NDArray[Any]]] = {
        "free_hist": state.free_hist,
        "free_gpus": state.free_gpus,
        "free_milli": state.free_milli,
        "idle_nodes": state.idle_nodes,
        "cpu": state.domain_free_cpu,
        "memory": state.domain_free_memory,
    }
    for name, levels in incremental.items():
        for level, (ours, theirs) in enumerate(zip(levels, fresh[name], strict=True)):
            assert np.array_equal(ours, theirs), f"{name}[{level}] drifted"


# --- which victims --------------------------------------------------------------------------------


def test_required_rack_gang_preempts_exactly_enough_unallocated_work_in_the_cheapest_rack() -> None:
    # Two racks of 4 nodes x 4 GPUs, every GPU running unallocated work; now = 1000 s.
    #   rack r0 (nodes 0-3): u0..u3, one node each, since 0        -> 4 x 1000 = 4000 each
    #   rack r1 (nodes 4-7): pair on nodes 4-5 since 900            -> 8 x 100  = 800
    #                        u6 since 500                           -> 4 x 500  = 2000
    #                        u7 since 800                           -> 4 x 200  = 800
    # rack-job needs 3 nodes in one rack. Rack r0: any 3 of u0..u3 = 12000. Rack r1 (3 nodes
    # free needed): {pair, u7} = 1600, {pair, u6} = 2800, {u6, u7} frees only 2 nodes.
    # Least lost work: {pair, u7}, which frees exactly the 12 GPUs the gang needs.
    sched = scheduler(racks(2, 4))
    for node in range(4):
        run(sched, spec(f"u{node}", "scratch"), [node], 0)
    run(sched, spec("u6", "scratch"), [6], 500)
    run(sched, spec("u7", "scratch"), [7], 800)
    run(sched, spec("pair", "scratch", pods=2), [4, 5], 900)
    sched.submit(spec("rack-job", "team-a", pods=3, topology=RACK), 1000)

    result = sched.cycle(1000)

    assert evictions(result) == [
        Evict("pair", "rack-job", GRACE, "unallocated-victim", 800.0),
        Evict("u7", "rack-job", GRACE, "unallocated-victim", 800.0),
    ]
    assert result.bound == []
    nomination = sched.jobs["rack-job"].nomination
    assert nomination is not None
    assert nomination.victims == {"pair", "u7"}
    assert sorted(nomination.nodes.tolist()) == [4, 5, 7]
    freed = 4 * len(nomination.nodes)
    assert freed == sched.jobs["rack-job"].request.gpus_total == 12
    assert_minimal(sched, "rack-job", ["pair", "u7"])
    # Victims keep their GPUs until the backend reports them gone.
    assert sched.jobs["u7"].state is JobState.RUNNING and sched.jobs["u7"].evicting
    assert "u7" in sched.state.allocations


def test_protected_jobs_are_never_chosen_even_when_cheaper() -> None:
    # One rack of 3 nodes at 2 h: team-b's b0 since 1.5 h, protected by its 8 h min runtime,
    # would lose 4 x 1800 = 7200; unallocated u1 and u2 since 0 lose 4 x 7200 = 28800 each.
    # team-a (no usage) outranks team-b, so only protection keeps b0 out of the cheapest set
    # {b0, u1} = 36000: the dearer {u1, u2} = 57600 goes.
    sched = scheduler(racks(1, 3))
    run(sched, spec("u1", "scratch"), [1], 0)
    run(sched, spec("u2", "scratch"), [2], 0)
    run(sched, spec("b0", "team-b", min_runtime="8h"), [0], 1.5 * HOUR)
    sched.submit(spec("pair", "team-a", pods=2, topology=RACK), 2 * HOUR)

    result = sched.cycle(2 * HOUR)

    assert evictions(result) == [
        Evict("u1", "pair", GRACE, "unallocated-victim", 28800.0),
        Evict("u2", "pair", GRACE, "unallocated-victim", 28800.0),
    ]


@pytest.mark.parametrize(("borrowed_min_runtime", "protected"), [(None, 8 * HOUR), (HOUR, HOUR)])
def test_protection_holds_until_start_plus_min_runtime_then_fair_share_applies(
    borrowed_min_runtime: float | None, protected: float
) -> None:
    # One node, held by team-b's job since 0 with min runtime 8 h: 4 GPUs, beyond team-b's
    # budget (30% of 4), so with borrowed work's protection capped at an hour it is protected
    # for that hour only; by default, for its 8 h. team-a's job asks at 30 min: nothing may be
    # preempted. When the protection ends, team-a (no usage) outranks team-b: better fair share
    # allows the eviction.
    sched = scheduler(racks(1, 1), contract=FAIR_SHARE, borrowed_min_runtime=borrowed_min_runtime)
    run(sched, spec("b-job", "team-b", min_runtime="8h"), [0], 0)
    sched.submit(spec("a-job", "team-a"), HOUR / 2)

    assert evictions(sched.cycle(HOUR / 2)) == []
    assert sched.jobs["a-job"].reason.endswith(
        "; no preemption: no running job may be preempted for it under the contract"
    )
    assert evictions(sched.cycle(protected - 1)) == []

    result = sched.cycle(protected)
    assert evictions(result) == [Evict("b-job", "a-job", GRACE, "better-fair-share", 4 * protected)]


def test_victim_set_is_minimal_and_prefers_least_lost_work_over_fewer_jobs() -> None:
    # One rack of 3 nodes x 4 GPUs, all unallocated; now = 1000 s; one 4-GPU pod to place.
    #   node 0: s0a (GPUs 0-1, since 700) 2 x 300 = 600;  s0b (GPUs 2-3, since 800) 2 x 200 = 400
    #   node 1: w1 (4 GPUs, since 600)    4 x 400 = 1600
    #   node 2: s2a (GPUs 0-1, since 0)   2 x 1000 = 2000; GPUs 2-3 idle
    # One free node costs {s0a, s0b} = 1000 (2 jobs), {w1} = 1600 or {s2a} = 2000 (1 job each):
    # least lost work wins over fewer jobs.
    sched = scheduler(racks(1, 3))
    run(sched, spec("s2a", "scratch", gpus=2), [2], 0, [0, 1])
    run(sched, spec("w1", "scratch"), [1], 600)
    run(sched, spec("s0a", "scratch", gpus=2), [0], 700, [0, 1])
    run(sched, spec("s0b", "scratch", gpus=2), [0], 800, [2, 3])
    sched.submit(spec("one", "team-a"), 1000)

    result = sched.cycle(1000)

    assert evicted_ids(result) == ["s0a", "s0b"]
    assert sum(e.lost_gpu_seconds for e in evictions(result)) == 1000.0
    assert_minimal(sched, "one", ["s0a", "s0b"])


def test_more_than_twelve_candidates_in_a_rack_give_a_minimal_set() -> None:
    # One rack of 4 nodes, each GPU running its own 1-GPU unallocated job: 16 candidates, more
    # than EXACT_VICTIMS, so the rack's victims are taken cheapest first and then spared while
    # the gang still fits. Lost work (1 GPU x seconds), now = 1000 s:
    #   node 3: 1, 2, 3 and 100;  node 0: 4, 5, 6, 7;  nodes 1 and 2: 50 .. 53 each.
    # Cheapest first takes node 3's three cheap jobs, then node 0's four: node 0 is free.
    # Sparing, costliest first, keeps node 0's four and drops node 3's three: 4+5+6+7 = 22.
    sched = scheduler(racks(1, 4))
    costs = {3: [1, 2, 3, 100], 0: [4, 5, 6, 7], 1: [50, 51, 52, 53], 2: [50, 51, 52, 53]}
    starts = sorted(
        (1000 - cost, node, gpu) for node, row in costs.items() for gpu, cost in enumerate(row)
    )
    for start, node, gpu in starts:
        run(sched, spec(f"n{node}g{gpu}", "scratch", gpus=1), [node], start, [gpu])
    sched.submit(spec("whole-node", "team-a", topology=RACK), 1000)

    result = sched.cycle(1000)

    assert evicted_ids(result) == ["n0g0", "n0g1", "n0g2", "n0g3"]
    assert sum(e.lost_gpu_seconds for e in evictions(result)) == 22.0
    assert_minimal(sched, "whole-node", evicted_ids(result))


def test_gang_larger_than_a_rack_spares_victims_it_does_not_need() -> None:
    # Two racks of 2 nodes, all unallocated; now = 1000 s. The gang needs 3 nodes (12 GPUs, more
    # than a rack): u0 since 975 (100), u1 since 0 (4000), u2 since 950 (200), u3 since 925
    # (300). Both racks are opened, then u1, the costliest, is spared: {u0, u2, u3} = 600.
    sched = scheduler(racks(2, 2))
    run(sched, spec("u1", "scratch"), [1], 0)
    run(sched, spec("u3", "scratch"), [3], 925)
    run(sched, spec("u2", "scratch"), [2], 950)
    run(sched, spec("u0", "scratch"), [0], 975)
    sched.submit(spec("wide", "team-a", pods=3), 1000)

    result = sched.cycle(1000)

    assert evicted_ids(result) == ["u0", "u2", "u3"]
    assert sum(e.lost_gpu_seconds for e in evictions(result)) == 600.0
    assert_minimal(sched, "wide", ["u0", "u2", "u3"])


def test_required_zone_takes_its_victims_in_one_zone_and_only_on_the_gang_s_racks() -> None:
    # Two zones of 6 racks x 2 nodes x 4 GPUs. In each zone racks 0-2 are free and racks 3-5
    # run eight 1-GPU unallocated jobs each (48 in all). The gang needs 6 whole racks in one
    # zone: the cluster's 6 free racks would hold it, but no zone's 3 do. The least it can
    # evict is the 24 jobs of one zone's 3 busy racks, more than `_spare` ever checks.
    sched = scheduler(ClusterState(nvl72_cluster(2, 1, 6, nodes_per_rack=2)))
    busy_racks = [3, 4, 5, 9, 10, 11]
    for rack in busy_racks:
        for node in (2 * rack, 2 * rack + 1):
            for gpu in range(4):
                run(sched, spec(f"u{node}g{gpu}", "scratch", gpus=1), [node], 900, [gpu])
    topology = {"required": "zone", "slices": [{"level": "rack", "pods": 2}]}
    sched.submit(spec("wide", "team-a", pods=12, topology=topology), 1000)

    result = sched.cycle(1000)

    victims = evicted_ids(result)
    assert len(victims) == 24
    victim_nodes = {int(sched.state.allocations[v].nodes[0]) for v in victims}
    zones = {node // 12 for node in victim_nodes}
    assert len(zones) == 1
    nominated = sched.jobs["wide"].nomination
    assert nominated is not None
    assert victim_nodes <= set(nominated.nodes.tolist())
    assert_minimal_by_rack(sched, "wide", victims)


def test_required_zone_refusal_counts_room_zone_by_zone() -> None:
    # Two zones of 3 racks x 2 nodes. In each zone one rack is free, one runs an unallocated
    # job and one a protected team-b job. The gang needs 3 whole racks in one zone: evicting
    # both unallocated jobs would give the cluster 4 racks, but no zone more than 2.
    sched = scheduler(ClusterState(nvl72_cluster(2, 1, 3, nodes_per_rack=2)))
    for zone in (0, 1):
        first = 6 * zone
        run(sched, spec(f"u{zone}", "scratch", pods=2), [first + 2, first + 3], 900)
        run(
            sched,
            spec(f"kept{zone}", "team-b", pods=2, min_runtime="8h"),
            [first + 4, first + 5],
            900,
        )
    topology = {"required": "zone", "slices": [{"level": "rack", "pods": 2}]}
    sched.submit(spec("wide", "team-a", pods=6, topology=topology), 1000)

    result = sched.cycle(1000)

    assert evictions(result) == []
    assert "leaves no zone with room for more than 4 of its 6 pods" in sched.jobs["wide"].reason


def zones_of_two_racks(in_rack_3: JobSpec) -> Scheduler:
    """Two zones of 2 racks x 2 nodes. Zone 0: rack 0 free, rack 1 runs team-b's young job b0,
    unprotected but at team-b's budget (the budget rule keeps it); zone 1: rack 2 free, rack
    3 runs `in_rack_3`, older (more work lost). team-a's gang needs a whole zone."""
    sched = Scheduler(
        ClusterState(nvl72_cluster(2, 1, 2, nodes_per_rack=2)),
        BudgetTree.from_dict(
            {"accounts": {"team-a": 50, "team-b": 25, "team-c": 25, "scratch": 0}}
        ),
        contract=BARE,
    )
    run(sched, in_rack_3, [6, 7], 0)
    run(sched, spec("b0", "team-b", pods=2, min_runtime="1h"), [2, 3], 1000)
    topology = {"required": "zone", "slices": [{"level": "rack", "pods": 2}]}
    sched.submit(spec("wide", "team-a", pods=4, topology=topology), 2 * HOUR)
    return sched


def across_racks(sched: Scheduler, job_id: str, now: float) -> PreemptionPlan | Refusal | None:
    entry, ranking = sched.queue.get(job_id), sched.queue.ranking(now)
    return sched.preemptor.spread.across_domains(
        job_id,
        sched.jobs[job_id].request,
        sched.ledger.preemptible,
        lambda slots: sched.preemptor.verdicts.of(entry, ranking, now, slots),
        now,
    )


def assert_refused_across_racks(sched: Scheduler, job_id: str, now: float, expected: str) -> None:
    """The search across racks refuses `job_id` with `expected` by itself, and a cycle evicts
    nothing and gives that reason."""
    refusal = across_racks(sched, job_id, now)
    assert isinstance(refusal, Refusal)
    assert refusal.reason == expected

    result = sched.cycle(now)

    assert evictions(result) == []
    assert expected in sched.jobs[job_id].reason


def test_a_required_zone_the_contract_cannot_open_leaves_the_others_to_the_general_search() -> None:
    # The aggregates point at zone 0 (b0 loses the least work), but the contract keeps b0:
    # the search across racks cannot prove a refusal while zone 1 could open (u1 is
    # unallocated work), and the general search evicts u1 there.
    sched = zones_of_two_racks(spec("u1", "scratch", pods=2))
    assert across_racks(sched, "wide", 2 * HOUR) is None

    result = sched.cycle(2 * HOUR)

    assert evicted_ids(result) == ["u1"]


def test_a_required_zone_refusal_is_proven_from_the_jobs_the_contract_allows() -> None:
    # Rack 3 runs team-c's c1, unprotected but at team-c's budget: the aggregates count both
    # zones as able to open, the contract neither.
    sched = zones_of_two_racks(spec("c1", "team-c", pods=2, min_runtime="1h"))
    expected = (
        "even evicting every job it may preempt leaves no zone with room for more than 2 of its "
        "4 pods in whole slices of 2"
    )
    assert_refused_across_racks(sched, "wide", 2 * HOUR, expected)


def test_a_shortfall_across_racks_is_proven_from_the_jobs_the_contract_allows() -> None:
    # 4 racks of 2 nodes: racks 0-1 free, rack 2 runs team-b's b0 (kept by the budget rule),
    # rack 3 unallocated u1. The gang needs 4 racks: the aggregates count b0's rack as room,
    # the contract does not, and evicting u1 gives 3 racks at most.
    sched = Scheduler(
        racks(4, 2), BudgetTree.from_dict({"accounts": {"team-a": 50, "team-b": 25, "scratch": 0}})
    )
    run(sched, spec("u1", "scratch", pods=2), [6, 7], 0)
    run(sched, spec("b0", "team-b", pods=2, min_runtime="1h"), [4, 5], 1000)
    topology = {"slices": [{"level": "rack", "pods": 2}]}
    sched.submit(spec("wide", "team-a", pods=8, topology=topology), 2 * HOUR)
    expected = (
        "even evicting every job it may preempt leaves room for at most 6 of its 8 pods in "
        "whole slices of 2"
    )
    assert_refused_across_racks(sched, "wide", 2 * HOUR, expected)


def assert_minimal_by_rack(sched: Scheduler, job_id: str, victims: Sequence[str]) -> None:
    """The victims make room, and sparing all of any one rack's victims leaves none (a set of
    whole-rack slices cannot use part of a rack)."""
    assert fits_without(sched, job_id, victims)
    by_rack: dict[int, list[str]] = {}
    for victim in victims:
        by_rack.setdefault(int(sched.state.allocations[victim].nodes[0]) // 2, []).append(victim)
    for rack, spared in by_rack.items():
        rest = [v for v in victims if v not in spared]
        assert not fits_without(sched, job_id, rest), f"rack {rack}'s victims could be spared"


def checkpoint_case(checkpoint: float | None, **options: Any) -> tuple[Scheduler, CycleResult]:
    # One rack of 2 nodes, unallocated work; now = 3000 s; a 4-GPU pod to place.
    #   node 0: w0 (4 GPUs, resumable, since 0)  4 x 3000 = 12000, or 4 x (3000 - checkpoint)
    #   node 1: h1a (2 GPUs, since 2400) 2 x 600 = 1200; h1b (2 GPUs, since 2600) 2 x 400 = 800
    sched = scheduler(racks(1, 2), **options)
    run(sched, spec("w0", "scratch", resumable=True), [0], 0)
    run(sched, spec("h1a", "scratch", gpus=2), [1], 2400, [0, 1])
    run(sched, spec("h1b", "scratch", gpus=2), [1], 2600, [2, 3])
    if checkpoint is not None:
        sched.report_checkpoint("w0", checkpoint)
    sched.submit(spec("node-job", "team-a"), 3000)
    return sched, sched.cycle(3000)


def test_a_gang_over_many_racks_looks_further_when_the_contract_spares_most_of_them() -> None:
    # 40 racks of 3 nodes. In rack r, node 3r runs unallocated u<r> since 10 r s; nodes 3r+1
    # and 3r+2 run team-a's priority-50 work, past its min runtime: unprotected, so the
    # aggregates count it as room, but team-a's priority-10 gang of 30 pods may not take it.
    # The first racks looked at (from the aggregates: 3 nodes each) open 1 node each, too few:
    # the search reads further racks. The 30 youngest unallocated jobs go, one per rack.
    sched = Scheduler(
        racks(40, 3), BudgetTree.from_dict({"accounts": {"team-a": 100, "scratch": 0}})
    )
    for rack in range(40):
        run(sched, spec(f"u{rack}", "scratch"), [3 * rack], 10.0 * rack)
        for node in (3 * rack + 1, 3 * rack + 2):
            run(sched, spec(f"a{node}", "team-a", priority=50, min_runtime="1h"), [node], 0)
    sched.submit(spec("wide", "team-a", pods=30, priority=10), 2 * HOUR)
    entry, ranking = sched.queue.get("wide"), sched.queue.ranking(2 * HOUR)
    # The search across racks answers by itself, without the general search.
    plan = sched.preemptor.spread.across_domains(
        "wide",
        sched.jobs["wide"].request,
        sched.ledger.preemptible,
        lambda slots: sched.preemptor.verdicts.of(entry, ranking, 2 * HOUR, slots),
        2 * HOUR,
    )
    assert isinstance(plan, PreemptionPlan)
    assert sorted(v.job_id for v in plan.victims) == sorted(f"u{r}" for r in range(10, 40))

    result = sched.cycle(2 * HOUR)

    assert evicted_ids(result) == sorted(f"u{rack}" for rack in range(10, 40))
    assert all(e.rule == "unallocated-victim" for e in evictions(result))
    assert_minimal(sched, "wide", evicted_ids(result))


def test_least_lost_work_takes_two_fresh_jobs_over_one_old_one() -> None:
    # {h1a, h1b} = 2000 < {w0} = 12000.
    _, result = checkpoint_case(checkpoint=None)
    assert evicted_ids(result) == ["h1a", "h1b"]


def test_a_checkpoint_makes_the_resumable_job_the_cheapest_victim() -> None:
    # w0 saved its state at 2900 s: it loses 4 x 100 = 400 < 2000.
    _, result = checkpoint_case(checkpoint=2900)
    assert evictions(result) == [Evict("w0", "node-job", GRACE, "unallocated-victim", 400.0)]


def test_fewer_jobs_break_a_tie_in_lost_work() -> None:
    # w0 saved its state at 2500 s: it loses 4 x 500 = 2000, as much as {h1a, h1b}; one job wins.
    _, result = checkpoint_case(checkpoint=2500)
    assert evicted_ids(result) == ["w0"]


class FewestJobs:
    """An alternative impact: fewest jobs first, then lost work."""

    def key(self, victims: Sequence[Candidate]) -> tuple[float, ...]:
        return (float(len(victims)), sum(v.lost_gpu_seconds for v in victims))


def test_the_impact_policy_can_be_replaced() -> None:
    # With fewest jobs first, w0 (1 job, 12000) beats {h1a, h1b} (2 jobs, 2000).
    _, result = checkpoint_case(checkpoint=None, impact=FewestJobs())
    assert evicted_ids(result) == ["w0"]


class FewestJobsFirst(LeastLostWork):
    """The same alternative, written as a subclass of the default policy."""

    def key(self, victims: Sequence[Candidate]) -> tuple[float, ...]:
        return (float(len(victims)), sum(v.lost_gpu_seconds for v in victims))


def test_a_subclass_of_the_default_impact_policy_is_honoured() -> None:
    # As above: w0 (1 job) should beat {h1a, h1b} (2 jobs).
    _, result = checkpoint_case(checkpoint=None, impact=FewestJobsFirst())
    assert evicted_ids(result) == ["w0"]


def test_standing_breaks_a_tie_in_lost_work_and_count() -> None:
    # One rack of 2 nodes at 3 h. team-b's job since 0 and team-c's since 0.5 h, both past a
    # 1 h min runtime and both checkpointed at 3 h - 100 s: each loses 4 x 100 = 400. team-b
    # used more (4 x 3 h against 4 x 2.5 h), so it ranks below team-c and its job goes first.
    sched = scheduler(racks(1, 2), contract=FAIR_SHARE)
    run(sched, spec("b-job", "team-b", min_runtime="1h", resumable=True), [0], 0)
    run(sched, spec("c-job", "team-c", min_runtime="1h", resumable=True), [1], 0.5 * HOUR)
    now = 3 * HOUR
    sched.report_checkpoint("b-job", now - 100)
    sched.report_checkpoint("c-job", now - 100)
    sched.submit(spec("a-job", "team-a"), now)
    ranking = sched.queue.ranking(now)
    assert ranking.prefers("team-c", "team-b")

    result = sched.cycle(now)

    assert evictions(result) == [Evict("b-job", "a-job", GRACE, "better-fair-share", 400.0)]


# --- the contract ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("priority", "now", "expected"),
    [
        (5, 2 * HOUR, [Evict("low", "high", GRACE, "higher-priority", 4 * 2 * HOUR)]),
        (1, 2 * HOUR, []),  # equal priority: not higher
        (0, 2 * HOUR, []),  # lower priority
        (5, 0.5 * HOUR, []),  # higher priority, but "low" is inside its 1 h min runtime
    ],
)
def test_within_a_team_priority_decides(priority: int, now: float, expected: list[Evict]) -> None:
    # team-a runs "low" (priority 1, min runtime 1 h) on the only node since 0.
    sched = scheduler(racks(1, 1))
    run(sched, spec("low", "team-a", priority=1, min_runtime="1h"), [0], 0)
    sched.submit(spec("high", "team-a", priority=priority), now)
    assert evictions(sched.cycle(now)) == expected


def test_fair_share_rule_across_teams_rank_decides_not_priority() -> None:
    # team-b runs b-job (priority 0, min runtime 1 h) on the only node since 0. team-a used
    # 64 GPUs over [0, 1 h) = 64 GPU-hours; team-b has used 4 x 2 h = 8 by 2 h. team-b ranks
    # above team-a, so team-a's priority-100 job may not preempt it.
    usage = UsageTracker()
    usage.start("team-a", 64, now=0)
    sched = Scheduler(
        racks(1, 1), BudgetTree.from_dict({"accounts": TEAMS}), usage=usage, contract=FAIR_SHARE
    )
    run(sched, spec("b-job", "team-b", min_runtime="1h"), [0], 0)
    usage.stop("team-a", 64, now=HOUR)
    sched.submit(spec("a-job", "team-a", priority=100), 2 * HOUR)

    assert evictions(sched.cycle(2 * HOUR)) == []
    assert sched.jobs["a-job"].reason.endswith(
        "no running job may be preempted for it under the contract"
    )

    # team-c, with no usage, ranks above team-b and may.
    sched.submit(spec("c-job", "team-c"), 2 * HOUR)
    result = sched.cycle(2 * HOUR)
    assert evictions(result) == [Evict("b-job", "c-job", GRACE, "better-fair-share", 4 * 2 * HOUR)]


HALVES = {"team-a": 50, "team-b": 50, "scratch": 0}


def budget_case(contract: Contract | None = None) -> Scheduler:
    """One rack of 4 nodes x 4 GPUs, budgets of 8 GPUs for team-a and team-b. team-b runs b0
    and b1 since 0 and b2 since 0.5 h (12 GPUs, min runtime 1 h); team-a runs a0 since 0 (4
    GPUs) and used 64 GPU-hours in the first hour, so it ranks below team-b in fair share."""
    usage = UsageTracker()
    usage.start("team-a", 64, now=0)
    options: dict[str, Any] = {} if contract is None else {"contract": contract}
    sched = Scheduler(
        racks(1, 4), BudgetTree.from_dict({"accounts": HALVES}), usage=usage, **options
    )
    run(sched, spec("b0", "team-b", min_runtime="1h", resumable=True), [0], 0)
    run(sched, spec("b1", "team-b", min_runtime="1h", resumable=True), [1], 0)
    run(sched, spec("a0", "team-a", min_runtime="1h"), [3], 0)
    run(sched, spec("b2", "team-b", min_runtime="1h", resumable=True), [2], 0.5 * HOUR)
    usage.stop("team-a", 64, now=HOUR)
    return sched


def test_budget_rule_a_team_below_its_budget_reclaims_from_one_beyond_its_own() -> None:
    # At 2 h team-a (4 of its 8 GPUs) asks for 4 more. team-b keeps its 8 without any one of its
    # jobs, so team-a may reclaim one whatever the fair-share ranking; the least lost work is
    # b2's, 4 GPUs x 1.5 h.
    sched = budget_case()
    sched.submit(spec("a-job", "team-a", min_runtime="1h"), 2 * HOUR)
    assert sched.queue.ranking(2 * HOUR).prefers("team-b", "team-a")

    result = sched.cycle(2 * HOUR)

    assert evictions(result) == [Evict("b2", "a-job", GRACE, "reclaim-budget", 4 * 1.5 * HOUR)]
    assert "of accounts running beyond their budget" in sched.jobs["a-job"].reason
    sched.evicted("b2", 2 * HOUR + GRACE)
    assert [d.job_id for d in sched.cycle(2 * HOUR + GRACE).bound] == ["a-job"]

    # Both teams now run their 8-GPU budgets: neither may take the other's GPUs, so the
    # eviction does not bounce back, even once every job is past its min runtime.
    sched.submit(spec("b-again", "team-b", min_runtime="1h"), 5 * HOUR)
    sched.submit(spec("a-more", "team-a", min_runtime="1h"), 5 * HOUR)
    assert evictions(sched.cycle(5 * HOUR)) == []
    assert sched.jobs["b-again"].reason.endswith(
        "no running job may be preempted for it under the contract"
    )


def test_budget_rule_never_takes_a_team_below_its_budget() -> None:
    # team-b runs 12 GPUs; after b2 leaves on its own it runs exactly its 8. team-a, below its
    # budget, may then evict none of team-b's jobs: each would leave team-b with 4 of 8.
    sched = budget_case()
    sched.finish("b2", 1.5 * HOUR)
    sched.submit(spec("big", "team-a", pods=2, min_runtime="1h"), 2 * HOUR)
    assert evictions(sched.cycle(2 * HOUR)) == []


def test_budget_rule_victims_of_one_team_together_keep_it_at_its_budget() -> None:
    # team-b runs 12 GPUs, 4 beyond its budget: any one of its jobs may be reclaimed, but not
    # two, which would leave it 4 of its 8. team-a (4 of its 8) asks for 8 GPUs: refused.
    sched = budget_case()
    sched.submit(spec("big", "team-a", pods=2, min_runtime="1h"), 2 * HOUR)
    assert evictions(sched.cycle(2 * HOUR)) == []
    reason = sched.jobs["big"].reason
    assert "no preemption" in reason and "at or above its budget" in reason


def test_budget_rule_counts_evictions_in_flight_against_the_victim_s_team() -> None:
    # Two team-a jobs of 4 GPUs in one cycle: the first reclaims b2, which team-b could spare.
    # While b2 is in its grace period team-b is counted without it, at its budget: the second
    # may evict nobody, in this cycle or the next.
    sched = budget_case()
    sched.submit(spec("a-1", "team-a", min_runtime="1h"), 2 * HOUR)
    sched.submit(spec("a-2", "team-a", min_runtime="1h"), 2 * HOUR)
    assert evicted_ids(sched.cycle(2 * HOUR)) == ["b2"]
    assert evictions(sched.cycle(2 * HOUR + 10)) == []
    assert sched.running_gpus("team-b") == 8
    sched.evicted("b2", 2 * HOUR + GRACE)
    assert sched.running_gpus("team-b") == 8
    assert evictions(sched.cycle(2 * HOUR + GRACE)) == []


def test_budget_caps_steer_the_choice_to_a_team_that_can_spare_the_gpus() -> None:
    # Three full racks of two nodes (24 GPUs). Rack 0: team-b's b0 and b1, the cheapest to evict
    # (started at 1 h); rack 1: team-c's c0 and c1 (at 0.5 h); rack 2: team-c's c2 and c3 (at
    # 0). team-b runs 8 GPUs, 5.6 beyond its 2.4-GPU budget: it may lose one job, not two.
    # team-c runs 16, 11.2 beyond its 4.8. team-a's 8-GPU gang, required in one rack,
    # therefore empties rack 1, the cheaper of team-c's.
    shares = {"team-a": 70, "team-b": 10, "team-c": 20}
    sched = Scheduler(racks(3, 2), BudgetTree.from_dict({"accounts": shares}), contract=BARE)
    run(sched, spec("c2", "team-c", min_runtime="1h"), [4], 0)
    run(sched, spec("c3", "team-c", min_runtime="1h"), [5], 0)
    run(sched, spec("c0", "team-c", min_runtime="1h"), [2], 0.5 * HOUR)
    run(sched, spec("c1", "team-c", min_runtime="1h"), [3], 0.5 * HOUR)
    run(sched, spec("b0", "team-b", min_runtime="1h"), [0], HOUR)
    run(sched, spec("b1", "team-b", min_runtime="1h"), [1], HOUR)
    sched.submit(spec("gang", "team-a", pods=2, min_runtime="1h", topology=RACK), 3 * HOUR)
    assert evicted_ids(sched.cycle(3 * HOUR)) == ["c0", "c1"]


def test_a_refusal_for_one_account_does_not_answer_for_another_in_the_same_cycle() -> None:
    # team-b ranks first and asks for 4 GPUs: beyond its budget it may evict nobody. team-a's
    # job of the same shape comes next in the same cycle and may reclaim b2 for its budget.
    sched = budget_case()
    sched.submit(spec("b-more", "team-b", min_runtime="1h"), 2 * HOUR)
    sched.submit(spec("a-job", "team-a", min_runtime="1h"), 2 * HOUR)
    result = sched.cycle(2 * HOUR)
    assert evictions(result) == [Evict("b2", "a-job", GRACE, "reclaim-budget", 4 * 1.5 * HOUR)]
    assert "no preemption" in sched.jobs["b-more"].reason


def test_fair_share_rule_lets_the_better_ranked_team_evict_instead() -> None:
    # The same cluster under the fair-share rule: team-a ranks below team-b, so it may not
    # evict; team-b (running 12 GPUs, beyond its budget) may evict team-a's a0.
    sched = budget_case(FAIR_SHARE)
    sched.submit(spec("a-job", "team-a", min_runtime="1h"), 2 * HOUR)
    assert evictions(sched.cycle(2 * HOUR)) == []
    sched.submit(spec("b-more", "team-b", min_runtime="1h"), 2 * HOUR)
    assert evicted_ids(sched.cycle(2 * HOUR)) == ["a0"]


@pytest.mark.parametrize(
    "preemptor",
    [
        spec("zero-min-runtime", "team-a", min_runtime=0),
        spec("no-budget", "scratch", min_runtime="1h"),
    ],
    ids=["min-runtime-0", "account-without-budget"],
)
def test_unallocated_preemptors_preempt_nobody(preemptor: JobSpec) -> None:
    sched = scheduler(racks(1, 1))
    run(sched, spec("u0", "scratch"), [0], 0)
    sched.submit(preemptor, 10)
    result = sched.cycle(10)
    assert result.decisions == []
    assert sched.jobs[preemptor.name].state is JobState.PENDING
    # The same request from a budgeted account with a min runtime does preempt.
    sched.submit(spec("budgeted", "team-a"), 20)
    assert evicted_ids(sched.cycle(20)) == ["u0"]


def test_preemptions_per_cycle_are_capped() -> None:
    # Two budgeted jobs, each able to evict one unallocated job; the cap allows one per cycle.
    sched = scheduler(racks(1, 2), max_preemptions_per_cycle=1)
    run(sched, spec("u0", "scratch"), [0], 0)
    run(sched, spec("u1", "scratch"), [1], 0)
    sched.submit(spec("first", "team-a", priority=2), 10)
    sched.submit(spec("second", "team-a", priority=1), 10)
    assert [(e.job_id, e.preemptor) for e in evictions(sched.cycle(10))] == [("u0", "first")]
    assert [(e.job_id, e.preemptor) for e in evictions(sched.cycle(11))] == [("u1", "second")]


# --- grace, nomination, re-planning -------------------------------------------------------------


def pair_preempting_two(nodes_per_rack: int = 2) -> Scheduler:
    """Rack r0 nodes 0-1 run u0, u1 (unallocated, since 0); `pair` (2 nodes in one rack) has
    evicted them at 100 s and waits. Other racks' nodes run team-b jobs protected for 8 h."""
    sched = scheduler(racks(2, nodes_per_rack))
    run(sched, spec("u0", "scratch"), [0], 0)
    run(sched, spec("u1", "scratch"), [1], 0)
    for node in range(nodes_per_rack, 2 * nodes_per_rack):
        run(sched, spec(f"b{node}", "team-b", min_runtime="8h"), [node], 0)
    sched.submit(spec("pair", "team-a", pods=2, topology=RACK), 100)
    assert evicted_ids(sched.cycle(100)) == ["u0", "u1"]
    return sched


def test_preemptor_starts_the_moment_the_last_victim_is_gone() -> None:
    sched = pair_preempting_two()
    pair = sched.jobs["pair"]

    sched.evicted("u0", 105)
    result = sched.cycle(105)
    assert result.decisions == []
    assert pair.reason == (
        "preempting: waiting for 1 evicted job(s) to exit (grace period); "
        "their GPUs are kept for this job"
    )

    sched.evicted("u1", 117)
    result = sched.cycle(117)
    assert bound(result) == {"pair": [0, 1]}
    assert pair.state is JobState.RUNNING and pair.start_time == 117
    assert pair.nomination is None
    assert_consistent(sched.state)


def test_nominated_capacity_is_not_taken_by_a_later_small_job() -> None:
    # u0 leaves at 110: node 0 is idle but nominated for `pair`. `small` (1 node, priority 10,
    # ahead of `pair` in team-a's queue) arrives then: it may not take node 0, and it finds
    # nothing it may preempt (nodes 0 and 1 are kept for `pair`, team-b's jobs are protected).
    sched = pair_preempting_two()
    sched.evicted("u0", 110)
    sched.submit(spec("small", "team-a", priority=10), 110)
    assert [row.job for row in sched.queue_rows(110)][:2] == ["small", "pair"]

    result = sched.cycle(110)

    assert result.decisions == []
    assert sched.state.free_whole_gpus[0] == 4
    assert sched.jobs["small"].state is JobState.PENDING
    assert sched.jobs["small"].reason.endswith(
        "no preemption: even evicting every unprotected job leaves no rack with room for "
        "1 pod of 4 GPUs"
    )
    # The fence is lifted between cycles: node 0 is healthy, only held for `pair`.
    assert sched.state.health[0] == Health.HEALTHY

    sched.evicted("u1", 120)
    result = sched.cycle(120)
    assert bound(result) == {"pair": [0, 1]}
    assert sched.jobs["small"].state is JobState.PENDING


def test_a_victim_that_never_exits_keeps_its_gpus_and_nothing_is_double_allocated() -> None:
    sched = pair_preempting_two()
    sched.evicted("u0", 110)
    # An unallocated 1-node job would fit on node 0, which is idle but nominated.
    sched.submit(spec("filler", "team-a", min_runtime=0), 110)
    for now in (110, 100 + GRACE, 1000, 10 * HOUR):
        result = sched.cycle(now)
        assert result.decisions == [], f"at {now}"
        assert "u1" in sched.state.allocations and sched.jobs["u1"].evicting
        assert sched.jobs["pair"].state is JobState.PENDING
        assert sched.jobs["filler"].state is JobState.PENDING
        assert sched.state.free_whole_gpus[0] == 4
        assert_consistent(sched.state)
    nomination = sched.jobs["pair"].nomination
    assert nomination is not None and nomination.victims == {"u1"}


def test_preemptor_replans_when_a_nominated_node_goes_down() -> None:
    # Two racks of 3 nodes; now = 1000 s. Rack r0: u0 since 0 (4000 lost), u1 and u2 since 900
    # (400 each). Rack r1: u3, u4, u5 since 0 (4000 each). `pair` evicts u1 and u2 (800).
    sched = scheduler(racks(2, 3))
    for node in (0, 3, 4, 5):
        run(sched, spec(f"u{node}", "scratch"), [node], 0)
    run(sched, spec("u1", "scratch", resumable=True), [1], 900)
    run(sched, spec("u2", "scratch"), [2], 900)
    sched.submit(spec("pair", "team-a", pods=2, topology=RACK), 1000)
    assert evicted_ids(sched.cycle(1000)) == ["u1", "u2"]

    # Node 1 fails during the grace period: u1 fails at once (resumable: requeued).
    failed = sched.set_health([1], Health.DOWN, 1010)
    assert [job.job_id for job in failed] == ["u1"]
    assert sched.jobs["u1"].state is JobState.PENDING
    sched.evicted("u2", 1020)

    # Nominated nodes 1-2 no longer hold the gang: re-planned. Rack r0 now needs only u0 gone
    # (nodes 0 and 2: 4 x 1020 = 4080); rack r1 would cost two jobs (8160).
    result = sched.cycle(1020)
    assert evictions(result) == [Evict("u0", "pair", GRACE, "unallocated-victim", 4080.0)]
    assert result.bound == []
    pair = sched.jobs["pair"]
    assert any("nominated capacity no longer fits" in event for _, event in pair.history)
    assert pair.nomination is not None and sorted(pair.nomination.nodes.tolist()) == [0, 2]
    # Requeued victims do not take the newly nominated node 2.
    assert sched.jobs["u2"].state is JobState.PENDING

    sched.evicted("u0", 1030)
    assert bound(sched.cycle(1030)) == {"pair": [0, 2]}
    assert_consistent(sched.state)


# --- node health ----------------------------------------------------------------------------------


def test_draining_node_requeues_its_job_only_after_min_runtime() -> None:
    # One rack of 3 nodes: `train` (team-a, min runtime 1 h, resumable) on node 0 since 0,
    # unallocated u1 on node 1 since 0, node 2 idle. Nodes 0 and 1 start draining at 600 s.
    sched = scheduler(racks(1, 3))
    run(sched, spec("train", "team-a", min_runtime="1h", resumable=True), [0], 0)
    run(sched, spec("u1", "scratch"), [1], 0)
    sched.set_health([0, 1], Health.DRAINING, 600)

    # Unallocated work leaves at once (4 x 600 lost); `train` is protected until 1 h.
    result = sched.cycle(600)
    assert evictions(result) == [Evict("u1", "", GRACE, "node_draining", 2400.0)]
    assert sched.jobs["train"].reason == (
        "running on a draining node; leaves when its min runtime ends"
    )
    assert evictions(sched.cycle(HOUR - 1)) == []

    result = sched.cycle(HOUR)
    assert evictions(result) == [Evict("train", "", GRACE, "node_draining", 4 * HOUR)]
    assert sched.jobs["train"].evictions == [
        EvictionRecord(
            HOUR,
            "",
            "node_draining",
            "its node is draining and its min runtime has ended",
            4 * HOUR,
        )
    ]
    assert evictions(sched.cycle(HOUR + 10)) == []  # not evicted twice

    # Gone: requeued, and placed again in the same cycle on the only healthy node.
    sched.evicted("u1", HOUR + 20)
    sched.evicted("train", HOUR + 20)
    assert sched.jobs["train"].state is JobState.PENDING
    result = sched.cycle(HOUR + 20)
    assert bound(result) == {"train": [2]}
    assert sched.jobs["u1"].state is JobState.PENDING  # draining nodes take no new work


def test_a_node_going_down_fails_its_gangs_at_once_and_replaces_the_resumable_one() -> None:
    # Two racks of 3 nodes. Rack r0: `gang` (team-a, resumable, 2 nodes in one rack) on nodes
    # 0-1; node 2 idle. Rack r1: `fragile` (team-b, not resumable) on nodes 3-4; `keeper` on 5.
    # Nodes 1 and 4 go down at 500 s.
    sched = scheduler(racks(2, 3))
    gang = spec("gang", "team-a", pods=2, resumable=True, topology=RACK)
    run(sched, gang, [0, 1], 0)
    run(sched, spec("fragile", "team-b", pods=2), [3, 4], 0)
    run(sched, spec("keeper", "team-b", min_runtime="8h"), [5], 0)

    failed = sched.set_health([1, 4], Health.DOWN, 500)

    assert sorted(job.job_id for job in failed) == ["fragile", "gang"]
    assert sched.jobs["fragile"].state is JobState.FAILED
    assert sched.jobs["fragile"].end_time == 500
    assert sched.jobs["gang"].state is JobState.PENDING
    assert set(sched.state.allocations) == {"keeper"}
    # Same cycle: the gang is placed again inside rack r0, on its surviving node and node 2
    # (rack r1 has only node 3 healthy and free).
    result = sched.cycle(500)
    assert bound(result) == {"gang": [0, 2]}
    assert sched.jobs["gang"].attempts == 2
    assert_consistent(sched.state)


def test_a_node_going_down_fails_a_job_holding_only_its_cpu() -> None:
    # `cpu-only` holds CPU and memory of node 0 and no GPU; `beside` holds a GPU of node 1.
    sched = scheduler(racks(1, 2))
    cpu_only = JobSpec.from_dict(
        {"name": "cpu-only", "account": "team-a", "pods": 1, "resources_per_pod": {"cpu": 4}}
    )
    held = Allocation.of([0], np.zeros((1, 0), dtype=np.int64), cpu_milli=4000)
    sched.adopt(cpu_only, held, start_time=0, now=0)
    run(sched, spec("beside", "team-a", gpus=1), [1], 0)

    failed = sched.set_health([0], Health.DOWN, 500)

    assert [job.job_id for job in failed] == ["cpu-only"]
    assert set(sched.state.allocations) == {"beside"}


# --- explanations ---------------------------------------------------------------------------------


def test_evictions_and_reasons_explain_who_why_and_what_it_cost() -> None:
    # u0 and u1 ran since 0; `pair` evicts them at 100 s: 4 x 100 = 400 GPU-seconds each.
    sched = pair_preempting_two()
    pair = sched.jobs["pair"]
    record = EvictionRecord(
        100, "pair", "unallocated-victim", "preempted by pair (unallocated-victim)", 400.0
    )
    assert sched.jobs["u0"].evictions == [record]
    assert sched.jobs["u0"].history[-1] == (100, "preempted by pair (unallocated-victim)")
    # 800 GPU-seconds = 0.2 GPU-hours.
    assert pair.reason == (
        "preempting 2 unallocated jobs in rack z0-b0-r0 (0.2 GPU-hours of work lost); "
        "starts when they exit"
    )
    assert pair.reason in sched.explain("pair", 100).text

    sched.evicted("u0", 110)
    assert sched.jobs["u0"].preemptions == 1
    assert sched.jobs["u0"].history[-1] == (
        110,
        "preempted; not resumable: requeued to start from scratch",
    )
    sched.cycle(110)
    assert "waiting for 1 evicted job(s) to exit" in sched.explain("pair", 110).text


def test_a_job_that_cannot_preempt_says_what_it_lacks() -> None:
    # Two racks of 2 nodes; every rack holds one protected team-b job and one unallocated job,
    # so even evicting both unallocated jobs leaves no rack with 2 free nodes.
    sched = scheduler(racks(2, 2))
    run(sched, spec("b0", "team-b", min_runtime="8h"), [0], 0)
    run(sched, spec("u1", "scratch"), [1], 0)
    run(sched, spec("b2", "team-b", min_runtime="8h"), [2], 0)
    run(sched, spec("u3", "scratch"), [3], 0)
    sched.submit(spec("pair", "team-a", pods=2, topology=RACK), 100)

    result = sched.cycle(100)

    assert evictions(result) == []
    assert (
        "no preemption: even evicting every unprotected job leaves no rack with room for 2 pods"
        in (sched.jobs["pair"].reason)
    )


# --- victims of every kind, shapes, shared GPUs, checkpoints, unconstrained gangs -----------------


def test_least_lost_work_is_chosen_whether_the_victims_are_unallocated_or_not() -> None:
    # Rack r0 (nodes 0-1): unallocated u0, u1 since 0: at 5 h they lose 4 x 5 h = 72000 each.
    # Rack r1 (nodes 2-3): team-b's resumable jobs past their 1 h min runtime, checkpointed
    # at 5 h - 60 s: 4 x 60 = 240 each. team-a outranks team-b. Least lost work: {b2, b3} = 480.
    sched = scheduler(racks(2, 2), contract=FAIR_SHARE)
    run(sched, spec("u0", "scratch"), [0], 0)
    run(sched, spec("u1", "scratch"), [1], 0)
    run(sched, spec("b2", "team-b", min_runtime="1h", resumable=True), [2], 0)
    run(sched, spec("b3", "team-b", min_runtime="1h", resumable=True), [3], 0)
    now = 5 * HOUR
    sched.report_checkpoint("b2", now - 60)
    sched.report_checkpoint("b3", now - 60)
    sched.submit(spec("pair", "team-a", pods=2, topology=RACK), now)

    result = sched.cycle(now)

    assert evicted_ids(result) == ["b2", "b3"]


def test_a_smaller_gang_may_preempt_where_a_larger_one_of_its_shape_could_not() -> None:
    # Every rack of 2 nodes holds a protected team-b job and an unallocated job. `pair` (2 nodes
    # in a rack, ahead in the queue by priority) cannot make room; `single` (1 node in a rack)
    # can, by evicting one unallocated job.
    sched = scheduler(racks(2, 2))
    run(sched, spec("b0", "team-b", min_runtime="8h"), [0], 0)
    run(sched, spec("u1", "scratch"), [1], 0)
    run(sched, spec("b2", "team-b", min_runtime="8h"), [2], 0)
    run(sched, spec("u3", "scratch"), [3], 0)
    sched.submit(spec("pair", "team-a", pods=2, priority=5, topology=RACK), HOUR)
    sched.submit(spec("single", "team-a", pods=1, priority=1, topology=RACK), HOUR)

    result = sched.cycle(HOUR)

    assert [e.preemptor for e in evictions(result)] == ["single"]


def half_gpu(sched: Scheduler, name: str, account: str, node: int, gpu: int, **fields: Any) -> None:
    """A one-pod job on half of GPU `gpu` of `node`, running since 0."""
    data = {"name": name, "account": account, "pods": 1, "resources_per_pod": {"gpu_milli": 500}}
    allocation = Allocation.of([node], [[gpu]], gpu_milli=500)
    sched.adopt(JobSpec.from_dict({**data, **fields}), allocation, start_time=0, now=0)


def test_a_whole_gpu_gang_may_preempt_shared_gpu_unallocated_work() -> None:
    # Two nodes whose 4 GPUs are each shared by two unallocated half-GPU jobs (16 jobs, each
    # losing 0.5 x 10 = 5 GPU-seconds at 10 s). The 8 jobs of one node free it for a 4-GPU pod.
    sched = scheduler(racks(1, 2))
    for node in range(2):
        for gpu in range(4):
            for half in "ab":
                half_gpu(sched, f"f{node}{gpu}{half}", "scratch", node, gpu)
    sched.submit(spec("whole", "team-a"), 10)

    result = sched.cycle(10)

    victims = evicted_ids(result)
    assert len(victims) == 8 and len({name[1] for name in victims}) == 1  # one node's eight
    assert sum(e.lost_gpu_seconds for e in evictions(result)) == 8 * 5.0
    assert_minimal(sched, "whole", victims)


def test_a_shared_gpu_keeps_its_protected_co_tenant() -> None:
    # Node 0: each GPU shared by a protected team-b half job and an unallocated one. Node 1:
    # each GPU shared by two unallocated half jobs. Evicting node 0's unallocated jobs frees
    # no whole GPU, so node 1's eight go.
    sched = scheduler(racks(1, 2))
    for gpu in range(4):
        half_gpu(sched, f"p0{gpu}", "team-b", 0, gpu, min_runtime="8h")
        half_gpu(sched, f"u0{gpu}", "scratch", 0, gpu)
        half_gpu(sched, f"f1{gpu}a", "scratch", 1, gpu)
        half_gpu(sched, f"f1{gpu}b", "scratch", 1, gpu)
    sched.submit(spec("whole", "team-a"), 10)

    result = sched.cycle(10)

    assert evicted_ids(result) == sorted(f"f1{gpu}{half}" for gpu in range(4) for half in "ab")


def test_a_checkpoint_does_not_lower_the_loss_of_a_job_that_cannot_resume() -> None:
    # u (not resumable) ran since 0 and reported a checkpoint at 900; preempted at 1000 it
    # restarts from scratch, losing 4 x 1000 = 4000, not 4 x 100.
    sched = scheduler(racks(1, 1))
    run(sched, spec("u", "scratch", resumable=False), [0], 0)
    sched.report_checkpoint("u", 900)
    sched.submit(spec("p", "team-a"), 1000)

    result = sched.cycle(1000)

    assert evictions(result) == [Evict("u", "p", GRACE, "unallocated-victim", 4000.0)]


def test_a_gang_without_a_required_rack_gets_a_minimal_victim_set() -> None:
    # Two racks of 3 nodes; nodes 0 and 3 idle, the other four run unallocated work since 0.
    # `trio` (3 nodes, anywhere) needs one more node: one victim suffices. One rack alone
    # needs two.
    sched = scheduler(racks(2, 3))
    for node in (1, 2, 4, 5):
        run(sched, spec(f"u{node}", "scratch"), [node], 0)
    sched.submit(spec("trio", "team-a", pods=3), 100)

    result = sched.cycle(100)

    assert_minimal(sched, "trio", evicted_ids(result))


def test_the_cheapest_rack_is_found_among_more_than_sixteen() -> None:
    # 18 racks of 2 nodes at 1000 s. Racks 0-16: one idle node and one unallocated job since 0
    # (4 x 1000 = 4000 to free the rack). Rack 17: two unallocated jobs since 990 (4 x 10 = 40
    # each). `pair` needs 2 nodes in one rack: least lost work is rack 17, 80 GPU-seconds.
    sched = scheduler(racks(18, 2))
    for rack in range(17):
        run(sched, spec(f"old{rack}", "scratch"), [2 * rack], 0)
    run(sched, spec("new0", "scratch"), [34], 990)
    run(sched, spec("new1", "scratch"), [35], 990)
    sched.submit(spec("pair", "team-a", pods=2, topology=RACK), 1000)

    result = sched.cycle(1000)

    assert evicted_ids(result) == ["new0", "new1"]


# --- the search on its own ------------------------------------------------------------------------


def test_victim_search_reports_whether_the_set_is_exact() -> None:
    # A rack of 2 nodes with 8 one-GPU candidates (exact) and one with 16 (cheapest first).
    for nodes, exact in ((2, True), (4, False)):
        state = racks(1, nodes)
        candidates = []
        for node in range(nodes):
            for gpu in range(4):
                name = f"n{node}g{gpu}"
                state.allocate(name, Allocation.of([node], [[gpu]]))
                lost = float(10 * node + gpu)
                node_array = np.array([node], dtype=np.int64)
                candidates.append(Candidate(name, "unallocated-victim", lost, 0.0, node_array, 1.0))
        request = GangRequest.from_spec(spec("p", "team-a", topology=RACK), state.topology)
        plan = VictimSearch(state, BestFit()).plan("p", request, candidates)
        assert not isinstance(plan, Refusal)
        assert plan.exact is exact
        # Node 0's four jobs are the cheapest way to a free node: 0 + 1 + 2 + 3.
        assert sorted(v.job_id for v in plan.victims) == ["n0g0", "n0g1", "n0g2", "n0g3"]
        assert plan.impact == (6.0, 4.0, 0.0)
