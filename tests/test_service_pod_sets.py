"""The service takes jobs of several pod sets as the job file writes them: a real
`toposched serve` on 127.0.0.1 runs them all or nothing, sets of different pod shapes too,
keeps them across a restart, and refuses what the scheduler cannot do."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml
from service_helpers import Server, budgets, serving, small_cluster

from toposched.cli.main import main
from toposched.cluster.state import Allocation
from toposched.jobs.spec import JobSpec
from toposched.service.errors import NeverFits
from toposched.service.fits import ClusterLimits
from toposched.service.records import allocation_to_json, allocations_from_json

# service_helpers' cluster: racks r0 (n0, n1) and r1 (n2, n3) of 4-GPU nodes.
ACCOUNT = "research/team-a"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("pod-sets")
    with serving(folder, "--cluster", "cluster.yaml", "--budgets", "budgets.yaml") as running:
        yield running


def rl_job(name: str, rollout_gpus: int = 4) -> dict[str, Any]:
    return {
        "name": name,
        "account": ACCOUNT,
        "topology": {"required": "rack"},
        "pod_sets": [
            {"name": "trainer", "pods": 1, "resources_per_pod": {"gpus": 4}},
            {"name": "rollout", "pods": 1, "resources_per_pod": {"gpus": rollout_gpus}},
        ],
    }


def wait_running(client: httpx.Client, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if job["state"] == "running":
            return job
        time.sleep(0.05)
    raise AssertionError(f"{job_id} did not start: {job}")


def test_a_job_of_two_sets_runs_in_one_rack(server: Server) -> None:
    with server.client() as client:
        text = yaml.safe_dump(rl_job("rl-1"), sort_keys=False)
        answer = client.post("/v1/jobs", content=text, headers={"Content-Type": "application/yaml"})
        assert answer.status_code == 201, answer.text
        assert [s["name"] for s in answer.json()["spec"]["pod_sets"]] == ["trainer", "rollout"]
        job = wait_running(client, "rl-1")
        assert job["nodes"] in (["n0", "n1"], ["n2", "n3"])
        assert (job["pods"], job["gpus"]) == (2, 8.0)
        assert client.delete("/v1/jobs/rl-1").status_code == 200
        deadline = time.monotonic() + 20
        while (ended := client.get("/v1/jobs/rl-1").json())["end_time"] is None:
            assert time.monotonic() < deadline, ended
            time.sleep(0.05)
        # Read back from the stored job once the scheduler no longer holds it.
        assert (ended["pods"], ended["gpus"]) == (2, 8.0)


def test_sets_of_different_shapes_run_and_are_released(server: Server) -> None:
    with server.client() as client:
        answer = client.post("/v1/jobs", json=rl_job("rl-2", rollout_gpus=2))
        assert answer.status_code == 201, answer.text
        job = wait_running(client, "rl-2")
        assert (job["pods"], job["gpus"]) == (2, 6.0)
        nodes = {n["name"]: n for n in client.get("/v1/nodes").json()["nodes"]}
        assert sum(n["free_gpus"] for n in nodes.values()) == 16 - 6
        assert client.delete("/v1/jobs/rl-2").status_code == 200
        deadline = time.monotonic() + 20
        while sum(n["free_gpus"] for n in client.get("/v1/nodes").json()["nodes"]) < 16:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_a_job_of_two_shapes_keeps_its_gpus_across_a_restart(tmp_path: Path) -> None:
    args = ("--cluster", "cluster.yaml", "--budgets", "budgets.yaml", "--backend", "dry-run")
    server = Server(tmp_path, *args).start()
    try:
        with server.client() as client:
            answer = client.post("/v1/jobs", json=rl_job("rl-4", rollout_gpus=2))
            assert answer.status_code == 201, answer.text
            before = wait_running(client, "rl-4")
            # 2 GPUs stay free beside the job in its rack: a 2-GPU job takes them.
            assert client.post("/v1/jobs", json=two_gpus("small")).status_code == 201
            wait_running(client, "small")
            assert client.post("/v1/jobs", json=two_gpus("waits", pods=7)).status_code == 201
        server.kill()
        server.start()
        with server.client() as client:
            after = client.get("/v1/jobs/rl-4").json()
            assert (after["state"], after["nodes"], after["gpus"]) == (
                "running",
                before["nodes"],
                6.0,
            )
            nodes = client.get("/v1/nodes").json()["nodes"]
            assert sum(n["free_gpus"] for n in nodes) == 16 - 6 - 2
            assert client.get("/v1/jobs/waits").json()["state"] == "pending"
            # Cancelled after the restart: every set's GPUs come back, and the 14 GPUs the
            # waiting job needs are free.
            assert client.delete("/v1/jobs/rl-4").status_code == 200
            wait_running(client, "waits")
    finally:
        server.stop()


def two_gpus(name: str, pods: int = 1) -> dict[str, Any]:
    return {
        "name": name,
        "account": ACCOUNT,
        "pods": pods,
        "resources_per_pod": {"gpus": 2},
    }


def test_both_forms_are_refused_naming_the_field(server: Server) -> None:
    with server.client() as client:
        answer = client.post("/v1/jobs", json={**rl_job("rl-3"), "pods": 2})
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert error["field"] == "pods"
        assert "either pod_sets or the one-set shorthand" in error["rule"]


def test_allocations_of_several_shapes_are_stored_and_read_back_among_others() -> None:
    trainer = Allocation.of([0, 1], [[0, 1, 2, 3], [0, 1, 2, 3]])
    rollout = Allocation.of([2, 2], [[0, 1], [2, 3]], cpu_milli=500)
    launcher = Allocation.of([3], np.zeros((1, 0), dtype=np.int64), cpu_milli=8000)
    several = Allocation.of_sets([trainer, rollout, launcher])
    plain = Allocation.of([5, 6], [[0], [1]])
    texts = [allocation_to_json(a) for a in (plain, several, plain, several)]
    read = allocations_from_json([text for text in texts if text is not None])
    assert [len(a.parts) for a in read] == [1, 3, 1, 3]
    for got, written in zip(read, (plain, several, plain, several), strict=True):
        assert got.nodes.tolist() == written.nodes.tolist()
        for got_part, part in zip(got.parts, written.parts, strict=True):
            assert got_part.gpus.tolist() == part.gpus.tolist()
            assert got_part.gpus.shape == part.gpus.shape
            assert (got_part.gpu_milli, got_part.cpu_milli) == (part.gpu_milli, part.cpu_milli)
    assert read[1].gpu_milli_total == 12_000


def shapes_job(rollouts: int, **fields: Any) -> JobSpec:
    """One 4-GPU trainer and `rollouts` 2-GPU rollout workers."""
    return JobSpec.from_dict(
        {
            "name": "shapes",
            "account": ACCOUNT,
            "pod_sets": [
                {"name": "trainer", "pods": 1, "resources_per_pod": {"gpus": 4}},
                {"name": "rollout", "pods": rollouts, "resources_per_pod": {"gpus": 2}},
            ],
        }
        | fields
    )


def test_sets_of_different_shapes_never_fit_only_when_their_gpus_do_not() -> None:
    limits = ClusterLimits.of(small_cluster())
    # 4 + 6 x 2 = 16 GPUs: the whole cluster, though 7 pods of the trainer's 4 GPUs are not.
    limits.check(shapes_job(6), budgets())
    with pytest.raises(NeverFits) as caught:
        limits.check(shapes_job(7), budgets())
    assert (caught.value.field, caught.value.value) == ("pod_sets", "18 GPUs")
    assert "the largest has 16 GPUs" in caught.value.rule
    # A rack holds 8 GPUs: 4 + 3 x 2 do not fit one.
    limits.check(shapes_job(2, topology={"required": "rack"}), budgets())
    with pytest.raises(NeverFits) as caught:
        limits.check(shapes_job(3, topology={"required": "rack"}), budgets())
    assert "every set in one rack; the largest has 8 GPUs" in caught.value.rule
    # An 8-GPU pod fits no 4-GPU node: the set is named.
    sets = [
        {"name": "trainer", "pods": 1, "resources_per_pod": {"gpus": 4}},
        {"name": "rollout", "pods": 1, "resources_per_pod": {"gpus": 8}},
    ]
    with pytest.raises(NeverFits) as caught:
        limits.check(shapes_job(1, pod_sets=sets), budgets())
    assert caught.value.field == "pod_sets[1].resources_per_pod.gpus"


def test_the_command_line_submits_sets_of_different_shapes(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rl.yaml"
    path.write_text(yaml.safe_dump(rl_job("rl-cli", rollout_gpus=1), sort_keys=False))
    assert main(["submit", str(path), "--server", server.url]) == 0
    assert "rl-cli" in capsys.readouterr().out
    with server.client() as client:
        job = wait_running(client, "rl-cli")
        assert (job["pods"], job["gpus"]) == (2, 5.0)
        assert client.delete("/v1/jobs/rl-cli").status_code == 200
