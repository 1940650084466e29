"""Stateful property test: random job streams through the scheduler keep state, usage and order."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import MILLI_PER_GPU, ClusterState, Health
from toposched.jobs.spec import JobSpec
from toposched.policy.budget import ROOT, BudgetTree, account_ancestors
from toposched.scheduler.core import Scheduler
from toposched.scheduler.decisions import Bind, Evict, Reserve
from toposched.scheduler.jobs import JobState
from toposched.scheduler.ledger import work_since

# Usage counts GPU-seconds over 7 days; a run is at most 40 steps of at most 3 h (120 h), so
# nothing expires and the oracle below is a plain integral.
MAX_STEP_S = 3 * 3600
REL = 1e-9


@st.composite
def clusters(draw: st.DrawFn) -> ClusterState:
    """1-4 racks of 1-3 nodes with 2 or 4 GPUs: small enough to fill and fragment quickly."""
    blocks = draw(st.integers(1, 2))
    racks = draw(st.integers(1, 2))
    topology = nvl72_cluster(
        zones=1,
        blocks_per_zone=blocks,
        racks_per_block=racks,
        nodes_per_rack=draw(st.integers(1, 3)),
        gpus_per_node=draw(st.sampled_from([2, 4])),
        cpu_milli=16_000,
        memory_mib=65_536,
    )
    return ClusterState(topology)


@st.composite
def shares(draw: st.DrawFn, count: int) -> list[int]:
    """`count` percent shares summing to at most 100; zeros allowed (accounts with no budget)."""
    left = 100
    result = []
    for _ in range(count):
        share = draw(st.sampled_from([0, left // 4, left // 2, left]))
        result.append(share)
        left -= share
    return result


@st.composite
def trees(draw: st.DrawFn) -> BudgetTree:
    """One or two levels: 1-3 top accounts, each a leaf or the parent of 1-3 teams."""
    top = draw(st.integers(1, 3))
    accounts: dict[str, Any] = {}
    for index, share in enumerate(draw(shares(top))):
        teams = draw(st.integers(0, 3))
        if teams:
            children = dict(zip([f"t{k}" for k in range(teams)], draw(shares(teams)), strict=True))
            accounts[f"p{index}"] = {"share": share, "children": children}
        else:
            accounts[f"p{index}"] = share
    return BudgetTree.from_dict({"accounts": accounts})


@dataclass
class Charge:
    """An allocated run as the oracle sees it: GPUs held by an account from `start` on."""

    account: str
    gpus: float
    start: float
    end: float | None = None

    def gpu_seconds(self, now: float) -> float:
        end = now if self.end is None else min(self.end, now)
        return self.gpus * max(end - self.start, 0.0)


def level_fs(share: float, shares_sum: float, used: float, used_sum: float) -> float:
    """Fair Tree's S / U, written out: no share -> 0; a share and no usage -> infinity."""
    if share <= 0:
        return 0.0
    if used <= 0:
        return math.inf
    return (share / shares_sum) / (used / used_sum)


def job_gpus(spec: JobSpec) -> float:
    resources = spec.resources_per_pod
    return spec.pods * resources.gpus * resources.gpu_milli / MILLI_PER_GPU


@st.composite
def job_params(draw: st.DrawFn) -> dict[str, Any]:
    """A JobSpec as a dict, with `leaf` (an index into the tree's leaves) for its account."""
    gpus = draw(st.sampled_from([1, 2, 4, "half"]))
    data: dict[str, Any] = {
        "leaf": draw(st.integers(0, 20)),
        "pods": draw(st.integers(1, 4)),
        "resources_per_pod": {"gpu_milli": 500} if gpus == "half" else {"gpus": gpus, "cpu": 1},
        "min_runtime": draw(st.sampled_from([0, 600, 3600, 12 * 3600])),
        "priority": draw(st.integers(0, 3)),
        "resumable": draw(st.booleans()),
    }
    expected = draw(st.sampled_from([None, 300, 1800, 7200]))
    if expected is not None:
        data["expected_runtime"] = expected
    if draw(st.booleans()):
        data["topology"] = {"required": "rack"}
    return data


class SchedulerMachine(RuleBasedStateMachine):
    """Submit, cycle, let time pass, finish, fail, evict, change budgets and node health."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.counter = 0
        self.charges: dict[str, list[Charge]] = {}
        self.open: dict[str, Charge] = {}
        self.submitted: dict[str, float] = {}

    @initialize(state=clusters(), tree=trees(), jobs=st.lists(job_params(), max_size=10))
    def setup(self, state: ClusterState, tree: BudgetTree, jobs: list[dict[str, Any]]) -> None:
        self.state = state
        self.tree = tree
        self.leaves = list(tree.leaves())
        self.scheduler = Scheduler(state, tree, reserve_min_gpus=4)
        self.submit(jobs)

    # --- the oracle ------------------------------------------------------------------------
    def budgeted(self, account: str) -> bool:
        return all(self.tree.share(a) > 0 for a in account_ancestors(account))

    def usage(self, account: str) -> float:
        """GPU-seconds charged to the account's subtree so far, from the runs seen."""
        prefix = account + "/"
        return sum(
            charge.gpu_seconds(self.now)
            for owner, charges in self.charges.items()
            if owner == account or owner.startswith(prefix)
            for charge in charges
        )

    def track(self) -> None:
        """Open a charge for every job that started, close it for every job that stopped."""
        running = self.scheduler.running
        for job_id in [j for j in self.open if j not in running]:
            self.open.pop(job_id).end = self.now
        for job_id, job in running.items():
            if job_id in self.open or job.unallocated:
                continue
            assert job.start_time == self.now, "a job started outside a cycle"
            charge = Charge(job.spec.account, job_gpus(job.spec), self.now)
            self.open[job_id] = charge
            self.charges.setdefault(job.spec.account, []).append(charge)

    def run_cycle(self) -> None:
        result = self.scheduler.cycle(self.now)
        for decision in result.decisions:
            backfilled = isinstance(decision, Bind) and decision.backfilled
            event(type(decision).__name__ + (" (backfilled)" if backfilled else ""))
            if isinstance(decision, Bind):
                job = self.scheduler.jobs[decision.job_id]
                assert job.state is JobState.RUNNING
                spec = job.spec
                assert decision.unallocated == (
                    spec.min_runtime == 0 or not self.budgeted(spec.account)
                )
                assert decision.allocation.pods == spec.pods
            elif isinstance(decision, Reserve):
                assert decision.start_time >= self.now
                assert self.scheduler.jobs[decision.job_id].state is JobState.PENDING
            else:
                assert isinstance(decision, Evict)
                assert self.scheduler.jobs[decision.job_id].evicting
        self.track()
        self.check_queue_order()

    # --- rules -----------------------------------------------------------------------------
    @rule(jobs=st.lists(job_params(), min_size=1, max_size=4))
    def submit(self, jobs: list[dict[str, Any]]) -> None:
        """Submit a few jobs at once, then run a cycle (a submission triggers one)."""
        for params in jobs:
            data = dict(params, name=f"j{self.counter}")
            data["account"] = self.leaves[data.pop("leaf") % len(self.leaves)]
            self.counter += 1
            self.scheduler.submit(JobSpec.from_dict(data), self.now)
            self.submitted[data["name"]] = self.now
        self.run_cycle()

    @rule()
    def cycle(self) -> None:
        self.run_cycle()

    @rule(seconds=st.integers(1, MAX_STEP_S))
    def advance(self, seconds: int) -> None:
        self.now += seconds
        self.run_cycle()

    def pick_running(self, index: int, evicting_only: bool = False) -> str | None:
        running = self.scheduler.running
        names = sorted(j for j, job in running.items() if job.evicting or not evicting_only)
        return names[index % len(names)] if names else None

    # Every event below is followed by a cycle, as a service or simulator drives the scheduler.
    @rule(index=st.integers(0, 50))
    def finish(self, index: int) -> None:
        name = self.pick_running(index)
        if name is not None:
            self.scheduler.finish(name, self.now)
            self.track()
            self.run_cycle()

    @rule(index=st.integers(0, 50), requeue=st.sampled_from([None, True, False]))
    def fail(self, index: int, requeue: bool | None) -> None:
        name = self.pick_running(index)
        if name is not None:
            job = self.scheduler.fail(name, self.now, requeue)
            again = job.spec.resumable if requeue is None else requeue
            assert job.state is (JobState.PENDING if again else JobState.FAILED)
            self.track()
            self.run_cycle()

    @rule(index=st.integers(0, 50))
    def victim_exits(self, index: int) -> None:
        name = self.pick_running(index, evicting_only=True)
        if name is not None:
            self.scheduler.evicted(name, self.now)
            self.track()
            self.run_cycle()

    @rule(account=st.integers(0, 20), fraction=st.sampled_from([0.0, 0.25, 0.5, 1.0]))
    def set_share(self, account: int, fraction: float) -> None:
        accounts = list(self.tree)
        path = accounts[account % len(accounts)]
        parent = self.tree.parent(path)
        others = sum(self.tree.share(c) for c in self.tree.children(parent) if c != path)
        self.scheduler.set_share(path, math.floor((100 - others) * fraction))
        self.run_cycle()

    @rule(node=st.integers(0, 50), health=st.sampled_from(list(Health)))
    def set_health(self, node: int, health: Health) -> None:
        target = node % self.state.topology.n_nodes
        on_node = set(self.state.owners_on([target]))
        failed = self.scheduler.set_health([target], health, self.now)
        if health is Health.DOWN:
            # Every gang on the node fails at once: requeued if resumable, else failed.
            assert {job.job_id for job in failed} == on_node
            for job in failed:
                assert job.state is (JobState.PENDING if job.spec.resumable else JobState.FAILED)
        else:
            assert failed == []
        self.track()
        self.run_cycle()

    # --- invariants ------------------------------------------------------------------------
    @invariant()
    def allocations_are_exact(self) -> None:
        if not hasattr(self, "scheduler"):
            return
        state, scheduler = self.state, self.scheduler
        assert set(state.allocations) == set(scheduler.running)
        assert all(job.state is JobState.RUNNING for job in scheduler.running.values())
        # Recount what every node gives from the allocations alone.
        top = state.topology
        width = state.gpu_free_milli.shape[1]
        used = np.zeros((top.n_nodes, width), dtype=np.int64)
        cpu = np.zeros(top.n_nodes, dtype=np.int64)
        for owner, allocation in state.allocations.items():
            assert allocation.pods == scheduler.running[owner].spec.pods
            for node, gpus in zip(allocation.nodes.tolist(), allocation.gpus.tolist(), strict=True):
                assert all(0 <= gpu < top.gpu_count[node] for gpu in gpus)
                used[node, gpus] += allocation.gpu_milli
                cpu[node] += allocation.cpu_milli
            assert (state.health[allocation.nodes] != Health.DOWN).all(), owner
        exists = np.arange(width)[None, :] < top.gpu_count[:, None]
        assert (used <= MILLI_PER_GPU).all(), "a GPU is over-allocated"
        assert (state.gpu_free_milli == np.where(exists, MILLI_PER_GPU - used, 0)).all()
        assert (cpu <= top.cpu_milli).all() and (state.free_cpu_milli == top.cpu_milli - cpu).all()
        assert (state.free_memory_mib >= 0).all()
        # The aggregates kept incrementally equal a recomputation; nothing is left fenced.
        fresh = state.compute_aggregates()
        assert all(
            (kept == again).all()
            for kept, again in zip(state.free_hist, fresh["free_hist"], strict=True)
        )
        for name, kept_levels in [
            ("free_gpus", state.free_gpus),
            ("free_milli", state.free_milli),
            ("idle_nodes", state.idle_nodes),
            ("cpu", state.domain_free_cpu),
            ("memory", state.domain_free_memory),
        ]:
            for level, kept in enumerate(kept_levels):
                assert (kept == fresh[name][level]).all(), (name, level)
                assert (kept >= 0).all(), (name, level)

    @invariant()
    def preemptible_aggregates_equal_a_recount(self) -> None:
        """Per rack, the GPUs and work of unprotected jobs (kept as jobs come and go) equal a
        recount from the running jobs; every whole GPU names the job holding it."""
        if not hasattr(self, "scheduler"):
            return
        scheduler, state = self.scheduler, self.state
        index = scheduler.ledger.preemptible
        index.refresh(self.now)
        top = state.topology
        leaf_of = top.node_domain[len(top.domain_levels) - 1]
        n_leaves = index.leaf_freeable.size
        freeable = np.zeros(n_leaves, dtype=np.int64)
        node_freeable = np.zeros(top.n_nodes, dtype=np.int64)
        unallocated_freeable = np.zeros(n_leaves, dtype=np.int64)
        unprotected_in_pair = np.zeros(index.unprotected_in_pair.size, dtype=np.int64)
        node_unallocated_freeable = np.zeros(top.n_nodes, dtype=np.int64)
        weight = np.zeros(n_leaves)
        weighted_since = np.zeros(n_leaves)
        owner = np.full(index.gpu_owner.shape, -1, dtype=np.int64)
        for job_id, job in scheduler.running.items():
            allocation = state.allocations[job_id]
            slot = index.slot_of[job_id]
            whole = allocation.gpu_milli == MILLI_PER_GPU
            if whole and allocation.gpus.size:
                owner[allocation.nodes[:, None], allocation.gpus] = slot
            assert job.start_time is not None
            if job.evicting or (
                not job.unallocated and self.now < job.start_time + job.min_runtime
            ):
                continue
            leaves = leaf_of[allocation.nodes]
            np.add.at(freeable, leaves, allocation.gpus.shape[1] if whole else 1)
            np.add.at(node_freeable, allocation.nodes, allocation.gpus.shape[1] if whole else 1)
            if not job.unallocated:
                unprotected_in_pair[index.pair[slot]] += 1
            if job.unallocated:
                np.add.at(unallocated_freeable, leaves, allocation.gpus.shape[1] if whole else 1)
                np.add.at(
                    node_unallocated_freeable,
                    allocation.nodes,
                    allocation.gpus.shape[1] if whole else 1,
                )
            touched = np.unique(leaves)
            weight[touched] += job.gpus
            weighted_since[touched] += job.gpus * work_since(job)
        assert (index.gpu_owner == owner).all()
        assert (index.leaf_freeable == freeable).all()
        assert (index.node_freeable == node_freeable).all()
        assert (index.leaf_unallocated_freeable == unallocated_freeable).all()
        assert (index.unprotected_in_pair == unprotected_in_pair).all()
        assert (index.node_unallocated_freeable == node_unallocated_freeable).all()
        assert np.allclose(index.leaf_weight, weight, atol=1e-6)
        assert np.allclose(index.leaf_weighted_since, weighted_since, rtol=1e-9, atol=1e-3)

    @invariant()
    def running_gpus_are_charged_to_their_accounts(self) -> None:
        if not hasattr(self, "scheduler"):
            return
        held: dict[str, float] = {}
        for job in self.scheduler.running.values():
            if not job.unallocated:
                for account in (ROOT, *account_ancestors(job.spec.account)):
                    held[account] = held.get(account, 0.0) + job_gpus(job.spec)
        for account in (ROOT, *self.tree):
            assert math.isclose(
                self.scheduler.usage.running(account), held.get(account, 0.0), abs_tol=1e-9
            ), account

    @invariant()
    def usage_matches_the_runs(self) -> None:
        if not hasattr(self, "scheduler"):
            return
        for account in self.tree:
            tracked = self.scheduler.usage.usage(account, self.now)
            assert math.isclose(tracked, self.usage(account), rel_tol=REL, abs_tol=1e-6), account

    def check_queue_order(self) -> None:
        """queue_rows holds every pending job, in Fair Tree order, checked from first principles:

        allocated work (budgeted account, min_runtime > 0) before unallocated work; in it, the
        accounts running fewer allocated GPUs than their budget first; each account's jobs in
        one run; between two accounts of one group, the ancestors where their paths part have
        Level FS in non-increasing order (ties by name); inside an account, priority down, then
        submit time, then name.
        """
        rows = self.scheduler.queue_rows(self.now)
        jobs = self.scheduler.jobs
        pending = {name for name, job in jobs.items() if job.state is JobState.PENDING}
        assert [row.position for row in rows] == list(range(1, len(rows) + 1))
        assert {row.job for row in rows} == pending
        running: dict[str, float] = {}
        for job in jobs.values():
            if job.state is JobState.RUNNING and not job.unallocated and not job.evicting:
                running[job.spec.account] = running.get(job.spec.account, 0.0) + job.gpus
        tiers = []
        for row in rows:
            spec = jobs[row.job].spec
            allocated = spec.min_runtime != 0 and self.budgeted(spec.account)
            assert row.tier == ("allocated" if allocated else "unallocated"), row
            assert row.account == spec.account and row.priority == spec.priority
            budget = self.tree.effective_share(spec.account) * self.state.topology.n_gpus
            owed = allocated and running.get(spec.account, 0.0) < budget - 1e-9
            assert row.owed == owed, (row, running.get(spec.account), budget)
            tiers.append(0 if owed else 1 if allocated else 2)
        assert tiers == sorted(tiers)
        event(f"queue of {min(len(rows), 5)}+ rows, {len(set(r.account for r in rows))} accounts")
        for tier in (0, 1, 2):
            accounts = [str(r.account) for r, t in zip(rows, tiers, strict=True) if t == tier]
            runs = [a for i, a in enumerate(accounts) if i == 0 or accounts[i - 1] != a]
            assert len(runs) == len(set(runs)), f"an account's jobs are split: {runs}"
            if tier < 2:
                for first, second in zip(runs, runs[1:], strict=False):
                    self.check_accounts_in_order(first, second)
        for before, after in zip(rows, rows[1:], strict=False):
            if (before.account, before.tier) != (after.account, after.tier):
                continue
            key_before = self.job_key(str(before.job))
            key_after = self.job_key(str(after.job))
            assert key_before < key_after, (before, after)

    def job_key(self, name: str) -> tuple[int, float, str]:
        spec = self.scheduler.jobs[name].spec
        submitted = self.submitted[name] if spec.submit_time is None else spec.submit_time
        return (-spec.priority, submitted, name)

    def check_accounts_in_order(self, first: str, second: str) -> None:
        """`first` runs before `second`: compare them where their paths part, as Fair Tree does."""
        path_a, path_b = account_ancestors(first), account_ancestors(second)
        depth = next(i for i, (a, b) in enumerate(zip(path_a, path_b, strict=False)) if a != b)
        a, b = path_a[depth], path_b[depth]
        parent = self.tree.parent(a)
        siblings = self.tree.children(parent)
        shares_sum = sum(self.tree.share(s) for s in siblings)
        used = {s: self.usage(s) for s in siblings}
        used_sum = sum(used.values())
        fs_a = level_fs(self.tree.share(a), shares_sum, used[a], used_sum)
        fs_b = level_fs(self.tree.share(b), shares_sum, used[b], used_sum)
        if fs_a == fs_b:
            assert a.rpartition("/")[2] < b.rpartition("/")[2], (first, second, fs_a)
        elif not math.isclose(fs_a, fs_b, rel_tol=1e-6):
            assert fs_a > fs_b, (first, fs_a, second, fs_b)


TestSchedulerMachine = SchedulerMachine.TestCase
TestSchedulerMachine.settings = settings(
    max_examples=80,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
