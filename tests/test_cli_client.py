"""The client commands without a server: options, where the server and token come from, local
input errors, an unreachable server, and how explanations read."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from toposched.cli.client import (
    ApiClient,
    ClientError,
    ExitCode,
    Explanation,
    Job,
    ServerError,
    exit_code_for_status,
)
from toposched.cli.connection import DEFAULT_SERVER, config_path, resolve_connection
from toposched.cli.follow import complete_lines, last_lines, new_output
from toposched.cli.jobs import default_idempotency_key, read_job_file
from toposched.cli.main import main
from toposched.cli.remote import duration
from toposched.cli.why import explanation_sentences, ordinal
from toposched.cluster.errors import InputError

JOB = """\
name: train-7b
account: research/team-a
pods: 2
resources_per_pod: {gpus: 4}
run:
  command: ["python", "-c", "print(1)"]
"""


def closed_port() -> int:
    """A loopback port nothing listens on (bound and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def write_config(home: Path, text: str, mode: int = 0o600) -> Path:
    path = config_path({"XDG_CONFIG_HOME": str(home)})
    path.parent.mkdir(parents=True)
    path.write_text(text)
    path.chmod(mode)
    return path


# -- where the server and the token come from ---------------------------------------------------


def test_flag_beats_environment_beats_config_file(tmp_path: Path) -> None:
    write_config(tmp_path, "server: http://file:1\ntoken: from-file\n")
    env = {
        "XDG_CONFIG_HOME": str(tmp_path),
        "TOPOSCHED_SERVER": "http://env:2",
        "TOPOSCHED_TOKEN": "from-env",
    }
    flagged = resolve_connection("http://flag:3/", "from-flag", env)
    assert (flagged.server, flagged.token) == ("http://flag:3", "from-flag")
    assert (flagged.server_source, flagged.token_source) == ("--server", "--token")
    from_env = resolve_connection(None, None, env)
    assert (from_env.server, from_env.token) == ("http://env:2", "from-env")
    only_file = {"XDG_CONFIG_HOME": str(tmp_path)}
    from_file = resolve_connection(None, None, only_file)
    assert (from_file.server, from_file.token) == ("http://file:1", "from-file")
    mixed = resolve_connection(None, "from-flag", only_file)
    assert (mixed.server, mixed.token) == ("http://file:1", "from-flag")


def test_defaults_without_flags_environment_or_file(tmp_path: Path) -> None:
    connection = resolve_connection(None, None, {"XDG_CONFIG_HOME": str(tmp_path)})
    assert connection.server == DEFAULT_SERVER == "http://127.0.0.1:8080"
    assert connection.token is None


def test_config_file_under_home_without_xdg(tmp_path: Path) -> None:
    assert config_path({"HOME": str(tmp_path)}) == tmp_path / ".config/toposched/client.yaml"


def test_token_never_in_repr(tmp_path: Path) -> None:
    connection = resolve_connection(None, "s3cret-token", {"XDG_CONFIG_HOME": str(tmp_path)})
    assert "s3cret-token" not in repr(connection)


def test_config_file_readable_by_others_warns(tmp_path: Path) -> None:
    path = write_config(tmp_path, "token: from-file\n", mode=0o644)
    warnings: list[str] = []
    connection = resolve_connection(None, None, {"XDG_CONFIG_HOME": str(tmp_path)}, warnings.append)
    assert connection.token == "from-file"
    assert len(warnings) == 1 and "chmod 600" in warnings[0] and str(path) in warnings[0]
    assert "from-file" not in warnings[0]
    path.chmod(0o600)
    warnings.clear()
    resolve_connection(None, None, {"XDG_CONFIG_HOME": str(tmp_path)}, warnings.append)
    assert warnings == []


def test_config_file_not_read_when_flags_say_everything(tmp_path: Path) -> None:
    write_config(tmp_path, "token: x\n", mode=0o644)
    warnings: list[str] = []
    resolve_connection("http://a:1", "t", {"XDG_CONFIG_HOME": str(tmp_path)}, warnings.append)
    assert warnings == []


@pytest.mark.parametrize(
    ("text", "field", "rule"),
    [
        ("servre: http://x:1\n", "servre", "unknown key"),
        ("server: 8080\n", "server", "non-empty string"),
        ("- server\n", "client.yaml", "must be a mapping"),
        ("server: [unclosed\n", "client.yaml", "not valid YAML"),
    ],
)
def test_bad_config_file_names_field_and_rule(
    tmp_path: Path, text: str, field: str, rule: str
) -> None:
    write_config(tmp_path, text)
    with pytest.raises(InputError) as raised:
        resolve_connection(None, None, {"XDG_CONFIG_HOME": str(tmp_path)})
    assert field in str(raised.value) and rule in str(raised.value)


def test_bad_token_in_config_file_is_not_shown(tmp_path: Path) -> None:
    write_config(tmp_path, "token: 12345678\n")
    with pytest.raises(InputError) as raised:
        resolve_connection(None, None, {"XDG_CONFIG_HOME": str(tmp_path)})
    assert "12345678" not in str(raised.value)


@pytest.mark.parametrize("url", ["127.0.0.1:8080", "ftp://host", "http://"])
def test_server_must_be_an_http_url(tmp_path: Path, url: str) -> None:
    with pytest.raises(InputError, match="http:// or https://"):
        resolve_connection(url, None, {"XDG_CONFIG_HOME": str(tmp_path)})


# -- exit codes without a server -----------------------------------------------------------------


def test_exit_codes_for_statuses() -> None:
    assert [int(code) for code in ExitCode] == [0, 2, 3, 4]
    assert exit_code_for_status(422) == ExitCode.BAD_INPUT
    assert exit_code_for_status(415) == ExitCode.BAD_INPUT
    for status in (401, 403, 404, 409, 413):
        assert exit_code_for_status(status) == ExitCode.REFUSED
    for status in (500, 502, 503):
        assert exit_code_for_status(status) == ExitCode.UNAVAILABLE


def test_server_error_names_field_value_and_rule_once() -> None:
    plain = ServerError(
        422, "invalid", "pods: 0 is invalid: must be >= 1", "pods", "0", "must be >= 1"
    )
    assert str(plain) == "server answered 422 invalid: pods: 0 is invalid: must be >= 1"
    terse = ServerError(422, "invalid", "bad job", "pods", "0", "must be >= 1")
    assert (
        str(terse)
        == "server answered 422 invalid: bad job (field pods; value '0'; rule: must be >= 1)"
    )


def test_unreachable_server_exits_4_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    server = f"http://127.0.0.1:{closed_port()}"
    for argv in (["queue"], ["jobs", "--json"], ["why", "x"], ["watch", "--no-follow"]):
        code = main([*argv, "--server", server, "--token", "s3cret-token"])
        captured = capsys.readouterr()
        assert code == 4, argv
        assert captured.out == ""
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and f"cannot reach the server at {server}" in lines[0]
        assert "s3cret-token" not in captured.err


def test_unreachable_server_from_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("TOPOSCHED_SERVER", f"http://127.0.0.1:{closed_port()}")
    assert main(["accounts"]) == 4
    assert "(from TOPOSCHED_SERVER): connection failed" in capsys.readouterr().err


def test_server_that_never_answers_is_a_timeout(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        server = f"http://127.0.0.1:{listener.getsockname()[1]}"
        connection = resolve_connection(server, None, {"XDG_CONFIG_HOME": str(tmp_path)})
        with ApiClient(connection, timeout_s=0.5) as client, pytest.raises(ClientError) as raised:
            client.queue()
    assert raised.value.exit_code == ExitCode.UNAVAILABLE
    assert "no answer in time" in str(raised.value) and "(from --server)" in str(raised.value)


# -- local input ---------------------------------------------------------------------------------


def test_submit_unreadable_or_invalid_files_exit_2_before_any_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    good = tmp_path / "good.yaml"
    good.write_text(JOB)
    cases = {
        "missing.yaml": (None, "is invalid: file not found"),
        "bad.yaml": ("name: [x\n", "is not valid YAML"),
        "bad.json": ('{"name": ', "is not valid JSON"),
        "list.yaml": ("- name: a\n- name: b\n", "list.yaml:1: job: 'list' is invalid: must be"),
        "two.yaml": ("name: a\n---\nname: b\n", "exactly one job"),
        # A job document's fields are JobSpec's but those the server sets, and `run`.
        "runn.yaml": (JOB + "runn: {command: [sleep, '1']}\n",
                      "unknown field (did you mean 'run'?); valid fields are name, account"),
        "when.yaml": (JOB + "submit_time: 5\n", "submit_time: 5 is invalid: is set by the server"),
        "empty.yaml": ("", "exactly one job"),
        "binary.yaml": (b"\xff\xfe\x00junk", "is not UTF-8 text (byte 0xff at offset 0)"),
        # Within the limits every loader keeps: aliases expand to at most 100,000 values.
        "laughs.yaml": ("a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\nb: &b [" + "*a, " * 99 + "*a]\n"
                        "c: [" + "*b, " * 199 + "*b]\n", "YAML aliases expand"),
    }  # fmt: skip
    # A closed port: reaching the network would be exit 4, so exit 2 shows nothing was sent.
    server = f"http://127.0.0.1:{closed_port()}"
    for name, (content, rule) in cases.items():
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif content is not None:
            path.write_text(content)
        assert main(["submit", str(good), str(path), "--server", server]) == 2, name
        err = capsys.readouterr().err
        assert name in err and rule in err, (name, err)
        assert len(err.strip().splitlines()) == 1
        if "valid fields are" in err:
            assert err.rstrip().endswith(", pod_sets, run") and "submit_time" not in err


def test_job_file_is_sent_unchanged_with_its_type(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(JOB)
    job_file = read_job_file(path, None)
    assert job_file.body == JOB.encode()
    assert job_file.content_type == "application/yaml"
    json_path = tmp_path / "job.json"
    json_path.write_text(json.dumps({"name": "j", "pods": 1, "resources_per_pod": {"gpus": 1}}))
    assert read_job_file(json_path, "k").content_type == "application/json"
    assert read_job_file(json_path, "k").idempotency_key == "k"


def test_default_idempotency_key_follows_content_and_path(tmp_path: Path) -> None:
    first = tmp_path / "a.yaml"
    second = tmp_path / "b.yaml"
    key = default_idempotency_key(first, JOB.encode())
    assert key == default_idempotency_key(first, JOB.encode())
    assert key != default_idempotency_key(second, JOB.encode())
    assert key != default_idempotency_key(first, JOB.encode() + b"# changed\n")
    assert len(key) <= 200


def test_idempotency_key_too_long_is_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    path = tmp_path / "job.yaml"
    path.write_text(JOB)
    server = f"http://127.0.0.1:{closed_port()}"
    assert main(["submit", str(path), "--idempotency-key", "k" * 201, "--server", server]) == 2
    assert "--idempotency-key" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["submit"],
        ["prio", "job"],
        ["prio", "job", "high"],
        ["jobs", "--state", "sleeping"],
        ["logs"],
        ["watch", "--after", "x"],
        ["show", "a", "b"],
    ],
)
def test_bad_usage_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(argv)
    assert raised.value.code == 2
    assert "usage: toposched" in capsys.readouterr().err


CLIENT_COMMANDS = ["submit", "queue", "jobs", "show", "why", "cancel", "prio", "nodes", "drain"]
CLIENT_COMMANDS += ["cordon", "uncordon", "accounts", "watch", "logs"]


@pytest.mark.parametrize("name", CLIENT_COMMANDS)
def test_every_client_command_teaches_with_examples_and_exit_codes(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as raised:
        main([name, "--help"])
    assert raised.value.code == 0
    help_text = capsys.readouterr().out
    assert f"toposched {name}" in help_text.split("examples:")[1]
    assert "exit codes:" in help_text and "4  cannot reach the server" in help_text
    if name == "submit":
        assert "never makes a second job" in " ".join(help_text.split())


# -- how things read -----------------------------------------------------------------------------


def test_ordinals_and_durations() -> None:
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 102, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "102nd", "111th",
    ]  # fmt: skip
    assert [duration(s) for s in (5, 90, 330, 2400, 7500, 200_000)] == [
        "5s", "1m30s", "5m30s", "40m", "2h05m", "2d07h",
    ]  # fmt: skip


def test_new_output_of_a_growing_log() -> None:
    assert new_output("", "a\nb\n") == "a\nb\n"
    assert new_output("a\nb\n", "a\nb\nc\n") == "c\n"
    # The window of the last 3 lines slid by two.
    assert new_output("a\nb\nc\n", "c\nd\ne\n") == "d\ne\n"
    # A new attempt started the log again: all of it is new.
    assert new_output("a\nb\nc\n", "x\n") == "x\n"
    assert complete_lines("a\nb\npart") == "a\nb\n"
    assert complete_lines("part") == ""


def test_last_lines() -> None:
    assert last_lines("a\nb\nc\n", 2) == "b\nc\n"
    assert last_lines("a\nb", 5) == "a\nb"
    assert last_lines("a\nb\n", 0) == ""


def _job(**fields: object) -> Job:
    job = {
        "id": "big", "account": "research/team-a", "priority": 0, "state": "pending",
        "pods": 18, "gpus": 72.0, "submit_time": 1000.0, "start_time": None, "end_time": None,
        "reason": "", "unallocated": False, "preemptions": 0, "attempts": 0, "nodes": [],
        "spec": {},
    }  # fmt: skip
    job.update(fields)
    return job  # type: ignore[return-value]


def test_pending_explanation_reads_as_sentences() -> None:
    explanation: Explanation = {
        "id": "big",
        "state": "pending",
        "position": {"account": 1, "overall": 4},
        "sort_key": [],
        "reason": "needs 18 free nodes in one rack; the fullest rack has 11",
        "code": "capacity",
        "reservation": {"start_time": 1000.0 + 600 + 2400, "domain": "rack r3"},
        "history": [],
    }
    sentences = explanation_sentences(explanation, _job(), now=1600.0)
    assert sentences == [
        "Job big (research/team-a, 18 pods, 72 GPUs) is pending, submitted 10m ago.",
        "It is 1st in the queue of research/team-a and 4th overall.",
        "It waits (capacity): needs 18 free nodes in one rack; the fullest rack has 11.",
        "Its start is reserved in rack r3 in ~40m (at " + sentences[3].split("(at ")[1],
    ]
    explanation["reservation"] = {"start_time": 1500.0, "domain": "rack r3"}
    assert explanation_sentences(explanation, _job(), now=1600.0)[-1].startswith(
        "Its reserved start in rack r3 was 1m40s ago ("
    )
    explanation["reservation"] = None
    assert explanation_sentences(explanation, _job(), now=1600.0)[-1] == (
        "No start is reserved for it yet."
    )
    explanation["reservation_note"] = "a start is reserved only for jobs of 8 GPUs or more"
    assert explanation_sentences(explanation, _job(), now=1600.0)[-1] == (
        "A start is reserved only for jobs of 8 GPUs or more."
    )
    del explanation["reservation_note"]
    # The job's own reason (what blocks it) apart from the queue order before it.
    blocked = _job(reason="needs 18 free nodes in one rack")
    explanation["reason"] = "#4 big research FS=1; priority 0; needs 18 free nodes in one rack"
    sentences = explanation_sentences(explanation, blocked, now=1600.0)
    assert "It waits (capacity): needs 18 free nodes in one rack." in sentences
    assert "Its order in the queue: #4 big research FS=1; priority 0." in sentences


def test_running_and_ended_explanations() -> None:
    explanation: Explanation = {
        "id": "big", "state": "running", "position": None, "sort_key": [], "reason": "running",
        "code": None, "reservation": None, "history": [],
    }  # fmt: skip
    running = _job(state="running", start_time=1000.0, nodes=["n1", "n2"], attempts=2,
                   preemptions=1)  # fmt: skip
    sentences = explanation_sentences(explanation, running, now=1090.0)
    assert sentences[0].endswith("is running since " + sentences[0].split("since ")[1])
    assert "(1m30s) on n1, n2." in sentences[0]
    assert sentences[1] == "It has been preempted 1 time and started 2 times."
    explanation["state"] = "failed"
    explanation["reason"] = "pod 0 exited with status 1"
    failed = _job(state="failed", start_time=1000.0, end_time=1060.0)
    sentences = explanation_sentences(explanation, failed, now=1120.0)
    assert sentences[0].startswith("Job big (research/team-a, 18 pods, 72 GPUs) failed at ")
    assert sentences[0].endswith("(1m00s ago) after running 1m00s.")
    assert sentences[1] == "Reason: pod 0 exited with status 1."
