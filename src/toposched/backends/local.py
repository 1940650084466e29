"""A backend that runs each pod's command as a process on this machine.

Every pod runs under a small wrapper (`toposched.backends.pod`) in a session of its own, with
its GPU indices in `CUDA_VISIBLE_DEVICES`, its place in the gang in the environment, and its
output captured to `<state>/jobs/<job>/<attempt>/<rank>.log`. All the backend knows is kept in
that folder (see `toposched.backends.pod_files`), so a backend made after the service was
killed finds the pods that survived it, and learns how the others ended from the exit status
their wrappers wrote.

A job is a gang: when one pod fails, the others are stopped and the job is reported `FAILED`
naming that pod; it is `FINISHED` when every pod exited 0. A stop sends SIGTERM to each pod
(the wrapper passes it on), and SIGKILL to each pod's process group once the grace period is
over, checked at each poll. A job's final report comes once all of its pods are gone, so its
GPUs are free when the service hears of it.

Reports are handed over at least once: a final report is taken as delivered at the next poll
(or `close`); if the service dies before that, a backend made after the restart reports it
again. The service should poll once before it reconciles with `running()`, so jobs that ended
while it was down come as finished or failed rather than lost.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from toposched import payload
from toposched.backends.pod_files import (
    AttemptFiles,
    PodExit,
    job_folder_name,
    read_json,
    write_json,
)
from toposched.backends.processes import ProcessId, identify, is_alive, kill_group, terminate
from toposched.backends.protocol import (
    Launch,
    PodLaunch,
    Report,
    ReportKind,
    RunningJob,
    RunSpec,
    Stop,
)
from toposched.backends.stopping import Stopping, final_report
from toposched.cluster.errors import InputError

__all__ = ["DEFAULT_GANG_GRACE", "LocalBackend", "pod_environment"]

DEFAULT_GANG_GRACE = 10.0
"""Seconds the other pods of a failed gang get between SIGTERM and SIGKILL."""
MASTER_ADDR = "127.0.0.1"
"""Every pod runs on this machine, so the gang meets on loopback."""
_OWN_PREFIX = "TOPOSCHED_"
"""The service's own settings (its token, its store) are not passed on to pods."""


@dataclass
class _Pod:
    rank: int
    process: ProcessId | None
    """The wrapper, leader of the pod's process group; None if it never started."""
    ended: PodExit | None = None


@dataclass
class _Attempt:
    """One attempt of a job whose pods may still run."""

    job_id: str
    attempt: int
    files: AttemptFiles
    pods: list[_Pod]
    started_reported: bool = False
    stopping: Stopping | None = None
    checkpoint_seen: int = 0


@dataclass(frozen=True)
class _Outcome:
    """A final report waiting for the next poll (a launch that could not start, or one found
    ended after a restart); `files` is None when nothing was written for it."""

    job_id: str
    attempt: int
    kind: ReportKind
    detail: str
    files: AttemptFiles | None


@dataclass
class _Delivery:
    """Attempts whose final report the last poll returned: marked delivered at the next."""

    files: list[AttemptFiles] = field(default_factory=list)

    def confirm(self) -> None:
        for files in self.files:
            files.delivered.touch()
        self.files.clear()


def pod_environment(
    launch: Launch, pod: PodLaunch, checkpoint_file: Path, master_port: int
) -> dict[str, str]:
    """The variables toposched sets for `pod` (on top of the service's environment and the
    job's `run.env`, which cannot override them)."""
    nodes = [p.node for p in sorted(launch.pods, key=lambda p: p.rank)]
    same_node = [p.rank for p in launch.pods if p.node == pod.node]
    gpus = ",".join(str(index) for index in pod.gpus)
    return {
        "CUDA_VISIBLE_DEVICES": gpus,
        payload.JOB_ID: launch.job_id,
        payload.ATTEMPT: str(launch.attempt),
        payload.RANK: str(pod.rank),
        payload.WORLD_SIZE: str(len(launch.pods)),
        payload.NODE: pod.node,
        payload.PEERS: ",".join(nodes),
        payload.GPUS: gpus,
        payload.CHECKPOINT_FILE: str(checkpoint_file),
        "RANK": str(pod.rank),
        "WORLD_SIZE": str(len(launch.pods)),
        "LOCAL_RANK": str(sorted(same_node).index(pod.rank)),
        "LOCAL_WORLD_SIZE": str(len(same_node)),
        "MASTER_ADDR": MASTER_ADDR,
        "MASTER_PORT": str(master_port),
    }


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((MASTER_ADDR, 0))
        port: int = probe.getsockname()[1]
        return port


def _command_problem(launch: Launch, env: dict[str, str]) -> str | None:
    """Why `launch` cannot be started at all, or None."""
    run = launch.run
    if run is None:
        return "nothing to run: the job has no run command (the local backend needs one)"
    if not run.command:
        return "nothing to run: run.command is empty"
    if run.workdir is not None and not Path(run.workdir).is_dir():
        return f"run.workdir {run.workdir!r} is not a folder on this machine"
    program = run.command[0]
    if os.sep in program:
        path = Path(run.workdir or ".") / program
        if not (path.is_file() and os.access(path, os.X_OK)):
            return f"run.command[0] {program!r} is not an executable file"
    elif shutil.which(program, path=env.get("PATH")) is None:
        return f"run.command[0] {program!r} was not found on PATH"
    return None


class LocalBackend:
    """Runs pods as processes on this machine; everything it knows lives under `state_dir`.

    `gang_grace_s`: seconds between SIGTERM and SIGKILL for the other pods of a failed gang.
    `python`: the interpreter that runs the pod wrapper (toposched must be importable by it).
    `clock`: wall-clock seconds, for grace deadlines that outlive a restart.
    """

    def __init__(
        self,
        state_dir: str | Path,
        gang_grace_s: float = DEFAULT_GANG_GRACE,
        python: str = sys.executable,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not gang_grace_s >= 0:
            raise InputError("gang_grace_s", gang_grace_s, "must be a number of seconds >= 0")
        self.state_dir = Path(state_dir)
        self.gang_grace_s = gang_grace_s
        self.python = python
        self._clock = clock
        self._attempts: dict[str, _Attempt] = {}
        self._outcomes: list[_Outcome] = []
        self._delivery = _Delivery()
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        (self.state_dir / "jobs").mkdir(parents=True, exist_ok=True)
        self._recover()

    # The protocol.

    def start(self, launch: Launch) -> None:
        """Start every pod; a launch that cannot run becomes a `FAILED` report.

        An attempt launched before (by this backend or one before a restart) is not launched
        again: the service may carry out a stored decision twice. Another attempt of a job
        still running is refused with an InputError.
        """
        files = AttemptFiles.of(self.state_dir, launch.job_id, launch.attempt)
        if files.launch.exists():
            return
        current = self._attempts.get(launch.job_id)
        if current is not None:
            raise InputError(
                "job_id", launch.job_id, f"is already running (attempt {current.attempt})"
            )
        env = {k: v for k, v in os.environ.items() if not k.startswith(_OWN_PREFIX)}
        env.update(launch.run.env if launch.run is not None else {})
        problem = _command_problem(launch, env)
        if problem is None:
            try:
                self._launch(launch, files, env)
                return
            except OSError as error:
                problem = f"cannot start the pods: {error}"
        self._outcomes.append(
            _Outcome(launch.job_id, launch.attempt, ReportKind.FAILED, problem, None)
        )

    def stop(self, stop: Stop) -> None:
        """SIGTERM to every pod, SIGKILL after `grace_s`; a stop of an attempt that is not
        running (or that ended by itself meanwhile) changes nothing."""
        if not stop.grace_s >= 0:
            raise InputError("grace_s", stop.grace_s, "must be a number of seconds >= 0")
        attempt = self._attempts.get(stop.job_id)
        if attempt is None or attempt.attempt != stop.attempt:
            return
        self._collect_exits(attempt)
        if all(pod.ended is not None for pod in attempt.pods):
            return  # It ended by itself; the next poll reports how.
        kind = ReportKind.EVICTED if stop.evicted else ReportKind.STOPPED
        current = attempt.stopping
        if current is None:
            self._begin_stop(attempt, kind, stop.grace_s, "")
        elif current.kind is not ReportKind.FAILED:
            current.deadline = min(current.deadline, self._clock() + stop.grace_s)
            write_json(attempt.files.stop, current.to_json())

    def poll(self, now: float) -> Sequence[Report]:
        self._delivery.confirm()
        reports: list[Report] = []
        for outcome in self._outcomes:
            reports.append(
                Report(outcome.job_id, outcome.attempt, outcome.kind, now, outcome.detail)
            )
            if outcome.files is not None:
                self._delivery.files.append(outcome.files)
        self._outcomes.clear()
        for attempt in list(self._attempts.values()):
            reports.extend(self._poll_attempt(attempt, now))
        return reports

    def running(self) -> Sequence[RunningJob]:
        return [RunningJob(a.job_id, a.attempt) for a in self._attempts.values()]

    def log_path(self, job_id: str, rank: int) -> str | None:
        """The log of pod `rank` of the job's running attempt, else of its latest one."""
        attempt = self._attempts.get(job_id)
        if attempt is not None:
            path = attempt.files.log(rank)
        else:
            folder = self.state_dir / "jobs" / job_folder_name(job_id)
            attempts = [int(p.name) for p in folder.glob("*") if p.name.isdigit()]
            if not attempts:
                return None
            path = AttemptFiles(folder / str(max(attempts))).log(rank)
        return str(path) if path.is_file() else None

    def close(self) -> None:
        """Stop watching; the pods keep running and a later backend on `state_dir` finds them."""
        self._delivery.confirm()

    # Starting.

    def _launch(self, launch: Launch, files: AttemptFiles, env: dict[str, str]) -> None:
        assert launch.run is not None
        files.folder.mkdir(parents=True, exist_ok=True)
        port = _free_port()
        write_json(
            files.launch,
            {
                "job_id": launch.job_id,
                "attempt": launch.attempt,
                "ranks": sorted(pod.rank for pod in launch.pods),
                "master_port": port,
            },
        )
        attempt = _Attempt(launch.job_id, launch.attempt, files, [])
        self._attempts[launch.job_id] = attempt
        for pod in sorted(launch.pods, key=lambda p: p.rank):
            pod_env = {**env, **pod_environment(launch, pod, files.checkpoint, port)}
            attempt.pods.append(self._spawn(files, pod.rank, launch.run, pod_env))

    def _spawn(self, files: AttemptFiles, rank: int, run: RunSpec, env: dict[str, str]) -> _Pod:
        """Start pod `rank` under its wrapper, in a session of its own; a pod that cannot be
        started is returned as ended, which fails the gang at the next poll."""
        wrapper = [self.python, "-m", "toposched.backends.pod", str(files.folder), str(rank), "--"]
        try:
            with open(files.log(rank), "ab") as log:
                child = subprocess.Popen(
                    [*wrapper, *run.command],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=run.workdir,
                    start_new_session=True,
                )
        except OSError as error:
            return _Pod(rank, None, PodExit(127, f"could not be started: {error}"))
        self._children[child.pid] = child
        process = identify(child.pid)
        try:
            write_json(files.pid(rank), process.to_json())
        except OSError as error:
            # Unrecorded, it could not be found after a restart: end it now.
            kill_group(process)
            return _Pod(rank, process, PodExit(-9, f"could not be recorded: {error}"))
        return _Pod(rank, process)

    # Watching.

    def _alive(self, process: ProcessId) -> bool:
        child = self._children.get(process.pid)
        if child is not None:
            if child.poll() is None:
                return True
            del self._children[process.pid]
            return False
        return is_alive(process)

    def _collect_exits(self, attempt: _Attempt) -> None:
        """Note every pod whose wrapper is gone since the last look, with the status it wrote."""
        for pod in attempt.pods:
            if pod.ended is not None or (pod.process is not None and self._alive(pod.process)):
                continue
            pod.ended = attempt.files.read_exit(pod.rank)
            if pod.ended is None:
                killed = attempt.stopping is not None and attempt.stopping.killed
                why = "killed after the grace period" if killed else "ended without a status"
                pod.ended = PodExit(-9, why)

    def _poll_attempt(self, attempt: _Attempt, now: float) -> list[Report]:
        reports: list[Report] = []
        if not attempt.started_reported:
            attempt.started_reported = True
            reports.append(Report(attempt.job_id, attempt.attempt, ReportKind.STARTED, now))
        checkpoint = self._checkpoint_detail(attempt)
        if checkpoint is not None:
            reports.append(
                Report(attempt.job_id, attempt.attempt, ReportKind.CHECKPOINTED, now, checkpoint)
            )
        self._collect_exits(attempt)
        if attempt.stopping is None:
            failed = [p for p in attempt.pods if p.ended is not None and p.ended.returncode != 0]
            if failed:
                assert failed[0].ended is not None
                detail = failed[0].ended.describe(failed[0].rank)
                self._begin_stop(attempt, ReportKind.FAILED, self.gang_grace_s, detail)
        if all(pod.ended is not None for pod in attempt.pods):
            reports.append(self._finish(attempt, now))
        elif attempt.stopping is not None and not attempt.stopping.killed:
            if self._clock() >= attempt.stopping.deadline:
                attempt.stopping.killed = True
                for pod in attempt.pods:
                    if pod.ended is None and pod.process is not None:
                        kill_group(pod.process)
        return reports

    def _begin_stop(self, attempt: _Attempt, kind: ReportKind, grace_s: float, detail: str) -> None:
        attempt.stopping = Stopping(kind, grace_s, detail, deadline=self._clock() + grace_s)
        write_json(attempt.files.stop, attempt.stopping.to_json())
        for pod in attempt.pods:
            if pod.ended is None and pod.process is not None:
                terminate(pod.process)

    def _finish(self, attempt: _Attempt, now: float) -> Report:
        """The final report of an attempt whose pods are all gone, kept on disk until delivered."""
        report = final_report(attempt.stopping, attempt.job_id, attempt.attempt, now)
        write_json(attempt.files.outcome, {"kind": report.kind.value, "detail": report.detail})
        del self._attempts[attempt.job_id]
        for pod in attempt.pods:
            if pod.process is not None:
                self._children.pop(pod.process.pid, None)
        self._delivery.files.append(attempt.files)
        return report

    def _checkpoint_detail(self, attempt: _Attempt) -> str | None:
        """What the job's latest new checkpoint line says ("rank 0: step 100"), if there is one."""
        try:
            with open(attempt.files.checkpoint, "rb") as handle:
                handle.seek(attempt.checkpoint_seen)
                fresh = handle.read()
        except OSError:
            return None
        complete = fresh[: fresh.rfind(b"\n") + 1]
        if not complete:
            return None
        attempt.checkpoint_seen += len(complete)
        write_json(attempt.files.checkpoint_seen, attempt.checkpoint_seen)
        try:
            last = json.loads(complete.splitlines()[-1])
            rank, note = last.get("rank"), str(last.get("note") or "")
        except (ValueError, AttributeError):
            return "checkpointed"
        return f"rank {rank}: {note}" if note else f"rank {rank}"

    # Recovery.

    def _recover(self) -> None:
        """Pick up every attempt not yet fully reported, left by an earlier backend."""
        folders = [f for f in (self.state_dir / "jobs").glob("*/*") if f.name.isdigit()]
        for folder in sorted(folders, key=lambda f: (f.parent.name, int(f.name))):
            files = AttemptFiles(folder)
            if not files.delivered.exists():
                self._recover_attempt(files)

    def _recover_attempt(self, files: AttemptFiles) -> None:
        launched = read_json(files.launch)
        if not isinstance(launched, dict) or not isinstance(launched.get("ranks"), list):
            return  # The crash came before any pod started.
        job_id, number = str(launched["job_id"]), int(launched["attempt"])
        outcome = read_json(files.outcome)
        if isinstance(outcome, dict) and outcome.get("kind") in [k.value for k in ReportKind]:
            kind = ReportKind(outcome["kind"])
            self._outcomes.append(
                _Outcome(job_id, number, kind, str(outcome.get("detail", "")), files)
            )
            return
        pods = []
        for rank in launched["ranks"]:
            process = ProcessId.from_json(read_json(files.pid(rank)))
            ended = None
            if process is None:
                ended = files.read_exit(rank) or PodExit(
                    -9, "was never started (the service stopped while starting it)"
                )
            pods.append(_Pod(rank, process, ended))
        seen = read_json(files.checkpoint_seen)
        self._attempts[job_id] = _Attempt(
            job_id,
            number,
            files,
            pods,
            started_reported=True,
            stopping=Stopping.from_json(read_json(files.stop)),
            checkpoint_seen=seen if isinstance(seen, int) else 0,
        )
