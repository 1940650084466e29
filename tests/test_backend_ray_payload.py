"""The payload helper's parts for jobs on several machines, without Ray: `module:function` entry
points, the stop callback (with a real SIGTERM to a real process), and peers' addresses."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from toposched.cluster.errors import InputError
from toposched.payload import PEER_ADDRESSES, entry_point_command, pod

JOB = """
import sys, time
from pathlib import Path
from toposched.payload import on_stop, stop_requested

def add(a, b):
    print(int(a) + int(b))
    return 7

def patient(out):
    on_stop(lambda: Path(out).write_text("saved"))
    print("ready", flush=True)
    time.sleep(60)

def carries_on(out):
    on_stop(exit_status=None)
    print("ready", flush=True)
    while not stop_requested():
        time.sleep(0.01)
    Path(out).write_text("ended at a convenient point")
"""


@pytest.fixture
def job_folder(tmp_path: Path) -> Path:
    (tmp_path / "job_module.py").write_text(JOB)
    return tmp_path


def run(folder: Path, *argv: str) -> subprocess.Popen[str]:
    command = list(entry_point_command(argv[0], argv[1:]))
    command[0] = sys.executable
    return subprocess.Popen(command, cwd=folder, stdout=subprocess.PIPE, text=True)


def test_an_entry_point_is_called_with_its_arguments(job_folder: Path) -> None:
    process = run(job_folder, "job_module:add", "2", "3")
    out, _ = process.communicate(timeout=30)
    assert (out, process.returncode) == ("5\n", 7)


def test_a_bad_entry_point_is_a_clear_error(job_folder: Path) -> None:
    with pytest.raises(InputError, match="must be MODULE:FUNCTION"):
        entry_point_command("job_module.add")
    process = run(job_folder, "job_module:missing")
    process.communicate(timeout=30)
    assert process.returncode == 2


@pytest.mark.parametrize(
    ("function", "saved"), [("patient", "saved"), ("carries_on", "ended at a convenient point")]
)
def test_the_stop_callback_runs_on_sigterm(job_folder: Path, function: str, saved: str) -> None:
    out = job_folder / "out"
    process = run(job_folder, f"job_module:{function}", str(out))
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    began = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    assert time.monotonic() - began < 10
    assert out.read_text() == saved


def test_peer_addresses_are_read_when_given() -> None:
    env = {
        "TOPOSCHED_JOB_ID": "j",
        "TOPOSCHED_ATTEMPT": "1",
        "TOPOSCHED_RANK": "1",
        "TOPOSCHED_WORLD_SIZE": "2",
        "TOPOSCHED_NODE": "n2",
        "TOPOSCHED_PEERS": "n1,n2",
        "TOPOSCHED_GPUS": "0",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
    }
    assert pod(env).peer_addresses == ()
    assert pod({**env, PEER_ADDRESSES: "10.0.0.1,10.0.0.2"}).peer_addresses == (
        "10.0.0.1",
        "10.0.0.2",
    )
