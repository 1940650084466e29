"""POST /v1/jobs through `SubmitFront` (plain ASGI, as `toposched serve` answers it) gives the
answers of the FastAPI route it stands in front of: the same statuses and bodies for new jobs,
repeated keys, and every kind of refusal, over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from service_helpers import Clock, free_port, job, running_loop

from toposched.service.api import create_app
from toposched.service.fast_submit import SubmitFront
from toposched.service.http import Context
from toposched.service.loop import Loop
from toposched.service.store import Store

MAX_BODY = 4096
TIMES = ("submit_time", "start_time", "end_time")


@contextmanager
def serving(loop: Loop, store: Store, front: bool) -> Iterator[httpx.Client]:
    ctx = Context(loop, None, MAX_BODY)
    app = create_app(ctx, store)
    port = free_port()
    config = uvicorn.Config(
        SubmitFront(app, ctx) if front else app, host="127.0.0.1", port=port, log_level="error"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            yield client
    finally:
        server.should_exit = True
        thread.join(10)


def requests() -> list[dict[str, Any]]:
    """(headers, body) pairs: accepted, repeated, and refused for each reason."""
    first = json.dumps(job("a")).encode()
    return [
        {"headers": {"Idempotency-Key": "k1"}, "content": first},
        {"headers": {"Idempotency-Key": "k1"}, "content": first},
        {"headers": {"Idempotency-Key": "k1"}, "content": json.dumps(job("b")).encode()},
        {"headers": {}, "content": first},
        {"headers": {"Idempotency-Key": "k" * 201}, "content": json.dumps(job("c")).encode()},
        {"headers": {"Content-Type": "text/plain"}, "content": b"name=x"},
        {"headers": {}, "content": b" " * (MAX_BODY + 1)},
        {"headers": {}, "content": b"{not json"},
        {"headers": {}, "content": json.dumps({**job("d"), "colour": "red"}).encode()},
        {"headers": {}, "content": json.dumps(job("e", gpus=9)).encode()},
        {"headers": {}, "content": json.dumps(job("f", account="nobody")).encode()},
        {"headers": {}, "content": json.dumps({**job("g"), "run": {"command": []}}).encode()},
        {"headers": {"Content-Type": "application/yaml"}, "content": b"name: h\npods: [\n"},
        {"headers": {}, "content": json.dumps([1, 2]).encode()},
        {"headers": {}, "content": json.dumps(job("i", pods=2)).encode()},
    ]


def answers(client: httpx.Client) -> list[tuple[int, Any]]:
    out = []
    for request in requests():
        headers = {"Content-Type": "application/json", **request["headers"]}
        answer = client.post("/v1/jobs", headers=headers, content=request["content"])
        body = answer.json()
        for name in TIMES:
            body.pop(name, None)
        out.append((answer.status_code, body))
    return out


def test_the_front_answers_as_the_route_does(tmp_path: Path) -> None:
    by_way = {}
    for front in (False, True):
        with ExitStack() as stack:
            path = tmp_path / f"{front}.db"
            loop = stack.enter_context(running_loop(path, Clock()))
            store = Store(str(path))
            stack.callback(store.close)
            client = stack.enter_context(serving(loop, store, front))
            by_way[front] = answers(client)
    assert by_way[True] == by_way[False]
    statuses = [status for status, _ in by_way[True]]
    assert statuses == [201, 200, 409, 409, 422, 415, 413, 422, 422, 422, 422, 422, 422, 422, 201]
