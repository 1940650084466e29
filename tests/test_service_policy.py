"""The scheduling policy's flags: `toposched serve` takes those of `toposched simulate`, asks
for the same settings with them, rejects a flag given without the one it refines before it
starts, and a server runs the policy they ask for."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from service_helpers import job, serving

from toposched.cli.main import build_parser, main
from toposched.cli.policy_options import policy_settings
from toposched.scheduler.settings import SchedulerSettings
from toposched.service import views

POLICY = [
    "--eviction-worth",
    "1",
    "--eviction-worth-owed",
    "--eviction-loss-budget",
    "100",
    "--checkpoint-wait",
    "1h",
    "--urgent-priority",
    "10",
    "--unallocated-headroom",
    "2",
    "--unallocated-order",
    "oldest",
    "--owed-order",
    "least-met",
    "--owed-half-life",
    "12h",
    "--borrowed-min-runtime",
    "10m",
    "--borrowing-preempts",
    "own-account",
]


def chosen(argv: list[str]) -> dict[str, object]:
    """The settings `argv` asks for that differ from the defaults."""
    args = build_parser().parse_args(argv)
    return SchedulerSettings.of(None, policy_settings(args)).changes()


def test_serve_and_simulate_ask_for_the_same_settings() -> None:
    served = chosen(["serve", "--gpus", "8", *POLICY])
    simulated = chosen(["simulate", *POLICY])
    assert served == simulated
    assert set(served) == {
        "worth",
        "checkpoint_wait",
        "admission",
        "unallocated_order",
        "owed_order",
        "owed_half_life",
        "borrowed_min_runtime",
        "borrowing_preempts",
    }
    assert chosen(["serve", "--gpus", "8"]) == {}


def test_serve_rejects_a_policy_flag_without_the_one_it_refines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "state.db"
    code = main(["serve", "--gpus", "8", "--store", str(store), "--urgent-priority", "10"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--urgent-priority" in err and "applies only with --checkpoint-wait" in err
    assert "Traceback" not in err
    assert not store.exists()


def test_serve_refuses_spares_at_a_level_the_cluster_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One 8-GPU node has no racks: refused before a store is made or a port bound.
    store = tmp_path / "state.db"
    argv = ["serve", "--gpus", "8", "--store", str(store), "--spares", "rack:1"]
    argv += ["--state-dir", str(tmp_path / "state")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--spares: 'rack' is invalid: unknown level" in err and "Traceback" not in err
    assert not store.exists() and not (tmp_path / "state").exists()


def test_serve_help_lists_the_policy_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = capsys.readouterr().out
    assert "scheduling policy" in text
    for flag in ("--eviction-worth", "--checkpoint-wait", "--unallocated-headroom"):
        assert flag in text


def queue_after_filling(
    server_args: tuple[str, ...], folder: Path
) -> tuple[list[str], dict[str, object], str]:
    """The queue's order of four unallocated jobs of two accounts, submitted one after the
    other while budgeted jobs fill every GPU, the policy the server reports, and its log."""
    folder.mkdir()
    with serving(
        folder, "--cluster", "cluster.yaml", "--budgets", "budgets.yaml", *server_args
    ) as server:
        with server.client() as client:
            for number in range(4):
                filler = job(f"fill{number}", min_runtime="1h", expected_runtime="2h")
                assert client.post("/v1/jobs", json=filler).status_code == 201
            wait_running(client, [f"fill{number}" for number in range(4)])
            for name, account in (
                ("u1", "prod"),
                ("u2", "research/team-a"),
                ("u3", "prod"),
                ("u4", "research/team-a"),
            ):
                spare = job(name, account=account, min_runtime="0s", expected_runtime="1h")
                assert client.post("/v1/jobs", json=spare).status_code == 201
                time.sleep(0.01)  # submission times apart
            queue = client.get("/v1/queue").json()["queue"]
            policy = client.get("/v1/policy").json()["policy"]
        return [row["id"] for row in queue], policy, server.log.read_text()


def wait_running(client: httpx.Client, names: list[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = {client.get(f"/v1/jobs/{name}").json()["state"] for name in names}
        if states == {"running"}:
            return
        time.sleep(0.1)
    raise AssertionError(f"not all running: {states}")


def test_a_server_runs_the_policy_its_flags_ask_for(tmp_path: Path) -> None:
    # Oldest first, the unallocated tier interleaves the two accounts by submission; by the
    # accounts' rank (the default) each account's jobs follow one another.
    oldest, policy, log = queue_after_filling(
        ("--unallocated-order", "oldest"), tmp_path / "oldest"
    )
    assert oldest == ["u1", "u2", "u3", "u4"]
    assert policy == {"unallocated_order": "oldest"}
    assert 'scheduling policy: unallocated_order="oldest"' in log
    ranked, policy, log = queue_after_filling((), tmp_path / "rank")
    assert ranked in (["u1", "u3", "u2", "u4"], ["u2", "u4", "u1", "u3"])
    assert policy == {}
    assert "scheduling policy" not in log
    # The same setting from a policy file.
    written = tmp_path / "policy.yaml"
    written.write_text("unallocated-order: oldest\n")
    from_file, policy, _ = queue_after_filling(("--policy", str(written)), tmp_path / "file")
    assert from_file == oldest and policy == {"unallocated_order": "oldest"}


def test_a_server_walks_the_whole_queue_as_often_as_asked(tmp_path: Path) -> None:
    # The same queue with every cycle a full one as with cycles that skip settled jobs; the
    # server says what it runs.
    skipping, policy, _ = queue_after_filling(("--full-cycle-every", "0"), tmp_path / "never")
    assert policy == {"full_cycle_every": 0.0}
    full, policy, _ = queue_after_filling(("--full-cycle-every", "always"), tmp_path / "always")
    assert policy == {"incremental": False}
    assert full == skipping
    served = build_parser().parse_args(["serve", "--gpus", "8", "--full-cycle-every", "90s"])
    simulated = build_parser().parse_args(["simulate", "--full-cycle-every", "90s"])
    assert served.full_cycle_every == simulated.full_cycle_every == 90.0


def test_the_policy_reads_as_json_with_every_rule_by_its_fields() -> None:
    args = build_parser().parse_args(["serve", "--gpus", "8", *POLICY, "--spares", "node:1"])
    settings = SchedulerSettings.of(None, policy_settings(args))
    served = SimpleNamespace(scheduler=SimpleNamespace(settings=settings))
    policy = json.loads(json.dumps(views.policy_view(served), allow_nan=False))["policy"]
    assert policy["worth"]["max_lost_per_gained"] == 1.0
    assert policy["worth"]["owed_only"] is True
    assert policy["worth"]["loss_budget"] == 100 * 3600  # GPU-seconds, as the rule keeps it
    assert policy["worth"]["scope"] == "cannot-resume"
    assert policy["checkpoint_wait"]["max_wait"] == 3600.0
    assert policy["checkpoint_wait"]["urgent_priority"] == 10
    assert policy["admission"]["headroom"] == 0.02
    assert policy["unallocated_order"] == "oldest"
    assert policy["owed_order"] == "least-met"
    assert policy["owed_half_life"] == 12 * 3600.0
    assert policy["borrowed_min_runtime"] == 600.0
    assert policy["borrowing_preempts"] == "own-account"
    assert policy["spares"] == ["node", 1]


def test_the_rule_turned_off_reads_as_null() -> None:
    args = build_parser().parse_args(["serve", "--gpus", "8", "--eviction-worth", "off"])
    settings = SchedulerSettings.of(None, policy_settings(args))
    served = SimpleNamespace(scheduler=SimpleNamespace(settings=settings))
    assert views.policy_view(served) == {"policy": {"worth": None}}
