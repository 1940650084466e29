"""The local backend with real processes: environment, logs, stops, gang failure, checkpoints,
and finding its pods again after the backend object is gone (as after a restart)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest

from toposched.backends.local import LocalBackend
from toposched.backends.local_node import local_cluster
from toposched.backends.pod_files import AttemptFiles, read_json
from toposched.backends.processes import ProcessId, is_alive, kill_group
from toposched.backends.protocol import (
    Backend,
    Launch,
    PodLaunch,
    Report,
    ReportKind,
    RunningJob,
    RunSpec,
    Stop,
)
from toposched.cluster.errors import InputError
from toposched.payload import checkpointed, pod

# Backends dropped without close() leave their Popen objects to the garbage collector.
pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

TIMEOUT = 10.0


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    """A state folder; every pod process group started under it is killed at teardown."""
    state = tmp_path / "state"
    yield state
    for pid_file in state.glob("jobs/*/*/*.pid"):
        process = ProcessId.from_json(read_json(pid_file))
        if process is not None:
            kill_group(process)
            assert wait_for(partial(gone, process)), f"{process} outlived teardown"


def gone(process: ProcessId) -> bool:
    return not is_alive(process)


def wait_for(condition: Callable[[], bool], timeout: float = TIMEOUT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def python(code: str, **env: str) -> RunSpec:
    return RunSpec((sys.executable, "-c", code), env=env)


def launch(job_id: str, run: RunSpec | None, pods: int = 1, attempt: int = 1) -> Launch:
    return Launch(
        job_id,
        attempt,
        tuple(
            PodLaunch(rank, f"local-{rank % 2}", (2 * rank, 2 * rank + 1)) for rank in range(pods)
        ),
        run,
    )


def poll_until_final(backend: Backend, job_id: str) -> list[Report]:
    """Every report about `job_id` up to and including its final one."""
    final = {ReportKind.FINISHED, ReportKind.FAILED, ReportKind.EVICTED, ReportKind.STOPPED}
    reports: list[Report] = []
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        reports += [r for r in backend.poll(time.time()) if r.job_id == job_id]
        if reports and reports[-1].kind in final:
            return reports
        time.sleep(0.02)
    raise AssertionError(f"no final report for {job_id} in {TIMEOUT} s: {reports}")


def kinds(reports: list[Report]) -> list[ReportKind]:
    return [r.kind for r in reports]


# A pod that writes "ready" once its SIGTERM handling is in place, then waits to be stopped.
WAIT_FOR_STOP = """
import os, pathlib, signal, sys, time
out = pathlib.Path(os.environ["OUT"])
def on_term(signum, frame):
    (out / "terminated").write_text("SIGTERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, {handler})
(out / "ready").write_text("")
time.sleep(60)
"""


def test_a_gang_of_two_runs_with_its_environment_and_logs(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOPOSCHED_TOKEN", "the service's own secret")
    code = """
import json, os, sys
from toposched.payload import pod
me = pod()
with open(os.path.join(os.environ["OUT"], os.environ["RANK"] + ".json"), "w") as f:
    json.dump({"env": dict(os.environ), "cwd": os.getcwd(), "pod": me.__dict__}, f)
print("hello from rank", me.rank)
print("warning on stderr", file=sys.stderr)
"""
    workdir = tmp_path / "work"
    workdir.mkdir()
    run = RunSpec(
        (sys.executable, "-c", code),
        env={"OUT": str(tmp_path), "MY_SETTING": "on", "RANK": "ignored"},
        workdir=str(workdir),
    )
    backend: Backend = LocalBackend(state_dir)
    backend.start(launch("gang", run, pods=2))
    assert backend.running() == [RunningJob("gang", 1)]
    reports = poll_until_final(backend, "gang")
    assert kinds(reports) == [ReportKind.STARTED, ReportKind.FINISHED], reports
    assert backend.running() == []
    seen = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in (0, 1)]
    for rank, record in enumerate(seen):
        env = record["env"]
        assert env["CUDA_VISIBLE_DEVICES"] == env["TOPOSCHED_GPUS"] == f"{2 * rank},{2 * rank + 1}"
        assert (env["RANK"], env["TOPOSCHED_RANK"], env["WORLD_SIZE"]) == (
            str(rank),
            str(rank),
            "2",
        )
        assert env["TOPOSCHED_JOB_ID"] == "gang" and env["TOPOSCHED_ATTEMPT"] == "1"
        assert env["TOPOSCHED_NODE"] == f"local-{rank}"
        assert env["TOPOSCHED_PEERS"] == "local-0,local-1"
        assert env["LOCAL_RANK"] == "0"
        assert env["MASTER_ADDR"] == "127.0.0.1"
        assert env["MY_SETTING"] == "on"
        assert "TOPOSCHED_TOKEN" not in env
        assert record["cwd"] == str(workdir)
        assert record["pod"]["gpus"] == [2 * rank, 2 * rank + 1]
        assert record["pod"]["peers"] == ["local-0", "local-1"]
    assert seen[0]["env"]["MASTER_PORT"] == seen[1]["env"]["MASTER_PORT"]
    for rank in (0, 1):
        log_path = backend.log_path("gang", rank)
        assert log_path is not None
        log = Path(log_path).read_text()
        assert f"hello from rank {rank}" in log and "warning on stderr" in log
    assert backend.log_path("gang", 2) is None
    assert backend.log_path("nobody", 0) is None


def test_stop_sends_sigterm_that_the_pod_catches_within_the_grace_period(
    state_dir: Path, tmp_path: Path
) -> None:
    backend = LocalBackend(state_dir)
    backend.start(
        launch("polite", python(WAIT_FOR_STOP.format(handler="on_term"), OUT=str(tmp_path)))
    )
    assert wait_for(lambda: (tmp_path / "ready").exists())
    began = time.monotonic()
    backend.stop(Stop("polite", 1, grace_s=5.0, evicted=True))
    reports = poll_until_final(backend, "polite")
    assert reports[-1].kind is ReportKind.EVICTED
    assert reports[-1].detail == "ended within the grace period"
    assert time.monotonic() - began < 5.0
    assert (tmp_path / "terminated").read_text() == "SIGTERM"


def test_a_pod_that_ignores_sigterm_is_killed_after_the_grace_period(
    state_dir: Path, tmp_path: Path
) -> None:
    backend = LocalBackend(state_dir)
    code = WAIT_FOR_STOP.format(handler="signal.SIG_IGN")
    backend.start(launch("stubborn", python(code, OUT=str(tmp_path)), pods=2))
    assert wait_for(lambda: (tmp_path / "ready").exists())
    pids = [ProcessId.from_json(read_json(p)) for p in state_dir.glob("jobs/stubborn/1/*.pid")]
    began = time.monotonic()
    backend.stop(Stop("stubborn", 1, grace_s=0.5, evicted=False))
    reports = poll_until_final(backend, "stubborn")
    assert reports[-1].kind is ReportKind.STOPPED
    assert reports[-1].detail == "killed after the grace period of 0.5 s"
    assert time.monotonic() - began >= 0.5
    assert not (tmp_path / "terminated").exists()
    assert len(pids) == 2 and not any(p is None or is_alive(p) for p in pids)


def test_one_failing_pod_fails_the_gang_and_stops_the_others(
    state_dir: Path, tmp_path: Path
) -> None:
    code = """
import os, pathlib, sys, time
if os.environ["RANK"] == "1":
    sys.exit(3)
pathlib.Path(os.environ["OUT"], "ready").write_text("")
time.sleep(60)
"""
    backend = LocalBackend(state_dir, gang_grace_s=5.0)
    backend.start(launch("gang", python(code, OUT=str(tmp_path)), pods=3))
    reports = poll_until_final(backend, "gang")
    assert reports[-1].kind is ReportKind.FAILED
    assert reports[-1].detail == "pod 1 exited with status 3"
    pids = [ProcessId.from_json(read_json(p)) for p in state_dir.glob("jobs/gang/1/*.pid")]
    assert len(pids) == 3 and not any(p is None or is_alive(p) for p in pids)
    assert backend.running() == []


def test_checkpointed_in_the_pod_becomes_a_checkpointed_report(
    state_dir: Path, tmp_path: Path
) -> None:
    code = """
import os, pathlib, time
from toposched.payload import checkpointed
checkpointed("step 7")
go = pathlib.Path(os.environ["OUT"], "go")
while not go.exists():
    time.sleep(0.01)
"""
    backend = LocalBackend(state_dir)
    backend.start(launch("saver", python(code, OUT=str(tmp_path))))
    reports: list[Report] = []

    def two_reports() -> bool:
        reports.extend(backend.poll(time.time()))
        return len(reports) >= 2

    assert wait_for(two_reports)
    assert [(r.kind, r.detail) for r in reports] == [
        (ReportKind.STARTED, ""),
        (ReportKind.CHECKPOINTED, "rank 0: step 7"),
    ]
    (tmp_path / "go").write_text("")
    assert kinds(poll_until_final(backend, "saver")) == [ReportKind.FINISHED]


def test_checkpointed_outside_a_pod_does_nothing_and_pod_names_what_is_missing() -> None:
    assert checkpointed("step 1", environ={}) is False
    with pytest.raises(InputError, match="TOPOSCHED_JOB_ID"):
        pod(environ={})


@pytest.mark.parametrize(
    ("run", "detail"),
    [
        (None, "nothing to run: the job has no run command (the local backend needs one)"),
        (RunSpec(("no-such-program-xyz", "--flag")), "'no-such-program-xyz' was not found on PATH"),
        (RunSpec(("./missing.sh",)), "'./missing.sh' is not an executable file"),
        (RunSpec(("true",), workdir="/no/such/folder"), "'/no/such/folder' is not a folder"),
    ],
)
def test_a_launch_that_cannot_run_is_reported_failed(
    state_dir: Path, run: RunSpec | None, detail: str
) -> None:
    backend = LocalBackend(state_dir)
    backend.start(launch("broken", run))
    assert backend.running() == []
    [report] = backend.poll(1.0)
    assert (report.job_id, report.kind) == ("broken", ReportKind.FAILED)
    assert detail in report.detail
    assert list(backend.poll(2.0)) == []


def test_start_refuses_another_attempt_of_a_running_job_and_ignores_a_repeat(
    state_dir: Path, tmp_path: Path
) -> None:
    backend = LocalBackend(state_dir)
    backend.start(
        launch("twice", python(WAIT_FOR_STOP.format(handler="on_term"), OUT=str(tmp_path)))
    )
    with pytest.raises(InputError, match="already running"):
        backend.start(launch("twice", python("pass"), attempt=2))
    # The same attempt again, from this backend or one made after a restart: nothing new runs.
    backend.start(launch("twice", python("pass")))
    LocalBackend(state_dir).start(launch("twice", python("pass")))
    assert len(list(state_dir.glob("jobs/twice/*/*.pid"))) == 1
    assert kinds(list(backend.poll(1.0))) == [ReportKind.STARTED]
    with pytest.raises(InputError, match="grace_s"):
        backend.stop(Stop("twice", 1, grace_s=float("nan"), evicted=True))
    assert backend.running() == [RunningJob("twice", 1)]


def test_a_new_backend_finds_a_surviving_pod_and_reports_its_end(
    state_dir: Path, tmp_path: Path
) -> None:
    code = """
import os, pathlib, time
go = pathlib.Path(os.environ["OUT"], "go")
while not go.exists():
    time.sleep(0.01)
print("done")
"""
    first = LocalBackend(state_dir)
    first.start(launch("survivor", python(code, OUT=str(tmp_path)), pods=2))
    assert kinds(list(first.poll(1.0))) == [ReportKind.STARTED]
    del first  # As if the service were killed: nobody stops the pods.

    second = LocalBackend(state_dir)
    assert second.running() == [RunningJob("survivor", 1)]
    assert list(second.poll(2.0)) == []
    (tmp_path / "go").write_text("")
    assert kinds(poll_until_final(second, "survivor")) == [ReportKind.FINISHED]
    assert second.running() == []
    log_path = second.log_path("survivor", 1)
    assert log_path is not None and Path(log_path).read_text() == "done\n"


def test_pods_that_ended_while_nobody_watched_are_reported_once(
    state_dir: Path, tmp_path: Path
) -> None:
    code = """
import os, pathlib, sys, time
go = pathlib.Path(os.environ["OUT"], "go")
while not go.exists():
    time.sleep(0.01)
sys.exit(int(os.environ["STATUS"]))
"""
    first = LocalBackend(state_dir)
    first.start(launch("fine", python(code, OUT=str(tmp_path), STATUS="0")))
    first.start(launch("broken", python(code, OUT=str(tmp_path), STATUS="5"), pods=2))
    first.poll(1.0)
    del first
    (tmp_path / "go").write_text("")
    pods = [("fine", 0), ("broken", 0), ("broken", 1)]
    exits = [state_dir / "jobs" / job / "1" / f"{rank}.exit" for job, rank in pods]
    assert wait_for(lambda: all(path.exists() for path in exits))
    # A wrapper writes its pod's status, then exits: the next backend finds them all gone.
    wrappers = [
        ProcessId.from_json(read_json(AttemptFiles(state_dir / "jobs" / job / "1").pid(rank)))
        for job, rank in pods
    ]
    assert wait_for(lambda: not any(w is not None and is_alive(w) for w in wrappers))

    second = LocalBackend(state_dir)
    reports = {r.job_id: r for r in second.poll(2.0)}
    assert reports["fine"].kind is ReportKind.FINISHED
    assert reports["broken"].kind is ReportKind.FAILED
    assert reports["broken"].detail == "pod 0 exited with status 5"
    assert second.running() == []
    # Not yet confirmed by a later poll: a backend made now would report them again.
    assert {r.job_id for r in LocalBackend(state_dir).poll(3.0)} == {"fine", "broken"}
    assert list(second.poll(4.0)) == []
    assert list(LocalBackend(state_dir).poll(5.0)) == []


def test_a_stop_under_way_survives_a_restart(state_dir: Path, tmp_path: Path) -> None:
    code = WAIT_FOR_STOP.format(handler="signal.SIG_IGN")
    first = LocalBackend(state_dir)
    first.start(launch("evictee", python(code, OUT=str(tmp_path))))
    assert wait_for(lambda: (tmp_path / "ready").exists())
    first.stop(Stop("evictee", 1, grace_s=0.3, evicted=True))
    del first

    second = LocalBackend(state_dir)
    assert second.running() == [RunningJob("evictee", 1)]
    reports = poll_until_final(second, "evictee")
    assert kinds(reports) == [ReportKind.EVICTED]
    assert os.path.exists(state_dir / "jobs" / "evictee" / "1" / "outcome.json")


def test_the_local_cluster_is_one_node_with_the_pretend_gpus() -> None:
    topology = local_cluster(gpus=4, name="box")
    assert topology.node_names == ["box"]
    assert int(topology.gpu_count[0]) == 4
    assert int(topology.cpu_milli[0]) == 1000 * (os.cpu_count() or 1)
    with pytest.raises(InputError, match="gpus"):
        local_cluster(gpus=0)
