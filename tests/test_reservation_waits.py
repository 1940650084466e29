"""`benchmarks/reservation_waits.py`, which splits the owed GPU-hours a team misses while all it
has waiting is larger than its budget by whose job holds the reservation: as a user runs it,
and its rule for a team short that way."""

from __future__ import annotations

import json

from bench_scripts import load_script, run_script
from test_preemption_scenarios import racks, spec

from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import Scheduler


def test_a_short_run_splits_the_shortfall_by_holder() -> None:
    done = run_script("reservation_waits", "--days", "2", "--gpus", "512")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    teams = out["teams"]
    assert teams
    for team in teams.values():
        assert abs(sum(team["by_holder"].values()) - team["short_gpu_hours"]) < 1e-6
    # Counted after each cycle, the same cause as the summary's hourly figure, near it.
    counted = sum(team["short_gpu_hours"] for team in teams.values())
    assert abs(counted - out["short_gpu_hours_jobs_larger_than_budget"]) < 0.25 * counted
    holders = {holder for team in teams.values() for holder in team["by_holder"]}
    assert "its own run" in holders and holders & set(teams)


def test_a_team_is_short_only_while_every_waiting_job_is_larger_than_its_budget() -> None:
    module = load_script("reservation_waits")
    tree = BudgetTree.from_dict({"accounts": {"a": 25, "b": 75}})
    scheduler = Scheduler(racks(1, 8), tree)  # 32 GPUs: a's budget 8, b's 24
    scheduler.submit(spec("a-small", "a"), 0.0)
    scheduler.cycle(0.0)
    assert scheduler.budget_gpus("a") == 8.0 and scheduler.running_gpus("a") == 4.0

    # a runs 4 of its 8 GPUs: waiting with 16 GPUs it is short 4, with 4 as well as 16 it is
    # not short that way (a job fits its budget), nor is b with a job of 16 (its budget: 24).
    assert module.short_of_large_runs(scheduler, {"a": [16.0]}) == {"a": 4.0}
    assert module.short_of_large_runs(scheduler, {"a": [4.0, 16.0], "b": [16.0]}) == {}
    # Running its whole budget, a is owed nothing more.
    scheduler.submit(spec("a-more", "a"), 1.0)
    scheduler.cycle(1.0)
    assert module.short_of_large_runs(scheduler, {"a": [16.0]}) == {}
