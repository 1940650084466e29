"""Shared set-up for the service tests: a small cluster, a store in a temporary folder, a
loop driven by a clock the test moves, and a real `toposched serve` on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from toposched.backends.dry_run import DryRunBackend
from toposched.cluster.loaders import topology_from_dict
from toposched.cluster.topology import Topology
from toposched.policy.budget import BudgetTree
from toposched.service.core import ServiceCore
from toposched.service.loop import Loop
from toposched.service.recovery import starter
from toposched.service.store import Store

CLUSTER = {
    "levels": ["rack"],
    "defaults": {"gpus": 4, "gpu_model": "H100", "cpu": 32, "memory": "256Gi"},
    "nodes": [{"name": f"n{i}", "labels": {"rack": f"r{i // 2}"}} for i in range(4)],
}
"""Two racks of two 4-GPU nodes: 16 GPUs."""
BUDGETS = {
    "accounts": {
        "research": {"share": 60, "children": {"team-a": 50, "team-b": 50}},
        "prod": {"share": 40},
    }
}


def small_cluster() -> Topology:
    return topology_from_dict(CLUSTER)


def budgets() -> BudgetTree:
    return BudgetTree.from_dict(BUDGETS)


def job(name: str, gpus: int = 4, pods: int = 1, **fields: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "name": name,
        "account": "research/team-a",
        "pods": pods,
        "resources_per_pod": {"gpus": gpus},
    }
    document.update(fields)
    return document


class Clock:
    """The service's clock, moved by the test."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@contextmanager
def running_loop(
    path: Path, clock: Clock, backend: DryRunBackend | None = None, resume: bool = True
) -> Iterator[Loop]:
    """A loop on the store at `path`, recovered and ready; stopped on exit."""
    store = Store(str(path))
    loop = Loop(
        starter(store, small_cluster(), budgets, backend or DryRunBackend(), resume),
        clock=clock,
        tick_s=0.05,
    )
    loop.start()
    assert loop.ready.wait(30), loop.failed
    try:
        yield loop
    finally:
        loop.stop()
        store.close()


def settle(loop: Loop) -> None:
    """Wait until the loop has run a cycle after everything queued so far."""
    seen = loop.cycles
    deadline = time.monotonic() + 10
    while loop.cycles < seen + 2:
        assert time.monotonic() < deadline, "the loop did not cycle"
        time.sleep(0.01)


def state_of(loop: Loop, job_id: str) -> str:
    def read(core: ServiceCore, now: float) -> str:
        return str(core.record(job_id).state)

    return loop.call(read)


# --- a real server -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """`toposched serve` as a subprocess on 127.0.0.1."""

    def __init__(
        self, folder: Path, *args: str, token: str | None = None, cert: Path | None = None
    ) -> None:
        """`cert`: the server's certificate when `args` make it serve HTTPS."""
        self.folder = folder
        self.args = args
        self.port = free_port()
        self.url = f"{'https' if cert else 'http'}://127.0.0.1:{self.port}"
        self.verify: ssl.SSLContext | bool = (
            ssl.create_default_context(cafile=str(cert)) if cert else True
        )
        self.token = token
        self.process: subprocess.Popen[bytes] | None = None
        self.log = folder / "server.log"

    def start(self) -> Server:
        (self.folder / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER))
        (self.folder / "budgets.yaml").write_text(yaml.safe_dump(BUDGETS, sort_keys=False))
        command = [
            sys.executable,
            "-m",
            "toposched.cli.main",
            "serve",
            "--port",
            str(self.port),
            "--store",
            str(self.folder / "state.db"),
            "--state-dir",
            str(self.folder / "state"),
            "--tick",
            "0.1",
            *self.args,
        ]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=log, cwd=self.folder)
        try:
            self.wait_ready()
        except BaseException:
            self.stop()  # never leave a server behind a failed start
            raise
        return self

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"server exited: {self.log.read_text()[-3000:]}")
            try:
                ready = httpx.get(f"{self.url}/v1/ready", timeout=1, verify=self.verify)
                if ready.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"server not ready: {self.log.read_text()[-3000:]}")

    def client(self, token: str | None = None) -> httpx.Client:
        token = token if token is not None else self.token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, verify=self.verify)

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


@contextmanager
def serving(folder: Path, *args: str, token: str | None = None) -> Iterator[Server]:
    server = Server(folder, *args, token=token).start()
    try:
        yield server
    finally:
        server.stop()
