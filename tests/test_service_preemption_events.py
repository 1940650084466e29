"""A preemption's event, read through the API of a real `toposched serve`: it names the rule
that chose the victim and the work the eviction throws away."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from service_helpers import job, serving


def wait_until(check: Callable[[], bool], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def events(client: httpx.Client) -> list[dict[str, Any]]:
    text = client.get("/v1/events", params={"follow": "false"}).text
    lines = (line.removeprefix("data: ") for line in text.splitlines())
    return [json.loads(line) for line in lines if line.startswith("{")]


def test_the_evicting_event_carries_the_rule_and_the_lost_work(tmp_path: Path) -> None:
    args = ("--cluster", "cluster.yaml", "--budgets", "budgets.yaml")
    with serving(tmp_path, *args) as server, server.client() as client:
        # team-b borrows the whole cluster (beyond its budget: unallocated work) ...
        borrower = job("borrower", gpus=4, pods=4, account="research/team-b")
        borrower.update(resumable=True, min_runtime=0)
        assert client.post("/v1/jobs", json=borrower).status_code == 201
        wait_until(lambda: client.get("/v1/jobs/borrower").json()["state"] == "running", "run")
        started = time.time()
        time.sleep(1.0)
        # ... until prod asks for GPUs within its own budget, which evicts the borrower
        assert client.post("/v1/jobs", json=job("owed", gpus=4, account="prod")).status_code == 201
        wait_until(lambda: any(e["kind"] == "evicting" for e in events(client)), "an eviction")
        held = time.time() - started
        evicting = next(e for e in events(client) if e["kind"] == "evicting")
    assert evicting["job"] == "borrower"
    assert evicting["preemptor"] == "owed"
    assert evicting["rule"] == "unallocated-victim"
    # 16 GPUs ran at least a second and at most `held` seconds with no checkpoint: all lost
    assert 16 * 1.0 <= evicting["lost_gpu_seconds"] <= 16 * (held + 1.0)
