"""The client commands end to end against a real `toposched serve` (dry-run backend, 8 GPUs
on one pretended machine) started as a process on 127.0.0.1: every command, --json, exit codes,
tokens, where the server and token come from, idempotent resubmission, the event stream."""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from toposched.cli.main import main

ADMIN_TOKEN = "admin-token-for-tests-3b7f"
TEAM_TOKEN = "team-a-token-for-tests-91c2"
READY_TIMEOUT_S = 90.0

BUDGETS = """\
accounts:
  research:
    share: 100
    children:
      team-a: {share: 50}
      team-b: {share: 50}
"""


def closed_port() -> int:
    """A free loopback port (bound and released): nothing listens there until reused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def tokens_yaml() -> str:
    def digest(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    return (
        "tokens:\n"
        f"  - {{name: ops, role: admin, sha256: {digest(ADMIN_TOKEN)}}}\n"
        f"  - {{name: team-a, role: team, accounts: [research/team-a], "
        f"sha256: {digest(TEAM_TOKEN)}}}\n"
    )


def job_yaml(name: str, pods: int, gpus: int, account: str = "research/team-a") -> str:
    return (
        f"name: {name}\n"
        f"account: {account}\n"
        f"pods: {pods}\n"
        f"resources_per_pod: {{gpus: {gpus}}}\n"
        "expected_runtime: 2h\n"
        "run:\n"
        '  command: ["python", "-c", "print(1)"]\n'
    )


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path


def start_server(root: Path, *options: str, port: int | None = None) -> Server:
    """`toposched serve` on a loopback port (a free one by default) with a store in `root`,
    once /v1/ready answers 200."""
    (root / "budgets.yaml").write_text(BUDGETS)
    (root / "tokens.yaml").write_text(tokens_yaml())
    port = closed_port() if port is None else port
    command = [sys.executable, "-m", "toposched.cli.main", "serve", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--store", str(root / "store.db")]
    command += ["--state-dir", str(root / "state"), "--budgets", str(root / "budgets.yaml")]
    command += ["--tokens", str(root / "tokens.yaml")]
    command += list(options) or ["--backend", "dry-run", "--gpus", "8"]
    log = root / "serve.log"
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, cwd=root)
    server = Server(f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"toposched serve exited {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{server.url}/v1/ready", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    stop_server(server)
    pytest.fail(f"toposched serve not ready in {READY_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


def stop_server(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


class Run:
    """Runs `toposched ARGV` through main() and captures what it printed."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self._capsys = capsys

    def __call__(self, *argv: str) -> Result:
        self._capsys.readouterr()
        code = main(list(argv))
        captured = self._capsys.readouterr()
        return Result(code, captured.out, captured.err)

    def code(self, *argv: str) -> int:
        """The exit code alone (for a command run in another thread)."""
        return main(list(argv))

    def json(self, *argv: str) -> Any:
        result = self(*argv, "--json")
        assert result.code == 0, result.err
        return json.loads(result.out)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    started = start_server(tmp_path_factory.mktemp("serve"))
    yield started
    stop_server(started)


@pytest.fixture()
def cli(
    server: Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Run:
    """`toposched ...` through main(argv) as the admin, with no config file in the way."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("TOPOSCHED_SERVER", server.url)
    monkeypatch.setenv("TOPOSCHED_TOKEN", ADMIN_TOKEN)
    return Run(capsys)


def submit(
    cli: Run, tmp_path: Path, name: str, pods: int, gpus: int, account: str = "research/team-a"
) -> dict[str, object]:
    path = tmp_path / f"{name}.yaml"
    path.write_text(job_yaml(name, pods, gpus, account))
    result = cli("submit", str(path), "--json")
    assert result.code == 0, result.err
    job: dict[str, object] = json.loads(result.out)
    return job


def test_submit_list_queue_show_why_prio_cancel(cli: Run, tmp_path: Path) -> None:
    running = submit(cli, tmp_path, "whole-box", pods=1, gpus=8)
    waiting = submit(cli, tmp_path, "waits", pods=2, gpus=2)
    assert running["id"] == "whole-box" and waiting["id"] == "waits"
    try:
        state = cli.json("show", "whole-box")
        assert state["state"] == "running" and state["nodes"] == ["local-0"]
        listed = cli.json("jobs", "--state", "pending")
        assert "waits" in [job["id"] for job in listed["jobs"]]
        assert all(job["state"] == "pending" for job in listed["jobs"])
        table = cli("jobs", "--account", "research/team-a")
        assert table.code == 0 and "whole-box" in table.out and "waits" in table.out
        queue = cli.json("queue")
        assert [entry["id"] for entry in queue["queue"]][:1] == ["waits"]
        assert "waits" in cli("queue").out

        why = cli("why", "waits")
        assert why.code == 0, why.err
        text = " ".join(why.out.split())
        assert "Job waits (research/team-a, 2 pods, 4 GPUs) is pending" in text
        assert "1st in the queue of research/team-a and 1st overall" in text
        assert "It waits (" in text and "history:" in text
        explanation = cli.json("why", "waits")
        assert explanation["id"] == "waits" and explanation["state"] == "pending"
        assert "is running since" in " ".join(cli("why", "whole-box").out.split())

        assert cli.json("prio", "waits", "5")["priority"] == 5
        assert "priority -2" in cli("prio", "waits", "-2").out
        shown = cli("show", "waits")
        assert shown.code == 0 and "pending" in shown.out and "python" in shown.out
    finally:
        assert cli("cancel", "waits").code == 0
        cancelled = cli.json("cancel", "whole-box")
    assert cancelled["id"] == "whole-box"
    again = cli("cancel", "waits")
    assert again.code == 3 and "409" in again.err and len(again.err.splitlines()) == 1


def test_resubmitting_the_same_file_makes_one_job(cli: Run, tmp_path: Path) -> None:
    path = tmp_path / "once.yaml"
    path.write_text(job_yaml("once", pods=1, gpus=1))
    first = cli("submit", str(path))
    assert first.code == 0 and "submitted: job once" in first.out
    second = cli("submit", str(path))
    assert second.code == 0 and "already submitted (same idempotency key)" in second.out
    assert [job["id"] for job in cli.json("jobs")["jobs"]].count("once") == 1
    # Another key for a name in use is a conflict, not a second job.
    renamed = cli("submit", str(path), "--idempotency-key", "another-key")
    assert renamed.code == 3 and "409" in renamed.err and "once" in renamed.err
    keyed_path = tmp_path / "keyed.yaml"
    keyed_path.write_text(job_yaml("keyed", pods=1, gpus=1))
    keyed = [cli.json("submit", str(keyed_path), "--idempotency-key", "ci-run-7") for _ in "ab"]
    assert keyed[0]["id"] == keyed[1]["id"] == "keyed"
    assert keyed[0]["submit_time"] == keyed[1]["submit_time"]
    for name in ("once", "keyed"):
        assert cli("cancel", name).code == 0


def test_missing_job_exits_3_naming_it(cli: Run) -> None:
    for argv in (["show", "no-such-job"], ["why", "no-such-job"], ["cancel", "no-such-job"]):
        result = cli(*argv)
        assert result.code == 3, argv
        assert "404" in result.err and "no-such-job" in result.err
        assert len(result.err.strip().splitlines()) == 1
        assert "Traceback" not in result.err


def test_invalid_job_exits_2_with_field_value_and_rule(cli: Run, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(job_yaml("bad", pods=0, gpus=1))
    result = cli("submit", str(path))
    # Refused by the client's light pass, as `place` refuses it, before anything is sent.
    assert result.code == 2 and "422" not in result.err
    assert f"{path}:3: pods: 0 is invalid: must be an integer >= 1" in result.err
    too_big = tmp_path / "too-big.yaml"
    too_big.write_text(job_yaml("too-big", pods=2, gpus=8))
    refused = cli("submit", str(too_big))
    assert refused.code == 2 and "422" in refused.err
    assert len(refused.err.strip().splitlines()) == 1


def test_bad_or_missing_token_exits_3_and_is_never_shown(
    cli: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOPOSCHED_TOKEN", "not-a-real-token-4242")
    result = cli("jobs")
    assert result.code == 3 and "401" in result.err
    assert "the token came from TOPOSCHED_TOKEN" in result.err
    assert "not-a-real-token-4242" not in result.err + result.out
    monkeypatch.delenv("TOPOSCHED_TOKEN")
    missing = cli("queue")
    assert missing.code == 3 and "no token was given" in missing.err


def test_team_token_sees_only_its_accounts(
    cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    submit(cli, tmp_path, "team-b-job", pods=1, gpus=1, account="research/team-b")
    try:
        monkeypatch.setenv("TOPOSCHED_TOKEN", TEAM_TOKEN)
        hidden = cli("show", "team-b-job")
        assert hidden.code == 3 and "403" in hidden.err
        not_theirs = tmp_path / "not-theirs.yaml"
        not_theirs.write_text(job_yaml("not-theirs", 1, 1, account="research/team-b"))
        refused = cli("submit", str(not_theirs))
        assert refused.code == 3 and "403" in refused.err
        assert "team-b-job" not in [job["id"] for job in cli.json("jobs")["jobs"]]
        drained = cli("drain", "local-0")
        assert drained.code == 3 and "403" in drained.err
    finally:
        monkeypatch.setenv("TOPOSCHED_TOKEN", ADMIN_TOKEN)
        cli("cancel", "team-b-job")


def test_server_and_token_flag_beat_environment_beat_config_file(
    cli: Run, server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config" / "toposched" / "client.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(f"server: {server.url}\ntoken: {ADMIN_TOKEN}\n")
    config.chmod(0o600)
    monkeypatch.delenv("TOPOSCHED_SERVER")
    monkeypatch.delenv("TOPOSCHED_TOKEN")
    from_file = cli("accounts")
    assert from_file.code == 0 and from_file.err == ""
    assert "owed GPU-h" in from_file.out and "research/team-a" in from_file.out
    monkeypatch.setenv("TOPOSCHED_TOKEN", "wrong-token")
    assert cli("accounts").code == 3  # the environment beats the file
    assert cli("accounts", "--token", ADMIN_TOKEN).code == 0  # the flag beats the environment
    monkeypatch.setenv("TOPOSCHED_TOKEN", ADMIN_TOKEN)
    monkeypatch.setenv("TOPOSCHED_SERVER", f"http://127.0.0.1:{closed_port()}")
    assert cli("accounts").code == 4  # the environment's server beats the file's
    assert cli("accounts", "--server", server.url).code == 0
    config.chmod(0o644)
    monkeypatch.delenv("TOPOSCHED_TOKEN")
    warned = cli("accounts", "--server", server.url)
    assert warned.code == 0 and "chmod 600" in warned.err and ADMIN_TOKEN not in warned.err


def test_nodes_drain_cordon_uncordon(cli: Run) -> None:
    nodes = cli.json("nodes")["nodes"]
    assert [node["name"] for node in nodes] == ["local-0"] and nodes[0]["gpus"] == 8
    assert "local-0" in cli("nodes").out
    try:
        drained = cli.json("drain", "local-0")
        assert drained["name"] == "local-0" and drained["health"] != "healthy"
        assert "local-0" in cli("cordon", "local-0").out
    finally:
        uncordoned = cli.json("uncordon", "local-0")
    assert uncordoned["health"] == "healthy"
    missing = cli("drain", "no-such-node")
    assert missing.code == 3 and "no-such-node" in missing.err


RACKS = """\
levels: [rack]
defaults: {gpus: 8, gpu_model: H100, cpu: 96, memory: 1Ti}
nodes:
  - {name: n1, labels: {rack: r1}}
  - {name: n2, labels: {rack: r1}}
  - {name: n3, labels: {rack: r2}}
"""


def test_nodes_by_page_and_by_rack(
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = tmp_path_factory.mktemp("serve-racks")
    (root / "racks.yaml").write_text(RACKS)
    racks = start_server(root, "--backend", "dry-run", "--cluster", "racks.yaml")
    try:
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
        monkeypatch.setenv("TOPOSCHED_SERVER", racks.url)
        monkeypatch.setenv("TOPOSCHED_TOKEN", ADMIN_TOKEN)
        cli = Run(capsys)
        domains = cli.json("nodes", "--level", "rack")["domains"]
        assert [(row["domain"], row["nodes"], row["gpus"]) for row in domains] == [
            ("r1", 2, 16),
            ("r2", 1, 8),
        ]
        table = cli("nodes", "--level", "rack").out
        assert "2 domains of level rack" in table and "r2" in table
        first_two = cli("nodes", "--limit", "2")
        assert first_two.code == 0 and "n2" in first_two.out and "n3" not in first_two.out
        assert "more nodes" in first_two.err
        assert [node["name"] for node in cli.json("nodes")["nodes"]] == ["n1", "n2", "n3"]
        unknown = cli("nodes", "--level", "row")
        assert unknown.code == 2 and "422" in unknown.err and "row" in unknown.err
    finally:
        stop_server(racks)


def test_accounts(cli: Run) -> None:
    answer = cli.json("accounts")
    names = [row["account"] for row in answer["accounts"]]
    assert "research/team-a" in names and "research/team-b" in names
    assert "accounts" in answer["tree"]
    assert "research/team-a" in cli("accounts").out


def test_policy_of_a_default_server_and_of_one_with_policy_flags(
    cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli.json("policy") == {}
    assert "no setting differs from the defaults" in cli("policy").out
    flags = ("--eviction-worth", "1", "--eviction-worth-owed", "--unallocated-order", "oldest")
    (tmp_path / "tuned").mkdir()
    tuned = start_server(tmp_path / "tuned", "--backend", "dry-run", "--gpus", "8", *flags)
    try:
        monkeypatch.setenv("TOPOSCHED_SERVER", tuned.url)
        policy = cli.json("policy")
        assert set(policy) == {"worth", "unallocated_order"}
        assert policy["unallocated_order"] == "oldest"
        assert policy["worth"]["max_lost_per_gained"] == 1.0 and policy["worth"]["owed_only"]
        table = cli("policy").out
        assert "2 settings changed from the defaults" in table
        assert "max_lost_per_gained=1.0" in table and "oldest" in table
        # Each setting named in its row, and a rule's fields whole, on as many lines as needed.
        named = [line.split("│")[1].strip() for line in table.splitlines() if "│" in line]
        assert {"worth", "unallocated_order"} <= set(named)
        assert "owed_only=True" in table and "restart_cost=0.0" in table
    finally:
        stop_server(tuned)


def test_watch_prints_stored_events_and_follows_new_ones(cli: Run, tmp_path: Path) -> None:
    submit(cli, tmp_path, "watched", pods=1, gpus=1)
    stored = cli("watch", "--after", "0", "--no-follow", "--json")
    assert stored.code == 0
    events = [json.loads(line) for line in stored.out.splitlines()]
    ids = [event["id"] for event in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert {"kind": "submitted", "job": "watched"}.items() <= next(
        event for event in events if event.get("job") == "watched"
    ).items()
    lines = cli("watch", "--after", "0", "--no-follow").out.splitlines()
    # The same events as lines (and any that happened in between).
    assert [int(line.split()[0]) for line in lines][: len(ids)] == ids
    assert any("submitted  watched" in line for line in lines)
    two = cli("watch", "--after", "0", "--count", "2", "--json").out.splitlines()
    assert [json.loads(line)["id"] for line in two] == ids[:2]

    # Following: a watch started after the last event sees the next one (a cancellation).
    results: list[int] = []
    follower = threading.Thread(
        target=lambda: results.append(cli.code("watch", "--after", str(ids[-1]), "--count", "1"))
    )
    follower.start()
    time.sleep(0.5)
    assert cli("cancel", "watched").code == 0
    follower.join(timeout=20)
    assert not follower.is_alive() and results == [0]


def test_watch_ends_with_exit_0_on_ctrl_c(cli: Run, server: Server, tmp_path: Path) -> None:
    submit(cli, tmp_path, "interrupted", pods=1, gpus=1)  # at least one event to print
    env = {
        **os.environ,
        "XDG_CONFIG_HOME": str(tmp_path),
        "TOPOSCHED_SERVER": server.url,
        "TOPOSCHED_TOKEN": ADMIN_TOKEN,
    }
    # A terminal's Ctrl-C: SIGINT raising KeyboardInterrupt, even where this test runs with
    # SIGINT ignored (as in a background job).
    program = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from toposched.cli.main import main; sys.exit(main(['watch', '--after', '0']))"
    )
    watcher = subprocess.Popen(
        [sys.executable, "-c", program],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert watcher.stdout is not None
    # Interrupt once it is following: it has printed the first stored event.
    ready, _, _ = select.select([watcher.stdout], [], [], 60)
    assert ready, "watch printed nothing in 60 s"
    first = watcher.stdout.readline()
    time.sleep(0.5)
    watcher.send_signal(signal.SIGINT)
    _, err = watcher.communicate(timeout=20)
    assert watcher.returncode == 0, err
    assert "Traceback" not in err
    assert first.split()[0] == "1"
    assert cli("cancel", "interrupted").code == 0


def test_logs_on_dry_run_exit_3(cli: Run, tmp_path: Path) -> None:
    submit(cli, tmp_path, "no-logs", pods=1, gpus=1)
    result = cli("logs", "no-logs")
    assert result.code == 3 and "404" in result.err and "no log" in result.err
    assert cli("cancel", "no-logs").code == 0


# Prints five numbered lines a quarter of a second apart, then exits.
COUNTING = (
    "import time\nfor i in range(5):\n    print('line', i, flush=True)\n    time.sleep(0.25)\n"
)


@pytest.fixture(scope="module")
def local_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    started = start_server(
        tmp_path_factory.mktemp("serve-local"), "--backend", "local", "--gpus", "2"
    )
    yield started
    stop_server(started)


def test_logs_of_a_real_process(
    local_server: Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("TOPOSCHED_SERVER", local_server.url)
    monkeypatch.setenv("TOPOSCHED_TOKEN", ADMIN_TOKEN)
    cli = Run(capsys)
    path = tmp_path / "count.json"
    document = {
        "name": "count",
        "account": "research/team-a",
        "pods": 1,
        "resources_per_pod": {"gpus": 1},
        "run": {"command": [sys.executable, "-c", COUNTING]},
    }
    path.write_text(json.dumps(document))
    assert cli("submit", str(path)).code == 0
    # Follows from the start (or while pending) until the job ends: every line, once.
    followed = cli("logs", "count", "--follow")
    assert followed.code == 0, followed.err
    assert followed.out.splitlines() == [f"line {i}" for i in range(5)]
    assert cli.json("show", "count")["state"] == "finished"
    assert cli("logs", "count").out.splitlines() == [f"line {i}" for i in range(5)]
    assert cli("logs", "count", "0", "--tail", "2").out == "line 3\nline 4\n"
    missing = cli("logs", "count", "3")
    assert missing.code == 3 and "404" in missing.err


def test_too_large_a_job_file_exits_3(cli: Run, tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    padding = "# padding\n" * 200_000  # 2 MB, over the server's 1 MiB default limit
    path.write_text(job_yaml("huge", pods=1, gpus=1) + padding)
    result = cli("submit", str(path))
    assert result.code == 3 and "413" in result.err
    assert len(result.err.strip().splitlines()) == 1


def test_watch_resumes_after_the_server_is_killed_and_restarted(
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = tmp_path_factory.mktemp("serve-restart")
    first = start_server(root)
    port = int(first.url.rsplit(":", 1)[1])
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("TOPOSCHED_SERVER", first.url)
    monkeypatch.setenv("TOPOSCHED_TOKEN", ADMIN_TOKEN)
    cli = Run(capsys)
    submit(cli, tmp_path, "before", pods=1, gpus=1)
    # The stored events of `before` (submitted, bound, started), then one after the restart,
    # followed from another process as from another terminal: its lines, as they come.
    command = [sys.executable, "-m", "toposched.cli.main", "watch", "--after", "0", "--count", "4"]
    follower = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(follower.stdout.readline, "")))
    reader.start()
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while len(lines) < 3 and follower.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(lines) == 3, (lines, follower.stderr.read() if follower.poll() else "")
        first.process.kill()  # a crash: the stream breaks without an end
        first.process.wait()
        second = start_server(root, port=port)
    except BaseException:
        follower.kill()
        stop_server(first)
        raise
    try:
        submit(cli, tmp_path, "after", pods=1, gpus=1)
        assert follower.wait(timeout=30) == 0, follower.stderr.read()
        reader.join(timeout=5)
        assert len(lines) == 4 and "after" in lines[3], lines
    finally:
        follower.kill()
        stop_server(second)


def test_unreachable_server_exits_4(cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOPOSCHED_SERVER", f"http://127.0.0.1:{closed_port()}")
    result = cli("jobs")
    assert result.code == 4 and "cannot reach the server" in result.err
