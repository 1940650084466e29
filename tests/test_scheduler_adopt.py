"""Adopting the running jobs of a restart at once (`Scheduler.adopt_many`) gives the scheduler
that adopting them one by one (`Scheduler.adopt`) gives: same jobs, holdings, protection,
usage and ledger, and the same decisions afterwards."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation, ClusterState
from toposched.jobs.spec import JobSpec
from toposched.policy.budget import BudgetTree
from toposched.scheduler.adoptions import Adoption
from toposched.scheduler.core import Scheduler
from toposched.scheduler.decisions import Bind, Evict
from toposched.scheduler.preemptible import PreemptibleIndex

HOUR = 3600.0
ROWS = (
    *("ids", "gpus", "since", "protected_until", "whole", "pods", "cpu_milli", "memory_mib"),
    *("account", "priority", "pair", "unallocated", "evicting", "counted"),
)
AGGREGATES = (
    *("leaf_freeable", "node_freeable", "leaf_unallocated_freeable", "leaf_weight"),
    *("node_unallocated_freeable", "leaf_weighted_since", "unprotected_in_pair"),
)
SUMS_OF_FRACTIONS = ("leaf_weight", "leaf_weighted_since")
TREE = {"accounts": {"team-a": 50, "team-b": 30, "scratch": 0}}


def cluster() -> ClusterState:
    """4 racks x 4 nodes x 4 GPUs = 64 GPUs."""
    return ClusterState(nvl72_cluster(1, 1, 4, nodes_per_rack=4))


def scheduler(cap: bool = True) -> Scheduler:
    # A cap on the protection of borrowed work, so that adoption order matters; without one,
    # the jobs are marked started and charged together.
    cap_s = HOUR if cap else None
    return Scheduler(cluster(), BudgetTree.from_dict(TREE), borrowed_min_runtime=cap_s)


def spec(name: str, account: str, pods: int, gpus: int, **fields: Any) -> JobSpec:
    data = {"name": name, "account": account, "pods": pods, "resources_per_pod": {"gpus": gpus}}
    return JobSpec.from_dict({**data, **fields})


def running_jobs(shared: bool = False) -> list[Adoption]:
    """Jobs placed by a real cycle, then taken as running since various times; with `shared`,
    some hold a share of one GPU (usage then counts fractions of GPUs)."""
    placer = scheduler()
    rng = np.random.default_rng(7)
    specs = []
    shapes = [(1, 1), (1, 2), (1, 4), (2, 4)]
    for index in range(24):
        account = ("team-a", "team-b", "scratch")[index % 3]
        runtime = ("0s", "2h", "12h")[int(rng.integers(3))]
        pods, gpus = shapes[int(rng.integers(4))]
        if shared and index % 4 == 1:
            resources = {"resources_per_pod": {"gpus": 1, "gpu_milli": 300}}
            specs.append(spec(f"j{index}", account, 1, 1, min_runtime=runtime, **resources))
        else:
            specs.append(spec(f"j{index}", account, pods, gpus, min_runtime=runtime))
        placer.submit(specs[-1], 0.0)
    bound = {d.job_id: d.allocation for d in placer.cycle(0.0).bound}
    assert len(bound) >= 12
    return [
        Adoption(s, bound[s.name], start_time=float(rng.uniform(0, 3 * HOUR)))
        for s in specs
        if s.name in bound
    ]


@pytest.mark.parametrize(("cap", "shared"), [(True, False), (False, False), (False, True)])
def test_adopting_at_once_equals_adopting_one_by_one(cap: bool, shared: bool) -> None:
    adoptions = running_jobs(shared)
    now = 3 * HOUR
    one_by_one, at_once = scheduler(cap), scheduler(cap)
    for adoption in adoptions:
        one_by_one.adopt(adoption.spec, adoption.allocation, adoption.start_time, now)
    adopted = at_once.adopt_many(adoptions, now)

    assert [job.job_id for job in adopted] == [a.spec.name for a in adoptions]
    fields = (
        "state",
        "start_time",
        "attempts",
        "reason",
        "reason_code",
        "unallocated",
        "min_runtime",
        "history",
        "submit_time",
    )
    for job_id, job in one_by_one.jobs.items():
        other = at_once.jobs[job_id]
        assert {f: getattr(job, f) for f in fields} == {f: getattr(other, f) for f in fields}
    assert any(job.unallocated for job in adopted)
    assert len({job.min_runtime for job in adopted}) > 1
    assert list(one_by_one.running) == list(at_once.running)
    views = [
        {name: target.ledger.views[name] for name in target.running}
        for target in (one_by_one, at_once)
    ]
    assert views[0] == views[1]
    assert len(one_by_one.queue) == len(at_once.queue) == 0
    assert one_by_one.state.allocations.keys() == at_once.state.allocations.keys()
    assert one_by_one.state.total_free_gpus == at_once.state.total_free_gpus
    for account in ("", "team-a", "team-b", "scratch"):
        later = now + HOUR
        assert one_by_one.usage.running(account) == at_once.usage.running(account)
        assert one_by_one.usage.usage(account, later) == at_once.usage.usage(account, later)
    if shared:
        assert any(not job.gpus.is_integer() for job in adopted)
    for time in (now, now + HOUR / 2, now + 2 * HOUR, now + 13 * HOUR):
        for adoption in adoptions:
            name = adoption.spec.name
            assert one_by_one.is_protected(name, time) == at_once.is_protected(name, time)
    assert_same_index(one_by_one.ledger.preemptible, at_once.ledger.preemptible, now)

    # The same decisions afterwards: a wide gang that must preempt, and small jobs.
    later = now + 2 * HOUR
    for target in (one_by_one, at_once):
        target.submit(spec("wide", "team-b", 4, 4, min_runtime="1h"), later)
        target.submit(spec("small", "team-a", 1, 1), later)

    def decisions(target: Scheduler) -> list[tuple[str, str]]:
        out = []
        for decision in target.cycle(later).decisions:
            if isinstance(decision, Bind):
                out.append(("bind", f"{decision.job_id} {decision.allocation.nodes.tolist()}"))
            elif isinstance(decision, Evict):
                out.append(("evict", f"{decision.job_id} for {decision.preemptor}"))
        return out

    assert decisions(one_by_one) == decisions(at_once)


def assert_same_index(one: PreemptibleIndex, other: PreemptibleIndex, now: float) -> None:
    """The same rows, owners and per-domain aggregates, before and after protections end."""
    assert one.slot_of == other.slot_of
    assert (one.accounts, one.pairs) == (other.accounts, other.pairs)
    assert np.array_equal(one.gpu_owner, other.gpu_owner)
    for time in (now, now + 13 * HOUR):
        one.refresh(time)
        other.refresh(time)
        for name in (*ROWS, *AGGREGATES):
            if name in SUMS_OF_FRACTIONS:
                # `adopt` counts a job from `now`, takes it out and counts it again from its
                # start: with fractions of GPUs, that leaves a rounding residue of the order
                # of one unit in the last place, which adopting at once does not have.
                assert np.allclose(getattr(one, name), getattr(other, name), rtol=1e-12), name
            else:
                assert np.array_equal(getattr(one, name), getattr(other, name)), name


def test_adopting_at_once_counts_what_the_first_searches_read() -> None:
    """A restart's adoption counts, once, what the first reservation search and preemption
    would: where every job holds GPUs, in release order, and every job whose protection has
    ended (unallocated work, and allocated jobs past their min runtime) as preemptible."""
    now = 3 * HOUR
    target = scheduler(cap=False)
    target.adopt_many(running_jobs(), now)
    order = target.ledger.release_order
    assert order.pairs.missing(order.slots()).size == 0
    index = target.ledger.preemptible
    ended = {
        job.job_id: job.unallocated or job.start_time + job.min_runtime <= now
        for job in target.running.values()
        if job.start_time is not None
    }
    assert len(ended) == len(target.running) and len(set(ended.values())) == 2
    assert {job_id: bool(index.counted[index.slot_of[job_id]]) for job_id in ended} == ended


def test_adopting_a_name_already_live_is_refused() -> None:
    adoptions = running_jobs()[:2]
    target = scheduler()
    with pytest.raises(InputError, match="already running"):
        target.adopt_many([adoptions[0], adoptions[0]], 3 * HOUR)


def test_copies_of_one_document_are_checked_for_their_own_account() -> None:
    """Jobs copied from one stored document share its request, not its account: each
    account is checked (once per account), so a copy charging an unknown one is refused."""
    first = running_jobs()[0]
    copy = first.spec.model_copy(update={"name": "copy", "account": "nope"})
    assert copy.resources_per_pod is first.spec.resources_per_pod
    target = scheduler(cap=False)
    with pytest.raises(InputError, match="nope.*names no account"):
        target.adopt_many([first, Adoption(copy, first.allocation, 0.0)], 3 * HOUR)


def pending_specs() -> list[JobSpec]:
    """Pending jobs as a restart reads them: copies of a few stored documents (sharing their
    resources and topology), under their own names, accounts and submit times."""
    shapes = [
        spec("shape-0", "team-a", 1, 1),
        spec("shape-1", "team-b", 2, 4, topology={"required": "rack"}),
        spec("shape-2", "scratch", 1, 2, min_runtime="0s"),
        spec("shape-3", "team-a", 4, 4, min_runtime="1h"),
    ]
    specs = []
    for index in range(40):
        shape = shapes[index % len(shapes)]
        account = ("team-a", "team-b", "scratch")[index % 3]
        copy = shape.with_name_and_time(f"p{index}", float(40 - index))
        specs.append(copy.model_copy(update={"account": account}) if index % 5 == 0 else copy)
    return specs


def test_queueing_at_once_equals_submitting_one_by_one() -> None:
    adoptions = running_jobs()
    now = 3 * HOUR
    one_by_one, at_once = scheduler(), scheduler()
    specs = pending_specs()
    for target in (one_by_one, at_once):
        target.adopt_many(adoptions, now)
    for pending in specs:
        one_by_one.submit(pending, now)
    queued = at_once.submit_many(specs, now)

    assert [job.job_id for job in queued] == [s.name for s in specs]
    fields = ("state", "submit_time", "reason", "reason_code", "history")
    for pending in specs:
        job, other = one_by_one.jobs[pending.name], at_once.jobs[pending.name]
        assert {f: getattr(job, f) for f in fields} == {f: getattr(other, f) for f in fields}
        assert job.request == other.request
        assert other.request.name == pending.name
    assert len(one_by_one.queue) == len(at_once.queue) == len(specs)
    assert one_by_one.incremental.submitted == at_once.incremental.submitted

    def decisions(target: Scheduler, time: float) -> list[str]:
        return [repr(decision) for decision in target.cycle(time).decisions]

    for time in (now, now + HOUR, now + 13 * HOUR):
        assert decisions(one_by_one, time) == decisions(at_once, time)


def test_queueing_a_name_already_live_is_refused() -> None:
    specs = pending_specs()
    target = scheduler()
    with pytest.raises(InputError, match="already pending"):
        target.submit_many([specs[0], specs[4], specs[0]], 0.0)
    # The jobs before the refused one are queued, as submitting one by one leaves them.
    assert [entry for entry in target.jobs] == [specs[0].name, specs[4].name]
    assert len(target.queue) == 2


def test_many_adopted_at_once_keep_the_ledger_order_one_by_one_gives() -> None:
    """A restart's thousands of jobs: the ledger's records in the order adopting them one by
    one gives, jobs of one start time and runtime (ties in the records' times) by name."""
    topology = nvl72_cluster(1, 1, 20, nodes_per_rack=18)  # 1,440 GPUs
    rng = np.random.default_rng(3)
    shapes = [spec("shape-a", "team-a", 1, 1, min_runtime="2h", expected_runtime="6h")]
    shapes.append(spec("shape-b", "scratch", 1, 1, min_runtime="0s"))
    adoptions = []
    for index in range(1_300):
        node, gpu = divmod(index, 4)
        start = float(rng.choice([0.0, 600.0, 1_200.0]))  # many ties
        name = f"r{(index * 7919) % 1_300}"  # names out of their start order
        copy = shapes[index % 2].with_name_and_time(name, 0.0)
        adoptions.append(Adoption(copy, Allocation.of([node], [[gpu]]), start))
    now = HOUR
    tree = BudgetTree.from_dict(TREE)
    one_by_one = Scheduler(ClusterState(topology), tree)
    at_once = Scheduler(ClusterState(topology), BudgetTree.from_dict(TREE))
    for adoption in adoptions:
        one_by_one.adopt(adoption.spec, adoption.allocation, adoption.start_time, now)
    at_once.adopt_many(adoptions, now)
    assert len(at_once.ledger.releases) == len(adoptions)
    assert list(one_by_one.ledger.releases) == list(at_once.ledger.releases)
    assert list(one_by_one.ledger.protection) == list(at_once.ledger.protection)
    assert len(at_once.ledger.protection) == len(adoptions) // 2
