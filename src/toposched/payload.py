"""For the job's own code: where this pod stands in its gang, and telling toposched it saved.

A pod started by toposched finds its rank, world size, peers and GPUs in its environment;
`pod()` reads them into one typed record. `checkpointed()` tells the backend the job has saved
its state (a `checkpointed` report reaches the service), so a preempted resumable job loses
little. `on_stop()` runs a callback (e.g. a last checkpoint) when toposched stops the pod, within
the grace period before the hard stop. Only the standard library is used, so importing this
costs a job nothing.

    from toposched.payload import checkpointed, on_stop, pod

    me = pod()
    print(me.rank, me.world_size, me.peers, me.gpus)
    on_stop(lambda: save(state))
    ...
    save(state)
    checkpointed(f"step {step}")

A job can also name a function to run rather than a command: `python -m toposched.payload
MODULE:FUNCTION [ARG...]` imports MODULE and calls FUNCTION with the arguments as strings
(`entry_point_command` builds that command); what it returns, if an int, is the exit status.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType

from toposched.cluster.errors import InputError

__all__ = [
    "ATTEMPT",
    "CHECKPOINT_FILE",
    "GPUS",
    "JOB_ID",
    "NODE",
    "PEERS",
    "PEER_ADDRESSES",
    "RANK",
    "WORLD_SIZE",
    "Pod",
    "checkpointed",
    "entry_point_command",
    "on_stop",
    "pod",
    "run_entry_point",
    "stop_requested",
]

JOB_ID = "TOPOSCHED_JOB_ID"
ATTEMPT = "TOPOSCHED_ATTEMPT"
RANK = "TOPOSCHED_RANK"
WORLD_SIZE = "TOPOSCHED_WORLD_SIZE"
NODE = "TOPOSCHED_NODE"
PEERS = "TOPOSCHED_PEERS"
"""The nodes of every pod, comma-separated, in rank order."""
PEER_ADDRESSES = "TOPOSCHED_PEER_ADDRESSES"
"""The network address of every pod's node, comma-separated, in rank order (set by backends
whose pods run on several machines, e.g. Ray)."""
GPUS = "TOPOSCHED_GPUS"
"""This pod's GPU indices on its node, comma-separated (also in CUDA_VISIBLE_DEVICES)."""
CHECKPOINT_FILE = "TOPOSCHED_CHECKPOINT_FILE"
"""A file the backend watches; `checkpointed()` appends a line to it."""


@dataclass(frozen=True)
class Pod:
    """This pod of a toposched job, as its environment describes it."""

    job_id: str
    attempt: int
    rank: int
    world_size: int
    node: str
    peers: tuple[str, ...]
    gpus: tuple[int, ...]
    local_rank: int
    master_addr: str
    master_port: int
    peer_addresses: tuple[str, ...] = ()
    """Where each pod's node is reached, in rank order; empty when every pod runs on one
    machine (then `master_addr` reaches them all)."""


def _get(environ: Mapping[str, str], name: str) -> str:
    value = environ.get(name)
    if value is None:
        raise InputError(name, None, "must be set: this process was not started by toposched")
    return value


def _int(environ: Mapping[str, str], name: str) -> int:
    value = _get(environ, name)
    if not value.isdigit():
        raise InputError(name, value, "must be a whole number >= 0")
    return int(value)


def _list(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    value = _get(environ, name)
    return tuple(value.split(",")) if value else ()


def pod(environ: Mapping[str, str] | None = None) -> Pod:
    """This pod, read from `environ` (default: the process environment).

    Raises InputError naming the variable that is missing or malformed.
    """
    env = os.environ if environ is None else environ
    job_id = _get(env, JOB_ID)
    gpus = _list(env, GPUS)
    if not all(index.isdigit() for index in gpus):
        raise InputError(GPUS, env[GPUS], "must be comma-separated whole numbers")
    return Pod(
        job_id=job_id,
        attempt=_int(env, ATTEMPT),
        rank=_int(env, RANK),
        world_size=_int(env, WORLD_SIZE),
        node=_get(env, NODE),
        peers=_list(env, PEERS),
        gpus=tuple(int(index) for index in gpus),
        local_rank=_int(env, "LOCAL_RANK"),
        master_addr=_get(env, "MASTER_ADDR"),
        master_port=_int(env, "MASTER_PORT"),
        peer_addresses=tuple(a for a in env.get(PEER_ADDRESSES, "").split(",") if a),
    )


def checkpointed(note: str = "", environ: Mapping[str, str] | None = None) -> bool:
    """Tell the backend this pod's job saved its state; `note` (e.g. "step 1200") goes along.

    Returns False, doing nothing, outside a toposched pod (no checkpoint file is set), so the
    same code runs anywhere.
    """
    env = os.environ if environ is None else environ
    path = env.get(CHECKPOINT_FILE)
    if not path:
        return False
    line = json.dumps({"time": time.time(), "rank": env.get(RANK), "note": note})
    # One short write in append mode: lines from several pods never interleave.
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")
    return True


_stop_requested = False


def stop_requested() -> bool:
    """Whether toposched asked this pod to stop (after `on_stop` installed the handler)."""
    return _stop_requested


def on_stop(callback: Callable[[], object] | None = None, exit_status: int | None = 0) -> None:
    """On toposched's stop signal (SIGTERM, sent at the start of the grace period): call
    `callback` (e.g. save a checkpoint, then `checkpointed()`), then exit with `exit_status`.

    With `exit_status` None the pod carries on instead, and can end at a convenient point by
    testing `stop_requested()`. The callback runs in the main thread, between two Python
    statements of whatever it was doing. Call from the main thread.
    """

    def handle(signum: int, frame: FrameType | None) -> None:
        global _stop_requested
        first = not _stop_requested
        _stop_requested = True
        if first and callback is not None:
            callback()
        if exit_status is not None:
            sys.exit(exit_status)

    signal.signal(signal.SIGTERM, handle)


_ENTRY_POINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def _entry_point(entry: str) -> Callable[..., object]:
    """The function `entry` ("package.module:function") names; InputError when it does not."""
    if not _ENTRY_POINT.match(entry):
        raise InputError("entry point", entry, "must be MODULE:FUNCTION, e.g. train.main:run")
    module_name, _, attribute = entry.partition(":")
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as error:
        raise InputError("entry point", entry, f"cannot import {module_name}: {error}") from None
    for part in attribute.split("."):
        target = getattr(target, part, None)
    if not callable(target):
        raise InputError("entry point", entry, f"{module_name} has no function {attribute}")
    return target


def entry_point_command(entry: str, args: Sequence[str] = ()) -> tuple[str, ...]:
    """The command that runs `entry` ("module:function") with `args` in a pod: Python runs
    `toposched.payload`, which calls the function. The entry point's form is checked here;
    whether it imports is found out on the node."""
    if not _ENTRY_POINT.match(entry):
        raise InputError("entry point", entry, "must be MODULE:FUNCTION, e.g. train.main:run")
    return ("python", "-m", "toposched.payload", entry, *args)


def run_entry_point(argv: Sequence[str]) -> int:
    """`python -m toposched.payload MODULE:FUNCTION [ARG...]`: call the function with the
    arguments; its exit status (0 unless it returns an int or raises)."""
    if not argv:
        print("usage: python -m toposched.payload MODULE:FUNCTION [ARG...]", file=sys.stderr)
        return 2
    sys.path.insert(0, os.getcwd())
    try:
        function = _entry_point(argv[0])
    except InputError as error:
        print(f"toposched: {error}", file=sys.stderr)
        return 2
    result = function(*argv[1:])
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


if __name__ == "__main__":
    sys.exit(run_entry_point(sys.argv[1:]))
