"""Owed and delivered GPU-hours end to end: the HTTP API of a service on the dry-run backend and
a real SQLite store, served on 127.0.0.1 with a clock the test moves, read through
`/v1/accounts` and `/metrics` against figures worked out by hand, and kept across a restart
(on SQLite and on PostgreSQL).

The scenario, on 16 GPUs where research/team-a and research/team-b each have a 4.8-GPU budget
(30% of the cluster) and prod 6.4: from T0 (an hour boundary) team-a's `a1` holds all 16 GPUs
for 2 h, protected, while team-b's `b1` (4 GPUs, 1 h) waits; `b1` runs from T0+2h to T0+3h.

    team-a: hours 0-1 asked 16 ran 16, owed min(4.8, 16) = 4.8 each; hour 2 nothing.
    team-b: hours 0-1 asked 4 ran 0, owed 4 each; hour 2 asked and ran 4 from its start.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import psycopg
import pytest
import uvicorn
from postgres_server import postgres_url
from prometheus_client.parser import text_string_to_metric_families
from service_helpers import Clock, Server, budgets, free_port, job, settle, small_cluster

from toposched.backends.dry_run import DryRunBackend
from toposched.cluster.units import HOUR
from toposched.service.api import create_app
from toposched.service.http import Context
from toposched.service.loop import Loop
from toposched.service.owed import CHANGE_SAVED_WITHIN_S, LAST_KEY, PAST_KEY
from toposched.service.recovery import starter
from toposched.service.store import Store
from toposched.service.store_protocol import open_store

__all__ = ["postgres_url"]  # the fixture, for the tests on PostgreSQL
TEAM_A, TEAM_B = "research/team-a", "research/team-b"


@dataclass
class Service:
    loop: Loop
    client: httpx.Client
    clock: Clock

    def at(self, hours: float) -> None:
        """Move the clock to T0 + `hours` and let the loop run its turns there."""
        self.clock.now = T0 + hours * HOUR
        settle(self.loop)

    def owed(self) -> dict[str, tuple[float, float, float, float | None]]:
        """Per account: owed, delivered and delivered-within-owed GPU-hours, and owed met."""
        body = self.client.get("/v1/accounts").json()
        assert body["owed_window_hours"] == 168  # the fair-share window: a week
        return {
            row["account"]: (
                round(row["owed_gpu_hours"], 9),
                round(row["delivered_gpu_hours"], 9),
                round(row["delivered_within_owed_gpu_hours"], 9),
                None if row["owed_met"] is None else round(row["owed_met"], 9),
            )
            for row in body["accounts"]
        }

    def state(self, job_id: str) -> str:
        return str(self.client.get(f"/v1/jobs/{job_id}").json()["state"])


T0 = Clock().now
assert T0 % HOUR == 0


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store: a SQLite file, or a new schema on the PostgreSQL server of the tests."""
    if request.param == "sqlite":
        return str(tmp_path / "s.db")
    url: str = request.getfixturevalue("postgres_url")
    schema = f"owed_{next(_schemas)}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    return f"{url}?options={quote(f'-c search_path={schema}')}"


_schemas = itertools.count()


@contextmanager
def service(location: str, clock: Clock) -> Iterator[Service]:
    """A loop on the store at `location` behind uvicorn on a free loopback port; the
    token-less API is open, as on a single machine."""
    store = open_store(location)
    loop = Loop(starter(store, small_cluster(), budgets, DryRunBackend()), clock, tick_s=0.05)
    loop.start()
    assert loop.ready.wait(30), loop.failed
    port = free_port()
    app = create_app(Context(loop, None, 1 << 20), store)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            running = Service(loop, client, clock)
            settle(loop)
            yield running
    finally:
        server.should_exit = True
        thread.join(10)
        loop.stop()
        store.close()


def submit(svc: Service, document: dict[str, Any]) -> None:
    answer = svc.client.post("/v1/jobs", json=document)
    assert answer.status_code == 201, answer.text


def metric(svc: Service, name: str, account: str) -> float:
    for family in text_string_to_metric_families(svc.client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name and sample.labels == {"account": account}:
                return float(sample.value)
    raise AssertionError(f"no {name} for {account}")


def start_scenario(svc: Service) -> None:
    a1 = job("a1", gpus=4, pods=4, expected_runtime="2h", min_runtime="4h")
    submit(svc, a1)
    settle(svc.loop)
    submit(svc, job("b1", account=TEAM_B, expected_runtime="1h", min_runtime="1h"))
    settle(svc.loop)
    assert (svc.state("a1"), svc.state("b1")) == ("running", "pending")


def test_owed_and_delivered_follow_the_clock(tmp_path: Path) -> None:
    with service(str(tmp_path / "s.db"), Clock()) as svc:
        start_scenario(svc)
        svc.at(1)
        figures = svc.owed()
        assert figures[TEAM_A] == (4.8, 16.0, 4.8, 1.0)
        assert figures[TEAM_B] == (4.0, 0.0, 0.0, 0.0)
        svc.at(2)
        assert (svc.state("a1"), svc.state("b1")) == ("finished", "running")
        svc.at(2.5)
        figures = svc.owed()
        assert figures[TEAM_A] == (9.6, 32.0, 9.6, 1.0)
        # hour 2 so far: asked 4 GPUs for half an hour and ran them: 2 owed, 2 delivered
        assert figures[TEAM_B] == (10.0, 2.0, 2.0, 0.2)
        assert figures["research"] == (19.6, 34.0, 11.6, round(11.6 / 19.6, 9))
        assert figures["prod"] == (0.0, 0.0, 0.0, None)
        owed_b = metric(svc, "toposched_account_owed_gpu_seconds", TEAM_B)
        assert owed_b == pytest.approx(10.0 * HOUR)
        delivered_a = metric(svc, "toposched_account_delivered_gpu_seconds", TEAM_A)
        assert delivered_a == pytest.approx(32.0 * HOUR)
        within = metric(svc, "toposched_account_delivered_within_owed_gpu_seconds", TEAM_B)
        assert within == pytest.approx(2.0 * HOUR)
        svc.at(3)
        assert svc.state("b1") == "finished"
        figures = svc.owed()
        assert figures[TEAM_B] == (12.0, 4.0, 4.0, round(1 / 3, 9))
        assert figures[TEAM_A] == (9.6, 32.0, 9.6, 1.0)


def test_figures_survive_a_restart_and_down_time_counts_neither_way(location: str) -> None:
    clock = Clock()
    with service(location, clock) as svc:
        start_scenario(svc)
        svc.at(2)
        assert svc.state("b1") == "running"
        svc.at(2.25)
        svc.at(2.5)  # nothing changed since 2.25: stored because a minute passed
        before = svc.owed()
    # The loop stops between turns writing nothing more: what the store holds is what a
    # SIGKILL after the last commit leaves.
    store = open_store(location)
    assert set(store.meta(LAST_KEY)) == {TEAM_A, TEAM_B}
    assert [hour[0] for hour in store.meta(PAST_KEY + TEAM_B)] == [500_000, 500_001]
    store.close()
    with service(location, clock) as svc:
        assert svc.owed() == before
    clock.now = T0 + 2.75 * HOUR  # down for a quarter of an hour while b1 ran on
    with service(location, clock) as svc:
        assert svc.owed() == before
        svc.at(3)
        assert svc.state("b1") == "finished"
        figures = svc.owed()
        # team-b's hour 2: the half hour before the stop and the quarter hour after the restart
        assert figures[TEAM_B] == (11.0, 3.0, 3.0, round(3 / 11, 9))
        assert figures[TEAM_A] == before[TEAM_A]


def test_figures_written_after_a_change_survive_sigkill(tmp_path: Path) -> None:
    """A real `toposched serve` on the wall clock: a change (here big's submission) stores the
    owed hours within `CHANGE_SAVED_WITHIN_S`, so a SIGKILL right after its answer loses at
    most that much of them; the restarted server goes on from them."""
    server = Server(tmp_path, "--cluster", "cluster.yaml", "--budgets", "budgets.yaml").start()
    try:
        with server.client() as client:
            submit_to(client, job("a1", gpus=4, pods=2))
            wait_until(lambda: client.get("/v1/jobs/a1").json()["state"] == "running")
            time.sleep(1.0)
            submit_to(client, job("big", gpus=4, pods=3))
            started = client.get("/v1/jobs/a1").json()["start_time"]
            submitted = client.get("/v1/jobs/big").json()["submit_time"]
        killed = time.time()
        server.kill()
        # a1's 8 GPUs ran from its start to the turn that took big in, and on to the kill
        delivered = 8 * (submitted - started)
        assert delivered >= 8.0
        stored = stored_delivered(tmp_path / "state.db", TEAM_A)
        lost = 8 * CHANGE_SAVED_WITHIN_S
        assert delivered - lost - 1e-6 <= stored <= 8 * (killed - started) + 1e-6
        server.start()
        with server.client() as client:
            row = account_row(client, TEAM_A)
            assert row["delivered_gpu_hours"] * HOUR >= stored - 1e-6
            # asks 20 GPUs, runs 8: owed grows faster than delivered once the clock moves on
            wait_until(
                lambda: (
                    (now := account_row(client, TEAM_A))["owed_gpu_hours"]
                    > now["delivered_gpu_hours"]
                )
            )
    finally:
        server.stop()


def submit_to(client: httpx.Client, document: dict[str, Any]) -> None:
    answer = client.post("/v1/jobs", json=document)
    assert answer.status_code == 201, answer.text


def wait_until(condition: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def stored_delivered(path: Path, team: str) -> float:
    """The team's delivered GPU-seconds as the store holds them, over all its kept hours."""
    store = Store(str(path))
    try:
        hours = [*(store.meta(PAST_KEY + team) or []), store.meta(LAST_KEY)[team]]
    finally:
        store.close()
    return float(sum(hour[1] for hour in hours))


def account_row(client: httpx.Client, account: str) -> dict[str, Any]:
    rows = client.get("/v1/accounts").json()["accounts"]
    return dict(next(row for row in rows if row["account"] == account))
