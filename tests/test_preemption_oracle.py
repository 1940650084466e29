"""Property tests: preemption victims against a brute-force oracle on small random clusters.

Clusters have 2-8 nodes of 2-4 GPUs in 1-2 levels; running jobs are whole-GPU gangs of 1-2 pods,
some unallocated, some allocated and past their min runtime, some protected, some checkpointed;
the preemptor is an allocated gang small enough for one innermost domain (rack), required in
one rack or unconstrained. The oracle tries every subset of the jobs the contract allows (at most
16 running jobs) and keeps those after whose release the gang has room (in one rack if it
requires one), judged GPU by GPU from the case itself.

Bound verified, both for `VictimSearch.plan` given every allowed job and through `Scheduler.cycle`:

- a victim set is found exactly when the oracle finds a feasible one; its victims are allowed by
  the contract, the engine places the gang once they are gone, and no victim can be spared;
- its impact (LeastLostWork's key) is never below the oracle's optimum;
- one-domain gangs (required in a rack, or a single pod): the impact is at most that of the best
  set inside any rack with at most `EXACT_VICTIMS` (12) candidates, hence equal to the optimum
  when every rack has at most 12 candidates;
- other gangs (several pods, no required rack): feasible and minimal only; no optimality claim.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from toposched.cluster.loaders import topology_from_dict
from toposched.cluster.state import Allocation, ClusterState, Health
from toposched.cluster.statement import Statement
from toposched.jobs.spec import JobSpec
from toposched.placement.policies import BestFit
from toposched.placement.request import GangRequest
from toposched.placement.search import Placement, place
from toposched.policy.budget import BudgetTree
from toposched.policy.contract import Contract, PreemptionRule
from toposched.policy.queue_entry import QueueEntry
from toposched.policy.ranking import Ranking
from toposched.scheduler import leaf_victims
from toposched.scheduler.core import Scheduler
from toposched.scheduler.decisions import Bind, Evict
from toposched.scheduler.jobs import JobState
from toposched.scheduler.leaf_victims import EXACT_VICTIMS
from toposched.scheduler.preemption import (
    Candidate,
    PreemptionPlan,
    Refusal,
    RefusalCode,
    VictimSearch,
)

HOUR = 3600
NOW = 4 * HOUR
#: The teams' budgets, percent of the cluster: one case's pair is drawn from these. Small budgets
#: make the budget rule's caps bind (two victims of a team together may not take it below).
SHARES = (5, 15, 40)
MAX_JOBS = 16
EXAMPLES = int(os.environ.get("TOPOSCHED_ORACLE_EXAMPLES", "150"))
SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
CONTRACT_RULES = {str(rule) for rule in PreemptionRule}
Key = tuple[float, float, float]


@dataclass(frozen=True)
class Running:
    """A job already running: one pod per entry of `nodes`, each on the GPUs in `gpus`."""

    name: str
    account: str
    nodes: tuple[int, ...]
    gpus: tuple[tuple[int, ...], ...]
    start: int
    min_runtime: int
    priority: int
    resumable: bool
    checkpoint: int | None

    def spec(self) -> JobSpec:
        return JobSpec.from_dict(
            {
                "name": self.name,
                "account": self.account,
                "pods": len(self.nodes),
                "resources_per_pod": {"gpus": len(self.gpus[0])},
                "min_runtime": self.min_runtime,
                "priority": self.priority,
                "resumable": self.resumable,
            }
        )


@dataclass(frozen=True)
class Case:
    """Racks (and blocks) as node labels, node GPUs, cordoned nodes, running jobs, preemptor."""

    node_gpus: tuple[int, ...]
    rack_of: tuple[int, ...]
    block_of: tuple[int, ...] | None
    cordoned: tuple[int, ...]
    running: tuple[Running, ...]
    account: str
    priority: int
    pods: int
    gpus_per_pod: int
    required: bool
    cross_account: str = "budget"
    """The contract's rule across accounts (`Contract.cross_account`)."""
    shares: tuple[int, int] = (40, 40)
    """team-a's and team-b's budgets, percent of the cluster; scratch has none."""
    borrowed_min_runtime: int | None = None
    """The longest protection of a job that took its team past its budget (None: no cap)."""

    @property
    def accounts(self) -> dict[str, int]:
        return {"team-a": self.shares[0], "team-b": self.shares[1], "scratch": 0}

    @property
    def one_domain(self) -> bool:
        """Searched rack by rack: required in one rack, or a single pod."""
        return self.required or self.pods == 1

    def cluster(self) -> dict[str, Any]:
        levels = ["rack"] if self.block_of is None else ["block", "rack"]
        nodes = []
        for index, gpus in enumerate(self.node_gpus):
            node: dict[str, Any] = {"name": f"n{index}", "gpus": gpus, "gpu_model": "X"}
            node["rack"] = f"r{self.rack_of[index]}"
            if self.block_of is not None:
                node["block"] = f"b{self.block_of[index]}"
            nodes.append(node)
        return {"levels": levels, "nodes": nodes}

    def preemptor(self) -> JobSpec:
        return JobSpec.from_dict(
            {
                "name": "preemptor",
                "account": self.account,
                "pods": self.pods,
                "resources_per_pod": {"gpus": self.gpus_per_pod},
                "priority": self.priority,
                "topology": {"required": "rack"} if self.required else {},
            }
        )


@st.composite
def cases(
    draw: st.DrawFn, beyond_a_rack: bool = False, budget_bound: bool = False, one_pod: bool = False
) -> Case:
    """A random case; one in four is dense: 4-GPU nodes in 1-2 racks full of one-GPU jobs, so
    that a rack may hold more than `EXACT_VICTIMS` candidates. `beyond_a_rack`: the preemptor
    has no required rack and needs more pods than the largest rack holds (when the cluster has
    room for that many). `budget_bound`: under the budget rule, team-a (40%) preempts and
    team-b (5-40%) runs unprotected allocated work, so that its cap often binds. `one_pod`:
    the preemptor is a single pod."""
    dense = draw(st.integers(0, 3)) == 0
    n_nodes = 4 if dense else draw(st.integers(2, 8))
    node_gpus = tuple(4 if dense else draw(st.integers(2, 4)) for _ in range(n_nodes))
    rack_cuts = draw(st.sets(st.integers(1, n_nodes - 1), max_size=1 if dense else 3))
    rack_of = tuple(sum(1 for cut in rack_cuts if cut <= i) for i in range(n_nodes))
    block_of: tuple[int, ...] | None = None
    nested = bool(rack_cuts) and draw(st.booleans())
    if nested:
        block_cuts = draw(st.sets(st.sampled_from(sorted(rack_cuts)), max_size=2))
        block_of = tuple(sum(1 for cut in block_cuts if cut <= i) for i in range(n_nodes))
    elif draw(st.booleans()):
        block_of = (0,) * n_nodes
    accounts = ["team-a", "team-b"] + ["scratch"] * (6 if dense else 1)
    if budget_bound:
        accounts = ["team-a", "team-b", "team-b", "team-b"]
    min_runtimes = [HOUR] if budget_bound else [0, HOUR, HOUR, 8 * HOUR]
    free = [list(range(g)) for g in node_gpus]
    running: list[Running] = []
    for node in range(n_nodes):
        while (
            free[node] and len(running) < MAX_JOBS and draw(st.integers(0, 15 if dense else 7)) > 0
        ):
            per_pod = 1 if dense else draw(st.integers(1, len(free[node])))
            nodes = [node]
            others = [n for n in range(n_nodes) if n != node and len(free[n]) >= per_pod]
            if not dense and others and draw(st.integers(0, 3)) == 0:
                nodes.append(draw(st.sampled_from(others)))
            gpus = []
            for pod_node in nodes:
                gpus.append(tuple(free[pod_node][:per_pod]))
                del free[pod_node][:per_pod]
            start = draw(st.integers(0, NOW // 300)) * 300
            resumable = draw(st.booleans())
            checkpoint = None
            if resumable and draw(st.booleans()):
                checkpoint = draw(st.integers(start // 300, NOW // 300)) * 300
            running.append(
                Running(
                    name=f"j{len(running)}",
                    account=draw(st.sampled_from(accounts)),
                    nodes=tuple(nodes),
                    gpus=tuple(gpus),
                    start=start,
                    min_runtime=draw(st.sampled_from(min_runtimes)),
                    priority=draw(st.integers(0, 2)),
                    resumable=resumable,
                    checkpoint=checkpoint,
                )
            )
    cordoned = tuple(sorted(draw(st.sets(st.integers(0, n_nodes - 1), max_size=1))))
    rack_gpus: dict[int, int] = {}
    for node, rack in enumerate(rack_of):
        rack_gpus[rack] = rack_gpus.get(rack, 0) + node_gpus[node]
    gpus_per_pod = draw(st.integers(1, max(node_gpus)))
    most = max(max(rack_gpus.values()) // gpus_per_pod, 1)
    pods = 1 if one_pod else draw(st.integers(max(most // 3, 1), most))
    everywhere = sum(gpus // gpus_per_pod for gpus in node_gpus)
    if beyond_a_rack and everywhere > most:
        pods = draw(st.integers(most + 1, everywhere))
    return Case(
        node_gpus=node_gpus,
        rack_of=rack_of,
        block_of=block_of,
        cordoned=cordoned,
        running=tuple(running),
        account="team-a" if budget_bound else draw(st.sampled_from(["team-a", "team-b"])),
        priority=draw(st.integers(0, 3)),
        pods=pods,
        gpus_per_pod=gpus_per_pod,
        required=draw(st.booleans()) and not beyond_a_rack,
        cross_account="budget" if budget_bound else draw(st.sampled_from(["budget", "fair_share"])),
        shares=(
            SHARES[-1] if budget_bound else draw(st.sampled_from(SHARES)),
            draw(st.sampled_from(SHARES)),
        ),
        borrowed_min_runtime=draw(st.sampled_from([None, HOUR, 0, HOUR // 2])),
    )


# --- the world the scheduler sees -----------------------------------------------------------------


@dataclass
class World:
    """The scheduler after adopting the running jobs, and the pending preemptor."""

    case: Case
    scheduler: Scheduler
    node_index: list[int]
    """Topology index of each described node (the topology orders nodes depth-first)."""
    request: GangRequest
    entry: QueueEntry
    ranking: Ranking


def build(case: Case) -> World:
    state = ClusterState(topology_from_dict(case.cluster()))
    contract = Contract(cross_account=case.cross_account, worth=None)  # type: ignore[arg-type]
    sched = Scheduler(
        state,
        BudgetTree.from_dict({"accounts": case.accounts}),
        contract=contract,
        borrowed_min_runtime=case.borrowed_min_runtime,
    )
    node_index = [state.topology.node_index(f"n{i}") for i in range(len(case.node_gpus))]
    for job in sorted(case.running, key=lambda j: (j.start, j.name)):
        nodes = [node_index[n] for n in job.nodes]
        allocation = Allocation.of(nodes, [list(g) for g in job.gpus])
        sched.adopt(job.spec(), allocation, start_time=job.start, now=job.start)
    for job in case.running:
        if job.checkpoint is not None:
            sched.report_checkpoint(job.name, job.checkpoint)
    if case.cordoned:
        sched.set_health([node_index[n] for n in case.cordoned], Health.CORDONED, NOW)
    preemptor = sched.submit(case.preemptor(), NOW)
    entry = QueueEntry("preemptor", case.account, case.priority, NOW, unallocated=False)
    return World(case, sched, node_index, preemptor.request, entry, sched.queue.ranking(NOW))


# --- the oracle -----------------------------------------------------------------------------------


@dataclass
class Allowed:
    """The jobs the contract lets the preemptor evict, with the cost of each, per the spec."""

    jobs: list[Running]
    rules: dict[str, str]
    lost: NDArray[np.float64]
    standing: NDArray[np.float64]
    caps: dict[str, float]
    """Budget rule: per account, the most GPUs its victims allowed by that rule may hold
    together (what it runs beyond its budget)."""

    def held_against(self, account: str) -> NDArray[np.float64]:
        """Per allowed job, the GPUs it counts against `account`'s cap."""
        return np.array(
            [
                len(job.nodes) * len(job.gpus[0])
                if job.account == account and self.rules[job.name] == PreemptionRule.RECLAIM_BUDGET
                else 0
                for job in self.jobs
            ],
            dtype=np.float64,
        )

    def within_caps(self, subsets: NDArray[np.int64]) -> NDArray[np.bool_]:
        within = np.ones(subsets.shape[0], dtype=bool)
        for account, cap in self.caps.items():
            within &= subsets @ self.held_against(account) <= cap
        return within

    @property
    def caps_bind(self) -> bool:
        """Whether evicting every allowed job would take some account below its budget."""
        return not self.within_caps(np.ones((1, len(self.jobs)), dtype=np.int64))[0]


class CaseLoads:
    """Each account's running allocated GPUs and its budget, and each job's protection, counted
    from the case itself."""

    def __init__(self, case: Case) -> None:
        self.cluster_gpus = sum(case.node_gpus)
        self.shares = case.accounts
        self.running: dict[str, float] = {}
        self.min_runtime: dict[str, float] = {}
        # In the order the jobs started: a job that takes its team's allocated GPUs past the
        # budget is protected for at most the case's cap.
        for job in sorted(case.running, key=lambda j: (j.start, j.name)):
            self.min_runtime[job.name] = job.min_runtime
            if job.min_runtime > 0 and self.shares[job.account] > 0:
                gpus = len(job.nodes) * len(job.gpus[0])
                total = self.running.get(job.account, 0.0) + gpus
                cap = case.borrowed_min_runtime
                if cap is not None and total > self.budget_gpus(job.account) + 1e-9:
                    self.min_runtime[job.name] = min(job.min_runtime, cap)
                self.running[job.account] = total

    def running_gpus(self, account: str) -> float:
        return self.running.get(account, 0.0)

    def budget_gpus(self, account: str) -> float:
        # A share is a percent of the parent's (here the whole cluster's) GPUs.
        return self.shares[account] / 100 * self.cluster_gpus


def allowed_victims(world: World) -> Allowed:
    contract = Contract(cross_account=world.case.cross_account, worth=None)  # type: ignore[arg-type]
    loads = CaseLoads(world.case)
    tree = world.scheduler.tree
    ranking = world.ranking
    jobs: list[Running] = []
    rules: dict[str, str] = {}
    lost: list[float] = []
    standing: list[float] = []
    for job in world.case.running:
        view = contract.running_job(
            job_id=job.name,
            account=job.account,
            priority=job.priority,
            submit_time=job.start,
            start_time=job.start,
            min_runtime=job.min_runtime,
            resumable=job.resumable,
            tree=tree,
            gpus=len(job.nodes) * len(job.gpus[0]),
        )
        # Borrowing shortens the protection only: the job stays allocated work.
        view = dataclasses.replace(
            view, min_runtime=min(view.min_runtime, loads.min_runtime[job.name])
        )
        verdict = contract.may_preempt(world.entry, view, NOW, ranking, loads)
        if not verdict.allowed:
            continue
        jobs.append(job)
        rules[job.name] = str(verdict.rule)
        # Work lost: since the last checkpoint for resumable jobs that report one, else since
        # the start; GPUs x seconds.
        since = job.start
        if job.resumable and job.checkpoint is not None:
            since = max(job.start, job.checkpoint)
        lost.append(float(len(job.nodes) * len(job.gpus[0]) * (NOW - since)))
        standing.append(
            0.0 if view.unallocated else float(len(ranking.leaves) - ranking.rank(job.account))
        )
    capped = {job.account for job in jobs if rules[job.name] == PreemptionRule.RECLAIM_BUDGET}
    caps = {
        account: loads.running_gpus(account) - loads.budget_gpus(account) + 1e-9
        for account in sorted(capped)
    }
    return Allowed(jobs, rules, np.array(lost), np.array(standing), caps)


@dataclass
class Oracle:
    """The least key over every feasible subset, and the least per rack within that rack."""

    optimum: Key | None
    optimum_set: list[str]
    by_rack: dict[int, tuple[int, Key | None]]
    """rack -> (candidates touching it, least key of a subset that opens that rack); only for
    one-domain gangs."""

    def exact_bound(self) -> Key | None:
        """The least key over racks whose candidates the search examines exhaustively."""
        keys = [key for count, key in self.by_rack.values() if count <= EXACT_VICTIMS and key]
        return min(keys) if keys else None

    @property
    def all_exact(self) -> bool:
        """One-domain gang, and every rack's candidates are examined exhaustively."""
        counts = [count for count, _ in self.by_rack.values()]
        return bool(counts) and max(counts) <= EXACT_VICTIMS


def oracle(world: World, allowed: Allowed) -> Oracle:
    """Every subset of the allowed jobs, judged GPU by GPU from the case description."""
    case = world.case
    n_nodes, k = len(case.node_gpus), len(allowed.jobs)
    capacity = np.array(case.node_gpus, dtype=np.int64)
    free = capacity.copy()
    for job in case.running:
        for node, gpus in zip(job.nodes, job.gpus, strict=True):
            free[node] -= len(gpus)
    usable = np.ones(n_nodes, dtype=bool)
    usable[list(case.cordoned)] = False
    freed = np.zeros((k, n_nodes), dtype=np.int64)
    for row, job in enumerate(allowed.jobs):
        for node, gpus in zip(job.nodes, job.gpus, strict=True):
            freed[row, node] += len(gpus)
    subsets = ((np.arange(2**k)[:, None] >> np.arange(k)) & 1).astype(np.int64)
    after = free[None, :] + subsets @ freed
    assert (after <= capacity).all()
    pods = (after // case.gpus_per_pod) * usable
    racks = sorted(set(case.rack_of))
    rack_of = np.array(case.rack_of)
    room = np.stack([pods[:, rack_of == rack].sum(axis=1) for rack in racks], axis=1)
    opens = room >= case.pods  # opens[s, r]: subset s gives rack r room for the gang
    lost = subsets @ allowed.lost
    count = subsets.sum(axis=1).astype(float)
    standing = subsets @ allowed.standing

    def best(mask: NDArray[np.bool_]) -> tuple[Key | None, int]:
        chosen = np.flatnonzero(mask)
        if chosen.size == 0:
            return None, -1
        order = np.lexsort((standing[chosen], count[chosen], lost[chosen]))
        s = int(chosen[order[0]])
        return (float(lost[s]), float(count[s]), float(standing[s])), s

    within = allowed.within_caps(subsets)
    opens &= within[:, None]
    feasible: NDArray[np.bool_] = np.asarray(
        opens.any(axis=1) if case.one_domain else (room.sum(axis=1) >= case.pods) & within
    )
    optimum, s = best(feasible)
    optimum_set = [] if s < 0 else [allowed.jobs[i].name for i in np.flatnonzero(subsets[s])]
    by_rack: dict[int, tuple[int, Key | None]] = {}
    for column, rack in enumerate(racks if case.one_domain else []):
        touching = (freed[:, rack_of == rack].sum(axis=1) > 0).astype(np.int64)
        inside = (subsets & (1 - touching)[None, :]).sum(axis=1) == 0
        key, _ = best(opens[:, column] & inside)
        by_rack[rack] = (int(touching.sum()), key)
    return Oracle(optimum, optimum_set, by_rack)


def places_without(state: ClusterState, request: GangRequest, owners: list[str]) -> bool:
    statement = Statement(state)
    try:
        statement.release_many(owners)
        return isinstance(place(state, request, BestFit()), Placement)
    finally:
        statement.discard()


def key_of(names: list[str], allowed: Allowed) -> Key:
    index = {job.name: i for i, job in enumerate(allowed.jobs)}
    rows = [index[name] for name in names]
    return (
        float(allowed.lost[rows].sum()),
        float(len(rows)),
        float(allowed.standing[rows].sum()),
    )


def budget_bound(job: Running, allowed: Allowed) -> dict[str, Any]:
    """A candidate's budget cap, for a job the budget rule allows."""
    if allowed.rules[job.name] != PreemptionRule.RECLAIM_BUDGET:
        return {}
    return {
        "budget_account": job.account,
        "gpus": float(len(job.nodes) * len(job.gpus[0])),
        "budget_cap": allowed.caps[job.account],
    }


def candidates_of(world: World, allowed: Allowed) -> list[Candidate]:
    """Every job the contract allows, as the victim search's candidates."""
    return [
        Candidate(
            job_id=job.name,
            rule=allowed.rules[job.name],
            lost_gpu_seconds=float(allowed.lost[i]),
            standing=float(allowed.standing[i]),
            nodes=np.array([world.node_index[n] for n in job.nodes], dtype=np.int64),
            gpus_per_pod=float(len(job.gpus[0])),
            **budget_bound(job, allowed),
        )
        for i, job in enumerate(allowed.jobs)
    ]


def may_miss_within_caps(case: Case, allowed: Allowed, found: Oracle) -> bool:
    """Whether the search may refuse although a set within the budget caps exists: only when
    the caps bind and some domain's candidates are not examined exhaustively (within caps the
    cheapest-first and every-job-in-the-chosen-racks searches are heuristics)."""
    return allowed.caps_bind and not (case.one_domain and found.all_exact)


def check_victims(world: World, allowed: Allowed, found: Oracle, victims: list[str]) -> Key:
    """Allowed, feasible, minimal, and within the bound; returns the set's key."""
    state, request = world.scheduler.state, world.request
    assert found.optimum is not None, f"victims {victims} where the oracle finds no feasible set"
    assert victims and len(set(victims)) == len(victims)
    assert set(victims) <= set(allowed.rules), "a victim the contract does not allow"
    chosen = np.array([[int(job.name in victims) for job in allowed.jobs]], dtype=np.int64)
    assert allowed.within_caps(chosen)[0], "the victims take an account below its budget"
    assert places_without(state, request, victims), "the engine cannot place after the eviction"
    for spared in victims:
        rest = [v for v in victims if v != spared]
        assert not places_without(state, request, rest), f"{spared} could be spared"
    key = key_of(victims, allowed)
    assert key >= found.optimum
    bound = found.exact_bound()
    if bound is not None:
        assert key <= bound, f"{key} is worse than a rack searched exactly: {bound}"
    if found.all_exact:
        assert key == found.optimum, f"{key} is not the optimum {found.optimum}"
    return key


# --- properties -----------------------------------------------------------------------------------

# Rack r0 (n0-n3, 4 GPUs each) runs 13 one-GPU unallocated jobs; the preemptor needs one node.
MANY_IN_ONE_RACK = Case(
    node_gpus=(4, 4, 4, 4),
    rack_of=(0, 0, 0, 0),
    block_of=None,
    cordoned=(),
    running=tuple(
        Running(f"j{i}", "scratch", (i // 4,), ((i % 4,),), 300 * i, 0, 0, False, None)
        for i in range(13)
    ),
    account="team-a",
    priority=0,
    pods=1,
    gpus_per_pod=4,
    required=True,
)
# Rack r0: unallocated work since 0; rack r1: team-b's jobs past their min runtime, checkpointed
# 300 s ago. Under the fair-share rule the cheapest set is team-b's, although unallocated work
# alone could make room (under the budget rule team-b, at its budget, keeps its jobs).
MIXED_RACKS = Case(
    node_gpus=(4, 4, 4, 4),
    rack_of=(0, 0, 1, 1),
    block_of=None,
    cordoned=(),
    running=(
        Running("j0", "scratch", (0,), ((0, 1, 2, 3),), 0, 0, 0, False, None),
        Running("j1", "scratch", (1,), ((0, 1, 2, 3),), 0, 0, 0, False, None),
        Running("j2", "team-b", (2,), ((0, 1, 2, 3),), 0, HOUR, 0, True, NOW - 300),
        Running("j3", "team-b", (3,), ((0, 1, 2, 3),), 0, HOUR, 0, True, NOW - 300),
    ),
    account="team-a",
    priority=0,
    pods=2,
    gpus_per_pod=4,
    required=True,
    cross_account="fair_share",
)


@SETTINGS
@given(cases())
@example(MANY_IN_ONE_RACK)
def test_victim_search_is_feasible_minimal_and_within_its_bound(case: Case) -> None:
    world = build(case)
    allowed = allowed_victims(world)
    found = oracle(world, allowed)
    state = world.scheduler.state
    # The oracle's own GPU arithmetic agrees with the engine on what it reports.
    everyone = [job.name for job in allowed.jobs]
    if found.optimum is not None:
        assert places_without(state, world.request, found.optimum_set)
    elif not allowed.caps_bind:
        assert not places_without(state, world.request, everyone)
    if found.optimum is not None and found.optimum[1] == 0:
        return  # it fits as things are: nothing to search for
    plan = VictimSearch(state, BestFit()).plan(
        "preemptor", world.request, candidates_of(world, allowed)
    )

    if found.optimum is None:
        assert isinstance(plan, Refusal)
        return
    if isinstance(plan, Refusal) and may_miss_within_caps(case, allowed, found):
        assert plan.code is RefusalCode.BUDGET_CAPS, plan
        assert "budget" in plan.reason, plan
        return
    assert isinstance(plan, PreemptionPlan), plan
    key = check_victims(world, allowed, found, [v.job_id for v in plan.victims])
    assert plan.impact == key
    if found.all_exact:
        assert plan.exact


@SETTINGS
@given(cases(one_pod=True))
@example(
    dataclasses.replace(
        MANY_IN_ONE_RACK, running=MANY_IN_ONE_RACK.running[:12], cordoned=(3,), gpus_per_pod=2
    )
)
def test_a_single_pod_chooses_among_one_node_subsets_as_among_every_subset(case: Case) -> None:
    # A single pod's exact search tries only the subsets of one node's candidates
    # (`leaf_victims.ONE_NODE_FROM`): the same victims, in the same order, as every subset.
    world = build(case)
    candidates = candidates_of(world, allowed_victims(world))

    def plan_trying(one_node_from: int) -> PreemptionPlan | Refusal:
        saved = leaf_victims.ONE_NODE_FROM
        leaf_victims.ONE_NODE_FROM = one_node_from
        try:
            search = VictimSearch(world.scheduler.state, BestFit())
            return search.plan("preemptor", world.request, candidates)
        finally:
            leaf_victims.ONE_NODE_FROM = saved

    every, one_node = plan_trying(EXACT_VICTIMS + 1), plan_trying(0)
    if isinstance(every, Refusal):
        assert isinstance(one_node, Refusal), one_node
        assert (one_node.code, one_node.reason) == (every.code, every.reason)
        return
    assert isinstance(one_node, PreemptionPlan), one_node
    assert [v.job_id for v in one_node.victims] == [v.job_id for v in every.victims]
    assert (one_node.impact, one_node.exact) == (every.impact, every.exact)


@SETTINGS
@given(cases())
@example(MANY_IN_ONE_RACK)
@example(MIXED_RACKS)
def test_a_cycle_evicts_an_allowed_feasible_minimal_set_within_the_bound(case: Case) -> None:
    check_a_cycle(case)


@SETTINGS
@given(cases(beyond_a_rack=True))
def test_a_cycle_makes_room_across_racks_for_gangs_larger_than_a_rack(case: Case) -> None:
    # These gangs take the path that chooses racks from the aggregates (and, when it finds no
    # set, the general search): a set is still found exactly when one exists, allowed,
    # feasible and minimal.
    check_a_cycle(case)


def check_a_cycle(case: Case) -> None:
    world = build(case)
    allowed = allowed_victims(world)
    found = oracle(world, allowed)
    sched = world.scheduler

    result = sched.cycle(NOW)

    binds = [d.job_id for d in result.decisions if isinstance(d, Bind)]
    evicts = [d for d in result.decisions if isinstance(d, Evict) and d.rule in CONTRACT_RULES]
    if found.optimum is not None and found.optimum[1] == 0:
        assert binds == ["preemptor"] and evicts == []
        return
    assert binds == []
    preemptor = sched.jobs["preemptor"]
    if found.optimum is None:
        assert evicts == []
        assert preemptor.state is JobState.PENDING and "no preemption" in preemptor.reason
        return
    if not evicts and may_miss_within_caps(case, allowed, found):
        assert preemptor.state is JobState.PENDING and "budget" in preemptor.reason
        return
    assert evicts, preemptor.reason
    victims = [e.job_id for e in evicts]
    check_victims(world, allowed, found, victims)
    lost = dict(zip([job.name for job in allowed.jobs], allowed.lost.tolist(), strict=True))
    for evict in evicts:
        assert evict.preemptor == "preemptor"
        assert evict.rule == allowed.rules[evict.job_id]
        assert evict.lost_gpu_seconds == lost[evict.job_id]
    assert preemptor.nomination is not None and preemptor.nomination.victims == set(victims)


@SETTINGS
@given(st.one_of(cases(budget_bound=True), cases(beyond_a_rack=True, budget_bound=True)))
def test_a_cycle_keeps_each_victim_team_at_its_budget(case: Case) -> None:
    # Under the budget rule the victims of one team together hold no more than it runs beyond
    # its budget; one-domain gangs whose racks are searched exhaustively still get the optimum
    # within those caps.
    check_a_cycle(case)
