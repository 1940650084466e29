"""The wrapper each local pod runs in: `python -m toposched.backends.pod FOLDER RANK -- ARGV...`.

It starts the pod's command (inheriting the wrapper's environment, working folder and output),
passes SIGTERM and SIGINT on to it, and when it ends writes its exit status whole to
`FOLDER/RANK.exit`. The status outlives the service: a backend started after a restart cannot
wait for a process it did not start, but it can read that file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType

from toposched.backends.pod_files import AttemptFiles, PodExit

USAGE = "usage: python -m toposched.backends.pod FOLDER RANK -- COMMAND [ARG...]"


def run_pod(files: AttemptFiles, rank: int, command: list[str]) -> PodExit:
    """Run `command` to its end, passing termination signals on; how it ended."""
    child: subprocess.Popen[bytes] | None = None
    received: list[int] = []
    passed_on: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if child is not None:
            passed_on.append(signum)
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    if received:
        return PodExit(-received[0], f"stopped by signal {received[0]} before it started")
    try:
        child = subprocess.Popen(command)
    except OSError as error:
        return PodExit(127, f"cannot run {command[0]!r}: {error.strerror or error}")
    if received and not passed_on:
        child.send_signal(received[0])
    return PodExit(child.wait())


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--" or not argv[1].isdigit():
        print(USAGE, file=sys.stderr)
        return 2
    files = AttemptFiles(Path(argv[0]))
    rank = int(argv[1])
    pod_exit = run_pod(files, rank, argv[3:])
    if pod_exit.detail:
        print(f"toposched: {pod_exit.detail}", file=sys.stderr, flush=True)
    files.write_exit(rank, pod_exit)
    # The pod ends with its command: whatever the command left running in the pod's process
    # group (this wrapper included) goes too, as in a container whose first process exited.
    # Only when the wrapper leads its own group, as the backend starts it.
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpgrp(), signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
