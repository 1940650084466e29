"""Serving: /v1/ready answers 503 until the store is recovered, TLS through uvicorn's files,
and the refusals of `toposched serve` at start."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn
from service_helpers import Server, budgets, free_port, job, small_cluster

from toposched.backends.dry_run import DryRunBackend
from toposched.cli.main import main
from toposched.service.api import create_app
from toposched.service.auth import Tokens, add_token
from toposched.service.core import ServiceCore
from toposched.service.fast_submit import SubmitFront
from toposched.service.http import Context
from toposched.service.loop import Loop
from toposched.service.recovery import recover
from toposched.service.store import Store


@contextmanager
def uvicorn_thread(
    loop: Loop, store: Store, tokens: Tokens | None = None, front: bool = False
) -> Iterator[str]:
    """The API on `loop`, as `toposched serve` serves it with `front` (`SubmitFront`)."""
    port = free_port()
    ctx = Context(loop, tokens, 1 << 20)
    app = create_app(ctx, store)
    served = SubmitFront(app, ctx) if front else app
    server = uvicorn.Server(uvicorn.Config(served, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(10)


def test_ready_is_503_until_the_store_is_recovered(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    release = threading.Event()

    def slow_start(now: float) -> ServiceCore:
        release.wait(20)  # recovery of a large store, held open by the test
        return recover(store, small_cluster(), budgets, DryRunBackend(), now)

    loop = Loop(slow_start, tick_s=0.05)
    loop.start()
    with uvicorn_thread(loop, store) as url:
        assert httpx.get(f"{url}/v1/health").status_code == 200
        waiting = httpx.get(f"{url}/v1/ready")
        assert waiting.status_code == 503
        assert waiting.json()["error"]["code"] == "unavailable"
        assert httpx.get(f"{url}/v1/jobs").status_code == 503
        release.set()
        assert loop.ready.wait(20)
        assert httpx.get(f"{url}/v1/ready").status_code == 200
        assert httpx.get(f"{url}/v1/jobs").json() == {"jobs": [], "next": None}
    loop.stop()


def test_the_front_answers_as_the_routes_while_the_store_is_recovered(tmp_path: Path) -> None:
    """While starting, `SubmitFront` answers the requests that wait for the scheduler itself:
    401 without a token, 503 with one (a submission's too, before its body is read); health,
    whoami and readiness as the routes answer them. Once ready, the routes answer."""
    store = Store(str(tmp_path / "s.db"))
    file = tmp_path / "tokens.yaml"
    token = add_token(file, "ops", "admin", [])
    release = threading.Event()

    def slow_start(now: float) -> ServiceCore:
        release.wait(20)
        return recover(store, small_cluster(), budgets, DryRunBackend(), now)

    loop = Loop(slow_start, tick_s=0.05)
    loop.start()
    with uvicorn_thread(loop, store, Tokens.load(file), front=True) as url:
        signed = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"})
        anonymous = httpx.Client(base_url=url)
        assert anonymous.get("/v1/health").status_code == 200
        assert anonymous.get("/v1/whoami").json()["token_required"] is True
        assert signed.get("/v1/whoami").json()["name"] == "ops"
        assert anonymous.get("/v1/ready").status_code == 503
        for method, path in (("GET", "/v1/events"), ("GET", "/v1/jobs"), ("POST", "/v1/jobs")):
            refused = anonymous.request(method, path)
            assert refused.status_code == 401, (method, path)
            waiting = signed.request(method, path, json=job("a"))
            assert waiting.status_code == 503, (method, path)
            assert waiting.json()["error"]["code"] == "unavailable"
            assert "starting" in waiting.json()["error"]["message"]
        release.set()
        assert loop.ready.wait(20)
        assert anonymous.get("/v1/ready").status_code == 200
        assert anonymous.get("/v1/jobs").status_code == 401
        assert signed.post("/v1/jobs", json=job("a")).status_code == 201
        assert [row["id"] for row in signed.get("/v1/jobs").json()["jobs"]] == ["a"]
        signed.close()
        anonymous.close()
    loop.stop()
    store.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")
def test_tls_through_the_certificate_files(tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    args = ("--ssl-keyfile", str(key), "--ssl-certfile", str(cert))
    server = Server(tmp_path, *args, cert=cert).start()
    try:
        with server.client() as client:
            assert client.get("/v1/ready").json() == {"status": "ready"}
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{server.port}/v1/ready", timeout=5)
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--host", "0.0.0.0"], "allowed only on a loopback address"),
        (["--store", "postgresql://127.0.0.1:1/toposched"], "cannot connect"),
        (["--fleet", "million", "--backend", "local"], "run it with --backend dry-run"),
        (["--gpus", "0"], "--gpus: 0 is invalid: must be a whole number of GPUs >= 1"),
    ],
)
def test_serve_refuses_bad_options_with_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    state = ["--state-dir", str(tmp_path / "state")]
    assert main(["serve", "--store", str(tmp_path / "s.db"), *state, *args]) == 2
    assert message in " ".join(capsys.readouterr().err.split())


def _serve_again(
    folder: Path, store: Path, port: int, state: str = "other-state"
) -> subprocess.CompletedProcess[str]:
    """`toposched serve` run to its end (a refusal) with `folder`'s cluster and budgets."""
    command = [
        sys.executable,
        "-m",
        "toposched.cli.main",
        "serve",
        "--cluster",
        "cluster.yaml",
        "--budgets",
        "budgets.yaml",
        "--backend",
        "dry-run",
        "--port",
        str(port),
        "--store",
        str(store),
        "--state-dir",
        str(folder / state),
    ]
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=120)


def test_a_second_server_on_the_same_store_is_refused_and_the_first_serves_on(
    tmp_path: Path,
) -> None:
    args = ("--cluster", "cluster.yaml", "--budgets", "budgets.yaml", "--backend", "dry-run")
    server = Server(tmp_path, *args).start()
    try:
        with server.client() as client:
            assert client.post("/v1/jobs", json=job("kept")).status_code == 201
        second = _serve_again(tmp_path, tmp_path / "state.db", free_port())
        assert second.returncode == 2
        message = " ".join(second.stderr.split())
        assert f"--store: '{tmp_path / 'state.db'}' is invalid: in use by another" in message
        assert f"(process {server.process.pid if server.process else ''})" in message
        with server.client() as client:
            assert client.get("/v1/jobs/kept").json()["state"] == "running"
            assert client.post("/v1/jobs", json=job("later")).status_code == 201
    finally:
        server.stop()
    # The lock goes with its server, and after a kill -9 too: the next one serves the store.
    restarted = Server(tmp_path, *args).start()
    restarted.kill()
    again = Server(tmp_path, *args).start()
    try:
        with again.client() as client:
            assert {record["id"] for record in client.get("/v1/jobs").json()["jobs"]} == {
                "kept",
                "later",
            }
    finally:
        again.stop()


def test_a_second_server_on_the_same_state_folder_is_refused(tmp_path: Path) -> None:
    """Its local backend would take the first server's pods for strays and stop them."""
    args = ("--cluster", "cluster.yaml", "--budgets", "budgets.yaml", "--backend", "dry-run")
    server = Server(tmp_path, *args).start()
    try:
        with server.client() as client:
            assert client.post("/v1/jobs", json=job("kept")).status_code == 201
        second = _serve_again(tmp_path, tmp_path / "second.db", free_port(), state="state")
        assert second.returncode == 2
        message = " ".join(second.stderr.split())
        assert f"--state-dir: '{tmp_path / 'state'}' is invalid: in use by another" in message
        assert not (tmp_path / "second.db").exists()
        with server.client() as client:
            assert client.get("/v1/jobs/kept").json()["state"] == "running"
        assert (tmp_path / "state" / "toposched.pid").read_text().strip() == str(
            server.process.pid if server.process else ""
        )
    finally:
        server.stop()
    # SIGTERM stops it cleanly: its loop and store closed, its locks given back, status 0.
    assert server.process is not None and server.process.returncode == 0
    assert (tmp_path / "state" / "toposched.pid").read_text() == ""


def test_an_address_in_use_is_refused_before_the_store_is_touched(tmp_path: Path) -> None:
    args = ("--cluster", "cluster.yaml", "--budgets", "budgets.yaml", "--backend", "dry-run")
    server = Server(tmp_path, *args).start()
    try:
        other = tmp_path / "other.db"
        refused = _serve_again(tmp_path, other, server.port)
        assert refused.returncode == 2
        message = " ".join(refused.stderr.split())
        assert f"--port: {server.port} is invalid: cannot listen on 127.0.0.1:{server.port}" in (
            message
        )
        assert not other.exists()
        assert not (tmp_path / "other-state").exists()
    finally:
        server.stop()
