"""Borrowing beyond a budget: its protection, owed accounts first, and the simulate options."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest
from test_preemption_scenarios import racks, run, spec

from toposched.cli.main import main
from toposched.cli.simulate import register, scheduler_factory
from toposched.cluster.errors import InputError
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import Scheduler
from toposched.scheduler.decisions import Evict
from toposched.sim.baselines import FifoFirstFit, KubeLike, SlurmLike

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


@pytest.mark.parametrize("cap", ["default", None, 3600.0, 1800.0, 0.0])
def test_a_borrowing_jobs_protection_is_capped_when_asked(cap: str | float | None) -> None:
    # As above, with `borrowed_min_runtime` (no cap unless given): `borrowing` (8 h declared)
    # is protected for the cap; `within` keeps its 8 h. team-b asks at 2 h, past any cap.
    tree = BudgetTree.from_dict(HALVES)
    if cap == "default":
        sched = Scheduler(racks(1, 2), tree)
        cap = None
    else:
        sched = Scheduler(racks(1, 2), tree, borrowed_min_runtime=cap)  # type: ignore[arg-type]
    sched.submit(spec("within", "team-a", min_runtime="8h"), 0)
    sched.cycle(0)
    sched.submit(spec("borrowing", "team-a", min_runtime="8h"), 1)
    sched.cycle(1)
    protected_for = 8 * 3600.0 if cap is None else cap
    assert sched.is_protected("borrowing", 1 + protected_for - 1)
    assert not sched.is_protected("borrowing", 1 + protected_for)
    assert sched.is_protected("within", 7200)
    sched.submit(spec("b-job", "team-b"), 7200)
    evicted = [d.job_id for d in sched.cycle(7200).decisions if isinstance(d, Evict)]
    assert evicted == ([] if cap is None else ["borrowing"])
    if cap == 3600.0:
        assert "protected for 1.0 h" in sched.jobs["borrowing"].history[1][1]


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan, "1h", True])
def test_a_bad_borrowed_min_runtime_is_named(bad: object) -> None:
    with pytest.raises(InputError, match="borrowed_min_runtime"):
        Scheduler(racks(1, 2), BudgetTree.from_dict(HALVES), borrowed_min_runtime=bad)  # type: ignore[arg-type]


def test_a_job_within_the_budget_keeps_its_protection() -> None:
    sched = Scheduler(racks(1, 2), BudgetTree.from_dict(HALVES), protect_beyond_budget=False)
    run(sched, spec("a0", "team-a", gpus=2, min_runtime="8h"), [0], 0)
    sched.submit(spec("a1", "team-a", gpus=2, min_runtime="8h"), 0)
    sched.cycle(0)
    # 2 + 2 GPUs: exactly the budget, not beyond it.
    assert sched.is_protected("a1", 600)


@pytest.mark.parametrize(
    ("options", "cross_account", "protect", "borrowed"),
    [
        ([], "budget", True, None),
        (["--cross-account", "fair-share"], "fair_share", True, None),
        (["--borrowed-min-runtime", "1h"], "budget", True, 3600.0),
        (["--borrowed-min-runtime", "none"], "budget", True, None),
        (
            ["--borrowed-min-runtime", "None", "--cross-account", "fair-share"],
            "fair_share",
            True,
            None,
        ),
        (["--unprotected-borrowing"], "budget", False, 0.0),
        (["--borrowed-min-runtime", "90m"], "budget", True, 5400.0),
        (["--borrowed-min-runtime", "600"], "budget", True, 600.0),
    ],
)
def test_simulate_options_reach_the_scheduler(
    options: list[str], cross_account: str, protect: bool, borrowed: float | None
) -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["simulate", *options])
    sched = scheduler_factory(args)(racks(1, 2), BudgetTree.from_dict(HALVES))
    assert isinstance(sched, Scheduler)
    assert (sched.contract.cross_account, sched.settings.protect_beyond_budget) == (
        cross_account,
        protect,
    )
    assert sched.settings.protection_cap == borrowed


def test_a_bad_borrowed_min_runtime_option_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    with pytest.raises(SystemExit):
        parser.parse_args(["simulate", "--borrowed-min-runtime", "soon"])
    error = capsys.readouterr().err
    assert "--borrowed-min-runtime: 'soon'" in error and "'none'" in error


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


@pytest.mark.parametrize("first_short", [True, False])
def test_idle_gpus_go_to_a_team_short_of_its_budget_before_a_borrower(first_short: bool) -> None:
    # One rack of 3 nodes x 4 GPUs; team-a and team-b are owed 6 GPUs each. team-b held all 12
    # GPUs for 10 hours, so over the window it has used far more: Fair Tree ranks team-a first.
    # At 10 h team-a runs 8 GPUs (beyond its budget) and team-b nothing; both ask for the one
    # free node. It goes to the team short of its budget, team-b, whatever the ranking.
    sched = Scheduler(racks(1, 3), BudgetTree.from_dict(HALVES))
    run(sched, spec("b-past", "team-b", pods=3), [0, 1, 2], 0)
    sched.finish("b-past", 36000)
    run(sched, spec("a-run", "team-a", pods=2), [0, 1], 36000)
    now = 36001.0
    assert sched.queue.ranking(now).prefers("team-a", "team-b")
    assert sched.owed_accounts() == frozenset()  # nothing pending yet
    jobs = [spec("a-next", "team-a"), spec("b-next", "team-b")]
    for job in jobs if first_short else jobs[::-1]:
        sched.submit(job, now)
    assert sched.owed_accounts() == {"team-b"}
    assert [row.job for row in sched.queue_rows(now)] == ["b-next", "a-next"]
    assert [row.owed for row in sched.queue_rows(now)] == [True, False]
    assert [bind.job_id for bind in sched.cycle(now).bound] == ["b-next"]
    assert "runs below its budget" not in sched.explain("a-next", now).text


@pytest.mark.parametrize("baseline", [FifoFirstFit, KubeLike, SlurmLike])
def test_the_baselines_keep_each_jobs_declared_protection(baseline: type[Scheduler]) -> None:
    # They never preempt; were the default to cap a borrower's protection, it would only move
    # their reservations' expected starts (a job without a declared runtime frees its GPUs at
    # its min runtime).
    sched = baseline(racks(1, 2), BudgetTree.from_dict(HALVES))  # type: ignore[call-arg]
    sched.submit(spec("within", "team-a", min_runtime="8h"), 0)
    sched.cycle(0)
    sched.submit(spec("borrowing", "team-a", min_runtime="8h"), 1)
    sched.cycle(1)
    assert sched.settings.protection_cap is None
    assert sched.is_protected("borrowing", 1 + 8 * 3600.0 - 1)
