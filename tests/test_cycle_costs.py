"""`benchmarks/cycle_costs.py`, which times a simulated run's cycles by what each follows: as a
user runs it, and how it names a cycle's group."""

from __future__ import annotations

import re

import pytest
from bench_scripts import load_script, run_script

from toposched.scheduler.decisions import Evict, Reserve
from toposched.scheduler.turn import CycleResult, FullCycle
from toposched.sim.engine import simulate
from toposched.workloads.ai2 import ai2_like


def test_a_short_run_counts_every_cycle_once() -> None:
    module = load_script("cycle_costs")
    done = run_script("cycle_costs", "--days", "0.25", "--gpus", "256")
    assert done.returncode == 0, done.stderr
    timed, walked, causes, inside, pieces = done.stdout.split("\n\n")
    groups, every = _table(timed)
    counts = [int(row[1].replace(",", "")) for row in groups]
    # The same run, its cycles counted by the simulator itself.
    cycles = len(simulate(ai2_like(days=0.25, gpus=256), progress=False).cycle_seconds)
    assert sum(counts) == int(every[1].replace(",", "")) == cycles > 50
    shares = [float(row[-1].rstrip("%")) for row in groups]
    assert abs(sum(shares) - 100.0) < 0.1 * len(shares)
    names = [row[0] for row in groups]
    assert any(name.startswith("submission | ") for name in names)
    assert any(" | skipping | " in name for name in names)
    assert any(" | full | " in name for name in names)
    # What each group's cycles walked: the same groups, in the same order; only cycles after
    # submissions skip jobs, and the turns are the pending jobs neither skipped nor alike.
    walked_rows = [re.split(r"\s{2,}", line.strip()) for line in walked.splitlines()[1:]]
    assert [row[0] for row in walked_rows] == names
    for name, *figures in walked_rows:
        pending, alike, skipped, turns, searches = map(float, figures)
        # Each of the four printed to a tenth: within 0.2 of one another.
        assert turns == pytest.approx(pending - alike - skipped, abs=0.2)
        assert turns >= 0 and searches >= 0
        if " | full | " in name:
            assert skipped == 0
    assert any(float(row[3]) > 0 for row in walked_rows if " | skipping | " in row[0])
    # The same cycles by why each walked the whole queue, the skipping ones apart.
    why, every_cycle = _table(causes)
    assert every_cycle[1] == every[1]
    assert sum(int(row[1].replace(",", "")) for row in why) == cycles
    assert {row[0] for row in why} <= {module.SKIPPED, *(cause.value for cause in FullCycle)}
    skipping = sum(int(row[1].replace(",", "")) for row in groups if " | skipping | " in row[0])
    assert {row[0]: int(row[1].replace(",", "")) for row in why}[module.SKIPPED] == skipping
    # The searches inside the cycles, and their share of the cycles' time.
    parts, _ = _table(inside.rstrip("\n").rsplit("\n", 1)[0])
    assert {row[0] for row in parts} == set(module.PARTS)
    share = re.search(r"these searches ([\d.]+)% of it", inside)
    assert share is not None and 0 < float(share.group(1)) < 100
    # The costliest groups piece by piece: the pieces add up to the cycle's mean (each
    # printed to a microsecond), none of them negative.
    piece_rows = [re.split(r"\s{2,}", line.strip()) for line in pieces.splitlines()[1:]]
    assert [row[0] for row in piece_rows] == names[: len(piece_rows)]
    assert len(piece_rows) == min(8, len(names))
    for _, mean, *parts in (row for row in piece_rows):
        assert sum(map(float, parts)) == pytest.approx(float(mean), abs=0.006)
        assert all(float(part) >= -0.001 for part in parts)


def _table(text: str) -> tuple[list[list[str]], list[str]]:
    """A table `print_groups` printed: its rows, and its last (every call)."""
    rows = [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()[1:]]
    assert rows[-1][0] == "every call"
    return rows[:-1], rows[-1]


def test_a_cycle_is_grouped_by_its_events_walk_and_decisions() -> None:
    module = load_script("cycle_costs")
    reserve = Reserve("big", 100.0, "su-0")
    result = CycleResult(10.0)
    result.decisions.extend([Evict("b", "big", 30.0, "reclaim-budget", 0.0), reserve])

    assert module.group_of(set(), result, None) == (
        "none (the clock only) | full | Evict + Reserve"
    )
    result.incremental = True
    told = {"submission", "completion"}
    again = module.group_of(told, result, Reserve("big", 50.0, "su-0"))
    assert again == "completion + submission | skipping | Evict + Reserve again"
    elsewhere = module.group_of(told, result, Reserve("big", 100.0, "su-1"))
    assert elsewhere.endswith("| Evict + Reserve")
    assert module.reservation_of(result) is reserve
    assert module.group_of({"checkpoint"}, CycleResult(0.0), reserve) == (
        "checkpoint | full | none"
    )
