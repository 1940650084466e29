"""Refusals under budget caps proven from GPU counts, checked against the general search."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from job_helpers import four_gpu_gang as spec

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import Allocation, ClusterState
from toposched.jobs.spec import JobSpec
from toposched.placement.request import GangRequest
from toposched.placement.search import Placement
from toposched.policy.budget import BudgetTree
from toposched.scheduler.candidates import CandidatePool
from toposched.scheduler.core import CycleResult, Scheduler
from toposched.scheduler.decisions import Bind, Evict
from toposched.scheduler.preemption import PreemptionPlan, VictimSearch
from toposched.scheduler.refusals import Refusal
from toposched.scheduler.spread import SpreadSearch

HOUR = 3600.0
RACKS, NODES_PER_RACK = 8, 3  # 24 nodes x 4 GPUs = 96 GPUs
SLICES = {"slices": [{"level": "rack", "pods": NODES_PER_RACK}]}


def fleet(holders: dict[int, str], budgets: dict[str, float]) -> Scheduler:
    """8 racks of 3 nodes x 4 GPUs; `holders[node]` runs a one-node job there since 0.
    `budgets` in GPUs of the 96 (a budget tree takes shares in percent)."""
    state = ClusterState(nvl72_cluster(1, 1, RACKS, nodes_per_rack=NODES_PER_RACK))
    shares = {account: gpus * 100 / 96 for account, gpus in budgets.items()}
    sched = Scheduler(state, BudgetTree.from_dict({"accounts": shares}))
    for node, account in sorted(holders.items()):
        sched.adopt(spec(f"{account}-{node}", account), Allocation.of([node], [[0, 1, 2, 3]]), 0, 0)
    return sched


def decisions(result: CycleResult) -> tuple[list[str], list[str]]:
    evicted = sorted(d.job_id for d in result.decisions if isinstance(d, Evict))
    bound = sorted(d.job_id for d in result.decisions if isinstance(d, Bind))
    return evicted, bound


def one_node_short(beyond_budget_gpus: int) -> Scheduler:
    """team-b holds the first node of every rack and the second of racks 0-5: 14 nodes, 56
    GPUs; racks 6 and 7 each lack one node (4 GPUs) of a whole free rack. Budgets: team-b
    56 - `beyond_budget_gpus` GPUs; team-a the rest, running nothing."""
    holders = {NODES_PER_RACK * rack: "team-b" for rack in range(RACKS)}
    holders.update({NODES_PER_RACK * rack + 1: "team-b" for rack in range(6)})
    team_b = 56 - beyond_budget_gpus
    return fleet(holders, {"team-a": 96 - team_b, "team-b": team_b})


def test_a_gang_two_whole_racks_away_may_take_what_its_victims_team_runs_beyond_budget() -> None:
    # team-b runs 8 GPUs beyond its budget: evicting its jobs on racks 6 and 7 (8 GPUs) frees
    # two whole racks without taking it below its budget.
    sched = one_node_short(beyond_budget_gpus=8)
    sched.submit(spec("gang", "team-a", pods=6, topology=SLICES), 2 * HOUR)
    evicted, _ = decisions(sched.cycle(2 * HOUR))
    assert evicted == ["team-b-18", "team-b-21"]


def test_a_gang_needing_more_than_the_caps_free_is_refused_from_counts() -> None:
    # team-b runs only 4 GPUs beyond its budget: the two racks need 8 GPUs freed. Refused,
    # saying how many GPUs the caps free and how many the slices need.
    sched = one_node_short(beyond_budget_gpus=4)
    sched.submit(spec("gang", "team-a", pods=6, topology=SLICES), 2 * HOUR)
    evicted, bound = decisions(sched.cycle(2 * HOUR))
    assert evicted == [] and bound == []
    reason = sched.jobs["gang"].reason
    assert "within the budgets evictions free at most 4 GPUs" in reason
    assert "room for its 6 pods in whole slices of 3 needs at least 8 more" in reason


def random_fleet(seed: int, per_pod: dict[str, int] | None = None) -> tuple[Scheduler, JobSpec]:
    """Random holders (team-b, team-c, or free) on every node; budgets that leave team-b and
    team-c a few GPUs beyond theirs; a team-a gang of 1-4 whole racks in slices, or of pods
    in no slices (pods of 4 GPUs, or asking `per_pod`)."""
    rng = np.random.default_rng(seed)
    owners = rng.choice(["team-b", "team-c", ""], size=RACKS * NODES_PER_RACK, p=[0.45, 0.35, 0.2])
    holders = {node: str(owner) for node, owner in enumerate(owners) if owner}
    running = {team: 4 * int((owners == team).sum()) for team in ("team-b", "team-c")}
    budgets = {team: max(gpus - 4 * int(rng.integers(0, 4)), 1) for team, gpus in running.items()}
    budgets["team-a"] = max(96 - sum(budgets.values()), 1)
    sched = fleet(holders, budgets)
    racks = int(rng.integers(1, 5))
    topology = SLICES if rng.random() < 0.75 else {}
    asked = {"resources_per_pod": per_pod} if per_pod else {}
    return sched, spec("gang", "team-a", pods=racks * NODES_PER_RACK, topology=topology, **asked)


@pytest.mark.parametrize("seed", range(60))
def test_refusals_proven_from_counts_agree_with_the_general_search(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Oracle: the same cycle with the proof turned off (the general search decides alone)
    # makes the same decisions; where the proof answered, that search refused too.
    proven: list[Refusal] = []
    original = SpreadSearch._short_within_caps

    def recorded(self: SpreadSearch, *args: Any) -> Refusal | None:
        answer = original(self, *args)
        if answer is not None:
            proven.append(answer)
        return answer

    monkeypatch.setattr(SpreadSearch, "_short_within_caps", recorded)
    sched, gang = random_fleet(seed)
    sched.submit(gang, 2 * HOUR)
    with_proof = decisions(sched.cycle(2 * HOUR))

    monkeypatch.setattr(SpreadSearch, "_short_within_caps", lambda self, *args: None)
    general, gang = random_fleet(seed)
    general.submit(gang, 2 * HOUR)
    assert decisions(general.cycle(2 * HOUR)) == with_proof
    if proven:
        assert with_proof == ([], [])


def test_the_random_cases_include_proven_refusals_and_plans(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The oracle above is not vacuous: over its seeds the proof answers some cases and the
    # general search others, some of them with evictions.
    answered = 0
    original = SpreadSearch._short_within_caps

    def counted(self: SpreadSearch, *args: Any) -> Refusal | None:
        nonlocal answered
        answer = original(self, *args)
        answered += answer is not None
        return answer

    monkeypatch.setattr(SpreadSearch, "_short_within_caps", counted)
    with_evictions = 0
    for seed in range(60):
        sched, gang = random_fleet(seed)
        sched.submit(gang, 2 * HOUR)
        with_evictions += bool(decisions(sched.cycle(2 * HOUR))[0])
    assert answered >= 3 and with_evictions >= 3


def _within_caps_alone(
    self: VictimSearch, preemptor: str, request: GangRequest, pool: CandidatePool, within: Any
) -> tuple[PreemptionPlan | None, None]:
    """`_plan_within_caps` without the placement with every candidate gone: the explanation
    then finds that placement on a what-if of its own."""
    plan, _ = self._plan_from_rows(preemptor, request, pool, within)
    return plan, None


HOGGED_SEEDS = 200
"""Seeds of `hogged_fleet`: about one in fifteen refuses a gang with no room at all."""


def hogged_fleet(seed: int) -> tuple[Scheduler, JobSpec]:
    """`random_fleet`, with team-a running CPU-only jobs of 100 cores on a few nodes (not
    preemptible by its own gang), and the gang's pods asking 64 cores each: where such a job
    runs, GPUs freed by evictions do not make room, which GPU counts do not see."""
    sched, gang = random_fleet(seed, {"gpus": 4, "cpu": 64})
    rng = np.random.default_rng(seed + 1_000)
    hogs = rng.choice(RACKS * NODES_PER_RACK, size=int(rng.integers(0, 12)), replace=False)
    for node in sorted(hogs.tolist()):
        hog = JobSpec.from_dict(
            {
                "name": f"hog-{node}",
                "account": "team-a",
                "pods": 1,
                "resources_per_pod": {"cpu": 100},
            }
        )
        sched.adopt(hog, Allocation.of([node], [], cpu_milli=100_000), 0, 0)
    return sched, gang


@pytest.mark.parametrize("seed", range(HOGGED_SEEDS))
def test_the_refusal_under_caps_is_the_one_every_candidate_gone_alone_gives(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The placement with every candidate gone, found by freeing the others on the what-if of
    # those within the caps, gives the reason a what-if of its own gives.
    monkeypatch.setattr(SpreadSearch, "_short_within_caps", lambda self, *args: None)
    shared, gang = hogged_fleet(seed)
    shared.submit(gang, 2 * HOUR)
    with_shared = decisions(shared.cycle(2 * HOUR))

    monkeypatch.setattr(VictimSearch, "_plan_within_caps", _within_caps_alone)
    alone, gang = hogged_fleet(seed)
    alone.submit(gang, 2 * HOUR)
    assert decisions(alone.cycle(2 * HOUR)) == with_shared
    assert shared.jobs["gang"].reason == alone.jobs["gang"].reason


def test_the_random_cases_refuse_under_caps_both_with_and_without_room(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The oracle above is not vacuous: the placement with every candidate gone both fits
    # (refused for the caps) and fails (refused for room) over its seeds.
    monkeypatch.setattr(SpreadSearch, "_short_within_caps", lambda self, *args: None)
    codes: list[str] = []
    original = VictimSearch._plan_within_caps

    def recorded(self: VictimSearch, *args: Any) -> Any:
        plan, everything = original(self, *args)
        if plan is None:
            codes.append("fits" if isinstance(everything, Placement) else "fails")
        return plan, everything

    monkeypatch.setattr(VictimSearch, "_plan_within_caps", recorded)
    for seed in range(HOGGED_SEEDS):
        sched, gang = hogged_fleet(seed)
        sched.submit(gang, 2 * HOUR)
        sched.cycle(2 * HOUR)
    assert codes.count("fits") >= 3 and codes.count("fails") >= 3
