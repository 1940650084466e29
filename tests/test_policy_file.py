"""`--policy FILE`: the scheduling policy's flags written once as a YAML or JSON mapping, for
`toposched simulate` and `toposched serve` alike."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from toposched.cli.main import build_parser, main
from toposched.cli.policy_options import policy_settings
from toposched.cluster.errors import InputError

ROOT = Path(__file__).resolve().parents[1]

AI2_1024_FLAGS = [
    "--checkpoint-wait", "1h", "--urgent-priority", "10", "--eviction-worth", "1",
    "--eviction-worth-scope", "own-account", "--checkpoint-wait-owed",
    "--checkpoint-wait-first", "1h", "--unallocated-headroom", "0.25",
    "--unallocated-headroom-reserved", "--unallocated-order", "oldest",
]  # fmt: skip
"""The recorded policy at 1,024 GPUs, as docs/simulator.md gives it in flags."""

AI2_3072_FLAGS = [
    *AI2_1024_FLAGS[: AI2_1024_FLAGS.index("--unallocated-headroom")],
    "--unallocated-headroom", "0.5", "--unallocated-headroom-reserved",
    "--unallocated-order", "oldest", "--owed-order", "least-met",
]  # fmt: skip

LITTLE_RESUMES_FLAGS = [
    "--eviction-worth", "1", "--eviction-worth-scope", "all", "--eviction-worth-unallocated",
    "--eviction-worth-owed", "--eviction-loss-budget", "100", "--eviction-worth-horizon", "4h",
    "--unallocated-admission", "1h", "--unallocated-headroom", "0.25",
    "--unallocated-headroom-reserved", "--unallocated-order", "oldest",
]  # fmt: skip
"""The policy where little work resumes, as docs/simulator.md gives it in flags."""


def settings(*words: str) -> dict[str, Any]:
    """The scheduler settings `toposched simulate` builds from these words."""
    return policy_settings(build_parser("simulate").parse_args(["simulate", *words]))


def written(tmp_path: Path, text: str, name: str = "policy.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("example", "flags"),
    [
        ("ai2-1024.yaml", AI2_1024_FLAGS),
        ("ai2-3072.yaml", AI2_3072_FLAGS),
        ("every-eviction.yaml", ["--eviction-worth", "off"]),
        ("frontier.yaml", ["--borrowing-preempts", "own-account"]),
        ("little-work-resumes.yaml", LITTLE_RESUMES_FLAGS),
        (
            "cannot-resume-unallocated.yaml",
            [
                "--eviction-worth-unallocated",
                "--unallocated-admission",
                "1h",
            ],
        ),
    ],
)
def test_the_example_policies_are_the_recorded_flags(example: str, flags: list[str]) -> None:
    from_file = settings("--policy", str(ROOT / "examples" / "policies" / example))
    assert from_file and from_file == settings(*flags)


def test_json_and_yaml_files_give_the_same_policy(tmp_path: Path) -> None:
    values = {"eviction-worth": 1, "eviction-worth-owed": True, "eviction-loss-budget": 100}
    as_json = written(tmp_path, json.dumps(values), "policy.json")
    as_yaml = written(tmp_path, "\n".join(f"{k}: {json.dumps(v)}" for k, v in values.items()))
    flags = ["--eviction-worth", "1", "--eviction-worth-owed", "--eviction-loss-budget", "100"]
    assert settings("--policy", as_json) == settings("--policy", as_yaml) == settings(*flags)


def test_named_loss_budgets_read_as_their_flag_does(tmp_path: Path) -> None:
    path = written(tmp_path, "eviction-loss-budget-for: team-b=50,team-a=2.5\n")
    flags = ["--eviction-loss-budget-for", "team-a=2.5,team-b=50"]
    assert settings("--policy", path) == settings(*flags) != {}


def test_a_zero_is_a_setting_where_the_flag_takes_one(tmp_path: Path) -> None:
    # --eviction-worth 0 is the rule at its strictest, which its refinements apply to; a
    # headroom of 0 is none, which refines nothing.
    path = written(tmp_path, "eviction-worth: 0\neviction-worth-owed: true\n")
    worth = settings("--policy", path)["contract"].worth
    assert worth.max_lost_per_gained == 0 and worth.owed_only
    path = written(tmp_path, "unallocated-headroom: 0\nunallocated-headroom-reserved: true\n")
    with pytest.raises(InputError, match="applies only with --unallocated-headroom"):
        settings("--policy", path)


def test_a_flag_on_the_command_line_wins_over_the_file(tmp_path: Path) -> None:
    path = written(tmp_path, "unallocated-headroom: 0.25\nunallocated-order: oldest\n")
    chosen = settings("--policy", path, "--unallocated-headroom", "2")
    assert chosen == settings("--unallocated-headroom", "2", "--unallocated-order", "oldest")
    # A switch the file turns off leaves the default, and an empty file changes nothing.
    assert settings("--policy", written(tmp_path, "unprotected-borrowing: false\n")) == {}
    assert settings("--policy", written(tmp_path, "")) == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "checkpoint-wait: 1h\nchekpoint-wait-first: 1h\n",
            ":2: chekpoint-wait-first: '1h' is invalid: is not a policy setting (did you mean "
            "'checkpoint-wait-first'?); the settings are spares, failed-gangs,",
        ),
        (
            "checkpoint-wait: soon\n",
            ":1: checkpoint-wait: 'soon' is invalid: must be a duration >= 0",
        ),
        (
            "checkpoint-wait: 1h\nurgent-priority: ten\n",
            ":2: urgent-priority: 'ten' is invalid: expected a whole number",
        ),
        (
            "eviction-worth-owed: yes please\n",
            ":1: eviction-worth-owed: 'yes please' is invalid: must be true or false (a switch)",
        ),
        (
            "unallocated-order: newest\n",
            ":1: unallocated-order: 'newest' is invalid: must be one of rank, oldest",
        ),
        (
            "checkpoint-wait: [1h, 2h]\n",
            ":1: checkpoint-wait: ['1h', '2h'] is invalid: must be one value, as written after",
        ),
        (
            "checkpoint-wait: 1h\ncheckpoint-wait: 2h\n",
            ":2: checkpoint-wait: 'checkpoint-wait' is invalid: duplicate key; already given at "
            "line 1",
        ),
        ("- checkpoint-wait\n", ":1: policy: ['checkpoint-wait'] is invalid: must be a mapping"),
        ("policy: other.yaml\n", ":1: policy: 'other.yaml' is invalid: is not a policy setting"),
        ("urgent-priority: 10\n", ":1: urgent-priority: 10 is invalid: applies only with"),
        (
            "eviction-worth: off\neviction-loss-budget-per-account: 10\n",
            ":2: eviction-loss-budget-per-account: 10 is invalid: has no effect with "
            "--eviction-worth off",
        ),
    ],
)
def test_a_bad_policy_file_exits_2_naming_file_line_and_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = written(tmp_path, text)
    out = tmp_path / "out"
    arguments = ["simulate", "--days", "0.01", "--no-progress", "--out", str(out)]
    assert main([*arguments, "--policy", path]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and message in error
    if message.startswith(":"):
        assert f"error: {path}{message}" in error
    assert not (out / "summary.json").exists()


def test_a_missing_policy_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "nowhere.yaml")
    assert main(["simulate", "--days", "0.01", "--out", str(tmp_path), "--policy", missing]) == 2
    assert f"policy file: '{missing}' is invalid: file not found" in capsys.readouterr().err


def test_the_server_refuses_a_bad_policy_file_before_it_starts(tmp_path: Path) -> None:
    path = written(tmp_path, "eviction-worth: lots\n")
    done = subprocess.run(
        [sys.executable, "-m", "toposched.cli.main", "serve", "--backend", "dry-run"]
        + ["--gpus", "8", "--state-dir", str(tmp_path / "state"), "--policy", path],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert f"error: {path}:1: eviction-worth: 'lots' is invalid:" in done.stderr


def test_a_run_with_the_policy_file_is_the_run_with_its_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = written(tmp_path, "checkpoint-wait: 1h\nurgent-priority: 10\nunallocated-headroom: 1\n")
    base = ["simulate", "--gpus", "256", "--days", "0.25", "--no-progress"]
    assert main([*base, "--out", str(tmp_path / "file"), "--policy", path]) == 0
    # The printed table names the settings the run changed.
    printed = capsys.readouterr().out
    assert all(word in printed for word in ("policy:", "checkpoint_wait", "admission"))
    flags = ["--checkpoint-wait", "1h", "--urgent-priority", "10", "--unallocated-headroom", "1"]
    assert main([*base, "--out", str(tmp_path / "flags"), *flags]) == 0
    assert main([*base, "--out", str(tmp_path / "default")]) == 0

    def outcome(name: str) -> tuple[object, ...]:
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        figures = (summary["counts"], summary["disruption"], summary["fairness"]["owed_met"])
        return (summary["policy"], *figures)

    assert outcome("file") == outcome("flags") != outcome("default")
    # The summary says which policy made its figures: the settings changed from the defaults.
    policy = outcome("file")[0]
    assert outcome("default")[0] == {}
    assert isinstance(policy, dict) and policy["checkpoint_wait"]["urgent_priority"] == 10
    assert policy["admission"]["headroom"] == 0.01
