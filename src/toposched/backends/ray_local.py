"""A Ray cluster of several nodes on this one machine, for tests, benchmarks and trying out.

Each node is a `ray start --block` process in a session of its own, with pretend GPUs and
topology labels; stopping a node ends its whole process group (raylet, workers, and through
their death signal the pods they run). Nodes listen on `127.0.0.2`, a loopback address, so
nothing leaves the machine; the dashboard and usage statistics are off, and node failures are
noticed within a few seconds.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from toposched.cluster.errors import ToposchedError

__all__ = ["LOOPBACK", "LocalRayCluster", "LocalRayNode"]

LOOPBACK = "127.0.0.2"
"""Ray replaces 127.0.0.1 by the machine's network address; another loopback address stays."""
OBJECT_STORE_BYTES = 100 * 1000 * 1000
_ENVIRONMENT = {
    "RAY_USAGE_STATS_ENABLED": "0",
    # A node whose raylet stops answering is declared dead within about two seconds.
    "RAY_health_check_initial_delay_ms": "500",
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "500",
    "RAY_health_check_failure_threshold": "3",
}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class LocalRayNode:
    name: str
    labels: dict[str, str]
    process: subprocess.Popen[bytes]
    log: Path


@dataclass
class LocalRayCluster:
    """Nodes started with `add_node` (the first one is the head), stopped by `stop`."""

    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tsray-")))
    port: int = field(default_factory=_free_port)
    ray: str = field(default_factory=lambda: str(Path(sys.executable).with_name("ray")))
    nodes: dict[str, LocalRayNode] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def add_node(
        self, name: str, labels: Mapping[str, str], gpus: int = 4, cpus: int = 1, tries: int = 3
    ) -> LocalRayNode:
        """Start node `name` (label `name=<name>` added) and return once it started. Ray gives
        a node 30 s to register; on a busy machine it may take longer, so it is tried again."""
        all_labels = {"name": name, **labels}
        command = [
            self.ray,
            "start",
            "--block",
            f"--node-ip-address={LOOPBACK}",
            f"--num-gpus={gpus}",
            f"--num-cpus={cpus}",
            f"--object-store-memory={OBJECT_STORE_BYTES}",
            "--labels=" + ",".join(f"{k}={v}" for k, v in all_labels.items()),
        ]
        if self.nodes:
            command.append(f"--address={self.address}")
        else:
            command += [
                "--head",
                f"--port={self.port}",
                f"--temp-dir={self.folder / 'ray'}",
                "--include-dashboard=false",
                "--disable-usage-stats",
            ]
        log = self.folder / f"{name}.log"
        for attempt in range(1, tries + 1):
            with open(log, "wb") as output:
                process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, **_ENVIRONMENT},
                    start_new_session=True,
                )
            node = LocalRayNode(name, all_labels, process, log)
            try:
                _wait_started(node)
            except ToposchedError:
                _kill_group(process, signal.SIGKILL)
                process.wait()
                if attempt == tries:
                    raise
                continue
            self.nodes[name] = node
            return node
        raise AssertionError("unreachable")

    def kill_node(self, name: str) -> None:
        """End node `name` at once, as a machine that lost power."""
        node = self.nodes.pop(name)
        _kill_group(node.process, signal.SIGKILL)
        node.process.wait()

    def stop(self, grace_s: float = 3.0, keep_files: bool = False) -> None:
        """Stop every node, workers first, then the head, each one's whole process group; then
        remove the cluster's folder (Ray's session files and the nodes' logs) unless
        `keep_files`."""
        for node in reversed(list(self.nodes.values())):
            _kill_group(node.process, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for node in reversed(list(self.nodes.values())):
            try:
                node.process.wait(max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                pass
            _kill_group(node.process, signal.SIGKILL)
            node.process.wait()
        self.nodes.clear()
        if not keep_files:
            shutil.rmtree(self.folder, ignore_errors=True)


def _wait_started(node: LocalRayNode, timeout_s: float = 90.0) -> None:
    """Return once `node` started; an error with the end of its log if it did not."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if node.process.poll() is not None:
            tail = node.log.read_text(errors="replace")[-2000:]
            raise ToposchedError(f"Ray node {node.name} did not start:\n{tail}")
        if "will now block forever" in node.log.read_text(errors="replace"):
            return
        time.sleep(0.1)
    raise ToposchedError(f"Ray node {node.name} did not start within {timeout_s:g} s")


def _kill_group(process: subprocess.Popen[bytes], signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
