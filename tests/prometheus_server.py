"""A real Prometheus server for tests: Debian's `prometheus` on loopback, scraping one target.

`prometheus_for(folder, target, token)` starts a server with its configuration and database in
`folder`, scraping `target` (host:port) every 0.5 s with the bearer token; tests that need it
are skipped, with the reason, only where the binary is missing or the server cannot start.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from service_helpers import free_port

SCRAPE_INTERVAL = "500ms"


def _binary() -> str | None:
    return shutil.which("prometheus") or (
        "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None
    )


class Prometheus:
    def __init__(self, url: str, log: Path) -> None:
        self.url = url
        self.log = log

    def query(self, expression: str) -> list[dict[str, Any]]:
        """The instant vector of `expression` through the HTTP API (`/api/v1/query`)."""
        answer = httpx.get(f"{self.url}/api/v1/query", params={"query": expression}, timeout=10)
        answer.raise_for_status()
        body = answer.json()
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def value(self, expression: str) -> float | None:
        """The single value of `expression`, None while Prometheus has no sample of it."""
        result = self.query(expression)
        if not result:
            return None
        assert len(result) == 1, result
        return float(result[0]["value"][1])

    def wait_for(self, expression: str, timeout: float = 20) -> float:
        """The value of `expression` once Prometheus has one."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.value(expression)
            if value is not None:
                return value
            time.sleep(0.25)
        raise AssertionError(f"no sample of {expression}; log: {self.log.read_text()[-2000:]}")


@contextmanager
def prometheus_for(folder: Path, target: str, token: str) -> Iterator[Prometheus]:
    binary = _binary()
    if binary is None:
        pytest.skip("Prometheus is not installed (Debian package `prometheus`)")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "token").write_text(token)
    config = {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL},
        "scrape_configs": [
            {
                "job_name": "toposched",
                "authorization": {"type": "Bearer", "credentials_file": str(folder / "token")},
                "static_configs": [{"targets": [target]}],
            }
        ],
    }
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = folder / "prometheus.log"
    command = [
        binary,
        f"--config.file={folder / 'prometheus.yml'}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--storage.tsdb.path={folder / 'data'}",
        "--log.level=warn",
    ]
    with log.open("ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=out)
    server = Prometheus(f"http://127.0.0.1:{port}", log)
    try:
        _wait_ready(server, process)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def _wait_ready(server: Prometheus, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.skip(f"Prometheus did not start: {server.log.read_text()[-1000:]}")
        try:
            if httpx.get(f"{server.url}/-/ready", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    pytest.skip(f"Prometheus was not ready in 30 s: {server.log.read_text()[-1000:]}")
