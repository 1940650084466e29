"""Nodes joining a running service: the cluster model grows at once (no restart), running
jobs keep their nodes and GPUs, node health, usage and the queue carry over, a job that fits
only with the new nodes starts on them, an eviction under way goes on, and a restart on the
grown cluster finds everything again. The dry-run backend stands in for one that follows
nodes (as the Ray backend does)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import pytest
from service_helpers import CLUSTER, Clock, budgets, job, settle, small_cluster

from toposched.backends.dry_run import DryRunBackend
from toposched.backends.protocol import NodeChange, NodeWatcher, Report, ReportKind
from toposched.cluster.errors import InputError
from toposched.cluster.loaders import topology_from_dict
from toposched.cluster.state import Health
from toposched.cluster.topology import Topology
from toposched.scheduler.decisions import Evict
from toposched.service import commands
from toposched.service.commands import Submission
from toposched.service.core import ServiceCore
from toposched.service.documents import body_hash, split_job
from toposched.service.errors import NeverFits
from toposched.service.loop import Loop
from toposched.service.recovery import recover, starter
from toposched.service.regrow import regrow
from toposched.service.step import step
from toposched.service.store import Store

NODES = cast(list[dict[str, Any]], CLUSTER["nodes"])


def grown_cluster(*added: tuple[str, str]) -> Topology:
    """The service tests' cluster (racks r0: n0 n1, r1: n2 n3) with nodes (name, rack) added."""
    nodes = [*NODES, *({"name": n, "labels": {"rack": r}} for n, r in added)]
    return topology_from_dict({**CLUSTER, "nodes": nodes})


class FollowingBackend(DryRunBackend):
    """The dry-run backend, following nodes: the test says what joins and what changes."""

    def __init__(self) -> None:
        super().__init__()
        self.changes: list[NodeChange] = []
        self.grown: Topology | None = None

    def node_changes(self) -> Sequence[NodeChange]:
        changes, self.changes = self.changes, []
        return changes

    def grown_model(self) -> Topology | None:
        grown, self.grown = self.grown, None
        return grown


def submit(core: ServiceCore, document: dict[str, Any], now: float) -> None:
    """In the caller's transaction (the loop's, when the loop calls it)."""
    fields, run = split_job(document)
    commands.submit(core, Submission(fields, run, None, body_hash(document)), now)


def submit_now(core: ServiceCore, document: dict[str, Any], now: float) -> None:
    with core.store.transaction():
        submit(core, document, now)


def nodes_of(core: ServiceCore, job_id: str) -> list[str]:
    return core.allocation_nodes(core.record(job_id).allocation)


def test_a_joining_node_is_used_at_once_and_everything_carries_over(tmp_path: Path) -> None:
    clock = Clock()
    backend = FollowingBackend()
    assert isinstance(backend, NodeWatcher)
    store = Store(str(tmp_path / "s.db"))
    loop = Loop(starter(store, small_cluster(), budgets, backend), clock=clock, tick_s=0.05)
    loop.start()
    assert loop.ready.wait(30), loop.failed
    try:
        rack_job = job("r", pods=2, topology={"required": "rack"}, expected_runtime="2h")
        loop.call(lambda core, now: submit(core, {**rack_job, "name": "a"}, now))
        loop.call(lambda core, now: submit(core, {**rack_job, "name": "b"}, now))
        settle(loop)
        loop.call(lambda core, now: submit(core, job("c", gpus=2, resumable=True), now))
        loop.call(lambda core, now: commands.node_action(core, "n3", "cordon", now))
        wide = job("wide", pods=3, topology={"required": "rack"})
        with pytest.raises(NeverFits, match="the largest rack has 8"):
            loop.call(lambda core, now: submit(core, wide, now))
        settle(loop)
        before = loop.call(lambda core, now: {j: nodes_of(core, j) for j in ("a", "b")})
        assert sorted(before.values()) == [["n0", "n1"], ["n2", "n3"]]
        assert loop.call(lambda core, now: str(core.record("c").state)) == "pending"
        usage = loop.call(lambda core, now: core.scheduler.usage.usage("research", now))
        clock.now += 60

        # n4 joins rack r0, before n2 and n3 in the model's order: their numbers move.
        backend.grown = grown_cluster(("n4", "r0"))
        settle(loop)

        def view(core: ServiceCore, now: float) -> dict[str, Any]:
            state = core.scheduler.state
            return {
                "nodes": {j: nodes_of(core, j) for j in ("a", "b", "c")},
                "attempts": {j: core.record(j).attempt for j in ("a", "b", "c")},
                "n3": state.health[core.node_index("n3")],
                "n4": state.health[core.node_index("n4")],
                "usage": core.scheduler.usage.usage("research", now),
                "gpus": state.topology.n_gpus,
            }

        after = loop.call(view)
        assert {j: after["nodes"][j] for j in ("a", "b")} == before
        assert after["nodes"]["c"] == ["n4"]
        assert after["attempts"] == {"a": 1, "b": 1, "c": 1}
        assert (after["n3"], after["n4"]) == (Health.CORDONED, Health.HEALTHY)
        # The usage window went on: a minute of 16 GPUs more, nothing lost or counted twice.
        assert after["usage"] == pytest.approx(usage + 60 * 16)
        assert after["gpus"] == 20
        for name in ("a", "b"):
            launch = backend.launch(name)
            assert launch is not None and sorted({p.node for p in launch.pods}) == before[name]
        # A node that joined and dies is followed like the others.
        backend.changes = [NodeChange("n4", Health.DOWN, "lost")]
        settle(loop)
        assert loop.call(lambda core, now: str(core.record("c").state)) == "pending"
        backend.changes = [NodeChange("n4", Health.HEALTHY, "back")]
        settle(loop)
        assert loop.call(lambda core, now: nodes_of(core, "c")) == ["n4"]
        events = [(e.kind, e.data.get("node"), e.data.get("detail")) for e in store.events_after(0)]
        assert ("node", "n4", "joined the cluster") in events
        # The cluster's limits grew with it: three 4-GPU pods fit in r0 now.
        loop.call(lambda core, now: submit(core, wide, now))
    finally:
        loop.stop()
        store.close()

    # A restart on the grown cluster finds its store (the same cluster) and every job.
    again = Store(str(tmp_path / "s.db"))
    try:
        core = recover(again, grown_cluster(("n4", "r0")), budgets, DryRunBackend(), clock.now)
        assert {j: nodes_of(core, j) for j in ("a", "b")} == before
        assert nodes_of(core, "c") == ["n4"]
        assert core.scheduler.state.health[core.node_index("n3")] == Health.CORDONED
    finally:
        again.close()
    refused = Store(str(tmp_path / "s.db"))
    with pytest.raises(InputError, match="another cluster"):
        recover(refused, small_cluster(), budgets, DryRunBackend(), 0.0)
    refused.close()


def test_an_eviction_under_way_goes_on_in_the_grown_model(tmp_path: Path) -> None:
    """A preemptor waiting for its victims keeps the nodes kept for it; the victims stay
    on their way out and are not chosen again."""
    store = Store(str(tmp_path / "s.db"))
    backend = DryRunBackend()
    now = 1_800_000_000.0
    core = recover(store, small_cluster(), budgets, backend, now)
    scratch: dict[str, Any] = {"account": "prod", "min_runtime": "0s", "expected_runtime": "10h"}
    for name in ("s0", "s1", "s2", "s3"):
        submit_now(core, job(name, **scratch), now)
    with store.transaction():
        step(core, [], now, True)
    submit_now(core, job("urgent", pods=2, topology={"required": "rack"}), now)
    with store.transaction():
        result = step(core, [], now, True)
    assert result is not None
    victims = sorted(d.job_id for d in result.decisions if isinstance(d, Evict))
    assert len(victims) == 2
    kept = sorted(core.scheduler.state.topology.node_names[n] for n in _nomination(core))
    stays = sorted(set(core.scheduler.running) - set(victims))[0]  # running, not evicted
    with store.transaction():
        step(core, [Report(stays, 1, ReportKind.CHECKPOINTED, now - 5)], now, False)

    with store.transaction():
        regrow(core, grown_cluster(("n1a", "r0")), now)
        result = step(core, [], now, True)
    assert result is not None and result.decisions == []
    scheduler = core.scheduler
    assert [scheduler.jobs[v].evicting for v in victims] == [True, True]
    assert sorted(scheduler.state.topology.node_names[n] for n in _nomination(core)) == kept
    assert str(core.record("urgent").state) == "pending"
    assert [len(scheduler.jobs[v].evictions) for v in victims] == [1, 1]
    assert scheduler.jobs[stays].last_checkpoint == now - 5
    core.send_outbox()
    with store.transaction():
        step(core, list(backend.poll(now + 1)), now + 1, True)
    assert sorted(nodes_of(core, "urgent")) == kept
    store.close()


def _nomination(core: ServiceCore) -> list[int]:
    nomination = core.scheduler.jobs["urgent"].nomination
    assert nomination is not None
    return [int(n) for n in nomination.nodes.tolist()]


def test_a_model_without_a_node_of_the_current_one_is_refused(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    core = recover(store, small_cluster(), budgets, DryRunBackend(), 0.0)
    fewer = topology_from_dict({**CLUSTER, "nodes": NODES[:3]})
    moved = topology_from_dict(
        {**CLUSTER, "nodes": [*NODES[:3], {"name": "n3", "labels": {"rack": "r9"}}]}
    )
    scheduler = core.scheduler
    with store.transaction():
        with pytest.raises(InputError, match="n3.*no node of that name"):
            regrow(core, fewer, 0.0)
        with pytest.raises(InputError, match="must keep its place"):
            regrow(core, moved, 0.0)
    assert core.scheduler is scheduler
    store.close()


def test_a_restart_on_a_cluster_that_grew_while_the_service_was_stopped(tmp_path: Path) -> None:
    """A backend that follows nodes (Ray) may find nodes that joined while the service was
    stopped: the stored allocations are renumbered. A fixed cluster that differs is refused."""
    path = str(tmp_path / "s.db")
    store = Store(path)
    now = 1_800_000_000.0
    core = recover(store, small_cluster(), budgets, FollowingBackend(), now)
    for name in ("a", "b"):
        submit_now(core, job(name, pods=2, topology={"required": "rack"}), now)
    with store.transaction():
        step(core, [], now, True)
    before = {j: nodes_of(core, j) for j in ("a", "b")}
    store.close()
    grown = grown_cluster(("n1a", "r0"))
    refused = Store(path)
    with pytest.raises(InputError, match="another cluster"):
        recover(refused, grown, budgets, DryRunBackend(), now)
    refused.close()
    for attempt in range(2):  # the second restart finds the grown cluster stored
        again = Store(path)
        core = recover(again, grown, budgets, FollowingBackend(), now + 1 + attempt)
        assert {j: nodes_of(core, j) for j in ("a", "b")} == before
        assert str(core.record("a").state) == "running"
        again.close()
