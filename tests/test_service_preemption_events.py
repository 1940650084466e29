"""A preemption's event, read through the API of a real `toposched serve` and in the dashboard
in Chromium: it names the preemptor, the rule that chose the victim and the work the eviction
throws away."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from service_helpers import Server, job, serving
from test_service_dashboard import Page, browser

from toposched.service.auth import add_token

__all__ = ["browser"]  # the Chromium fixture, shared with the dashboard's tests


def wait_until(check: Callable[[], bool], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def events(client: httpx.Client) -> list[dict[str, Any]]:
    text = client.get("/v1/events", params={"follow": "false"}).text
    lines = (line.removeprefix("data: ") for line in text.splitlines())
    return [json.loads(line) for line in lines if line.startswith("{")]


@pytest.fixture(scope="module")
def evicted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, float]]:
    """A server where team-b's borrower (16 GPUs, unallocated work, no checkpoint) ran at
    least a second before prod's owed job evicted it; with the most seconds it can have run."""
    folder = tmp_path_factory.mktemp("preemption")
    token = add_token(folder / "tokens.yaml", "ops", "admin", [])
    args = ("--cluster", "cluster.yaml", "--budgets", "budgets.yaml", "--tokens", "tokens.yaml")
    with serving(folder, *args, token=token) as server, server.client() as client:
        borrower = job("borrower", gpus=4, pods=4, account="research/team-b")
        borrower.update(resumable=True, min_runtime=0)
        assert client.post("/v1/jobs", json=borrower).status_code == 201
        wait_until(lambda: client.get("/v1/jobs/borrower").json()["state"] == "running", "run")
        started = time.time()
        time.sleep(1.0)
        assert client.post("/v1/jobs", json=job("owed", gpus=4, account="prod")).status_code == 201
        wait_until(lambda: any(e["kind"] == "evicting" for e in events(client)), "an eviction")
        yield server, time.time() - started


def test_the_evicting_event_carries_the_rule_and_the_lost_work(
    evicted: tuple[Server, float],
) -> None:
    server, held = evicted
    with server.client() as client:
        evicting = next(e for e in events(client) if e["kind"] == "evicting")
    assert evicting["job"] == "borrower"
    assert evicting["preemptor"] == "owed"
    assert evicting["rule"] == "unallocated-victim"
    # 16 GPUs ran at least a second and at most `held` seconds with no checkpoint: all lost
    assert 16 * 1.0 <= evicting["lost_gpu_seconds"] <= 16 * (held + 1.0)


def test_the_dashboard_shows_the_preemption_and_its_cost(
    evicted: tuple[Server, float], browser: Any
) -> None:
    server, _ = evicted
    with server.client() as client:
        lost = next(e for e in events(client) if e["kind"] == "evicting")["lost_gpu_seconds"]
    assert server.token is not None
    view = Page(browser, server.url)
    try:
        page = view.open_with(server.token)
        preemption = page.locator("#events li.preemption")
        preemption.wait_for(timeout=10_000)
        text = preemption.inner_text()
        assert "evicting borrower for owed (unallocated-victim)" in text
        shown = re.search(r"lost ([\d.,]+) GPU-hours", text)
        assert shown is not None, text
        assert float(shown.group(1).replace(",", "")) == pytest.approx(lost / 3600, rel=0.05)
        assert view.errors == []
    finally:
        view.close()
