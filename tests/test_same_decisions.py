"""`benchmarks/same_decisions.py`, which checks a whole run's decisions with cycles that skip
settled jobs against a run of full cycles: as a user runs it, and its comparison on logs that
differ."""

from __future__ import annotations

import json

from bench_scripts import load_script, run_script

from toposched.scheduler.decisions import Reserve


def test_a_short_run_decides_the_same_both_ways() -> None:
    done = run_script("same_decisions", "--days", "0.2", "--gpus", "256")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["same"] is True
    assert out["decisions"] > 0 and out["cycles_that_skipped_jobs"] > 0


def test_the_periodic_full_cycle_is_the_one_asked_for() -> None:
    # With no periodic full cycle more cycles skip jobs than with one every 5 minutes (the
    # default), and the decisions are the same; with every cycle a full one, nothing to compare.
    args = ("--days", "0.2", "--gpus", "256")
    skipped = {}
    for every in ("5m", "0"):
        done = run_script("same_decisions", *args, "--full-cycle-every", every)
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        assert out["same"] is True
        skipped[every] = out["cycles_that_skipped_jobs"]
    assert skipped["0"] > skipped["5m"] > 0
    refused = run_script("same_decisions", *args, "--full-cycle-every", "always")
    assert refused.returncode == 2 and "leaves no cycle that skips jobs" in refused.stderr


def test_logs_that_differ_are_told_apart() -> None:
    module = load_script("same_decisions")
    first, second = Reserve("a", 100.0, "rack-0"), Reserve("b", 200.0, "rack-1")
    full = module.Log(times=[10.0, 20.0], decisions=[first, second])

    later = module.Log(times=[10.0, 30.0], decisions=[first, second])
    moved = module.compare(later, full)
    assert moved["same"] is False and "decision 2 made at 30.0, not 20.0" in moved["difference"]

    other = module.Log(times=[10.0, 20.0], decisions=[first, Reserve("c", 200.0, "rack-1")])
    assert module.compare(other, full)["same"] is False

    fewer = module.Log(times=[10.0], decisions=[first])
    assert "made 1 decisions where a full cycle made 2" in module.compare(fewer, full)["difference"]

    assert module.compare(full, full)["same"] is True
