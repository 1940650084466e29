"""Crash recovery: `toposched serve` killed with SIGKILL and started again on the same store
keeps every acknowledged job exactly once, its running jobs on their GPUs and its queue in
order."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from service_helpers import Server, job

from toposched.cluster.errors import InputError
from toposched.jobs.spec import JobSpec
from toposched.scheduler.jobs import JobState
from toposched.service.documents import accept_job, split_job
from toposched.service.records import JobRecord
from toposched.service.restore import RestoredSpecs
from toposched.service.store import Store

ARGS = ("--cluster", "cluster.yaml", "--budgets", "budgets.yaml", "--backend", "dry-run")


def jobs_by_id(client: httpx.Client) -> dict[str, dict[str, Any]]:
    listed = client.get("/v1/jobs", params={"limit": 1000}).json()["jobs"]
    return {j["id"]: j for j in listed}


def test_a_killed_server_comes_back_with_everything_it_acknowledged(tmp_path: Path) -> None:
    server = Server(tmp_path, *ARGS).start()
    try:
        with server.client() as client:
            for i in range(4):
                answer = client.post("/v1/jobs", json=job(f"run{i}", expected_runtime="2h"))
                assert answer.status_code == 201
            for i in range(3):
                assert client.post("/v1/jobs", json=job(f"wait{i}")).status_code == 201
            client.post("/v1/nodes/n1/cordon")
            before = jobs_by_id(client)
            queue = [row["id"] for row in client.get("/v1/queue").json()["queue"]]
            last_event = client.get("/v1/events", params={"follow": "false"}).text
        assert queue == ["wait0", "wait1", "wait2"]
        assert sum(j["state"] == "running" for j in before.values()) == 4
        server.kill()
        server.start()
        with server.client() as client:
            after = jobs_by_id(client)
            assert set(after) == set(before)
            for name, was in before.items():
                now = after[name]
                assert (now["state"], now["nodes"], now["submit_time"]) == (
                    was["state"],
                    was["nodes"],
                    was["submit_time"],
                ), name
            assert [row["id"] for row in client.get("/v1/queue").json()["queue"]] == queue
            nodes = {n["name"]: n for n in client.get("/v1/nodes").json()["nodes"]}
            assert nodes["n1"]["health"] == "cordoned"
            assert sum(n["free_gpus"] for n in nodes.values()) == 0
            events = client.get("/v1/events", params={"follow": "false"}).text
            assert events.startswith(last_event)
            # Still serving: a finished run makes room for the first waiting job.
            client.delete("/v1/jobs/run0")
            client.get("/v1/ready")
    finally:
        server.stop()


def test_acknowledged_submissions_survive_kills_during_concurrent_traffic(tmp_path: Path) -> None:
    server = Server(tmp_path, *ARGS).start()
    acknowledged: set[str] = set()
    lock = threading.Lock()

    def client_thread(prefix: str, stop: threading.Event) -> None:
        with server.client() as client:
            i = 0
            while not stop.is_set():
                name = f"{prefix}-{i}"
                try:
                    answer = client.post(
                        "/v1/jobs",
                        json=job(name, gpus=1, account="prod"),
                        headers={"Idempotency-Key": name},
                    )
                except httpx.HTTPError:
                    continue
                if answer.status_code in (200, 201):
                    with lock:
                        acknowledged.add(name)
                    i += 1

    try:
        for _round in range(2):
            stop = threading.Event()
            threads = [
                threading.Thread(target=client_thread, args=(f"c{_round}{t}", stop))
                for t in range(3)
            ]
            for thread in threads:
                thread.start()
            while len(acknowledged) < 30 * (_round + 1):
                threading.Event().wait(0.05)
            server.kill()
            stop.set()
            for thread in threads:
                thread.join(30)
            server.start()
        with server.client() as client:
            stored = jobs_by_id(client)
        assert acknowledged <= set(stored)
        running_gpus = sum(j["gpus"] for j in stored.values() if j["state"] == "running")
        assert running_gpus <= 16
    finally:
        server.stop()


def test_stored_documents_read_back_as_the_specs_a_full_validation_gives() -> None:
    specs = RestoredSpecs()
    documents = [
        {**job(f"j{i}", gpus=1 + i % 2, expected_runtime="2h"), "submit_time": 10.0 + i}
        for i in range(6)
    ]
    documents.append({**job("r", run={"command": ["true"]}), "submit_time": 3})
    for document in documents:
        fields = {key: value for key, value in document.items() if key != "run"}
        read, validated = specs.spec(document), JobSpec.from_dict(fields)
        assert read == validated and hash(read) == hash(validated)
        assert read.model_fields_set == validated.model_fields_set
        assert read.to_dict() == validated.to_dict()
    # A document whose own fields are not of a spec's types is validated in full: refused.
    with pytest.raises(InputError, match="submit_time"):
        specs.spec({**documents[0], "submit_time": "yesterday"})
    with pytest.raises(InputError, match="name"):
        specs.spec({**documents[0], "name": ""})


def _stored(store: Store, job_id: str, submit_time: float, text: str) -> None:
    record = JobRecord(job_id, "research/team-a", 0, JobState.PENDING, None, submit_time)
    record.spec_text = text
    store.insert_job(record)


def test_stored_texts_read_back_as_the_specs_their_documents_give(tmp_path: Path) -> None:
    """Records read back hold their documents as text; the specs made from the texts (of
    a few documents parsed, the others' copies) are those of the documents, whatever the
    layout of the text."""
    store = Store(str(tmp_path / "s.db"))
    texts: list[tuple[str, float, str]] = []
    for i in range(4):  # as the service writes them: run last, after the submit time
        fields, run = split_job(job(f"s{i}", expected_runtime="2h", run={"command": [f"t{i}"]}))
        accepted = accept_job(fields, run, 5.0 + i)
        assert accepted.text is not None or i == 0
        texts.append((f"s{i}", 5.0 + i, accepted.text or json.dumps(accepted.document)))
    for i, required in enumerate(("rack", "rack", "node", None)):  # fields after the time
        document = {**job(f"t{i}"), "submit_time": 7.0}
        if required is not None:
            document["topology"] = {"required": required}
        texts.append((f"t{i}", 7.0, json.dumps(document)))
    texts.append(("other", 7.0, json.dumps({**job("n"), "submit_time": 7.0})))
    texts.append(("late", 8.0, json.dumps({**job("late"), "submit_time": 7.5})))
    texts.append(("spaced", 7.0, json.dumps({**job("spaced"), "submit_time": 7.0}, indent=1)))
    with store.transaction():
        for job_id, submit_time, text in texts:
            _stored(store, job_id, submit_time, text)
    specs = RestoredSpecs()
    for record, (_, _, text) in zip(store.jobs(), texts, strict=True):
        document = json.loads(text)
        document.pop("run", None)
        read, validated = specs.of(record), JobSpec.from_dict(document)
        assert read == validated and read.model_fields_set == validated.model_fields_set
    store.close()
