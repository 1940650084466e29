"""Jobs the Ray backend's tests run, as `module:function` entry points
(`python -m toposched.payload ray_jobs:FUNCTION ARG...`, with this folder as working folder).

`allreduce` is the worked example of docs/ray.md: a gang that sums a value over every rank at
each step through plain sockets, meeting at rank 0, checkpointing each step and resuming from
its checkpoints after a preemption.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

from toposched.payload import checkpointed, on_stop, pod


def report_place(out_dir: str) -> int:
    """Write where this pod runs and what it was given to OUT_DIR/<rank>.json."""
    me = pod()
    place = {
        "rank": me.rank,
        "world_size": me.world_size,
        "node": me.node,
        "peers": list(me.peers),
        "peer_addresses": list(me.peer_addresses),
        "gpus": list(me.gpus),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "master_addr": me.master_addr,
        "master_port": me.master_port,
        "greeting": os.environ.get("GREETING"),
        "cwd": os.getcwd(),
        "node_group": _raylet_group(),
    }
    Path(out_dir, f"{me.rank}.json").write_text(json.dumps(place))
    return 0


def _raylet_group() -> int | None:
    """The process group of the raylet this pod descends from (its pod actor is one of the
    raylet's workers): the group of the node's `ray start`."""
    pid = os.getppid()
    while pid > 1:
        stat = Path(f"/proc/{pid}/stat").read_text()
        name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        if name == "raylet":
            return os.getpgid(pid)
        pid = int(fields.split()[1])
    return None


def hold(seconds: str) -> int:
    """Run for SECONDS; on toposched's stop, report a checkpoint and end. Reports a "ready"
    checkpoint once it can handle the stop."""
    on_stop(lambda: checkpointed("saved at stop"))
    checkpointed("ready")
    time.sleep(float(seconds))
    return 0


def stubborn(seconds: str) -> int:
    """Ignore the stop signal and run for SECONDS: only the hard stop ends it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    checkpointed("ready")
    time.sleep(float(seconds))
    return 0


def fail_rank(rank: str, status: str) -> int:
    """Pod RANK ends with STATUS after a moment; the others run on."""
    on_stop()
    if pod().rank == int(rank):
        time.sleep(0.5)
        return int(status)
    time.sleep(600)
    return 0


def _connect(address: str, port: int, timeout_s: float = 30.0) -> socket.socket:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return socket.create_connection((address, port), timeout=timeout_s)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class _Ring:
    """Rank 0 and a connection to every other rank (or, elsewhere, one to rank 0)."""

    def __init__(self) -> None:
        me = pod()
        self.rank, self.size = me.rank, me.world_size
        self.links: list[socket.socket] = []
        if self.rank == 0:
            server = socket.create_server((me.master_addr, me.master_port))
            for _ in range(self.size - 1):
                link, _ = server.accept()
                self.links.append(link)
            server.close()
        else:
            self.links.append(_connect(me.master_addr, me.master_port))
        self.readers = [link.makefile("r") for link in self.links]

    def reduce(self, value: float, how: str = "sum") -> float:
        """`value` summed (or its minimum) over every rank, known to every rank."""
        if self.rank != 0:
            self.links[0].sendall(f"{value}\n".encode())
            return float(self.readers[0].readline())
        values = [value, *(float(reader.readline()) for reader in self.readers)]
        result = sum(values) if how == "sum" else min(values)
        for link in self.links:
            link.sendall(f"{result}\n".encode())
        return result


def allreduce(steps: str, state_dir: str, step_s: str = "0.2") -> int:
    """STEPS steps of an all-reduce of (rank + 1) * (step + 1), saved in STATE_DIR after each
    step; a later attempt resumes at the last step every rank saved. Writes the outcome to
    STATE_DIR/done-<rank>.json."""
    me = pod()
    ring = _Ring()
    state_file = Path(state_dir, f"rank-{me.rank}.json")
    totals: list[float] = json.loads(state_file.read_text()) if state_file.exists() else []
    start = int(ring.reduce(len(totals), how="min"))
    totals = totals[:start]
    on_stop(lambda: checkpointed(f"stopping after step {len(totals)}"))
    for step in range(start, int(steps)):
        total = (totals[-1] if totals else 0.0) + ring.reduce((me.rank + 1) * (step + 1))
        totals.append(total)
        temporary = state_file.with_suffix(".tmp")
        temporary.write_text(json.dumps(totals))
        temporary.replace(state_file)
        checkpointed(f"step {step + 1}")
        time.sleep(float(step_s))
    outcome = {"resumed_from": start, "total": totals[-1], "attempt": me.attempt}
    Path(state_dir, f"done-{me.rank}.json").write_text(json.dumps(outcome))
    return 0
