"""For the job's own code: where this pod stands in its gang, and telling toposched it saved.

A pod started by toposched finds its rank, world size, peers and GPUs in its environment;
`pod()` reads them into one typed record. `checkpointed()` tells the backend the job has saved
its state (a `checkpointed` report reaches the service), so a preempted resumable job loses
little. Only the standard library is used, so importing this costs a job nothing.

    from toposched.payload import checkpointed, pod

    me = pod()
    print(me.rank, me.world_size, me.peers, me.gpus)
    ...
    save(state)
    checkpointed(f"step {step}")
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

from toposched.cluster.errors import InputError

__all__ = [
    "ATTEMPT",
    "CHECKPOINT_FILE",
    "GPUS",
    "JOB_ID",
    "NODE",
    "PEERS",
    "RANK",
    "WORLD_SIZE",
    "Pod",
    "checkpointed",
    "pod",
]

JOB_ID = "TOPOSCHED_JOB_ID"
ATTEMPT = "TOPOSCHED_ATTEMPT"
RANK = "TOPOSCHED_RANK"
WORLD_SIZE = "TOPOSCHED_WORLD_SIZE"
NODE = "TOPOSCHED_NODE"
PEERS = "TOPOSCHED_PEERS"
"""The nodes of every pod, comma-separated, in rank order."""
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
