"""Random and mutated argument lists to every subcommand, through `main(argv)`.

Whatever the arguments: no exception escapes and nothing prints a traceback, the exit code is 0
(a tiny run, or --help) or 2 (a clear error), and the files given are unchanged. Arguments are
drawn so that each command fails fast or runs tiny: simulate and demo always end with a
workload that does not exist, eval with an empty traces folder, bench with an unknown option
(their real runs take minutes) and serve with a --tick it refuses before it builds or opens
anything (only its error paths are tried, never a server); `--fleet` (a 1,000,080-GPU build)
is never drawn but for serve. The client commands are given a server address nothing listens
on: they end with 2 (bad arguments or files, before any request) or 4 (no server).
"""

from __future__ import annotations

import math
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from toposched.cli.main import main
from toposched.cli.options import (
    check_count,
    check_days,
    check_pods,
    check_seed,
    check_workload_options,
)
from toposched.cluster.errors import InputError
from toposched.cluster.limits import MAX_OPTION_GPUS, check_gpus

CLUSTER = """\
levels: [rack]
defaults: {gpus: 8, gpu_model: H100}
nodes:
  - {name: n1, labels: {rack: r1}}
  - {name: n2, labels: {rack: r1}}
"""

JOB = """\
name: train
pods: 1
resources_per_pod: {gpus: 4}
"""

WORKLOAD = """\
cluster: {levels: [rack], nodes: [{name: n1, labels: {rack: r1}, gpus: 8, gpu_model: H100}]}
jobs:
  - {name: a, submit: 0, runtime: 1h, account: research, pods: 1, resources_per_pod: {gpus: 1}}
"""

# Values that break some rule, and a few tiny valid ones.
BAD_VALUES = [
    "",
    " ",
    "0",
    "-1",
    "3",
    "1.5",
    "abc",
    "nan",
    "inf",
    "-inf",
    "1e999",
    "9223372036854775808",
    "9" * 40,
    "x" * 300,
    "0x10",
    "1_0",
    "rack:0",
    "rack:x",
    ":1",
    "none",
    "\u00e9\u4e2d",
]
TINY_VALUES = ["1", "2", "4", "8", "0.01", "rack:1"]
SHARED_FLAGS = ["--gpus", "--days", "--seed", "--out", "--json", "--help", "--nosuch"]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Input files of every kind a command reads: valid, broken, binary, a folder."""
    root = tmp_path_factory.mktemp("fuzz")
    made = {
        "cluster": root / "cluster.yaml",
        "job": root / "job.yaml",
        "workload": root / "workload.yaml",
        "broken": root / "broken.yaml",
        "binary": root / "binary.yaml",
        "csv": root / "nodes.csv",
    }
    made["cluster"].write_text(CLUSTER)
    made["job"].write_text(JOB)
    made["workload"].write_text(WORKLOAD)
    made["broken"].write_text("name: [unclosed\npods: *nothing\n")
    made["binary"].write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff" * 8)
    made["csv"].write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,abc,1,1,V100\n")
    folder = root / "folder"
    folder.mkdir()
    made["folder"] = folder
    empty = root / "no-traces"
    empty.mkdir()
    made["no-traces"] = empty
    return made


def _snapshot(files: dict[str, Path]) -> dict[str, bytes | None]:
    return {name: path.read_bytes() if path.is_file() else None for name, path in files.items()}


def _run(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """`main(argv)`'s exit code (argparse's SystemExit counts as one) and its stderr."""
    try:
        code: int | str | None = main(list(argv))
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err
    assert code is None or isinstance(code, int), code
    return code or 0, err


def _word(files: dict[str, Path]) -> st.SearchStrategy[str]:
    """One argument: a value, a file, a flag, or random text that is not an option (random
    options could abbreviate --fleet)."""
    return st.one_of(
        st.sampled_from(BAD_VALUES + TINY_VALUES),
        st.sampled_from([str(path) for path in files.values()] + ["missing.yaml"]),
        st.sampled_from(SHARED_FLAGS),
        st.text(max_size=20).filter(lambda text: not text.startswith("-")),
    )


def _options(
    files: dict[str, Path], flags: list[str], values: st.SearchStrategy[str]
) -> st.SearchStrategy[list[str]]:
    """Flag-value pairs, then mutated: tokens dropped, or inserted anywhere."""
    pair = st.tuples(st.sampled_from(flags), values).map(list)
    pairs = st.lists(pair, max_size=5).map(lambda found: [word for p in found for word in p])
    return st.tuples(pairs, st.lists(st.tuples(st.integers(0, 12), _word(files)), max_size=3)).map(
        _mutated
    )


def _mutated(drawn: tuple[list[str], list[tuple[int, str]]]) -> list[str]:
    words, edits = drawn
    for position, word in edits:
        index = position % (len(words) + 1)
        if position % 3 == 0 and words:
            del words[index % len(words)]
        else:
            words.insert(index, word)
    return words


COMMANDS = [
    "simulate",
    "demo",
    "cluster show",
    "cluster build",
    "place",
    "eval",
    "bench",
    "serve",
    "any",
]


def _argv_strategies(files: dict[str, Path]) -> dict[str, st.SearchStrategy[list[str]]]:
    """Argument lists for each command (`any`: random words, no command)."""
    values = st.one_of(
        st.sampled_from(BAD_VALUES + TINY_VALUES),
        st.sampled_from([str(path) for path in files.values()]),
    )
    simulate_flags = [
        "--gpus",
        "--days",
        "--seed",
        "--out",
        "--sample-interval",
        "--cycle-every",
        "--spares",
        "--borrowed-min-runtime",
        "--save-workload",
        "--failed-gangs",
        "--cross-account",
        "--traces-dir",
    ]
    never = ["--workload", "missing-workload.yaml"]
    simulate = _options(files, simulate_flags, values).map(
        lambda words: ["simulate", *words, "--no-progress", *never]
    )
    demo = _options(files, simulate_flags, values).map(
        lambda words: ["demo", "--alone", *words, "--no-progress", *never]
    )
    show = st.tuples(_options(files, ["--help", "--nosuch"], values), _word(files)).map(
        lambda drawn: ["cluster", "show", drawn[1], *drawn[0]]
    )
    build_flags = ["--zones", "--blocks", "--racks", "--groups", "--units", "-k", "--model"]
    build = st.tuples(
        st.sampled_from(["nvl72", "superpod", "fattree", "torus"]),
        _options(
            files, build_flags, st.sampled_from(BAD_VALUES + ["1", "2", "4", "GB200", "B200"])
        ),
    ).map(lambda drawn: ["cluster", "build", drawn[0], *drawn[1]])
    place = st.tuples(
        st.one_of(
            st.just([str(files["job"])]),
            st.lists(
                st.sampled_from([str(path) for path in files.values()]), min_size=1, max_size=3
            ),
        ),
        _options(files, ["--cluster", "--policy", "--seed", "--pods"], values),
    ).map(lambda drawn: ["place", *drawn[0], "--cluster", str(files["cluster"]), *drawn[1]])
    packing = _options(files, ["--traces", "--policies", "--seeds", "--workers", "--order"], values)
    evaluate = packing.map(
        lambda words: ["eval", "packing", *words, "--traces-dir", str(files["no-traces"])]
    )
    bench = _options(files, ["--json", "--quick"], values).map(
        lambda words: ["bench", "placement", *words, "--no-such-option"]
    )
    serve_flags = [
        "--gpus",
        "--port",
        "--host",
        "--store",
        "--backend",
        "--cluster",
        "--fleet",
        "--max-body",
        "--tick",
        "--ssl-keyfile",
        "--ssl-certfile",
        "--ray-address",
        "--ray-levels",
        "--budgets",
        "--tokens",
        "--state-dir",
        "--log-level",
    ]
    serve_values = st.one_of(
        values, st.sampled_from(["local", "dry-run", "ray", "million", "127.0.0.1", "8"])
    )
    # Ends with a --tick the service refuses, so that no drawn list starts a server.
    serve = _options(files, serve_flags, serve_values).map(
        lambda words: ["serve", *words, "--tick", "0"]
    )
    anything = st.lists(_word(files), max_size=4)
    strategies = [simulate, demo, show, build, place, evaluate, bench, serve, anything]
    return dict(zip(COMMANDS, strategies, strict=True))


@pytest.fixture(scope="module")
def argv_strategies(files: dict[str, Path]) -> dict[str, st.SearchStrategy[list[str]]]:
    return _argv_strategies(files)


@pytest.mark.parametrize("command", COMMANDS)
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_any_arguments_exit_0_or_2_without_a_traceback_and_leave_files_unchanged(
    data: st.DataObject,
    files: dict[str, Path],
    argv_strategies: dict[str, st.SearchStrategy[list[str]]],
    command: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # default outputs (out/) land here
    argv = data.draw(argv_strategies[command])
    before = _snapshot(files)
    code, err = _run(argv, capsys)
    event(f"exit {code}")  # --hypothesis-show-statistics
    assert code in (0, 2), (argv, code, err)
    assert "Traceback" not in err, (argv, err)
    assert len(err) < 4000, (argv, len(err))  # a value echoed whole would flood the terminal
    assert _snapshot(files) == before, argv


# --- one rule per flag, the same message in every command ----------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--gpus", "0"],
        ["demo", "--gpus", "0"],
        ["simulate", "--workload", "frontier", "--gpus", "0"],
        ["simulate", "--workload", "itp:01", "--gpus", "0", "--compare"],
    ],
)
def test_gpus_has_one_rule_and_one_message_in_every_command(
    argv: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, err = _run([*argv, "--no-progress", "--out", str(tmp_path / "out")], capsys)
    assert code == 2
    assert "error: --gpus: 0 is invalid: must be a whole number of GPUs >= 1 (at most" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("argv", "rule"),
    [
        (["simulate", "--gpus", "3"], "the ai2 workload's cluster has 8-GPU nodes: at least 8"),
        (["demo", "--gpus", "3"], "the ai2 workload's cluster has 8-GPU nodes: at least 8"),
        (["simulate", "--workload", "itp:01", "--gpus", "4"], "the itp workload's cluster"),
        (["simulate", "--workload", "frontier", "--gpus", "3"], "the frontier fleet holds 2,160"),
    ],
)
def test_a_workloads_own_gpus_rule_is_said_as_its_rule_before_anything_is_written(
    argv: list[str],
    rule: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    code, err = _run([*argv, "--no-progress"], capsys)
    assert code == 2
    assert f"error: --gpus: {argv[-1]} is invalid: {rule}" in err
    assert not (tmp_path / "out").exists()


def test_shared_option_rules() -> None:
    assert check_gpus(8) == 8 and check_gpus(MAX_OPTION_GPUS) == MAX_OPTION_GPUS
    assert check_days(0.5) == 0.5 and check_seed(0) == 0 and check_pods(0) == 0
    assert check_count("--racks", 3, 4) == 3
    refused: list[tuple[Callable[[Any], object], float, str]] = [
        (check_gpus, MAX_OPTION_GPUS + 1, "--gpus"),
        (check_days, math.inf, "--days"),
        (check_days, math.nan, "--days"),
        (check_days, 0.0, "--days"),
        (check_seed, -1, "--seed"),
        (check_seed, 10**30, "--seed"),
        (check_pods, -1, "--pods"),
    ]
    for check, value, flag in refused:
        with pytest.raises(InputError) as caught:
            check(value)
        assert caught.value.field == flag and len(str(caught.value)) < 200
    with pytest.raises(InputError, match="at most 4"):
        check_count("--racks", 5, 4)
    check_workload_options("ai2", 8, 0, None)
    check_workload_options("itp:01", 64, None, "traces")
    check_workload_options("openb", None, None, "traces")
    check_workload_options("my-lab.jsonl", None, None, None)
    with pytest.raises(InputError, match="the frontier fleet holds 2,160 to 1,000,080"):
        check_workload_options("frontier", 1_000_081, None, None)


@pytest.mark.parametrize(
    "argv",
    [
        ["place", "job.yaml", "--cluster", "c.yaml", "--seed", "-1"],
        ["simulate", "--seed", "-1", "--no-progress"],
        ["demo", "--seed", "-1", "--no-progress"],
    ],
)
def test_seed_has_one_rule_in_every_command(
    argv: list[str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    code, err = _run(argv, capsys)
    assert code == 2
    assert "error: --seed: -1 is invalid: must be a whole number >= 0 (at most 2^63-1)" in err


def test_a_cluster_build_beyond_the_node_limit_is_refused_before_building(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, err = _run(["cluster", "build", "nvl72", "--zones", "1000", "--racks", "1000"], capsys)
    assert code == 2
    assert "nvl72: '18,000,000 nodes' is invalid:" in err and "at most 4,194,304 nodes" in err
    code, err = _run(["cluster", "build", "fattree", "-k", "3"], capsys)
    assert code == 2 and "error: -k: 3 is invalid: must be even" in err
    code, err = _run(["cluster", "build", "superpod", "--units", "0"], capsys)
    assert code == 2 and "error: --units: 0 is invalid: must be a whole number >= 1" in err


def test_traces_dir_has_one_rule_in_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    missing = str(tmp_path / "nowhere")
    rule = f"error: --traces-dir: '{missing}' is invalid: not found: must be an existing folder"
    for argv in (
        ["simulate", "--workload", "openb", "--no-progress"],
        ["simulate", "--workload", "itp:01", "--no-progress"],
        ["demo", "--no-progress"],
        ["eval", "packing"],
    ):
        code, err = _run([*argv, "--traces-dir", missing], capsys)
        assert code == 2 and rule in err, (argv, err)
    assert not (tmp_path / "out").exists()


# --- the client commands, against a port nothing listens on --------------------------------------

CLIENT_COMMANDS = ["submit", "jobs", "show", "cancel", "prio", "queue", "why", "nodes", "drain"]
CLIENT_COMMANDS += ["cordon", "uncordon", "accounts", "watch", "logs"]
CLIENT_FLAGS = ["--limit", "--tail", "--count", "--after", "--state", "--account", "--level"]
CLIENT_FLAGS += ["--idempotency-key", "--token", "--json", "--follow", "--no-follow"]


def _closed_port() -> int:
    """A loopback port nothing listens on (bound and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_client_commands_exit_2_on_bad_arguments_and_4_without_a_server(
    data: st.DataObject,
    files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every argument list ends in a clear error: 2 for bad arguments or files, found before
    any request, or 4 for the server that is not there; never a traceback."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))  # no client config file
    monkeypatch.delenv("TOPOSCHED_TOKEN", raising=False)
    values = st.one_of(
        st.sampled_from(BAD_VALUES + TINY_VALUES + ["pending", "bogus", "rack", "j1"]),
        st.sampled_from([str(path) for path in files.values()]),
    )
    command = data.draw(st.sampled_from(CLIENT_COMMANDS))
    words = data.draw(_options(files, CLIENT_FLAGS, values))
    argv = [command, *words, "--server", f"http://127.0.0.1:{_closed_port()}"]
    before = _snapshot(files)
    code, err = _run(argv, capsys)
    event(f"exit {code}")
    assert code in (0, 2, 4), (argv, code, err)
    assert "Traceback" not in err, (argv, err)
    assert len(err) < 4000, (argv, len(err))
    assert _snapshot(files) == before, argv
