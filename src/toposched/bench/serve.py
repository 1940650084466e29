"""Service benchmarks: `toposched serve --fleet million --backend dry-run` as a subprocess on
127.0.0.1, driven by clients in this process over HTTP.

- sustained durable submissions per second: concurrent clients, each waiting for its answer
  (every answer comes after the job's commit);
- submit-to-decision latency at a fixed offered rate (1,000/s): from sending the request to
  the decision carried out, read from the stored events after the run (the dry-run backend's
  `started` report, dated when the decision, once committed, was handed to it);
- restart to first decision: a store filled directly with 100,000 running jobs and 10,000
  pending ones, then the server started on it; from spawning the process (imports included,
  read from bytecode compiled beforehand, as an installed package's) until a client sees the
  first `bound` event.

The clients speak HTTP/1.1 on keep-alive sockets themselves (asyncio), so that on a small
machine most of the CPU goes to the server, not to client libraries. Beside the throughput, the
latency and the restart, the server's own CPU time (per submission, split between the HTTP
thread and the scheduler's loop; until the first decision) is given, read from /proc: on a
shared machine it moves far less with the others' load than wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml

import toposched
from toposched.bench.cycle import team_tree
from toposched.bench.harness import Measurement
from toposched.cluster.builders import million_gpu_cluster
from toposched.cluster.state import Allocation
from toposched.scheduler.jobs import JobState
from toposched.service.records import JobRecord
from toposched.service.store import Store

RATE_TARGET = 1000.0
P99_TARGET_S = 20e-3
RESTART_TARGET_S = 5.0
CLIENTS = 32
NODES_PER_RACK = 18
GPUS_PER_NODE = 4
_LATENCY_CONNECTIONS = 64
_ACCOUNTS = [f"program-{p}/team-{p}{t}" for p in range(3) for t in range(5)]
"""The leaves of the benchmark's budget tree (`team_tree`)."""


def run_serve_benchmarks(quick: bool = False) -> list[Measurement]:
    compile_bytecode()
    with tempfile.TemporaryDirectory(prefix="toposched-bench-serve-") as name:
        folder = Path(name)
        (folder / "budgets.yaml").write_text(yaml.safe_dump(team_tree().to_dict()))
        results = _submissions(folder, quick)
        results.append(_restart(folder, quick))
    return results


def _single(name: str, seconds: float, target_s: float | None, **extra: Any) -> Measurement:
    """A figure measured once (a rate's seconds per item, a percentile, a restart)."""
    return Measurement(name, 1, seconds, seconds, seconds, target_s=target_s, extra=extra)


def compile_bytecode() -> None:
    """The package's modules compiled to bytecode (`__pycache__`) before any server starts,
    as an installed package's are (pip compiles them at install). Where the environment sets
    PYTHONDONTWRITEBYTECODE, as development set-ups often do, each server would otherwise
    compile every module from source at its start (about 0.2 s of CPU), which a deployed
    service does not do at a restart. Nothing is written where the package is read-only."""
    compileall.compile_dir(Path(toposched.__file__).parent, quiet=2)


# --- a server ----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def _server(folder: Path, store: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    command = [
        sys.executable,
        "-m",
        "toposched.cli.main",
        "serve",
        "--fleet",
        "million",
        "--backend",
        "dry-run",
        "--store",
        str(store),
        "--state-dir",
        str(folder / "state"),
        "--budgets",
        str(folder / "budgets.yaml"),
        "--port",
        str(port),
        "--tick",
        "0.1",
        "--log-level",
        "warning",
    ]
    with (folder / "server.log").open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=log)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _cpu_seconds(process: subprocess.Popen[bytes]) -> tuple[float, float] | None:
    """CPU seconds the server used so far (user + system; from /proc, None where there is
    none): its main thread, which runs the HTTP server's event loop, and its other threads
    (the scheduler's loop, nearly all of it). On a shared machine CPU time varies less with the
    load than wall time."""
    try:
        every = _stat_seconds(Path(f"/proc/{process.pid}/stat"))
        main = _stat_seconds(Path(f"/proc/{process.pid}/task/{process.pid}/stat"))
    except OSError:
        return None
    return main, every - main


def _stat_seconds(path: Path) -> float:
    fields = path.read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_ready(process: subprocess.Popen[bytes], url: str, folder: Path) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log = (folder / "server.log").read_text()[-2000:]
            raise RuntimeError(f"toposched serve exited: {log}")
        try:
            if httpx.get(f"{url}/v1/ready", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.02)
    raise RuntimeError("toposched serve was not ready within 10 minutes")


def _events(url: str) -> list[dict[str, Any]]:
    """Every stored event, read after the run (follow=false)."""
    events: list[dict[str, Any]] = []
    after = 0
    while True:
        answer = httpx.get(f"{url}/v1/events", params={"after": after, "follow": "false"})
        answer.raise_for_status()
        batch = [
            json.loads(line[6:]) for line in answer.text.splitlines() if line.startswith("data: ")
        ]
        if not batch:
            return events
        events.extend(batch)
        after = batch[-1]["id"]


# --- HTTP clients --------------------------------------------------------------------------------


class _Connection:
    """One keep-alive HTTP/1.1 connection that POSTs job documents."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, body: bytes) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        head = (
            f"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        status = int((await self.reader.readline()).split()[1])
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        await self.reader.readexactly(length)
        return status

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _bodies(prefix: str, count: int) -> list[bytes]:
    """One-pod jobs of 1, 2 or 4 GPUs in the benchmark's teams, running for hours."""
    return [
        json.dumps(
            {
                "name": f"{prefix}-{index}",
                "account": _ACCOUNTS[index % len(_ACCOUNTS)],
                "pods": 1,
                "resources_per_pod": {"gpus": (1, 2, 4)[index % 3]},
                "expected_runtime": "6h",
            }
        ).encode()
        for index in range(count)
    ]


async def _closed_loop(port: int, bodies: list[bytes], clients: int) -> float:
    """Submit every body from `clients` connections, each waiting for its answer; seconds."""
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)

    async def client() -> None:
        connection = _Connection(port)
        try:
            while not queue.empty():
                status = await connection.post(queue.get_nowait())
                if status != 201:
                    raise RuntimeError(f"a submission was answered {status}")
        finally:
            connection.close()

    begin = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return time.perf_counter() - begin


async def _open_loop(port: int, bodies: list[bytes], rate: float) -> tuple[list[float], float]:
    """Send body i at start + i / rate (on the first free connection); the wall-clock time
    each was sent, and how many seconds the sending took."""
    sent = [0.0] * len(bodies)
    pool: asyncio.Queue[_Connection] = asyncio.Queue()
    for _ in range(_LATENCY_CONNECTIONS):
        pool.put_nowait(_Connection(port))
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.05

    async def one(index: int) -> None:
        await asyncio.sleep(max(0.0, start + index / rate - loop.time()))
        connection = await pool.get()
        sent[index] = time.time()
        status = await connection.post(bodies[index])
        pool.put_nowait(connection)
        if status != 201:
            raise RuntimeError(f"a submission was answered {status}")

    begin = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(len(bodies))))
    elapsed = time.perf_counter() - begin
    while not pool.empty():
        pool.get_nowait().close()
    return sent, elapsed


# --- the figures ---------------------------------------------------------------------------------


def _submissions(folder: Path, quick: bool) -> list[Measurement]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    throughput_jobs = 2_000 if quick else 10_000
    latency_s = 2.0 if quick else 10.0
    with _server(folder, folder / "submit.db", port) as process:
        _wait_ready(process, url, folder)
        asyncio.run(_closed_loop(port, _bodies("warm", 200), CLIENTS))
        cpu_before = _cpu_seconds(process)
        elapsed = asyncio.run(_closed_loop(port, _bodies("load", throughput_jobs), CLIENTS))
        cpu_after = _cpu_seconds(process)
        rate = throughput_jobs / elapsed
        bodies = _bodies("lat", int(RATE_TARGET * latency_s))
        latency_cpu_before = _cpu_seconds(process)
        load_before = os.getloadavg()[0]
        sent, sending_s = asyncio.run(_open_loop(port, bodies, RATE_TARGET))
        load_after = os.getloadavg()[0]
        latency_cpu_after = _cpu_seconds(process)
        time.sleep(1.0)  # the last decisions and reports are stored
        started = {
            e["job"]: e["time"]
            for e in _events(url)
            if e["kind"] == "started" and str(e["job"]).startswith("lat-")
        }
    latencies = np.array(
        [started[f"lat-{index}"] - at for index, at in enumerate(sent) if f"lat-{index}" in started]
    )
    if len(latencies) < len(sent):
        raise RuntimeError(f"only {len(latencies)} of {len(sent)} jobs were started")
    offered = len(bodies) / sending_s
    p50, p90, p99 = (float(v) for v in np.percentile(latencies, [50, 90, 99]))
    return [
        _single(
            f"sustained durable submissions, {CLIENTS} concurrent clients (s per submission)",
            1 / rate,
            1 / RATE_TARGET,
            per_second=round(rate),
            jobs=throughput_jobs,
            **_per_item_ms(cpu_before, cpu_after, throughput_jobs),
        ),
        _single(
            f"submit-to-decision latency p50 at {offered:,.0f}/s offered",
            p50,
            None,
            jobs=len(latencies),
            **_per_item_ms(latency_cpu_before, latency_cpu_after, len(bodies)),
        ),
        _single(
            f"submit-to-decision latency p99 at {offered:,.0f}/s offered",
            p99,
            P99_TARGET_S,
            jobs=len(latencies),
            p90_ms=round(p90 * 1000, 1),
            max_ms=round(float(latencies.max()) * 1000, 1),
            # The machine's 1-minute load average before and after: on a shared machine the
            # tail follows it more than anything the service does.
            load=f"{load_before:.1f}-{load_after:.1f}",
        ),
    ]


def _per_item_ms(
    before: tuple[float, float] | None, after: tuple[float, float] | None, items: int
) -> dict[str, float | None]:
    """The server's CPU per item between two `_cpu_seconds`: all of it, the HTTP thread's
    and the scheduler loop's."""
    if before is None or after is None:
        return {"server_cpu_ms": None}
    http, loop = (1000 * (end - begin) / items for begin, end in zip(before, after, strict=True))
    return {
        "server_cpu_ms": round(http + loop, 3),
        "http_thread_cpu_ms": round(http, 3),
        "loop_cpu_ms": round(loop, 3),
    }


def fill_store(path: Path, pending: int, now: float, max_running: int | None = None) -> int:
    """Write a busy million-GPU fleet straight into a store: jobs of 1, 2 or 6 whole nodes on
    consecutive nodes until the fleet is covered (about 100,000; at most `max_running`), the
    first node of a rack left free where a job would start on it, so that no rack is whole;
    then `pending` jobs: one in a hundred a one-node job that fits, the others whole-rack gangs
    that cannot while the fleet is covered. Returns how many jobs run."""
    rng = np.random.default_rng(0)
    n_nodes = million_gpu_cluster().n_nodes
    store = Store(str(path))
    count = 0
    with store.transaction():
        store.set_meta("budget_tree", team_tree().to_dict())
        node = 0
        while max_running is None or count < max_running:
            if node % NODES_PER_RACK == 0:
                node += 1
            size = min(int(rng.choice([1, 2, 6], p=[0.47, 0.3, 0.23])), n_nodes - node)
            if size <= 0:
                break
            start = now - float(rng.uniform(0, 1.5 * 3600))
            store.insert_job(_running_record(f"run-{count}", count, node, size, start))
            node += size
            count += 1
        for index in range(pending):
            store.insert_job(_pending_record(index, now - 30))
    store.close()
    return count


def _running_record(name: str, index: int, node: int, size: int, start: float) -> JobRecord:
    document = _document(name, _ACCOUNTS[index % len(_ACCOUNTS)], size, start - 60)
    nodes = np.arange(node, node + size, dtype=np.int64)
    return JobRecord(
        job_id=name,
        account=document["account"],
        priority=0,
        state=JobState.RUNNING,
        spec=document,
        submit_time=start - 60,
        start_time=start,
        attempt=1,
        allocation=Allocation.of(nodes, np.tile(np.arange(GPUS_PER_NODE), (size, 1))),
        reason="running",
    )


def _pending_record(index: int, submit_time: float) -> JobRecord:
    fits = index % 100 == 0
    name = f"wait-{index}"
    pods = 1 if fits else NODES_PER_RACK
    document = _document(name, _ACCOUNTS[index % len(_ACCOUNTS)], pods, submit_time)
    if not fits:
        document["topology"] = {"required": "rack"}
    return JobRecord(
        job_id=name,
        account=document["account"],
        priority=0,
        state=JobState.PENDING,
        spec=document,
        submit_time=submit_time,
    )


def _document(name: str, account: str, pods: int, submit_time: float) -> dict[str, Any]:
    return {
        "name": name,
        "account": account,
        "pods": pods,
        "resources_per_pod": {"gpus": GPUS_PER_NODE},
        "min_runtime": "2h",
        "expected_runtime": "6h",
        "submit_time": submit_time,
    }


def _restart(folder: Path, quick: bool) -> Measurement:
    max_running, pending = (20_000, 2_000) if quick else (None, 10_000)
    store = folder / "restart.db"
    fill_begin = time.perf_counter()
    count = fill_store(store, pending, time.time(), max_running)
    fill_s = time.perf_counter() - fill_begin
    return _restarted(folder, store, count, pending, fill_s)


def restart_runs(runs: int) -> list[Measurement]:
    """The restart alone, `runs` times: one store filled as the suite fills it (100,000
    running and 10,000 pending jobs), each run on a fresh copy of it, with the machine's load
    average (1 min) when it began (`python -m toposched.bench.serve`)."""
    results = []
    compile_bytecode()
    with tempfile.TemporaryDirectory(prefix="toposched-bench-restart-") as name:
        folder = Path(name)
        (folder / "budgets.yaml").write_text(yaml.safe_dump(team_tree().to_dict()))
        filled, pending = folder / "filled.db", 10_000
        begin = time.perf_counter()
        count = fill_store(filled, pending, time.time())
        fill_s = time.perf_counter() - begin
        for _ in range(runs):
            store = folder / "restart.db"
            for suffix in ("", "-wal", "-shm"):
                Path(f"{store}{suffix}").unlink(missing_ok=True)
            shutil.copyfile(filled, store)
            load = os.getloadavg()[0]
            result = _restarted(folder, store, count, pending, fill_s)
            result.extra["load_average"] = round(load, 2)
            results.append(result)
    return results


def _restarted(folder: Path, store: Path, count: int, pending: int, fill_s: float) -> Measurement:
    """A server started on `store` (filled with `count` running and `pending` pending jobs),
    timed from its spawn to the first decision a client sees."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    begin = time.time()
    ready_s: float | None = None
    with _server(folder, store, port) as process, httpx.Client(base_url=url) as client:
        deadline = time.monotonic() + 600
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                log = (folder / "server.log").read_text()[-2000:]
                raise RuntimeError(f"no decision after the restart: {log}")
            try:
                answer = client.get("/v1/events", params={"follow": "false"}, timeout=5)
            except httpx.HTTPError:
                answer = None
            if answer is not None and answer.status_code == 200:
                if ready_s is None:
                    ready_s = time.time() - begin
                if _decided(answer.text):
                    break
            time.sleep(0.02)
        decided_s = time.time() - begin
        cpu_s = _cpu_seconds(process)
    return _single(
        f"restart to first decision ({count:,} running, {pending:,} pending jobs in the store)",
        decided_s,
        RESTART_TARGET_S,
        ready_s=round(ready_s or decided_s, 2),
        server_cpu_s=None if cpu_s is None else round(sum(cpu_s), 2),
        store_fill_s=round(fill_s, 1),
    )


def _decided(stream: str) -> bool:
    for line in stream.splitlines():
        if line.startswith("data: ") and json.loads(line[6:])["kind"] in ("bound", "evicting"):
            return True
    return False


def submission_runs(runs: int, quick: bool = False) -> list[list[Measurement]]:
    """The submissions part alone, `runs` times, each on a new server and store: sustained
    submissions, then the latency at 1,000/s (`python -m toposched.bench.serve
    --submissions`)."""
    compile_bytecode()
    results = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="toposched-bench-submit-") as name:
            folder = Path(name)
            (folder / "budgets.yaml").write_text(yaml.safe_dump(team_tree().to_dict()))
            results.append(_submissions(folder, quick))
    return results


def _print_restarts(runs: int) -> None:
    for measured in restart_runs(runs):
        extra = measured.extra
        print(
            f"decided {measured.median_s:.2f} s, ready {extra['ready_s']:.2f} s, server CPU "
            f"{extra['server_cpu_s']} s, load {extra['load_average']}",
            flush=True,
        )


def _print_submissions(runs: int) -> None:
    for sustained, p50, p99 in submission_runs(runs):
        print(
            f"{sustained.extra['per_second']}/s sustained (server CPU "
            f"{_cpu_split(sustained.extra)} each); at 1,000/s p50 "
            f"{p50.median_s * 1000:.1f} ms, p90 {p99.extra['p90_ms']} ms, p99 "
            f"{p99.median_s * 1000:.1f} ms, max {p99.extra['max_ms']} ms (server CPU "
            f"{_cpu_split(p50.extra)} each), load {p99.extra['load']}",
            flush=True,
        )


def _cpu_split(extra: dict[str, Any]) -> str:
    """The server's CPU per submission: all of it, then the HTTP thread's and the loop's."""
    if extra.get("server_cpu_ms") is None:
        return "unknown"
    return (
        f"{extra['server_cpu_ms']} ms: HTTP {extra['http_thread_cpu_ms']}, "
        f"loop {extra['loop_cpu_ms']}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        prog="python -m toposched.bench.serve",
        description="Run one part of `toposched bench serve` alone, several times. By default "
        "the restart (one store filled once, each run on a fresh copy): wall time to the "
        "first decision, the server's CPU seconds and the load average at each run's start. "
        "With --submissions, the sustained submissions and the latency at 1,000/s, each run "
        "on a new server: the figures with the server's CPU per submission and the load "
        "average (1 min) before and after the latency's 10 s.",
    )
    parser.add_argument("--runs", type=int, default=3, help="runs to time (default 3)")
    parser.add_argument(
        "--submissions",
        action="store_true",
        help="time the submissions and their latency instead of the restart",
    )
    arguments = parser.parse_args()
    if arguments.submissions:
        _print_submissions(arguments.runs)
    else:
        _print_restarts(arguments.runs)
