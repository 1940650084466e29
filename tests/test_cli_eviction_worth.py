"""`toposched simulate --eviction-worth` and `--checkpoint-wait`: the cost/benefit rules of
preemption from the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from toposched.cli.main import main


def _disruption(out: Path, *flags: str) -> dict[str, object]:
    arguments = ["simulate", "--workload", "ai2", "--gpus", "256", "--days", "1", "--seed", "3"]
    assert main([*arguments, "--no-progress", "--out", str(out), *flags]) == 0
    disruption: dict[str, object] = json.loads((out / "summary.json").read_text())["disruption"]
    return disruption


def test_a_zero_ratio_evicts_no_allocated_work(tmp_path: Path) -> None:
    contract_only = _disruption(tmp_path / "contract", "--eviction-worth", "off")
    lost = contract_only["gpu_hours_lost_by_cause"]
    assert isinstance(lost, dict) and lost["evictions_of_allocated_work"] > 0
    allowed = lost["evictions_of_allocated_work"]
    never = _disruption(
        tmp_path / "never", "--eviction-worth", "0", "--eviction-worth-scope", "all"
    )
    lost = never["gpu_hours_lost_by_cause"]
    # Only victims that had just checkpointed go (the rule sees nothing to lose); each still
    # runs its 30 s grace period, and that is all that is lost.
    assert isinstance(lost, dict) and lost["evictions_of_allocated_work"] < 0.01 * allowed
    # Unallocated work is not weighed: budgeted work still reclaims it.
    assert lost["evictions_of_unallocated_work"] > 0
    reclaimed = lost["evictions_of_unallocated_work"]
    weighed = _disruption(
        tmp_path / "weighed",
        *("--eviction-worth", "0", "--eviction-worth-scope", "all"),
        "--eviction-worth-unallocated",
    )
    lost = weighed["gpu_hours_lost_by_cause"]
    # Weighed too, unallocated work is evicted only when it loses nothing (a checkpoint at
    # the moment, and its grace period).
    assert isinstance(lost, dict) and lost["evictions_of_unallocated_work"] < 0.01 * reclaimed
    assert lost["evictions_of_allocated_work"] < 0.01 * allowed


def test_the_loss_budget_caps_the_work_thrown_away_in_a_day(tmp_path: Path) -> None:
    # Without a budget the contract's evictions throw away about 235 GPU-hours of budgeted work
    # on this day; a ratio of 1,000 refuses almost nothing, so the 5 GPU-hour budget is what
    # binds. The rule weighs the work lost when it decides; a victim also loses its 30 s grace
    # period, which the budget does not count (a victim that had just checkpointed costs the
    # budget nothing and still loses its 30 s), hence the margin.
    capped = _disruption(
        tmp_path,
        *("--eviction-worth", "1000", "--eviction-worth-scope", "all"),
        *("--eviction-loss-budget", "5"),
    )
    lost = capped["gpu_hours_lost_by_cause"]
    assert isinstance(lost, dict) and 0 < lost["evictions_of_allocated_work"] <= 5 * 1.5
    assert lost["evictions_of_unallocated_work"] > 0


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--eviction-worth", "-1"], "a number >= 0"),
        (["--eviction-worth", "nan"], "a number >= 0"),
        (["--eviction-worth", "never"], "a number >= 0 (e.g. 1; or off, no rule)"),
        (["--eviction-worth", "1", "--eviction-worth-horizon", "0"], "a duration > 0"),
        (
            ["--eviction-worth", "off", "--eviction-worth-horizon", "2h"],
            "has no effect with --eviction-worth off",
        ),
        (
            ["--eviction-worth", "off", "--eviction-worth-owed"],
            "has no effect with --eviction-worth off",
        ),
        (["--eviction-worth", "1", "--eviction-loss-budget", "0"], "a number > 0"),
        (["--eviction-worth", "1", "--eviction-loss-budget", "inf"], "a number > 0"),
        (
            ["--eviction-worth", "off", "--eviction-worth-scope", "own-account"],
            "has no effect with --eviction-worth off",
        ),
        (["--eviction-worth", "1", "--eviction-worth-scope", "mine"], "invalid choice"),
        (
            ["--eviction-worth", "off", "--eviction-worth-restart", "5m"],
            "'5m' is invalid: has no effect with --eviction",
        ),
        (
            ["--eviction-worth", "off", "--eviction-worth-unallocated"],
            "has no effect with --eviction-worth off",
        ),
        (
            ["--eviction-worth", "off", "--eviction-worth-shortfall", "2"],
            "shortfall: 2 is invalid: has no effect with",
        ),
        (
            ["--eviction-worth", "off", "--eviction-loss-budget", "100"],
            "budget: 100 is invalid: has no effect with",
        ),
        (
            ["--eviction-worth", "off", "--eviction-loss-budget-per-account", "25"],
            "account: 25 is invalid: has no effect",
        ),
        (["--eviction-worth", "1", "--eviction-loss-budget-per-account", "0"], "a number > 0"),
        (["--eviction-loss-budget-for", "team-a"], "ACCOUNT=GPU_HOURS pairs"),
        (["--eviction-loss-budget-for", "team-a=0"], "each budget a number > 0"),
        (["--eviction-loss-budget-for", "a=1,a=2"], "each account once"),
        (["--eviction-loss-budget-for", "=5"], "ACCOUNT=GPU_HOURS pairs"),
        (
            ["--eviction-worth", "off", "--eviction-loss-budget-for", "a=5,b=2.5"],
            "--eviction-loss-budget-for: 'a=5,b=2.5' is invalid: has no effect with",
        ),
        (
            ["--eviction-loss-budget-for", "team-z=5"],
            "'team-z' is invalid: names no account of the budget tree",
        ),
        (["--eviction-worth", "1", "--eviction-worth-shortfall", "-1"], "a number >= 0"),
        (["--eviction-worth", "1", "--eviction-worth-shortfall", "much"], "a number >= 0"),
        (
            ["--eviction-worth", "off", "--eviction-worth-horizon", "90m"],
            "'1h30m' is invalid: has no effect with",
        ),
        (["--eviction-worth", "1", "--eviction-worth-restart", "-5m"], "--eviction-worth-restart"),
        (["--eviction-worth", "1", "--eviction-worth-restart", "soon"], "--eviction-worth-restart"),
        (["--checkpoint-wait", "0"], "a duration > 0"),
        (["--checkpoint-wait", "soon"], "--checkpoint-wait"),
        (["--urgent-priority", "10"], "applies only with --checkpoint-wait"),
        (["--checkpoint-wait", "1h", "--urgent-priority", "high"], "invalid int value"),
        (["--checkpoint-wait-owed"], "applies only with --checkpoint-wait"),
        (["--checkpoint-wait-first", "1h"], "applies only with --checkpoint-wait"),
        (["--checkpoint-wait-total", "2h"], "applies only with --checkpoint-wait"),
        (["--checkpoint-wait", "1h", "--checkpoint-wait-first", "0"], "a duration > 0"),
    ],
)
def test_bad_values_exit_2_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    assert_exits_2_before_the_run(tmp_path, capsys, flags, message)


def assert_exits_2_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    """`toposched simulate` with `flags` exits with code 2 saying `message`, and writes no
    summary."""
    arguments = ["simulate", "--days", "1", "--gpus", "256", "--out", str(tmp_path), *flags]
    try:
        code: int | str | None = main(arguments)
    except SystemExit as exit_info:
        code = exit_info.code
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "summary.json").exists()


def contract_of(*flags: str) -> Any:
    """The contract of the scheduler `toposched simulate` builds with `flags`."""
    from toposched.cli.main import build_parser
    from toposched.cli.simulate_run import scheduler_factory
    from toposched.cluster.builders import nvl72_cluster
    from toposched.cluster.state import ClusterState
    from toposched.policy.budget import BudgetTree
    from toposched.scheduler.core import Scheduler

    args = build_parser("simulate").parse_args(["simulate", *flags])
    state = ClusterState(nvl72_cluster(1, 1, 1, nodes_per_rack=2))
    sched = scheduler_factory(args)(state, BudgetTree.from_dict({"accounts": {"a": 100}}))
    assert isinstance(sched, Scheduler)
    return sched.contract


def test_the_checkpoint_wait_options_reach_the_scheduler() -> None:
    from toposched.policy.checkpoint_wait import CheckpointWait

    def rule(*flags: str) -> CheckpointWait | None:
        wait: CheckpointWait | None = contract_of(*flags).checkpoint_wait
        return wait

    assert rule() is None
    assert rule("--checkpoint-wait", "30m") == CheckpointWait(max_wait=1800.0)
    chosen = rule(
        "--checkpoint-wait",
        "1h",
        "--checkpoint-wait-first",
        "45m",
        "--checkpoint-wait-owed",
        "--checkpoint-wait-total",
        "2h",
    )
    assert chosen == CheckpointWait(
        max_wait=3600.0, first_checkpoint=2700.0, owed_only=True, max_total_wait=7200.0
    )


def test_the_refinements_reach_the_rule() -> None:
    from toposched.cli.main import build_parser
    from toposched.cli.policy_options import policy_settings
    from toposched.policy.contract import Contract
    from toposched.policy.worth import EvictionWorth, WorthScope

    def rule(*flags: str) -> EvictionWorth | None:
        args = build_parser("simulate").parse_args(["simulate", *flags])
        contract = policy_settings(args).get("contract", Contract())
        return contract.worth

    assert rule("--eviction-worth", "off") is None
    assert rule("--eviction-worth", "2") == EvictionWorth(2.0, scope=WorthScope.CANNOT_RESUME)
    assert rule("--eviction-worth-scope", "all") == EvictionWorth(scope=WorthScope.ALL)
    assert rule("--eviction-worth", "1") == EvictionWorth(1.0)
    restarting = rule("--eviction-worth", "1", "--eviction-worth-restart", "5m")
    assert restarting == EvictionWorth(1.0, restart_cost=300.0)
    scoped = rule("--eviction-worth", "1", "--eviction-worth-scope", "cannot-resume")
    assert scoped == EvictionWorth(1.0, scope=WorthScope.CANNOT_RESUME)
    weighing = rule("--eviction-worth", "1", "--eviction-worth-unallocated")
    assert weighing == EvictionWorth(1.0, unallocated=True)
    crediting = rule("--eviction-worth", "1", "--eviction-worth-shortfall", "2")
    assert crediting == EvictionWorth(1.0, shortfall_weight=2.0)
    per_account = rule("--eviction-worth", "1", "--eviction-loss-budget-per-account", "25")
    assert per_account == EvictionWorth(1.0, account_loss_budget=25 * 3600.0)
    named = rule("--eviction-loss-budget-for", "team-b=50, team-a=2.5")
    assert named == EvictionWorth(
        account_loss_budgets=(("team-a", 2.5 * 3600.0), ("team-b", 50 * 3600.0))
    )


def test_the_rule_is_on_unless_turned_off() -> None:
    from toposched.policy.worth import DEFAULT_EVICTION_WORTH, WorthScope

    default = contract_of().worth
    assert default == DEFAULT_EVICTION_WORTH
    assert default.scope is WorthScope.CANNOT_RESUME and default.max_lost_per_gained == 1.0
    assert contract_of("--eviction-worth", "OFF").worth is None
