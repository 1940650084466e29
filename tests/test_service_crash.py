"""The crash test: concurrent clients submit 2,000 jobs to a real `toposched serve` (dry-run
backend, runs of a second or less) while the server is killed with SIGKILL four times at
random moments (seeded) and started again on the same store.

Afterwards every acknowledged job exists exactly once (clients retry with the same
Idempotency-Key until they get an answer), no GPU was ever held twice (checked in the store
at every kill and through the API after every restart), and every job reaches a final state.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.service_helpers import Server
from toposched.service.records import allocation_from_json

JOBS = 2000
CLIENTS = 8
KILLS = 4
SEED = 39
NODES, GPUS_PER_NODE, NODES_PER_RACK = 128, 8, 8
ACCOUNTS = ("research/team-a", "research/team-b", "prod")
FINAL = {"finished", "failed", "cancelled"}
SETTLE_S = 60.0


def crash_cluster() -> dict[str, Any]:
    """Sixteen racks of eight 8-GPU nodes: 1,024 GPUs."""
    return {
        "levels": ["rack"],
        "defaults": {"gpus": GPUS_PER_NODE, "gpu_model": "H100", "cpu": 64, "memory": "512Gi"},
        "nodes": [
            {"name": f"n{i}", "labels": {"rack": f"r{i // NODES_PER_RACK}"}} for i in range(NODES)
        ],
    }


def documents(count: int, rng: random.Random) -> list[dict[str, Any]]:
    """Mostly one-pod jobs of 1 to 8 GPUs, one in ten a gang of 2 to 4 whole nodes; each runs
    0.1 to 0.8 s. A pod's GPUs on a node are then known from its job alone (a one-pod job's
    GPUs, or a whole node), which the API check below relies on."""
    jobs = []
    for index in range(count):
        gang = rng.random() < 0.1
        pods = rng.randint(2, 4) if gang else 1
        gpus = GPUS_PER_NODE if gang else rng.choice((1, 2, 4, 8))
        jobs.append(
            {
                "name": f"job-{index}",
                "account": ACCOUNTS[index % len(ACCOUNTS)],
                "pods": pods,
                "resources_per_pod": {"gpus": gpus},
                "expected_runtime": round(rng.uniform(0.1, 0.8), 2),
            }
        )
    return jobs


@dataclass
class Tally:
    """What the clients saw: acknowledged names, how many tries it took, unexpected answers;
    `stop` makes them give up (the test failed)."""

    acknowledged: Counter[str] = field(default_factory=Counter)
    retries: int = 0
    unexpected: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)


def submit_until_acknowledged(client: httpx.Client, document: dict[str, Any], tally: Tally) -> None:
    """POST until an answer of 200/201 arrives; connection errors and 503 (restarting) are
    retried with the same key, anything else is recorded as unexpected."""
    name = document["name"]
    while not tally.stop.is_set():
        try:
            answer = client.post("/v1/jobs", json=document, headers={"Idempotency-Key": name})
        except httpx.TransportError:
            answer = None
        if answer is not None and answer.status_code in (200, 201):
            with tally.lock:
                tally.acknowledged[name] += 1
            return
        if answer is not None and answer.status_code != 503:
            with tally.lock:
                tally.unexpected.append(f"{name}: {answer.status_code} {answer.text[:200]}")
            return
        with tally.lock:
            tally.retries += 1
        time.sleep(0.05)


def client_thread(url: str, jobs: list[dict[str, Any]], tally: Tally) -> None:
    with httpx.Client(base_url=url, timeout=10) as client:
        for document in jobs:
            submit_until_acknowledged(client, document, tally)


def store_gpus_held_once(path: Path) -> int:
    """In the store (server dead): the running jobs' (node, GPU) pairs are all different.
    Returns how many jobs run."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT id, allocation FROM jobs WHERE state = 'running'").fetchall()
    held: dict[tuple[int, int], str] = {}
    for job_id, text in rows:
        allocation = allocation_from_json(text)
        assert allocation is not None, f"running job {job_id} has no allocation"
        for rank, node in enumerate(allocation.nodes.tolist()):
            for gpu in allocation.gpus[rank].tolist():
                other = held.setdefault((node, gpu), job_id)
                assert other == job_id, f"GPU {gpu} of node {node} held by {other} and {job_id}"
    return len(rows)


def api_gpus_consistent(client: httpx.Client, per_pod: dict[str, int]) -> None:
    """Through the API (one snapshot of the loop): each node's used GPUs are exactly the GPUs of
    the jobs it lists, never more than it has."""
    for node in client.get("/v1/nodes").json()["nodes"]:
        used = sum(per_pod[job_id] for job_id in node["jobs"])
        assert used == node["gpus"] - node["free_gpus"] <= node["gpus"], node


def all_jobs(client: httpx.Client) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = []
    after: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 1000}
        if after is not None:
            params["after"] = after
        page = client.get("/v1/jobs", params=params).json()
        jobs.extend(page["jobs"])
        after = page["next"]
        if after is None:
            return jobs


def wait_until_final(client: httpx.Client) -> list[dict[str, Any]]:
    deadline = time.monotonic() + SETTLE_S
    while True:
        jobs = all_jobs(client)
        if all(job["state"] in FINAL for job in jobs) or time.monotonic() > deadline:
            return jobs
        time.sleep(0.5)


def test_acknowledged_jobs_survive_random_kills_exactly_once(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    (tmp_path / "crash-cluster.yaml").write_text(yaml.safe_dump(crash_cluster()))
    args = ("--cluster", "crash-cluster.yaml", "--budgets", "budgets.yaml")
    server = Server(tmp_path, *args, "--backend", "dry-run", "--log-level", "warning").start()
    jobs = documents(JOBS, rng)
    per_pod = {d["name"]: d["resources_per_pod"]["gpus"] for d in jobs}
    tally = Tally()
    threads = [
        threading.Thread(
            target=client_thread, args=(server.url, jobs[i::CLIENTS], tally), daemon=True
        )
        for i in range(CLIENTS)
    ]
    try:
        for thread in threads:
            thread.start()
        running_at_kills = []
        for _kill in range(KILLS):
            time.sleep(rng.uniform(0.2, 1.2))
            server.kill()
            running_at_kills.append(store_gpus_held_once(tmp_path / "state.db"))
            server.start()
            with server.client() as client:
                api_gpus_consistent(client, per_pod)
        for thread in threads:
            thread.join(SETTLE_S)
        assert not any(thread.is_alive() for thread in threads), "clients did not finish"
        with server.client() as client:
            final = wait_until_final(client)
            api_gpus_consistent(client, per_pod)
            nodes = client.get("/v1/nodes").json()["nodes"]
    finally:
        tally.stop.set()
        server.stop()

    assert tally.unexpected == []
    assert sorted(tally.acknowledged) == sorted(per_pod)
    assert set(tally.acknowledged.values()) == {1}
    # Every acknowledged job exists exactly once, and every job is in a final state.
    assert Counter(job["id"] for job in final) == Counter(list(per_pod))
    states = Counter(job["state"] for job in final)
    assert set(states) <= FINAL, states
    # Nothing was lost by the backend across the kills: every job ran to its end.
    assert states == {"finished": JOBS}, states
    assert all(node["free_gpus"] == node["gpus"] and node["jobs"] == [] for node in nodes)
    # The kills really interrupted work in flight.
    assert tally.retries > 0 and max(running_at_kills) > 0, (tally.retries, running_at_kills)
    assert_store_history(tmp_path / "state.db")


def assert_store_history(path: Path) -> None:
    """One `submitted` event per job; each run of a job was started by one stored decision and
    bound once."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        submitted = db.execute(
            "SELECT job, COUNT(*) FROM events WHERE kind = 'submitted' GROUP BY job"
        ).fetchall()
        starts = db.execute(
            "SELECT job, attempt, COUNT(*) FROM decisions WHERE kind = 'start' "
            "GROUP BY job, attempt HAVING COUNT(*) > 1"
        ).fetchall()
        bound = dict(
            db.execute("SELECT job, COUNT(*) FROM events WHERE kind = 'bound' GROUP BY job")
        )
        attempts = dict(db.execute("SELECT id, attempt FROM jobs"))
        unsent = db.execute("SELECT COUNT(*) FROM decisions WHERE sent = 0").fetchone()[0]
    assert len(submitted) == JOBS and {count for _job, count in submitted} == {1}
    assert starts == []
    assert bound == attempts
    assert unsent == 0
