"""Borrowing beyond a budget: Scheduler(protect_beyond_budget=False) and the simulate options."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from test_preemption_scenarios import racks, run, spec

from toposched.cli.main import main
from toposched.cli.simulate import register, scheduler_factory
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import Scheduler
from toposched.scheduler.decisions import Evict

# Two teams with half of the 8 GPUs each.
HALVES = {"accounts": {"team-a": 50, "team-b": 50}}


@pytest.mark.parametrize("protect", [True, False])
def test_a_job_started_beyond_its_teams_budget_is_unprotected_when_asked(protect: bool) -> None:
    # One rack of 2 nodes x 4 GPUs. At 0 team-a starts `within` (4 GPUs: its whole budget),
    # at 1 s `borrowing` (4 more: beyond it), both with an 8 h min runtime. At 600 s team-b,
    # which runs nothing of its budget, asks for 4 GPUs: team-a keeps its budget without
    # `borrowing`, so the budget rule lets team-b reclaim it once it is unprotected.
    sched = Scheduler(racks(1, 2), BudgetTree.from_dict(HALVES), protect_beyond_budget=protect)
    sched.submit(spec("within", "team-a", min_runtime="8h"), 0)
    assert [d.job_id for d in sched.cycle(0).bound] == ["within"]
    sched.submit(spec("borrowing", "team-a", min_runtime="8h"), 1)
    assert [d.job_id for d in sched.cycle(1).bound] == ["borrowing"]
    assert sched.is_protected("within", 600)
    assert sched.is_protected("borrowing", 600) is protect

    sched.submit(spec("b-job", "team-b"), 600)
    evictions = [d for d in sched.cycle(600).decisions if isinstance(d, Evict)]
    if protect:
        assert evictions == []
    else:
        assert evictions == [Evict("borrowing", "b-job", 30.0, "reclaim-budget", 4 * 599.0)]
        assert "beyond its team's budget" in sched.jobs["borrowing"].history[1][1]


def test_a_job_within_the_budget_keeps_its_protection() -> None:
    sched = Scheduler(racks(1, 2), BudgetTree.from_dict(HALVES), protect_beyond_budget=False)
    run(sched, spec("a0", "team-a", gpus=2, min_runtime="8h"), [0], 0)
    sched.submit(spec("a1", "team-a", gpus=2, min_runtime="8h"), 0)
    sched.cycle(0)
    # 2 + 2 GPUs: exactly the budget, not beyond it.
    assert sched.is_protected("a1", 600)


@pytest.mark.parametrize(
    ("options", "cross_account", "protect"),
    [
        ([], "budget", True),
        (["--cross-account", "fair-share"], "fair_share", True),
        (["--unprotected-borrowing"], "budget", False),
    ],
)
def test_simulate_options_reach_the_scheduler(
    options: list[str], cross_account: str, protect: bool
) -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["simulate", *options])
    sched = scheduler_factory(args)(racks(1, 2), BudgetTree.from_dict(HALVES))
    assert isinstance(sched, Scheduler)
    assert (sched.contract.cross_account, sched.protect_beyond_budget) == (cross_account, protect)


def test_simulate_runs_under_either_rule_and_names_a_bad_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arguments = ["simulate", "--workload", "ai2", "--days", "0.05", "--gpus", "64"]
    arguments += ["--no-progress", "--json", "--out", str(tmp_path)]
    assert main([*arguments, "--cross-account", "fair-share"]) == 0
    assert json.loads(capsys.readouterr().out)["conservation"]["holds"]
    with pytest.raises(SystemExit):
        main([*arguments, "--cross-account", "priority"])
    assert "invalid choice: 'priority'" in capsys.readouterr().err
