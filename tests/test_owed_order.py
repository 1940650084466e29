"""The order among teams below their budget: by Fair Tree standing, or the team that received
the least of what it was owed lately first (`OwedOrder.LEAST_MET`), as golden scenarios, and
the decayed standing against a brute-force integration."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from job_specs import spec

from toposched.cli.main import main
from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.errors import InputError
from toposched.cluster.state import ClusterState
from toposched.policy.budget import BudgetTree
from toposched.policy.fairshare import PendingQueue
from toposched.policy.owed_standing import OwedOrder, OwedStanding
from toposched.policy.queue_entry import QueueEntry
from toposched.policy.usage import UsageTracker
from toposched.scheduler.core import Scheduler
from toposched.scheduler.settings import SchedulerSettings

HOUR = 3600.0


def three_teams() -> BudgetTree:
    """On 16 GPUs: team-a 4 GPUs, team-b 8, team-c 4."""
    return BudgetTree.from_dict({"accounts": {"team-a": 25, "team-b": 50, "team-c": 25}})


def sixteen_gpus() -> ClusterState:
    """2 racks x 2 nodes x 4 GPUs: nodes 0-3."""
    return ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=2))


def bound(scheduler: Scheduler, now: float) -> list[str]:
    return [decision.job_id for decision in scheduler.cycle(now).bound]


def two_teams_short(order: OwedOrder) -> tuple[Scheduler, list[str]]:
    """team-b borrowed the whole cluster for two hours, then waits for two whole nodes from
    2 h on; team-a, which used little, is short of half its budget from 3 h on. At 4 h two
    nodes free up: one of the two 8-GPU jobs starts. Returns the queue's order at 4 h and
    the scheduler after the cycle there."""
    scheduler = Scheduler(
        sixteen_gpus(),
        three_teams(),
        SchedulerSettings(owed_order=order, owed_half_life=HOUR),
    )
    scheduler.submit(spec("b1", "team-b", pods=4, expected_runtime="2h"), 0.0)
    assert bound(scheduler, 0.0) == ["b1"]

    now = 2 * HOUR
    scheduler.finish("b1", now)
    for name, account, gpus in (("a1", "team-a", 2), ("c1", "team-c", 4), ("c2", "team-c", 4)):
        protected = spec(name, account, gpus=gpus, min_runtime="10h", expected_runtime="10h")
        scheduler.submit(protected, now)
    scheduler.submit(spec("b2", "team-b", pods=2), now)
    # team-a and team-c have used nothing: they start; b2 needs two whole nodes, one is left.
    assert bound(scheduler, now) == ["a1", "c1", "c2"]

    now = 3 * HOUR
    scheduler.submit(spec("a2", "team-a", pods=2), now)
    assert bound(scheduler, now) == []

    now = 4 * HOUR
    scheduler.finish("c1", now)
    scheduler.finish("c2", now)
    queue = [row.job for row in scheduler.queue_rows(now)]
    return scheduler, queue


def test_by_standing_the_team_that_used_less_goes_first() -> None:
    scheduler, queue = two_teams_short(OwedOrder.STANDING)
    # Usage over the week: team-a 4 GPU-hours, team-b 32: team-a ranks first.
    assert queue == ["a2", "b2"]
    assert bound(scheduler, 4 * HOUR) == ["a2"]


def test_least_met_puts_the_team_short_longest_first() -> None:
    scheduler, queue = two_teams_short(OwedOrder.LEAST_MET)
    assert queue == ["b2", "a2"]
    assert bound(scheduler, 4 * HOUR) == ["b2"]
    # Decayed by an hour's half-life, at 4 h: team-b received 8 of its 8 owed GPUs over
    # [0, 2 h) and none over [2 h, 4 h): (2^-2 - 2^-4) / (1 - 2^-4) = 0.2 of what it was owed;
    # team-a all of its 2 owed GPUs over [2 h, 3 h), then 2 of 4 (its budget): 0.6.
    least_met = scheduler.least_met
    assert least_met is not None
    assert least_met.standing.met("team-b") == pytest.approx(0.2)
    assert least_met.standing.met("team-a") == pytest.approx(
        (2 * (0.5 - 0.25) + 2 * (1 - 0.5)) / (2 * (0.5 - 0.25) + 4 * (1 - 0.5))
    )
    assert least_met.standing.met("team-c") == pytest.approx(1.0)


def test_an_owed_sequence_orders_the_owed_teams_and_a_set_leaves_it_to_standing() -> None:
    tree = BudgetTree.from_dict({"accounts": {"x": 40, "y": 30, "z": 30}})
    usage = UsageTracker()
    usage.start("x", 1, now=0)  # x has used a little, y and z nothing: y, z, x by standing
    queue = PendingQueue(tree, usage)
    for account in ("x", "y", "z"):
        queue.add(QueueEntry(f"{account}-job", account, 0, 0.0))
    now = HOUR
    assert [entry.job_id for entry in queue.ordered(now)] == ["y-job", "z-job", "x-job"]
    assert [entry.job_id for entry in queue.ordered(now, frozenset({"x", "z"}))] == [
        "z-job",
        "x-job",
        "y-job",
    ]
    assert [entry.job_id for entry in queue.ordered(now, ("x", "z"))] == [
        "x-job",
        "z-job",
        "y-job",
    ]
    explained = {row.entry.job_id: row for row in queue.explanations(now, ("x", "z"))}
    assert explained["x-job"].owed and explained["z-job"].owed
    assert not explained["y-job"].owed
    assert [queue.position(job, now, ("x", "z")) for job in ("x-job", "z-job", "y-job")] == [
        0,
        1,
        2,
    ]


# --- the decayed standing ------------------------------------------------------------------

spans = st.lists(
    st.tuples(
        st.floats(1.0, 4 * HOUR),  # how long the rates hold
        st.floats(0.0, 64.0),  # GPUs held
        st.floats(0.0, 64.0),  # GPUs asked for beyond those held
        # budget: none, or at least 1/64 GPU (a subnormal one underflows the oracle's sums)
        st.just(0.0) | st.floats(1 / 64, 32.0),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(spans, st.floats(0.25 * HOUR, 48 * HOUR))
def test_met_is_the_decayed_ratio_summed_second_by_second(
    rates: list[tuple[float, float, float, float]], half_life: float
) -> None:
    standing = OwedStanding(half_life)
    now = 0.0
    standing.advance(now)
    pieces: list[tuple[float, float, float, float]] = []  # begin, end, owed, delivered
    for span, running, more, budget in rates:
        standing.set_rates("team", running, running + more, budget)
        owed = min(budget, running + more)
        pieces.append((now, now + span, owed, min(running, owed)))
        now += span
        standing.advance(now)
    # The oracle: each span cut into many slices, every slice weighed by its midpoint's age.
    owed_sum = delivered_sum = 0.0
    for begin, end, owed, delivered in pieces:
        slices = 400
        width = (end - begin) / slices
        for index in range(slices):
            weight = 2.0 ** (-(now - (begin + (index + 0.5) * width)) / half_life) * width
            owed_sum += owed * weight
            delivered_sum += delivered * weight
    met = standing.met("team")
    if owed_sum == 0:
        assert met is None
        return
    assert met is not None
    assert met == pytest.approx(min(delivered_sum / owed_sum, 1.0), rel=1e-4, abs=1e-6)


def test_a_team_owed_nothing_has_no_figure_and_time_only_goes_forward() -> None:
    standing = OwedStanding(HOUR)
    assert standing.met("team") is None
    standing.advance(0.0)
    standing.set_rates("team", running=4, demand=0, budget=8)
    standing.advance(HOUR)
    assert standing.met("team") is None  # asked for nothing: owed nothing
    standing.set_rates("team", running=4, demand=8, budget=8)
    standing.advance(2 * HOUR)
    assert standing.met("team") == pytest.approx(0.5)
    with pytest.raises(InputError, match="must not go backwards"):
        standing.advance(HOUR)
    for bad in (0, -1.0, math.inf, math.nan, True, "1h"):
        with pytest.raises(InputError, match="half_life"):
            OwedStanding(bad)  # type: ignore[arg-type]


def test_settings_check_the_order_and_its_half_life() -> None:
    with pytest.raises(InputError, match="owed_order"):
        SchedulerSettings(owed_order="least-met")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="owed_half_life"):
        SchedulerSettings(owed_half_life=0)
    assert SchedulerSettings(owed_order=OwedOrder.LEAST_MET).changes() == {
        "owed_order": OwedOrder.LEAST_MET
    }


def test_the_half_life_flag_needs_the_order_it_refines(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--days", "0.01", "--owed-half-life", "12h"]) == 2
    err = capsys.readouterr().err
    assert "--owed-half-life" in err and "applies only with --owed-order least-met" in err
    assert "Traceback" not in err
    with pytest.raises(SystemExit):
        main(["simulate", "--owed-order", "least-met", "--owed-half-life", "0"])
    assert "--owed-half-life" in capsys.readouterr().err
