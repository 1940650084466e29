"""`toposched serve --backend local`: real short commands run as processes, their logs are
read over the API, a cancel and an eviction are seen by the process as SIGTERM."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from service_helpers import Server, serving

from toposched.backends.local import LocalBackend
from toposched.backends.protocol import Launch, PodLaunch, RunSpec

WAIT_FOR_SIGTERM = (
    "import signal, sys, time\n"
    "def bye(*_):\n"
    "    print('got SIGTERM', flush=True)\n"
    "    sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, bye)\n"
    "print('ready', flush=True)\n"
    "while True:\n"
    "    time.sleep(0.05)\n"
)
BUDGETS = {"accounts": {"a": 50, "b": 50}}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("local")
    (folder / "two-teams.yaml").write_text(yaml.safe_dump(BUDGETS))
    args = ("--backend", "local", "--gpus", "4", "--budgets", "two-teams.yaml")
    with serving(folder, *args) as running:
        yield running


def python_job(name: str, code: str, gpus: int = 1, **fields: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "name": name,
        "account": "a",
        "pods": 1,
        "resources_per_pod": {"gpus": gpus},
        "run": {"command": [sys.executable, "-c", code], "env": {"GREETING": "hello"}},
    }
    document.update(fields)
    return document


def wait_for(check: Callable[[], bool], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def state(client: httpx.Client, name: str) -> str:
    return str(client.get(f"/v1/jobs/{name}").json()["state"])


def log(client: httpx.Client, name: str, rank: int = 0) -> str:
    answer = client.get(f"/v1/jobs/{name}/pods/{rank}/log")
    return answer.text if answer.status_code == 200 else ""


def test_a_command_runs_and_its_log_is_served(server: Server) -> None:
    code = (
        "import os; print(os.environ['GREETING'], os.environ['CUDA_VISIBLE_DEVICES']); "
        "print('line 2'); print('line 3')"
    )
    with server.client() as client:
        assert client.post("/v1/jobs", json=python_job("hello", code, gpus=2)).status_code == 201
        wait_for(lambda: state(client, "hello") == "finished", "hello to finish")
        text = log(client, "hello")
        assert text.startswith("hello "), text
        assert len(text.split()[1].split(",")) == 2
        tail = client.get("/v1/jobs/hello/pods/0/log", params={"tail": 2})
        assert tail.headers["content-type"].startswith("text/plain")
        assert tail.text == "line 2\nline 3\n"
        assert client.get("/v1/jobs/hello/pods/5/log").status_code == 404


def test_a_failing_command_fails_its_job(server: Server) -> None:
    with server.client() as client:
        client.post("/v1/jobs", json=python_job("boom", "raise SystemExit(3)"))
        wait_for(lambda: state(client, "boom") == "failed", "boom to fail")


def test_cancel_sends_sigterm_to_the_process(server: Server) -> None:
    with server.client() as client:
        client.post("/v1/jobs", json=python_job("sleeper", WAIT_FOR_SIGTERM, gpus=1))
        wait_for(lambda: "ready" in log(client, "sleeper"), "sleeper to start")
        assert client.delete("/v1/jobs/sleeper").json()["state"] == "cancelled"
        wait_for(lambda: "got SIGTERM" in log(client, "sleeper"), "SIGTERM in the log")


def test_an_eviction_sends_sigterm_and_requeues_a_resumable_job(server: Server) -> None:
    with server.client() as client:
        victim = python_job(
            "borrower", WAIT_FOR_SIGTERM, gpus=4, account="b", min_runtime=0, resumable=True
        )
        assert client.post("/v1/jobs", json=victim).status_code == 201
        wait_for(lambda: "ready" in log(client, "borrower"), "the borrower to start")
        owed = python_job("owed", "print('owed ran')", gpus=2, account="a")
        assert client.post("/v1/jobs", json=owed).status_code == 201
        wait_for(lambda: "got SIGTERM" in log(client, "borrower"), "SIGTERM in the victim")
        wait_for(lambda: state(client, "owed") == "finished", "the preemptor to finish")
        events = client.get("/v1/events", params={"follow": "false"}).text
        assert '"kind": "evicting", "job": "borrower"' in events
        assert '"kind": "evicted", "job": "borrower"' in events
        assert client.get("/v1/jobs/borrower").json()["preemptions"] == 1
        client.delete("/v1/jobs/borrower")


def test_processes_outlive_a_killed_server(tmp_path: Path) -> None:
    with serving(tmp_path, "--backend", "local", "--gpus", "2") as server:
        with server.client() as client:
            client.post(
                "/v1/jobs", json=python_job("survivor", WAIT_FOR_SIGTERM, account="default")
            )
            wait_for(lambda: "ready" in log(client, "survivor"), "the survivor to start")
        server.kill()
        server.start()
        with server.client() as client:
            job = client.get("/v1/jobs/survivor").json()
            assert (job["state"], job["attempts"]) == ("running", 1)
            client.delete("/v1/jobs/survivor")
            wait_for(lambda: "got SIGTERM" in log(client, "survivor"), "SIGTERM after restart")


def test_a_process_the_store_does_not_know_is_stopped_at_start(tmp_path: Path) -> None:
    # A pod left running by a store restored from an older backup: the restarted service
    # stops it, since the scheduler counts its GPUs free.
    pid_file = tmp_path / "stray.pid"
    code = (
        "import os, time\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "while True:\n"
        "    time.sleep(0.05)\n"
    )
    state_dir = tmp_path / "state"
    stray = LocalBackend(state_dir / "local")
    pod = PodLaunch(0, "local-0", (0,))
    stray.start(Launch("stray", 1, (pod,), RunSpec((sys.executable, "-c", code))))
    wait_for(lambda: pid_file.exists() and pid_file.read_text() != "", "the stray pod to start")
    pid = int(pid_file.read_text())
    stray.close()
    args = ("--backend", "local", "--gpus", "2", "--state-dir", str(state_dir))
    with serving(tmp_path, *args):
        wait_for(lambda: not _alive(pid), "the stray pod to be stopped")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
