"""Golden scenarios for the scheduling cycle: order, contract, reservations, backfill, events."""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from job_specs import spec as job

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation, ClusterState, Health
from toposched.jobs.spec import JobSpec
from toposched.policy.budget import BudgetTree
from toposched.policy.contract import Contract
from toposched.policy.usage import UsageTracker
from toposched.scheduler.core import CycleResult, Scheduler
from toposched.scheduler.decisions import Bind, Reserve
from toposched.scheduler.failures import Failure, FailureMemo
from toposched.scheduler.fence import Fence
from toposched.scheduler.jobs import JobState, Nomination, ReasonCode

HOUR = 3600.0

# research 70 { pretraining 60 { team-a 50, team-b 50 }, eval 40 }, product 30
BUDGET = {
    "accounts": {
        "research": {
            "share": 70,
            "children": {
                "pretraining": {"share": 60, "children": {"team-a": 50, "team-b": 50}},
                "eval": 40,
            },
        },
        "product": 30,
    }
}
TEAM_A = "research/pretraining/team-a"
TEAM_B = "research/pretraining/team-b"
EVAL = "research/eval"
PRODUCT = "product"
# GPU-hours used over [0, 1 h): team-a 300, team-b 100, eval 100, product 300 (800 in all).
GOLDEN_USAGE = {TEAM_A: 300.0, TEAM_B: 100.0, EVAL: 100.0, PRODUCT: 300.0}


def small_cluster() -> ClusterState:
    """2 racks x 2 nodes x 4 GPUs = 16 GPUs: rack z0-b0-r0 is nodes 0-1, z0-b0-r1 nodes 2-3."""
    return ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=2))


def used_for_an_hour(gpus_by_account: Mapping[str, float]) -> UsageTracker:
    """Usage after each account held its GPUs over [0, 1 h): GPU-hours = GPUs; read at 1 h."""
    usage = UsageTracker()
    for account, gpus in gpus_by_account.items():
        usage.start(account, gpus, now=0)
    for account, gpus in gpus_by_account.items():
        usage.stop(account, gpus, now=HOUR)
    return usage


def two_teams(share_a: float = 50, share_b: float = 50) -> BudgetTree:
    return BudgetTree.from_dict({"accounts": {"team-a": share_a, "team-b": share_b}})


def order(scheduler: Scheduler, now: float) -> list[str]:
    return [row.job for row in scheduler.queue_rows(now)]


def bound(result: CycleResult) -> list[str]:
    return [decision.job_id for decision in result.bound]


def adopt_on(
    scheduler: Scheduler, spec: JobSpec, node: int, gpus: Iterable[int], start: float = 0.0
) -> None:
    """Take over `spec` already running on `gpus` of `node` since `start`."""
    scheduler.adopt(spec, Allocation.of([node], [list(gpus)]), start_time=start, now=start)


# --- Fair Tree order ---------------------------------------------------------------------------


def test_fair_tree_decides_which_team_runs_when_only_one_fits() -> None:
    # Hand-computed Level FS = S / U at now = 1 h (usage in GPU-hours, 800 in all):
    #   top:         research S 0.7, U 500/800 = 0.625 -> 1.12;  product S 0.3, U 0.375 -> 0.8
    #   research:    eval S 0.4, U 100/500 = 0.2 -> 2.0;  pretraining S 0.6, U 0.8 -> 0.75
    #   pretraining: team-b S 0.5, U 100/400 = 0.25 -> 2.0;  team-a S 0.5, U 0.75 -> 0.667
    # Fair Tree order of the leaves: eval, team-b, team-a, product. Every job below fills the
    # 16-GPU cluster, so only eval's runs, although product's was submitted first at priority 100.
    scheduler = Scheduler(
        small_cluster(), BudgetTree.from_dict(BUDGET), usage=used_for_an_hour(GOLDEN_USAGE)
    )
    now = HOUR
    for name, account, priority in [
        ("product-job", PRODUCT, 100),
        ("a-job", TEAM_A, 0),
        ("b-job", TEAM_B, 0),
        ("eval-job", EVAL, 0),
    ]:
        scheduler.submit(job(name, account, pods=4, priority=priority, expected_runtime="2h"), now)
    assert order(scheduler, now) == ["eval-job", "b-job", "a-job", "product-job"]

    result = scheduler.cycle(now)

    assert bound(result) == ["eval-job"]
    # The next in line reserves the whole cluster for when eval-job ends, 2 h from now.
    assert result.reservation == Reserve("b-job", now + 2 * HOUR, "block z0-b0")
    rows = scheduler.queue_rows(now)
    assert [row.job for row in rows] == ["b-job", "a-job", "product-job"]
    assert [row.position for row in rows] == [1, 2, 3]
    assert rows[0].standing == (
        "research FS=1.12 (S=0.700 U=0.625) > pretraining FS=0.75 (S=0.600 U=0.800) > "
        "team-b FS=2 (S=0.500 U=0.250)"
    )
    assert rows[2].standing == "product FS=0.8 (S=0.300 U=0.375)"
    reason = rows[0].reason
    assert reason.startswith("waiting for reservation at +2.0 h in block z0-b0; now: ")
    assert "needs 4 pods of 4 GPUs (16 GPUs); the cluster has room for 0 such pods" in reason


def test_a_team_ranked_first_at_its_level_beats_a_leaf_with_a_better_own_ratio() -> None:
    # product's own Level FS (0.8) is above team-a's (0.667), and product's GPU-hours per share
    # are also better (0.375 / 0.3 vs team-a's 0.375 / 0.21); but research (1.12) ranks above
    # product (0.8) at the top level, so every research job, team-a's included, goes first.
    scheduler = Scheduler(
        small_cluster(), BudgetTree.from_dict(BUDGET), usage=used_for_an_hour(GOLDEN_USAGE)
    )
    scheduler.submit(job("product-job", PRODUCT, pods=4), HOUR)
    scheduler.submit(job("a-job", TEAM_A, pods=4), HOUR)
    assert bound(scheduler.cycle(HOUR)) == ["a-job"]


def test_priority_orders_jobs_only_within_a_team() -> None:
    # Ranking as in the golden case: eval, team-b, team-a, product. product's priority 1000
    # does not lift it over team-a's priority 0; inside team-a, priority 9 goes before 0
    # although it was submitted later.
    scheduler = Scheduler(
        small_cluster(), BudgetTree.from_dict(BUDGET), usage=used_for_an_hour(GOLDEN_USAGE)
    )
    scheduler.submit(job("product-urgent", PRODUCT, priority=1000), HOUR)
    scheduler.submit(job("a-low", TEAM_A, priority=0), HOUR + 1)
    scheduler.submit(job("a-high", TEAM_A, priority=9), HOUR + 2)
    scheduler.submit(job("b-low", TEAM_B, priority=-5), HOUR + 3)
    now = HOUR + 3
    assert order(scheduler, now) == ["b-low", "a-high", "a-low", "product-urgent"]
    assert [row.priority for row in scheduler.queue_rows(now)] == [-5, 9, 0, 1000]
    # Everything fits (4 x 4 GPUs of 16), and binds go in queue order.
    assert bound(scheduler.cycle(now)) == ["b-low", "a-high", "a-low", "product-urgent"]


def test_equal_priority_ties_go_by_submit_time_then_name() -> None:
    scheduler = Scheduler(small_cluster(), two_teams())
    scheduler.submit(job("z-first", "team-a"), 10)
    scheduler.submit(job("a-second", "team-a"), 20)
    scheduler.submit(job("c-same-time", "team-a"), 30)
    scheduler.submit(job("b-same-time", "team-a"), 30)
    assert order(scheduler, 30) == ["z-first", "a-second", "b-same-time", "c-same-time"]
    # A submit_time given in the spec wins over the time of the call.
    scheduler.submit(job("backdated", "team-a", submit_time=5), 40)
    assert order(scheduler, 40)[0] == "backdated"


def test_budget_change_reorders_the_queue() -> None:
    # Usage: team-a 100, team-b 300 GPU-hours (400 in all).
    #   shares 50/50: team-a FS = 0.5 / 0.25 = 2.0;  team-b FS = 0.5 / 0.75 = 0.667 -> a first
    #   shares 10/90: team-a FS = 0.1 / 0.25 = 0.4;  team-b FS = 0.9 / 0.75 = 1.2   -> b first
    scheduler = Scheduler(
        small_cluster(), two_teams(), usage=used_for_an_hour({"team-a": 100, "team-b": 300})
    )
    now = HOUR
    scheduler.submit(job("a-job", "team-a", pods=4), now)
    scheduler.submit(job("b-job", "team-b", pods=4), now)
    assert order(scheduler, now) == ["a-job", "b-job"]
    assert scheduler.queue_rows(now)[0].standing == "team-a FS=2 (S=0.500 U=0.250)"

    scheduler.set_share("team-a", 10)
    scheduler.set_share("team-b", 90)

    assert order(scheduler, now) == ["b-job", "a-job"]
    rows = scheduler.queue_rows(now)
    assert rows[0].standing == "team-b FS=1.2 (S=0.900 U=0.750)"
    assert rows[1].standing == "team-a FS=0.4 (S=0.100 U=0.250)"
    # Only one fits: the budget change decided which.
    assert bound(scheduler.cycle(now)) == ["b-job"]


def test_running_work_moves_the_ranking() -> None:
    # No usage yet: team-a and team-b tie at FS = inf and team-a goes first by name. team-a's
    # first job then runs for an hour on 4 GPUs while team-b holds nothing: team-a has usage
    # and team-b none, so team-b's FS is inf and it now goes first.
    scheduler = Scheduler(small_cluster(), two_teams())
    scheduler.submit(job("a-1", "team-a"), 0)
    assert bound(scheduler.cycle(0)) == ["a-1"]
    scheduler.submit(job("a-2", "team-a", pods=4), 0)
    scheduler.submit(job("b-1", "team-b", pods=4), 0)
    assert order(scheduler, 0) == ["a-2", "b-1"]
    assert order(scheduler, HOUR) == ["b-1", "a-2"]
    assert scheduler.usage.usage("team-a", HOUR) == pytest.approx(4 * HOUR)


# --- the contract ------------------------------------------------------------------------------


def test_min_runtime_protects_until_start_plus_min_runtime() -> None:
    scheduler = Scheduler(small_cluster(), two_teams())
    scheduler.submit(job("train", "team-a", min_runtime="2h"), 100)
    scheduler.cycle(100)
    assert scheduler.is_protected("train", 100)
    assert scheduler.is_protected("train", 100 + 2 * HOUR - 1)
    assert not scheduler.is_protected("train", 100 + 2 * HOUR)
    assert not scheduler.is_protected("train", 100 + 3 * HOUR)


def test_min_runtime_is_capped_by_the_contract() -> None:
    # Asked for 12 h; the default contract caps protection at 8 h.
    scheduler = Scheduler(small_cluster(), two_teams())
    scheduler.submit(job("long", "team-a", min_runtime="12h"), 0)
    scheduler.cycle(0)
    assert scheduler.jobs["long"].min_runtime == 8 * HOUR
    assert scheduler.is_protected("long", 8 * HOUR - 1)
    assert not scheduler.is_protected("long", 8 * HOUR)
    # A cluster may set a tighter cap.
    strict = Scheduler(small_cluster(), two_teams(), contract=Contract(max_min_runtime=HOUR))
    strict.submit(job("long", "team-a", min_runtime="12h"), 0)
    strict.cycle(0)
    assert strict.is_protected("long", HOUR - 1)
    assert not strict.is_protected("long", HOUR)


def test_adopted_jobs_are_protected_from_their_real_start() -> None:
    scheduler = Scheduler(small_cluster(), two_teams())
    spec = job("old", "team-a", min_runtime="1h")
    scheduler.adopt(spec, Allocation.of([0], [[0, 1, 2, 3]]), start_time=0, now=1800)
    assert scheduler.is_protected("old", 3599)
    assert not scheduler.is_protected("old", 3600)
    # Charged only from the takeover: 4 GPUs x 1800 s at t = 3600.
    assert scheduler.usage.usage("team-a", 3600) == pytest.approx(4 * 1800)


def test_unallocated_work_fills_idle_gpus_unprotected_and_uncharged() -> None:
    # scratch has share 0: no budget. fill declares min_runtime 0. Both are unallocated work:
    # they queue after every budgeted job whatever their priority or submit time, take only
    # the GPUs budgeted work leaves idle, are never protected, and are not charged.
    tree = BudgetTree.from_dict({"accounts": {"team-a": 60, "scratch": 0}})
    scheduler = Scheduler(small_cluster(), tree)
    scheduler.submit(job("fill", "team-a", min_runtime=0, priority=100), 0)
    scheduler.submit(job("scratch-job", "scratch", min_runtime="1h"), 1)
    scheduler.submit(job("budgeted", "team-a", pods=2), 2)
    rows = scheduler.queue_rows(2)
    assert [(row.job, row.tier) for row in rows] == [
        ("budgeted", "allocated"),
        ("fill", "unallocated"),
        ("scratch-job", "unallocated"),
    ]

    result = scheduler.cycle(2)

    # 8 + 4 + 4 = 16 GPUs: all fit.
    assert [(d.job_id, d.unallocated) for d in result.bound] == [
        ("budgeted", False),
        ("fill", True),
        ("scratch-job", True),
    ]
    assert scheduler.is_protected("budgeted", 2)
    assert not scheduler.is_protected("fill", 2)
    assert not scheduler.is_protected("scratch-job", 2)
    assert scheduler.jobs["fill"].reason == "running as unallocated work"
    # Only the budgeted 8 GPUs are charged: 8 x 1000 s.
    assert scheduler.usage.running("team-a") == 8
    assert scheduler.usage.running("scratch") == 0
    assert scheduler.usage.usage("team-a", 1002) == pytest.approx(8 * 1000)
    assert scheduler.usage.usage("scratch", 1002) == 0
    scheduler.finish("fill", 1002)
    scheduler.finish("scratch-job", 1002)
    assert scheduler.usage.running("team-a") == 8


def test_unallocated_work_waits_while_budgeted_work_needs_the_gpus() -> None:
    scheduler = Scheduler(small_cluster(), two_teams())
    scheduler.submit(job("fill", "team-a", min_runtime=0), 0)
    scheduler.submit(job("whole", "team-b", pods=4), 10)
    assert bound(scheduler.cycle(10)) == ["whole"]
    assert scheduler.jobs["fill"].state is JobState.PENDING
    # The budgeted job ends: the GPUs are idle, and the unallocated job takes them.
    scheduler.finish("whole", 20)
    assert bound(scheduler.cycle(20)) == ["fill"]


def test_unallocated_jobs_never_get_a_reservation() -> None:
    scheduler = Scheduler(small_cluster(), two_teams())
    adopt_on(scheduler, job("busy", "team-a", expected_runtime=100), 0, range(4))
    scheduler.submit(job("big-fill", "team-b", pods=4, min_runtime=0), 0)
    result = scheduler.cycle(0)
    assert result.reservation is None
    assert scheduler.jobs["big-fill"].reservation is None


# --- reservations and backfill on a simulated timeline -----------------------------------------


@dataclass
class Timeline:
    """What a simulated run decided, cycle by cycle."""

    starts: dict[str, float] = field(default_factory=dict)
    nodes: dict[str, frozenset[int]] = field(default_factory=dict)
    binds: list[tuple[float, Bind]] = field(default_factory=list)
    reservations: list[tuple[float, Reserve, frozenset[int]]] = field(default_factory=list)
    """(cycle time, decision, nodes kept from backfill in that cycle)."""

    def first_reservation(self, job_id: str) -> float:
        return next(r.start_time for _, r, _ in self.reservations if r.job_id == job_id)

    def reserved_times(self, job_id: str) -> list[float]:
        return [r.start_time for _, r, _ in self.reservations if r.job_id == job_id]


def reserved_nodes(scheduler: Scheduler) -> frozenset[int]:
    """The nodes the cycle just kept from backfill (the placement behind its reservation)."""
    return frozenset(int(node) for node in scheduler.reservations.reserved_nodes)


def simulate(
    scheduler: Scheduler, arrivals: list[tuple[float, JobSpec]], start: float, until: float
) -> Timeline:
    """Drive the scheduler from `start`: every job ends exactly at its expected end; at each
    event time (endings first, then arrivals) one cycle runs, and one runs at `start`.
    Running jobs must declare expected runtimes."""
    timeline = Timeline()
    events: list[tuple[float, int, int, str | JobSpec | None]] = []  # (time, kind, seq, what)
    sequence = 0
    finish, arrive, tick = 0, 1, 2

    def push(time: float, kind: int, payload: str | JobSpec | None) -> None:
        nonlocal sequence
        heapq.heappush(events, (time, kind, sequence, payload))
        sequence += 1

    push(start, tick, None)
    for running in scheduler.running.values():
        assert running.expected_end is not None
        push(running.expected_end, finish, running.job_id)
    for time, spec in arrivals:
        push(time, arrive, spec)
    while events and events[0][0] <= until:
        now = events[0][0]
        while events and events[0][0] == now:
            _, kind, _, payload = heapq.heappop(events)
            if kind == finish:
                assert isinstance(payload, str)
                scheduler.finish(payload, now)
            elif kind == arrive:
                assert isinstance(payload, JobSpec)
                scheduler.submit(payload, now)
        result = scheduler.cycle(now)
        if result.reservation is not None:
            timeline.reservations.append((now, result.reservation, reserved_nodes(scheduler)))
        for decision in result.bound:
            runtime = scheduler.jobs[decision.job_id].spec.expected_runtime
            assert runtime is not None
            timeline.starts[decision.job_id] = now
            timeline.nodes[decision.job_id] = frozenset(decision.allocation.nodes.tolist())
            timeline.binds.append((now, decision))
            push(now + runtime, finish, decision.job_id)
    return timeline


def backfill_scenario(
    reserve_min_gpus: float = 8, with_short: bool = False
) -> tuple[Scheduler, Timeline]:
    """Rack r0 = nodes 0-1, rack r1 = nodes 2-3; all work charges to team-a, priority 0.

    t=0 running:  x0 node 0 (4 GPUs) until 1000;  x1 node 1 (4) until 3000;
                  x2 node 2 (GPUs 0-1) until 6000;  x3 node 3 (4) until 8000.
    t=0 queue:    big (2 pods x 4 GPUs, required rack, 2000 s), then long-2 (1 x 2 GPUs, 10000 s).
    t=500:        short-4 arrives if `with_short` (1 x 4 GPUs, 1500 s).
    t=1000:       long-4 arrives (1 x 4 GPUs, 5000 s).
    """
    scheduler = Scheduler(small_cluster(), two_teams(), reserve_min_gpus=reserve_min_gpus)
    adopt_on(scheduler, job("x0", "team-a", expected_runtime=1000), 0, range(4))
    adopt_on(scheduler, job("x1", "team-a", expected_runtime=3000), 1, range(4))
    adopt_on(scheduler, job("x2", "team-a", gpus=2, expected_runtime=6000), 2, [0, 1])
    adopt_on(scheduler, job("x3", "team-a", expected_runtime=8000), 3, range(4))
    rack = {"required": "rack"}
    scheduler.submit(job("big", "team-a", pods=2, expected_runtime=2000, topology=rack), 0)
    scheduler.submit(job("long-2", "team-a", gpus=2, expected_runtime=10000), 0)
    arrivals = [(1000.0, job("long-4", "team-a", expected_runtime=5000))]
    if with_short:
        arrivals.append((500.0, job("short-4", "team-a", expected_runtime=1500)))
    return scheduler, simulate(scheduler, arrivals, start=0, until=20000)


def check_backfill(scheduler: Scheduler, timeline: Timeline) -> set[str]:
    """Assert every backfilled job kept off the nodes reserved in its cycle or ended before the
    reservation; return which of the two happened."""
    reservations = {time: (reserve, nodes) for time, reserve, nodes in timeline.reservations}
    kinds = set()
    for time, decision in timeline.binds:
        if not decision.backfilled:
            continue
        reserve, kept = reservations[time]
        runtime = scheduler.jobs[decision.job_id].spec.expected_runtime
        assert runtime is not None
        off_reserved = not (timeline.nodes[decision.job_id] & kept)
        assert off_reserved or time + runtime <= reserve.start_time, decision.job_id
        kinds.add("off reserved nodes" if off_reserved else "ends before")
    return kinds


def test_reservation_is_the_earliest_time_a_rack_frees_up() -> None:
    # Releases in expected-end order: x0 at 1000 frees node 0, x1 at 3000 frees node 1, so
    # rack r0 is whole at 3000; rack r1 needs x2 (6000) and x3 (8000). Reserve r0 for 3000.
    _, timeline = backfill_scenario()
    at_zero, reserve, nodes = timeline.reservations[0]
    assert (at_zero, reserve) == (0.0, Reserve("big", 3000.0, "rack z0-b0-r0"))
    assert nodes == {0, 1}


def test_backfill_never_delays_the_reserved_job() -> None:
    # t=0:    long-2 cannot end before 3000, so it backfills off the reserved rack: node 2.
    # t=1000: x0 ends and frees reserved node 0; long-4 (ends 6000) may not use it, and waits.
    # t=3000: x1 ends; rack r0 is whole: big starts, on time.
    # t=5000: big ends; long-4 gets a node of r0.
    scheduler, timeline = backfill_scenario()
    assert timeline.starts["big"] == 3000.0 == timeline.first_reservation("big")
    assert timeline.reserved_times("big") == [3000.0] * len(timeline.reserved_times("big"))
    assert timeline.nodes["big"] == {0, 1}
    assert (timeline.starts["long-2"], timeline.nodes["long-2"]) == (0.0, frozenset({2}))
    assert timeline.starts["long-4"] == 5000.0
    assert timeline.nodes["long-4"] <= {0, 1}
    assert scheduler.jobs["big"].state is JobState.FINISHED
    assert check_backfill(scheduler, timeline) == {"off reserved nodes"}


def test_a_job_ending_before_the_reservation_may_use_the_reserved_nodes() -> None:
    # As above, plus short-4 (1500 s) queued at 500. At 1000 x0 frees reserved node 0 and
    # short-4 would end at 2500 <= 3000: it may run there. big still starts at 3000.
    scheduler, timeline = backfill_scenario(with_short=True)
    assert (timeline.starts["short-4"], timeline.nodes["short-4"]) == (1000.0, frozenset({0}))
    assert timeline.starts["big"] == 3000.0 == timeline.first_reservation("big")
    assert check_backfill(scheduler, timeline) == {"off reserved nodes", "ends before"}


def test_without_a_reservation_the_same_timeline_delays_the_large_job() -> None:
    # No reservations: at 1000 long-4 takes node 0 until 6000; rack r1 is held by long-2 until
    # 10000, so big waits for rack r0 until 6000 instead of 3000.
    _, timeline = backfill_scenario(reserve_min_gpus=math.inf)
    assert timeline.reservations == []
    assert (timeline.starts["long-4"], timeline.nodes["long-4"]) == (1000.0, frozenset({0}))
    assert timeline.starts["big"] == 6000.0


def starvation_scenario(reserve_min_gpus: float) -> tuple[Scheduler, Timeline]:
    """Eight 2-GPU jobs fill the 16 GPUs at t=0; fill-k ends at 500 (k + 1) and sits on rack r0
    for even k, r1 for odd k. big (2 pods x 4 GPUs, one rack) queues at t=0; behind it 60 jobs
    of 2 GPUs and 4000 s arrive one every 200 s, faster than 8 slots of 4000 s free up."""
    scheduler = Scheduler(small_cluster(), two_teams(), reserve_min_gpus=reserve_min_gpus)
    for k in range(8):
        spec = job(f"fill-{k}", "team-a", gpus=2, expected_runtime=500 * (k + 1))
        node = 2 * (k % 2) + (k // 2) % 2  # k = 0, 4 -> node 0; 2, 6 -> 1; 1, 5 -> 2; 3, 7 -> 3
        adopt_on(scheduler, spec, node, [0, 1] if k < 4 else [2, 3])
    rack = {"required": "rack"}
    scheduler.submit(job("big", "team-a", pods=2, expected_runtime=1000, topology=rack), 0)
    arrivals = [
        (200.0 * i, job(f"s-{i:02d}", "team-a", gpus=2, expected_runtime=4000)) for i in range(60)
    ]
    return scheduler, simulate(scheduler, arrivals, start=0, until=100_000)


def test_large_job_starves_under_plain_order_but_starts_by_its_reservation() -> None:
    # With the reservation: r0 frees at 500, 1500, 2500, 3500 and r1 at 1000, 2000, 3000,
    # 4000, so r0 is whole first, at 3500, and is kept for big. A stream job started before
    # 3500 cannot end by then (4000 s), so none touches r0; they backfill into r1 as it frees.
    scheduler, reserved = starvation_scenario(reserve_min_gpus=8)
    assert set(reserved.reserved_times("big")) == {3500.0}  # never pushed back
    assert reserved.starts["big"] == 3500.0
    assert reserved.nodes["big"] == {0, 1}
    assert [reserved.starts[f"s-{i:02d}"] for i in range(3)] == [1000.0, 2000.0, 3000.0]
    assert check_backfill(scheduler, reserved) == {"off reserved nodes"}
    # Without it, every freed pair of GPUs goes to the next stream job at once, so no rack is
    # ever whole while the stream lasts (last arrival at 11800): big waits until the queue
    # drains and starts last of all 61 jobs.
    _, plain = starvation_scenario(reserve_min_gpus=math.inf)
    assert plain.starts["s-00"] == 500.0
    assert plain.starts["big"] > 11800.0
    assert plain.starts["big"] == max(plain.starts.values())
    assert len(plain.starts) == len(reserved.starts) == 61  # every job ran in both


# --- failures and node health ------------------------------------------------------------------


def test_fail_requeues_a_resumable_job_with_its_identity_and_history() -> None:
    scheduler = Scheduler(small_cluster(), two_teams())
    original = scheduler.submit(job("ckpt", "team-a", resumable=True), 5)
    scheduler.cycle(5)
    assert scheduler.fail("ckpt", 100) is original
    assert original.state is JobState.PENDING
    assert scheduler.usage.running("team-a") == 0
    assert "ckpt" not in scheduler.state.allocations
    # Back in the queue with its original submit time, so it keeps its place among its team's.
    scheduler.submit(job("newer", "team-a"), 50)
    assert order(scheduler, 100) == ["ckpt", "newer"]
    scheduler.cycle(100)
    assert scheduler.jobs["ckpt"] is original
    assert original.attempts == 2
    assert original.start_time == 100
    assert [event for _, event in original.history] == [
        "submitted",
        "started",
        "failed; requeued",
        "started",
    ]


def test_fail_marks_a_job_that_cannot_resume_failed() -> None:
    scheduler = Scheduler(small_cluster(), two_teams())
    scheduler.submit(job("once", "team-a", resumable=False), 0)
    scheduler.cycle(0)
    failed = scheduler.fail("once", 10)
    assert failed.state is JobState.FAILED
    assert failed.end_time == 10
    assert "once" not in scheduler.queue
    assert scheduler.state.total_free_gpus == 16
    # The caller may ask for a requeue anyway.
    scheduler.submit(job("retry", "team-a", resumable=False), 20)
    scheduler.cycle(20)
    assert scheduler.fail("retry", 30, requeue=True).state is JobState.PENDING


def test_a_node_going_down_fails_its_gangs_at_once() -> None:
    scheduler = Scheduler(small_cluster(), two_teams())
    adopt_on(scheduler, job("on-0-resumable", "team-a", gpus=2, resumable=True), 0, [0, 1])
    adopt_on(scheduler, job("on-0", "team-a", gpus=2), 0, [2, 3])
    spread = Allocation.of([1, 2], [[0, 1, 2, 3], [0, 1, 2, 3]])
    scheduler.adopt(job("gang", "team-b", pods=2), spread, start_time=0, now=0)
    adopt_on(scheduler, job("elsewhere", "team-b"), 3, range(4))

    failed = scheduler.set_health([0, 2], Health.DOWN, now=50)

    assert sorted(j.job_id for j in failed) == ["gang", "on-0", "on-0-resumable"]
    states = {name: scheduler.jobs[name].state for name in scheduler.jobs}
    assert states == {
        "on-0-resumable": JobState.PENDING,
        "on-0": JobState.FAILED,
        "gang": JobState.FAILED,
        "elsewhere": JobState.RUNNING,
    }
    assert set(scheduler.state.allocations) == {"elsewhere"} == set(scheduler.running)
    # The requeued job runs again, on the only healthy node with room (node 1).
    result = scheduler.cycle(50)
    assert bound(result) == ["on-0-resumable"]
    assert result.bound[0].allocation.nodes.tolist() == [1]


# --- explanations ------------------------------------------------------------------------------


def test_a_reservation_whose_releases_are_overdue_says_so() -> None:
    # x0 and x1 expected to end at 42 min, still running at 50 min and protected for 8 h: big's
    # reservation of rack r0 is due, and its reason does not promise a start in "+0 s".
    scheduler = Scheduler(small_cluster(), two_teams())
    for name, node, runtime in (("x0", 0, 2520), ("x1", 1, 2520), ("x2", 2, 2 * HOUR)):
        spec = job(name, "team-b", expected_runtime=runtime, min_runtime="8h")
        adopt_on(scheduler, spec, node, range(4))
    scheduler.submit(job("big", "team-a", pods=2, topology={"required": "rack"}), 3000)
    result = scheduler.cycle(3000)
    assert result.reservation == Reserve("big", 3000, "rack z0-b0-r0")
    reason = scheduler.jobs["big"].reason
    assert reason.startswith(
        "waiting for reservation in rack z0-b0-r0, due now: the jobs holding it are past their "
        "expected end (or, without one, their min runtime); now: "
    )


def test_explain_and_queue_rows_give_position_standing_reservation_and_reason() -> None:
    scheduler = Scheduler(small_cluster(), two_teams())
    adopt_on(scheduler, job("x0", "team-b", expected_runtime=2520), 0, range(4))
    adopt_on(scheduler, job("x1", "team-b", expected_runtime=2520), 1, range(4))
    adopt_on(scheduler, job("x2", "team-b", expected_runtime=HOUR), 2, range(4))
    scheduler.submit(job("big", "team-a", pods=2, priority=3, topology={"required": "rack"}), 0)
    scheduler.submit(job("b-wait", "team-b", pods=2), 0)
    scheduler.cycle(0)

    # Neither team has usage at t=0: both FS = inf, team-a first by name. big waits for rack r0,
    # whole when x0 and x1 end at 2520 s = 42 min.
    rows = scheduler.queue_rows(0)
    assert [(row.position, row.job, row.tier) for row in rows] == [
        (1, "big", "allocated"),
        (2, "b-wait", "allocated"),
    ]
    assert rows[0].standing == "team-a FS=inf (S=0.500 U=0.000)"
    assert rows[0].priority == 3
    assert rows[0].reason.startswith("waiting for reservation at +42 min in rack z0-b0-r0")
    assert "needs 2 pods of 4 GPUs (8 GPUs)" in rows[0].reason
    assert scheduler.jobs["big"].reservation is not None
    assert scheduler.jobs["big"].reservation.start_time == 2520

    explanation = scheduler.explain("big", 0)
    assert (explanation.state, explanation.code) == (JobState.PENDING, ReasonCode.RESERVED)
    assert (explanation.position, explanation.position_in_account) == (1, 1)
    assert (explanation.reservation_start, explanation.reservation_domain) == (
        2520,
        "rack z0-b0-r0",
    )
    assert explanation.sort_key is not None and explanation.sort_key[3] == -3
    assert explanation.history == ((0, "submitted"),)
    assert rows[0].code is ReasonCode.RESERVED
    text = explanation.text
    assert str(explanation) == text
    assert text.startswith("#1 big [team-a] team-a FS=inf (S=0.500 U=0.000); priority 3")
    assert "waiting for reservation at +42 min in rack z0-b0-r0" in text
    later = scheduler.explain("b-wait", 0).text
    assert later.startswith("#2 b-wait [team-b]")
    assert "1 jobs of" in later
    assert "the cluster has room for 1 such pod " in later
    running = scheduler.explain("x0", 0)
    assert running.text == "x0: running; running"
    assert (running.state, running.code, running.position) == (
        JobState.RUNNING,
        ReasonCode.RUNNING,
        None,
    )
    # An hour on, team-b has used 12 GPU-hours and team-a none: team-b's S / U = 0.5 / 1.0.
    assert scheduler.queue_rows(HOUR)[1].standing == "team-b FS=0.5 (S=0.500 U=1.000)"


def test_explain_calls_accounts_ranked_ahead_under_served() -> None:
    # Usage team-a 100, team-b 300 GPU-hours: team-a FS 2.0 is under-served and goes first.
    scheduler = Scheduler(
        small_cluster(), two_teams(), usage=used_for_an_hour({"team-a": 100, "team-b": 300})
    )
    scheduler.submit(job("a-job", "team-a"), HOUR)
    scheduler.submit(job("b-job", "team-b"), HOUR)
    assert "1 jobs of under-served accounts ahead" in scheduler.explain("b-job", HOUR).text


# --- the shape memo: a failed gang answers for larger gangs of its shape -------------------------


def fragmented_scheduler() -> Scheduler:
    """Every node holds a 2-GPU job (8 GPUs free, no node with 4), ending at 1000, 2000, ..."""
    scheduler = Scheduler(small_cluster(), two_teams())
    for node in range(4):
        spec = job(f"f{node}", "team-b", gpus=2, expected_runtime=1000 * (node + 1))
        adopt_on(scheduler, spec, node, [0, 1])
    return scheduler


def test_first_blocked_large_job_gets_a_reservation() -> None:
    # big (2 x 4 GPUs) fits once f0 and f1 end, at 2000 (nodes 0 and 1 then have 4 free GPUs).
    scheduler = fragmented_scheduler()
    scheduler.submit(job("big", "team-a", pods=2, expected_runtime=100), 1)
    result = scheduler.cycle(1)
    assert result.reservation == Reserve("big", 2000.0, "rack z0-b0-r0")


def test_large_job_behind_a_smaller_blocked_job_of_its_shape_still_gets_the_reservation() -> None:
    # small (1 x 4 GPUs, priority 5) goes first and is blocked: no node has 4 free GPUs. big is
    # still the first blocked job with >= 8 GPUs, and fits at 2000 as above.
    scheduler = fragmented_scheduler()
    scheduler.submit(job("small", "team-a", priority=5, expected_runtime=100), 1)
    scheduler.submit(job("big", "team-a", pods=2, expected_runtime=100), 1)
    result = scheduler.cycle(1)
    assert result.reservation == Reserve("big", 2000.0, "rack z0-b0-r0")


def test_a_job_skipped_by_the_shape_memo_is_told_its_own_size() -> None:
    # big is answered by small's failure without a search of its own; its reason must still
    # state what big needs, not what small needs.
    scheduler = fragmented_scheduler()
    scheduler.submit(job("small", "team-a", priority=5), 1)
    scheduler.submit(job("big", "team-a", pods=2), 1)
    scheduler.cycle(1)
    assert "needs 2 pods of 4 GPUs (8 GPUs)" in scheduler.jobs["big"].reason


def node_three_reserved_for_big() -> Scheduler:
    """Nodes 0-2 busy (node 0 until 1000, nodes 1-2 until 5000), node 3 free, and big (2 x 4
    GPUs) pending: its reservation takes nodes 0 and 3 for 1000."""
    scheduler = Scheduler(small_cluster(), two_teams())
    adopt_on(scheduler, job("r0", "team-b", expected_runtime=1000), 0, range(4))
    adopt_on(scheduler, job("r1", "team-b", expected_runtime=5000), 1, range(4))
    adopt_on(scheduler, job("r2", "team-b", expected_runtime=5000), 2, range(4))
    scheduler.submit(job("big", "team-a", pods=2, expected_runtime=100), 0)
    return scheduler


def test_backfills_in_a_row_share_the_reserved_nodes_and_a_long_job_between_does_not() -> None:
    # As below: big reserves nodes 0 and 3 for 1000. Behind it (in name order): two 1-GPU jobs
    # that end by 500 backfill onto node 3; x3-long (2 GPUs, ends 9000) searches next and must
    # not see node 3's two free GPUs; x4-short backfills onto node 3 again. Afterwards no node
    # stays fenced.
    scheduler = node_three_reserved_for_big()
    for name, gpus, runtime in [
        ("x1-short", 1, 500),
        ("x2-short", 1, 400),
        ("x3-long", 2, 9000),
        ("x4-short", 1, 300),
    ]:
        scheduler.submit(job(name, "team-a", gpus=gpus, expected_runtime=runtime), 0)
    result = scheduler.cycle(0)
    assert result.reservation is not None and result.reservation.start_time == 1000
    assert bound(result) == ["x1-short", "x2-short", "x4-short"]
    assert all(b.allocation.nodes.tolist() == [3] and b.backfilled for b in result.bound)
    assert scheduler.jobs["x3-long"].state is JobState.PENDING
    assert "the cluster has room for 0 such pods" in scheduler.jobs["x3-long"].reason
    assert (scheduler.state.health == np.int8(Health.HEALTHY)).all()


def test_a_short_job_may_backfill_after_a_long_job_of_its_shape_was_refused() -> None:
    # Nodes 0-2 busy (node 0 until 1000, nodes 1-2 until 5000), node 3 free. big (2 x 4 GPUs)
    # reserves nodes 0 and 3 for 1000. long (ends 9000) may not use node 3; short (ends 500)
    # may, and nothing else stands in its way.
    scheduler = node_three_reserved_for_big()
    scheduler.submit(job("long", "team-a", expected_runtime=9000), 0)
    scheduler.submit(job("short", "team-a", expected_runtime=500), 0)
    result = scheduler.cycle(0)
    assert result.reservation is not None and result.reservation.start_time == 1000
    assert bound(result) == ["short"]
    assert result.bound[0].allocation.nodes.tolist() == [3]
    assert result.bound[0].backfilled


def test_failures_answer_later_cycles_until_capacity_is_freed() -> None:
    # f0-f3 hold 2 GPUs on every node (protected for 1 h), so no node has 4 free GPUs. wide
    # (2 x 4) is searched once; wider (3 x 4) is answered by it. Reservations are off here,
    # and every cycle is a full one (after submissions only, wider's turn would be skipped and
    # keep its last reason).
    scheduler = Scheduler(small_cluster(), two_teams(), reserve_min_gpus=1000, incremental=False)
    for node in range(4):
        adopt_on(scheduler, job(f"f{node}", "team-b", gpus=2, min_runtime="1h"), node, [0, 1])
    scheduler.submit(job("wide", "team-a", pods=2), 0)
    scheduler.submit(job("wider", "team-a", pods=3), 0)
    assert scheduler.cycle(0).searches == 1
    wide_reason = scheduler.jobs["wide"].reason

    # A submission changes no capacity: the failures still answer, wide keeps its own reason.
    scheduler.submit(job("pair", "team-a", gpus=2), 60)
    result = scheduler.cycle(60)
    assert bound(result) == ["pair"] and result.searches == 1
    assert scheduler.jobs["wide"].reason == wide_reason
    assert "3 pods of 4 GPUs" in scheduler.jobs["wider"].reason
    assert "no domain it could use gained enough GPUs since" in scheduler.jobs["wider"].reason

    # Jobs that end free capacity: wide is searched again and now fits (pair holds 2 GPUs of
    # one node, so 3 nodes are free). wider's dropped failure is checked again at its turn,
    # against what wide left (1 node with 4 free GPUs), and holds without a search.
    for name in ("f0", "f1", "f2", "f3"):
        scheduler.finish(name, 120)
    result = scheduler.cycle(120)
    assert bound(result) == ["wide"] and result.searches == 1
    assert scheduler.jobs["wider"].reason.startswith("needs 3 pods of 4 GPUs")
    assert "no domain that gained GPUs since has room for it now" in scheduler.jobs["wider"].reason


def test_a_failure_stops_answering_once_a_preemptor_hands_back_part_of_its_kept_nodes() -> None:
    # Nodes 0-2 are full (protected), node 3 is kept for nominee, whose victims are gone.
    # first (priority 10) fails while node 3 is fenced. nominee then starts on 2 of node 3's 4
    # GPUs; last, of first's shape, must be searched again and fits in the other 2.
    scheduler = Scheduler(small_cluster(), two_teams())
    for node in range(3):
        adopt_on(scheduler, job(f"full{node}", "team-b", min_runtime="1h"), node, range(4))
    scheduler.submit(job("first", "team-a", gpus=2, priority=10), 0)
    nominee = scheduler.submit(job("nominee", "team-a", gpus=2, priority=5), 0)
    nominee.nomination = Nomination(set(), np.array([3], dtype=np.int64), 0.0)
    scheduler.submit(job("last", "team-a", gpus=2), 0)
    result = scheduler.cycle(0)
    assert bound(result) == ["nominee", "last"]


SHAPE: tuple[object, ...] = ("4 GPUs per pod",)


def failure_behind_node_0() -> tuple[Fence, FailureMemo]:
    """A 2-pod gang of `SHAPE` that did not fit while node 0 was fenced."""
    fence = Fence(small_cluster())
    failures = FailureMemo()
    fence.close(np.array([0], dtype=np.int64))
    failures.add(SHAPE, Failure(2, "no room", fence.frozen(), "wide", epoch=1, cycle=1), fence)
    return fence, failures


def marked(fence: Fence, *nodes: int) -> np.ndarray:
    """One flag per node of the fence's cluster, set for `nodes`."""
    marks = np.zeros(fence.state.topology.n_nodes, dtype=bool)
    marks[list(nodes)] = True
    return marks


def test_a_failure_found_behind_the_fence_does_not_answer_once_the_fence_is_lifted() -> None:
    fence, failures = failure_behind_node_0()
    shape = SHAPE
    assert failures.find(shape, 2, fence, cycle=1) is not None
    assert failures.find(shape, 3, fence, cycle=1) is not None  # more pods: no room either
    assert failures.find(shape, 1, fence, cycle=1) is None  # fewer pods may fit
    assert failures.find_beyond(shape, 2, fence, marked(fence, 0), cycle=1) is None  # 0 let go
    fence.open(np.array([0], dtype=np.int64))
    assert failures.find(shape, 2, fence, cycle=1) is None  # node 0 is back: try again
    fence.open_all()


def test_a_new_failure_replaces_or_joins_the_known_ones_by_what_each_fence_held() -> None:
    # A failure implies another with at least as many pods found with at least the nodes it
    # found fenced. Known: 2 pods did not fit with node 0 fenced.
    fence, failures = failure_behind_node_0()
    node = lambda index: np.array([index], dtype=np.int64)  # noqa: E731

    def known_after(pods: int, job_id: str) -> list[str]:
        failure = Failure(pods, "no room", fence.frozen(), job_id, epoch=1, cycle=1)
        failures.add(SHAPE, failure, fence)
        return [failure.job_id for failure in failures.by_shape[SHAPE]]

    # 3 pods under nodes 0 and 1: implied, not kept.
    fence.close(node(1))
    assert known_after(3, "more") == ["wide"]
    # Node 0 opened and fenced again: 1 pod under nodes 0 and 1 joins (fewer pods, more
    # fenced: neither implies the other).
    fence.open(node(0))
    fence.close(node(0))
    assert known_after(1, "one") == ["wide", "one"]
    # Node 1 opened: 1 pod under node 0 alone implies both.
    fence.open(node(1))
    assert known_after(1, "alone") == ["alone"]
    # Under node 2 alone: neither implies the other.
    fence.open(node(0))
    fence.close(node(2))
    assert known_after(1, "other") == ["alone", "other"]
    fence.open_all()


def test_a_failure_behind_the_fence_answers_for_each_set_of_opened_nodes_afresh() -> None:
    # find_beyond remembers, per set of opened nodes, which failures' fences miss it: asked
    # again with other nodes opened (the next cycle's reservation), it must look again.
    fence, failures = failure_behind_node_0()
    shape = SHAPE
    elsewhere, fenced_node = marked(fence, 2, 3), marked(fence, 0, 2)
    for _ in range(2):
        assert failures.find_beyond(shape, 2, fence, elsewhere, cycle=1) is not None
        assert failures.find_beyond(shape, 2, fence, fenced_node, cycle=1) is None
        assert failures.find_beyond(shape, 1, fence, elsewhere, cycle=1) is None  # fewer pods
    fence.open_all()


def test_a_remembered_answer_behind_the_fence_lasts_only_while_nothing_moved() -> None:
    # find_beyond remembers its answer per shape for the cycle, the fence's generation and the
    # failures known: a fence that moves, a failure added or the next cycle asks again.
    fence, failures = failure_behind_node_0()
    elsewhere = marked(fence, 2, 3)
    assert failures.find_beyond(SHAPE, 2, fence, elsewhere, cycle=1) is not None
    fence.open(np.array([0], dtype=np.int64))  # node 0 is back: the failure no longer holds
    assert failures.find_beyond(SHAPE, 2, fence, elsewhere, cycle=1) is None
    fence.close(np.array([1], dtype=np.int64))
    failures.add(SHAPE, Failure(3, "no room", fence.frozen(), "wider", epoch=1, cycle=1), fence)
    found = failures.find_beyond(SHAPE, 3, fence, elsewhere, cycle=1)
    assert found is not None and found.job_id == "wider"
    assert failures.find_beyond(SHAPE, 2, fence, elsewhere, cycle=1) is None  # fewer pods
    # The next cycle's fence may reach the same generation with other nodes fenced.
    generation = fence.generation
    fence.open_all()
    following = Fence(fence.state)
    following.close(np.array([3], dtype=np.int64))
    following.close(np.array([2], dtype=np.int64))
    following.open(np.array([2], dtype=np.int64))
    assert following.generation == generation
    assert following.fenced.nodes() == frozenset({3})
    assert failures.find_beyond(SHAPE, 3, following, elsewhere, cycle=2) is None
    following.open_all()


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("account", "field"),
    [("research/nobody", "account"), ("research", "account"), ("research/pretraining", "account")],
)
def test_submit_rejects_unknown_and_non_leaf_accounts(account: str, field: str) -> None:
    scheduler = Scheduler(small_cluster(), BudgetTree.from_dict(BUDGET))
    with pytest.raises(InputError) as raised:
        scheduler.submit(job("j", account), 0)
    assert raised.value.field == field
    assert raised.value.value == account
    assert "j" not in scheduler.jobs and len(scheduler.queue) == 0


def test_non_leaf_account_error_says_jobs_charge_to_leaves() -> None:
    scheduler = Scheduler(small_cluster(), BudgetTree.from_dict(BUDGET))
    with pytest.raises(InputError, match="leaf account"):
        scheduler.submit(job("j", "research"), 0)
    with pytest.raises(InputError, match="names no account"):
        scheduler.submit(job("j", "research/nobody"), 0)


def test_duplicate_live_job_names_are_rejected_until_the_job_ends() -> None:
    scheduler = Scheduler(small_cluster(), two_teams())
    scheduler.submit(job("dup", "team-a"), 0)
    with pytest.raises(InputError) as raised:
        scheduler.submit(job("dup", "team-b"), 1)
    assert (raised.value.field, raised.value.value) == ("name", "dup")
    assert "already pending" in str(raised.value)
    scheduler.cycle(1)
    with pytest.raises(InputError, match="already running"):
        scheduler.submit(job("dup", "team-b"), 2)
    scheduler.finish("dup", 3)
    # A finished name may be used again: a new job.
    again = scheduler.submit(job("dup", "team-b"), 4)
    assert again.spec.account == "team-b" and again.attempts == 0


@pytest.mark.parametrize("call", ["finish", "fail", "is_protected"])
def test_events_for_jobs_that_are_not_running_are_rejected(call: str) -> None:
    scheduler = Scheduler(small_cluster(), two_teams())
    scheduler.submit(job("waiting", "team-a", pods=5), 0)  # 20 GPUs: never fits
    scheduler.cycle(0)
    method: Any = getattr(scheduler, call)
    with pytest.raises(InputError) as raised:
        method("waiting", 10)
    assert (raised.value.field, raised.value.value) == ("job", "waiting")
    assert "is pending, not running" in str(raised.value)
    with pytest.raises(InputError) as unknown:
        method("nobody", 10)
    assert (unknown.value.field, unknown.value.value) == ("job", "nobody")
    assert scheduler.jobs["waiting"].state is JobState.PENDING


def test_finishing_twice_is_rejected_and_changes_nothing() -> None:
    scheduler = Scheduler(small_cluster(), two_teams())
    scheduler.submit(job("done", "team-a"), 0)
    scheduler.cycle(0)
    scheduler.finish("done", 10)
    with pytest.raises(InputError, match="is finished, not running"):
        scheduler.finish("done", 20)
    assert scheduler.jobs["done"].end_time == 10
    assert scheduler.usage.running("team-a") == 0
