"""Min-runtime protection at the scheduler level: a protected job is never a victim, and the same
job past its min runtime is, on each path a preemption takes.

Protection is enforced at three points: the ledger's protection list (which allocated jobs are
past their min runtime, the candidates of the general search and the reason a one-domain gang
gets), the preemptible index's `unprotected` mask (the victim searches' verdicts) and
`Contract.may_preempt` (the contract's own rule). Removing any one of them makes a test here
fail (each was checked by mutating it): the protection list the one-rack refusal's reason, the
index's mask the choice of the cheaper victim, the contract's rule its own test. The scheduler
asks the contract only about jobs the index calls unprotected, so that last rule is checked
with the scheduler's own queue entry, ranking and ledger rather than through a cycle."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import Allocation, ClusterState
from toposched.jobs.spec import JobSpec
from toposched.policy.budget import BudgetTree
from toposched.policy.contract import Contract, PreemptionRule, RunningJob
from toposched.policy.queue_entry import QueueEntry
from toposched.scheduler.core import CycleResult, Scheduler
from toposched.scheduler.decisions import Evict
from toposched.scheduler.jobs import JobState
from toposched.scheduler.preemption import RefusalCode

HOUR = 3600.0
TEAMS = {"team-a": 10, "team-b": 50, "team-c": 40, "scratch": 0}
"""Team a runs far beyond its budget in every setting: the budget rule lets anyone under budget
reclaim from it, so only protection keeps its jobs."""


def spec(name: str, account: str, pods: int, **fields: Any) -> JobSpec:
    data: dict[str, Any] = {
        "name": name,
        "account": account,
        "pods": pods,
        "resources_per_pod": {"gpus": 4},
        "min_runtime": 2 * HOUR,
    }
    data.update(fields)
    return JobSpec.from_dict(data)


def fleet(racks: int, nodes_per_rack: int) -> Scheduler:
    state = ClusterState(nvl72_cluster(1, 1, racks, nodes_per_rack=nodes_per_rack))
    # The contract's own rules: these victims cannot resume, and the cost/benefit rule
    # (tests/test_preemption_worth.py) would weigh them too.
    return Scheduler(
        state, BudgetTree.from_dict({"accounts": TEAMS}), contract=Contract(worth=None)
    )


def adopt(sched: Scheduler, job: JobSpec, nodes: Sequence[int], start: float) -> None:
    allocation = Allocation.of(list(nodes), [list(range(4))] * len(nodes))
    sched.adopt(job, allocation, start_time=start, now=0.0)


def evicted(result: CycleResult) -> set[str]:
    return {d.job_id for d in result.decisions if isinstance(d, Evict)}


def one_rack_setting(now: float) -> tuple[Scheduler, CycleResult]:
    """Two racks of two nodes. Team a runs one job on rack 0 since time 0 (2 h min runtime)
    and one on rack 1 that is always protected; team b (running nothing) asks for a whole
    rack at `now`."""
    sched = fleet(2, 2)
    adopt(sched, spec("a-run", "team-a", 2), [0, 1], 0.0)
    adopt(sched, spec("a-keep", "team-a", 2, min_runtime=8 * HOUR), [2, 3], now - HOUR)
    sched.submit(spec("b-wants-rack", "team-b", 2, topology={"required": "rack"}), now)
    return sched, sched.cycle(now)


def test_one_rack_gang_waits_for_protection_then_preempts() -> None:
    sched, result = one_rack_setting(HOUR)
    assert evicted(result) == set()
    waiting = sched.jobs["b-wants-rack"]
    assert waiting.state is JobState.PENDING
    # Nobody may be preempted yet: the reason says so (not that evicting finds no room).
    assert waiting.refusal is not None
    assert waiting.refusal.code is RefusalCode.NO_ALLOWED_VICTIM, waiting.refusal

    sched, result = one_rack_setting(3 * HOUR)
    assert evicted(result) == {"a-run"}


def mixed_pair_setting(now: float, gang: dict[str, Any]) -> tuple[Scheduler, CycleResult]:
    """Two racks of four nodes. On rack 0 team a runs two jobs of the same priority: `a-old`
    (one node, since -3 h, past its 2 h min runtime) and `a-new` (three nodes, since 0, protected
    until 2 h); on rack 1 a job that is always protected. Team b asks for four nodes
    (`gang` adds its topology): only evicting both jobs of rack 0 would make room, so nothing
    may be evicted."""
    sched = fleet(2, 4)
    adopt(sched, spec("a-keep", "team-a", 4, min_runtime=8 * HOUR), [4, 5, 6, 7], now - HOUR)
    adopt(sched, spec("a-old", "team-a", 1), [0], -3 * HOUR)
    adopt(sched, spec("a-new", "team-a", 3), [1, 2, 3], 0.0)
    sched.submit(spec("b-wants-four", "team-b", 4, **gang), now)
    return sched, sched.cycle(now)


@pytest.mark.parametrize(
    "gang",
    [{}, {"topology": {"required": "rack"}}, {"topology": {"preferred": "rack"}}],
    ids=["anywhere", "one-rack", "preferring-a-rack"],
)
def test_a_protected_job_is_not_taken_with_an_unprotected_one_of_its_pair(
    gang: dict[str, Any],
) -> None:
    sched, result = mixed_pair_setting(HOUR, gang)
    assert evicted(result) == set()
    assert sched.jobs["a-new"].state is JobState.RUNNING
    assert not sched.jobs["a-new"].evicting
    # Two hours later both are past their min runtime: both go.
    sched, result = mixed_pair_setting(3 * HOUR, gang)
    assert evicted(result) == {"a-old", "a-new"}


def test_contract_refuses_a_protected_victim_and_allows_it_after() -> None:
    """The contract's own rule, as the scheduler's verdicts ask it."""
    sched = fleet(2, 4)
    adopt(sched, spec("a-run", "team-a", 4), [0, 1, 2, 3], 0.0)
    adopt(sched, spec("a-keep", "team-a", 4, min_runtime=8 * HOUR), [4, 5, 6, 7], 0.0)
    sched.submit(spec("b-wait", "team-b", 1), HOUR)
    contract: Contract = sched.contract
    entry = sched.queue.get("b-wait")
    assert isinstance(entry, QueueEntry)
    victim: RunningJob = sched.ledger.views["a-run"]
    early = contract.may_preempt(entry, victim, HOUR, sched.queue.ranking(HOUR), sched.ledger)
    assert not early.allowed
    assert early.rule is PreemptionRule.PROTECTED
    late = contract.may_preempt(
        entry, victim, 3 * HOUR, sched.queue.ranking(3 * HOUR), sched.ledger
    )
    assert late.allowed


def spread_setting(now: float, gang: dict[str, Any]) -> tuple[Scheduler, CycleResult]:
    """Three racks of four nodes, all held by team a: on rack 0 `a-old` (one node, past its
    min runtime) and `a-new` (three nodes, protected until 2 h), on rack 1 `a-idle` (four
    nodes, past its min runtime), rack 2 always protected. Team b asks for six nodes, more
    than a rack: the search across racks runs, and only evicting `a-new` too makes room."""
    sched = fleet(3, 4)
    adopt(sched, spec("a-old", "team-a", 1), [0], -3 * HOUR)
    adopt(sched, spec("a-new", "team-a", 3), [1, 2, 3], 0.0)
    adopt(sched, spec("a-idle", "team-a", 4), [4, 5, 6, 7], -3 * HOUR)
    adopt(sched, spec("a-keep", "team-a", 4, min_runtime=8 * HOUR), [8, 9, 10, 11], now - HOUR)
    sched.submit(spec("b-wants-six", "team-b", 6, **gang), now)
    return sched, sched.cycle(now)


@pytest.mark.parametrize(
    "gang", [{}, {"topology": {"preferred": "rack"}}], ids=["anywhere", "preferring-a-rack"]
)
def test_a_gang_across_racks_leaves_protected_jobs(gang: dict[str, Any]) -> None:
    sched, result = spread_setting(HOUR, gang)
    assert "a-new" not in evicted(result)
    assert not sched.jobs["a-new"].evicting
    assert sched.jobs["b-wants-six"].state is JobState.PENDING
    sched, result = spread_setting(3 * HOUR, gang)
    assert "a-new" in evicted(result)
    assert "a-keep" not in evicted(result)


def cheaper_protected_setting(gang: dict[str, Any]) -> tuple[Scheduler, CycleResult]:
    """Two racks of three nodes, all team a's but node 2. On rack 0 `a-old` (one node, since
    -3 h: past its min runtime, 4 h of work to lose at 1 h) and `a-new` (one node, since 0:
    protected, 1 h of work to lose); rack 1 always protected. At 1 h team b asks for two
    nodes: the free node and one more. Evicting `a-new` would lose less work, but only
    `a-old` may go."""
    sched = fleet(2, 3)
    adopt(sched, spec("a-old", "team-a", 1), [0], -3 * HOUR)
    adopt(sched, spec("a-new", "team-a", 1), [1], 0.0)
    adopt(sched, spec("a-keep", "team-a", 3, min_runtime=8 * HOUR), [3, 4, 5], 0.0)
    sched.submit(spec("b-wants-two", "team-b", 2, **gang), HOUR)
    return sched, sched.cycle(HOUR)


@pytest.mark.parametrize(
    "gang", [{}, {"topology": {"required": "rack"}}], ids=["anywhere", "one-rack"]
)
def test_the_cheaper_victim_is_passed_over_while_protected(gang: dict[str, Any]) -> None:
    sched, result = cheaper_protected_setting(gang)
    assert evicted(result) == {"a-old"}
    assert not sched.jobs["a-new"].evicting
