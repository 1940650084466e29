"""The Ray backend on a real Ray cluster of three nodes on this machine (see ray_cluster.py):
the cluster model from node labels, gangs landing on the chosen nodes, stops with a grace
period and the job's stop hook, gang failure, a node lost, adoption after the service's
process was killed, and `toposched serve` using a node that joins after it started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from ray_cluster import RACKS, ray_cluster  # noqa: F401  (the module fixture)
from service_helpers import job as job_document
from service_helpers import serving

from toposched.backends.protocol import (
    Launch,
    PodLaunch,
    Report,
    ReportKind,
    RunSpec,
    Stop,
)
from toposched.backends.ray_local import LocalRayCluster
from toposched.cluster.errors import InputError
from toposched.cluster.state import ClusterState, Health
from toposched.cluster.topology import Topology
from toposched.jobs.spec import JobSpec
from toposched.payload import entry_point_command
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import Scheduler
from toposched.scheduler.decisions import Bind, Evict

ray = pytest.importorskip("ray")

from toposched.backends.ray_backend import RayBackend, group_name  # noqa: E402
from toposched.backends.ray_discovery import RayCluster, discover_nodes  # noqa: E402
from toposched.backends.ray_setup import connect_backend  # noqa: E402

TESTS = Path(__file__).parent
TIMEOUT = 60.0
LIVE = ("pending", "running")
FINAL = {ReportKind.FINISHED, ReportKind.FAILED, ReportKind.EVICTED, ReportKind.STOPPED}


def job(function: str, *args: str, **env: str) -> RunSpec:
    """A run of `ray_jobs:function` from this folder."""
    return RunSpec(entry_point_command(f"ray_jobs:{function}", args), env=env, workdir=str(TESTS))


class Watch:
    """Polls a backend and keeps every report by job, so waiting on one job loses no report
    of another."""

    def __init__(self, backend: RayBackend) -> None:
        self.backend = backend
        self.reports: dict[str, list[Report]] = {}

    def until(
        self, job_id: str, done: Callable[[list[Report]], bool], timeout: float = TIMEOUT
    ) -> list[Report]:
        """Every report about `job_id` so far, once `done` holds of them."""
        deadline = time.monotonic() + timeout
        while True:
            for report in self.backend.poll(time.time()):
                self.reports.setdefault(report.job_id, []).append(report)
            reports = self.reports.get(job_id, [])
            if done(reports):
                return reports
            if time.monotonic() > deadline:
                raise AssertionError(f"{job_id} not done in {timeout} s: {reports}")
            time.sleep(0.05)

    def started(self, job_id: str) -> list[Report]:
        return self.until(job_id, lambda rs: any(r.kind is ReportKind.STARTED for r in rs))

    def final(self, job_id: str) -> list[Report]:
        return self.until(job_id, lambda rs: bool(rs) and rs[-1].kind in FINAL)


def session_nodes() -> list[dict[str, object]]:
    """Ray's records of the session's three nodes (a test may have added and removed more)."""
    return [record for record in ray.nodes() if record["Labels"].get("name") in RACKS]


def step_of(report: Report) -> int:
    """The step a checkpoint report names ("rank 1: step 12"), else -1."""
    words = report.detail.split()
    return (
        int(words[-1])
        if report.kind is ReportKind.CHECKPOINTED and words[-2:-1] == ["step"]
        else -1
    )


def live_groups() -> list[str]:
    from ray.util.placement_group import placement_group_table

    return [info["name"] for info in placement_group_table().values() if info["state"] != "REMOVED"]


@pytest.fixture
def backend(ray_cluster: LocalRayCluster) -> Iterator[RayBackend]:  # noqa: F811
    """A backend on the session's cluster; whatever it still runs is stopped after the test."""
    cluster = RayCluster(["rack"], min_interval_s=0.0)
    cluster.discover()
    backend = RayBackend(cluster, gang_grace_s=1.0, watch_s=1.0)
    yield backend
    for run in backend.running():
        backend.stop(Stop(run.job_id, run.attempt, 0.0, evicted=False))
    deadline = time.monotonic() + TIMEOUT
    while backend.running() and time.monotonic() < deadline:
        backend.poll(time.time())
        time.sleep(0.05)
    assert not backend.running(), "gangs outlived the test"


def test_cluster_model_from_node_labels(ray_cluster: LocalRayCluster) -> None:  # noqa: F811
    found = RayCluster(["rack"]).discover()
    topology = found.topology
    assert list(topology.node_names) == ["n1", "n2", "n3"]
    assert {name: topology.node_path(i)["rack"] for i, name in enumerate(topology.node_names)} == (
        RACKS
    )
    assert topology.gpu_count.tolist() == [4, 4, 4]
    assert topology.cpu_milli.tolist() == [1000, 1000, 1000]
    assert found.skipped == ()
    # A level the nodes have no label for keeps a node out, by name; none left is an error.
    records = session_nodes()
    for record in records:
        if record["Labels"].get("name") == "n3":
            record["Labels"].pop("rack")
    partial = discover_nodes(records, ["rack"])
    assert list(partial.topology.node_names) == ["n1", "n2"]
    assert [(s.name, "'rack'" in s.reason) for s in partial.skipped] == [("n3", True)]
    with pytest.raises(InputError, match="no node can be used.*n1: has no 'zone' label"):
        discover_nodes(session_nodes(), ["zone", "rack"])


def test_node_health_follows_the_ray_nodes(ray_cluster: LocalRayCluster) -> None:  # noqa: F811
    """Ray's node records as they would read when n2 dies, then comes back with a new id; and
    a node dead when toposched starts is in the model, down."""
    records = session_nodes()
    cluster = RayCluster(["rack"], min_interval_s=0.0, read_nodes=lambda: records)
    cluster.discover()
    assert cluster.changes() == []
    n2 = next(r for r in records if r["Labels"]["name"] == "n2")
    n2["Alive"], n2["DeathReasonMessage"] = False, "health check failed"
    assert [(c.node, c.health, c.detail) for c in cluster.changes()] == [
        ("n2", Health.DOWN, "health check failed")
    ]
    assert cluster.changes() == []
    records.append({**n2, "NodeID": "f" * 56, "Alive": True})
    assert [(c.node, c.health) for c in cluster.changes()] == [("n2", Health.HEALTHY)]
    node = cluster.node("n2")
    assert node is not None and node.node_id == "f" * 56
    records = [{**r, "Alive": r["Labels"]["name"] != "n3"} for r in session_nodes()]
    restarted = RayCluster(["rack"], read_nodes=lambda: records)
    assert list(restarted.discover().topology.node_names) == ["n1", "n2", "n3"]
    assert [(c.node, c.health) for c in restarted.changes()] == [("n3", Health.DOWN)]


def test_gang_lands_on_the_chosen_nodes(
    backend: RayBackend,
    ray_cluster: LocalRayCluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    pods = (PodLaunch(0, "n3", (1, 2)), PodLaunch(1, "n2", (0,)), PodLaunch(2, "n3", (3,)))
    launch = Launch("lands", 1, pods, job("report_place", str(tmp_path), GREETING="hello"))
    backend.start(launch)
    backend.start(launch)  # Carried out twice (as after a restart): one gang.
    reports = Watch(backend).final("lands")
    assert [r.kind for r in reports] == [ReportKind.STARTED, ReportKind.FINISHED]
    places = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in range(3)]
    for place, spec in zip(places, pods, strict=True):
        assert place["node_group"] == ray_cluster.nodes[spec.node].process.pid
        assert place["node"] == spec.node
        assert place["gpus"] == list(spec.gpus)
        assert place["cuda_visible_devices"] == ",".join(map(str, spec.gpus))
        assert place["world_size"] == 3
        assert place["peers"] == ["n3", "n2", "n3"]
        assert place["peer_addresses"] == ["127.0.0.2"] * 3
        assert place["master_addr"] == "127.0.0.2"
        assert place["greeting"] == "hello"
        assert place["cwd"] == str(TESTS)
    assert len({place["master_port"] for place in places}) == 1
    assert group_name("lands", 1) not in live_groups()


def test_eviction_honours_the_grace_period_and_calls_the_stop_hook(backend: RayBackend) -> None:
    backend.start(Launch("victim", 1, (PodLaunch(0, "n1", (0, 1)),), job("hold", "600")))
    backend.start(Launch("stubborn", 1, (PodLaunch(0, "n1", (2, 3)),), job("stubborn", "600")))
    watch = Watch(backend)
    for job_id in ("victim", "stubborn"):
        watch.until(job_id, lambda rs: any(r.detail == "rank 0: ready" for r in rs))
    backend.stop(Stop("victim", 1, grace_s=30.0, evicted=True))
    stopped = time.monotonic()
    backend.stop(Stop("stubborn", 1, grace_s=1.0, evicted=True))
    reports = watch.final("victim")
    assert [(r.kind, r.detail) for r in reports] == [
        (ReportKind.STARTED, ""),
        (ReportKind.CHECKPOINTED, "rank 0: ready"),
        (ReportKind.CHECKPOINTED, "rank 0: saved at stop"),
        (ReportKind.EVICTED, "ended within the grace period"),
    ]
    assert time.monotonic() - stopped < 10
    reports = watch.final("stubborn")
    assert (reports[-1].kind, reports[-1].detail) == (
        ReportKind.EVICTED,
        "killed after the grace period of 1 s",
    )
    assert time.monotonic() - stopped >= 1.0
    # Evicted means the GPUs are free: a gang needing all four of n1's starts.
    whole = Launch("after", 1, (PodLaunch(0, "n1", (0, 1, 2, 3)),), job("hold", "0"))
    backend.start(whole)
    assert watch.final("after")[-1].kind is ReportKind.FINISHED


def test_gang_fails_as_a_whole(backend: RayBackend) -> None:
    pods = (PodLaunch(0, "n1", (0,)), PodLaunch(1, "n2", (0,)), PodLaunch(2, "n3", (0,)))
    backend.start(Launch("gang", 1, pods, job("fail_rank", "1", "3")))
    reports = Watch(backend).final("gang")
    assert [(r.kind, r.detail) for r in reports] == [
        (ReportKind.STARTED, ""),
        (ReportKind.FAILED, "pod 1 exited with status 3"),
    ]
    assert group_name("gang", 1) not in live_groups()


def test_launches_that_cannot_run_fail(backend: RayBackend) -> None:
    backend.start(Launch("nowhere", 1, (PodLaunch(0, "n9", (0,)),), job("hold", "1")))
    backend.start(Launch("nothing", 1, (PodLaunch(0, "n1", (0,)),), None))
    backend.start(Launch("typo", 1, (PodLaunch(0, "n1", (0,)),), job("no_such_function")))
    watch = Watch(backend)
    assert watch.final("nowhere")[-1].detail == "pod 0: node 'n9' is not a live Ray node"
    assert "no run command" in watch.final("nothing")[-1].detail
    assert watch.final("typo")[-1].detail == "pod 0 exited with status 2"
    with pytest.raises(InputError, match="must be MODULE:FUNCTION"):
        entry_point_command("not an entry point")


def test_allreduce_resumes_from_its_checkpoint_after_preemption(
    backend: RayBackend, tmp_path: Path
) -> None:
    pods = (PodLaunch(0, "n1", (0,)), PodLaunch(1, "n2", (0,)), PodLaunch(2, "n3", (0,)))
    run = job("allreduce", "60", str(tmp_path), "0.1")
    backend.start(Launch("ring", 1, pods, run))
    watch = Watch(backend)
    watch.until("ring", lambda rs: any(step_of(r) >= 3 for r in rs))
    backend.stop(Stop("ring", 1, grace_s=10.0, evicted=True))
    reports = watch.final("ring")
    assert reports[-1].kind is ReportKind.EVICTED
    assert any(r.detail.startswith("rank") and "stopping after step" in r.detail for r in reports)
    watch.reports.clear()
    assert not list(tmp_path.glob("done-*"))
    backend.start(Launch("ring", 2, pods, run))
    assert watch.final("ring")[-1].kind is ReportKind.FINISHED
    outcomes = [json.loads((tmp_path / f"done-{rank}.json").read_text()) for rank in range(3)]
    expected = sum((1 + 2 + 3) * (step + 1) for step in range(60))
    assert [o["total"] for o in outcomes] == [expected] * 3
    assert {o["attempt"] for o in outcomes} == {2}
    assert len({o["resumed_from"] for o in outcomes}) == 1 and outcomes[0]["resumed_from"] >= 3


def test_a_lost_node_is_reported_down_and_fails_its_gang(
    ray_cluster: LocalRayCluster,  # noqa: F811
) -> None:
    ray_cluster.add_node("n4", {"rack": "r2"})
    cluster = RayCluster(["rack"], min_interval_s=0.0)
    assert "n4" in list(cluster.discover().topology.node_names)
    backend = RayBackend(cluster, gang_grace_s=1.0, watch_s=1.0)
    pods = (PodLaunch(0, "n3", (0,)), PodLaunch(1, "n4", (0,)))
    backend.start(Launch("doomed", 1, pods, job("hold", "600")))
    watch = Watch(backend)
    watch.started("doomed")
    ray_cluster.kill_node("n4")
    reports = watch.final("doomed")
    assert reports[-1].kind is ReportKind.FAILED
    assert reports[-1].detail.startswith("pod 1: its Ray actor died")
    deadline = time.monotonic() + TIMEOUT
    changes = list(backend.node_changes())
    while not changes and time.monotonic() < deadline:
        time.sleep(0.2)
        changes = list(backend.node_changes())
    assert [(c.node, c.health) for c in changes] == [("n4", Health.DOWN)]
    assert group_name("doomed", 1) not in live_groups()


DRIVER = """
import sys, time
from toposched.backends.protocol import Launch, PodLaunch, ReportKind, RunSpec
from toposched.backends.ray_setup import connect_backend
from toposched.payload import entry_point_command
backend = connect_backend(sys.argv[1], ["rack"]).backend
run = RunSpec(entry_point_command("ray_jobs:hold", ["600"]), workdir=sys.argv[2])
backend.start(Launch("survivor", 1, (PodLaunch(0, "n1", (0,)), PodLaunch(1, "n3", (1,))), run))
while not any(r.kind is ReportKind.STARTED for r in backend.poll(time.time())):
    time.sleep(0.05)
print("started", flush=True)
time.sleep(600)
"""


def test_a_restarted_service_adopts_what_ray_still_runs(
    ray_cluster: LocalRayCluster,  # noqa: F811
    backend: RayBackend,
) -> None:
    service = subprocess.Popen(
        [sys.executable, "-c", DRIVER, ray_cluster.address, str(TESTS)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )
    try:
        assert service.stdout is not None and service.stdout.readline() == "started\n"
    finally:
        service.send_signal(signal.SIGKILL)
        service.wait()
    restarted = RayBackend(backend.cluster, watch_s=1.0)
    assert [(r.job_id, r.attempt) for r in restarted.running()] == [("survivor", 1)]
    # The stored decision carried out again starts nothing new.
    run = RunSpec(entry_point_command("ray_jobs:hold", ["600"]), workdir=str(TESTS))
    restarted.start(
        Launch("survivor", 1, (PodLaunch(0, "n1", (0,)), PodLaunch(1, "n3", (1,))), run)
    )
    assert live_groups().count(group_name("survivor", 1)) == 1
    time.sleep(1.5)
    assert {r.kind for r in restarted.poll(time.time())} <= {ReportKind.CHECKPOINTED}
    # The store knows nothing of it: an orphan, stopped on request.
    assert [(r.job_id, r.attempt) for r in restarted.stop_orphans(known=set())] == [("survivor", 1)]
    assert Watch(restarted).final("survivor")[-1].kind is ReportKind.STOPPED
    assert group_name("survivor", 1) not in live_groups()
    assert restarted.running() == []


def wait_until(check: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def node_health(client: httpx.Client) -> dict[str, str]:
    """Each node the service lists, and its health."""
    rows = client.get("/v1/nodes", params={"limit": 1000}).json()["nodes"]
    return {row["name"]: row["health"] for row in rows}


def launch_of(bind: Bind, topology: Topology, attempt: int, run: RunSpec) -> Launch:
    """The backend's launch for the scheduler's Bind: each pod's node by name, its GPUs."""
    allocation = bind.allocation
    pods = tuple(
        PodLaunch(
            rank,
            topology.node_names[int(allocation.nodes[rank])],
            tuple(int(g) for g in allocation.gpus[rank]),
        )
        for rank in range(allocation.pods)
    )
    return Launch(bind.job_id, attempt, pods, run)


def test_the_scheduler_preempts_work_on_ray_within_the_required_rack(
    ray_cluster: LocalRayCluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The scheduler decides, the backend carries out: unallocated work fills rack r1, a
    budgeted job that needs a whole rack evicts it (its stop hook runs within the grace
    period), and lands on r1's nodes once Ray has the GPUs back."""
    setup = connect_backend(ray_cluster.address, ["rack"])
    backend, topology = setup.backend, setup.topology
    watch = Watch(backend)
    tree = BudgetTree.from_dict({"accounts": {"team-a": 100, "scratch": 0}})
    scheduler = Scheduler(ClusterState(topology), tree)
    for change in backend.node_changes():  # Nodes an earlier test removed.
        scheduler.set_health([topology.node_index(change.node)], change.health, time.time())

    def gang(name: str, account: str, **fields: object) -> JobSpec:
        document = {"name": name, "account": account, "pods": 2, "resources_per_pod": {"gpus": 4}}
        return JobSpec.from_dict({**document, "topology": {"required": "rack"}, **fields})

    scheduler.submit(gang("scratch-job", "scratch", grace_period="20s"), time.time())
    (bind,) = scheduler.cycle(time.time()).bound
    backend.start(launch_of(bind, topology, 1, job("hold", "600")))
    watch.until("scratch-job", lambda rs: any(r.detail.endswith("ready") for r in rs))
    scheduler.submit(gang("rack-job", "team-a"), time.time())
    (evict,) = [d for d in scheduler.cycle(time.time()).decisions if isinstance(d, Evict)]
    assert (evict.job_id, evict.preemptor, evict.grace_s) == ("scratch-job", "rack-job", 20.0)
    stopped = time.monotonic()
    backend.stop(Stop(evict.job_id, 1, evict.grace_s, evicted=True))
    reports = watch.final("scratch-job")
    assert reports[-1].kind is ReportKind.EVICTED and time.monotonic() - stopped < 20
    assert any(r.detail.endswith("saved at stop") for r in reports)
    scheduler.evicted("scratch-job", time.time())
    (bind,) = scheduler.cycle(time.time()).bound
    assert bind.job_id == "rack-job"
    backend.start(launch_of(bind, topology, 1, job("report_place", str(tmp_path))))
    assert watch.final("rack-job")[-1].kind is ReportKind.FINISHED
    places = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in range(2)]
    assert sorted(place["node"] for place in places) == ["n1", "n2"]
    assert {place["node_group"] for place in places} == {
        ray_cluster.nodes[name].process.pid for name in ("n1", "n2")
    }


def test_labelled_nodes_that_join_grow_the_model_and_others_are_kept_out(
    ray_cluster: LocalRayCluster,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Ray's node records as they would read when nodes join: a labelled one grows the model
    (once), one without the level's label is reported once and kept out, and a node that
    joined dies and comes back like the others."""
    records = session_nodes()
    cluster = RayCluster(["rack"], min_interval_s=0.0, read_nodes=lambda: records)
    cluster.discover()
    assert cluster.changes() == [] and cluster.grown() is None
    n3 = next(r for r in records if r["Labels"]["name"] == "n3")
    n5 = {**n3, "NodeID": "5" * 56, "Labels": {"name": "n5", "rack": "r1"}}
    bare = {**n3, "NodeID": "6" * 56, "Labels": {"name": "bare"}}
    records += [n5, bare]
    assert cluster.changes() == []
    grown = cluster.grown()
    assert grown is not None and list(grown.node_names) == ["n1", "n2", "n5", "n3"]
    assert grown.node_path(2) == {"rack": "r1"}
    node = cluster.node("n5")
    assert node is not None and node.node_id == "5" * 56
    assert cluster.node("bare") is None
    assert cluster.changes() == [] and cluster.grown() is None
    left_out = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert left_out == ["Ray node bare is left out: has no 'rack' label (levels: rack)"]
    # The same model a restart reads.
    assert list(
        RayCluster(["rack"], read_nodes=lambda: records).discover().topology.node_names
    ) == [
        "n1",
        "n2",
        "n5",
        "n3",
    ]
    n5["Alive"] = False
    assert [(c.node, c.health) for c in cluster.changes()] == [("n5", Health.DOWN)]
    records.append({**n5, "NodeID": "7" * 56, "Alive": True})
    assert [(c.node, c.health) for c in cluster.changes()] == [("n5", Health.HEALTHY)]
    assert cluster.grown() is None


def test_serve_uses_a_node_that_joins_after_it_started(
    ray_cluster: LocalRayCluster,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`toposched serve --backend ray`: a labelled node started after the service is in its
    model at once, and a gang that fits only there lands on it; a node without the rack label
    is named in the log and kept out; a restart finds the grown cluster."""
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    args = ("--backend", "ray", "--ray-address", ray_cluster.address, "--ray-levels", "rack")
    command = entry_point_command("ray_jobs:report_place", [str(tmp_path)])
    run = {"command": list(command), "workdir": str(TESTS)}
    gang = job_document("wide", pods=2, gpus=4, topology={"required": "node"}, run=run)
    with serving(tmp_path, *args, "--budgets", "budgets.yaml") as server:
        with server.client() as client:
            refused = client.post("/v1/jobs", json=gang)
            assert refused.json()["error"]["code"] == "never_fits", refused.text
            try:
                n5 = ray_cluster.add_node("n5", {"rack": "r3"}, gpus=8).process.pid
                ray_cluster.add_node("n6", {}, gpus=8)
                wait_until(lambda: node_health(client).get("n5") == "healthy")
                wait_until(lambda: "Ray node n6 is left out" in server.log.read_text())
                assert "n6" not in node_health(client)
                assert client.post("/v1/jobs", json=gang).status_code == 201
                wait_until(lambda: client.get("/v1/jobs/wide").json()["state"] not in LIVE)
                assert client.get("/v1/jobs/wide").json()["state"] == "finished"
                log = server.log.read_text()
                assert "Ray node n6 is left out: has no 'rack' label" in log
                assert log.count("Ray node n6 is left out") == 1
                # Restarted, the service reads the grown cluster its store now belongs to.
                server.stop()
                server.start()
                health = node_health(client)
                assert (health["n5"], "n6" in health) == ("healthy", False)
            finally:
                for name in ("n5", "n6"):
                    if name in ray_cluster.nodes:
                        ray_cluster.kill_node(name)
    places = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in range(2)]
    assert [(place["node"], place["node_group"]) for place in places] == [("n5", n5)] * 2
    assert sorted(gpu for place in places for gpu in place["gpus"]) == list(range(8))
