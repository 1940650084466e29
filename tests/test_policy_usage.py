"""Tests for usage tracking: continuous accrual, subtree sums, window expiry and decay."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toposched.cluster.errors import InputError
from toposched.cluster.units import DAY, HOUR
from toposched.policy.budget import ROOT
from toposched.policy.usage import UsageTracker


def test_running_gpus_accrue_continuously() -> None:
    usage = UsageTracker()
    usage.start("lab/team", 4, now=0)
    # 4 GPUs for half an hour, then for an hour and a half: 7,200 and 21,600 GPU-seconds.
    assert usage.usage("lab/team", now=1800) == 7200
    assert usage.usage("lab/team", now=5400) == 21600
    usage.stop("lab/team", 4, now=5400)
    assert usage.usage("lab/team", now=9000) == 21600  # stopped: no more accrual
    assert usage.running("lab/team") == 0


def test_inner_accounts_and_the_root_sum_their_subtrees() -> None:
    usage = UsageTracker()
    usage.start("research/pretraining/team-a", 8, now=0)
    usage.start("research/pretraining/team-b", 2, now=0)
    usage.start("research/eval", 1, now=1000)
    usage.start("product", 4, now=2000)
    now = 3000
    # team-a 8 x 3000 = 24,000; team-b 2 x 3000 = 6,000; eval 1 x 2000; product 4 x 1000.
    assert usage.usage("research/pretraining/team-a", now) == 24000
    assert usage.usage("research/pretraining/team-b", now) == 6000
    assert usage.usage("research/pretraining", now) == 30000
    assert usage.usage("research", now) == 32000
    assert usage.usage("product", now) == 4000
    assert usage.usage(ROOT, now) == 36000
    assert usage.running("research") == 11
    assert usage.running(ROOT) == 15


def test_accounts_never_seen_have_no_usage() -> None:
    assert UsageTracker().usage("anyone/at/all", now=10) == 0


def test_several_jobs_of_one_account_add_up_and_stop_independently() -> None:
    usage = UsageTracker()
    usage.start("team", 2, now=0)
    usage.start("team", 0.5, now=100)  # a fractional GPU
    usage.stop("team", 2, now=200)
    # 2 x 200 + 0.5 x (300 - 100) = 500.
    assert usage.usage("team", now=300) == pytest.approx(500)
    assert usage.running("team") == pytest.approx(0.5)


def test_usage_leaves_the_window_a_whole_bucket_at_a_time() -> None:
    usage = UsageTracker(window=2 * HOUR, bucket=HOUR)
    usage.start("team", 2, now=0)
    usage.stop("team", 2, now=1800)  # 3,600 GPU-seconds, all in bucket 0 = [0 h, 1 h)
    # A bucket counts while any part of it is within the last 2 h: bucket 0 until 3 h.
    assert usage.usage("team", now=2 * HOUR) == 3600
    assert usage.usage("team", now=3 * HOUR - 1) == 3600
    assert usage.usage("team", now=3 * HOUR) == 0
    assert usage.usage(ROOT, now=3 * HOUR) == 0


def test_a_long_running_job_counts_only_its_last_window() -> None:
    usage = UsageTracker(window=2 * HOUR, bucket=HOUR)
    usage.start("team", 1, now=0)
    # At 10 h the counted buckets are [8 h, 9 h) and [9 h, 10 h): 7,200 GPU-seconds.
    assert usage.usage("team", now=10 * HOUR) == 7200
    # At 10.5 h, bucket [8 h, 9 h) still overlaps the window (8.5 h, 10.5 h]: 2.5 h of one GPU.
    assert usage.usage("team", now=10.5 * HOUR) == 9000
    assert usage.usage("team", now=11 * HOUR) == 7200


def test_default_window_is_seven_days() -> None:
    usage = UsageTracker()
    usage.start("team", 1, now=0)
    usage.stop("team", 1, now=HOUR)
    assert usage.usage("team", now=7 * DAY + HOUR - 1) == HOUR
    assert usage.usage("team", now=7 * DAY + HOUR) == 0


def test_half_life_decay() -> None:
    usage = UsageTracker(half_life=HOUR)
    usage.start("team", 1, now=0)
    usage.stop("team", 1, now=HOUR)
    # One GPU over [0, 1 h), each second weighing 2^-(age / 1 h). At 1 h:
    # integral of 2^-((3600 - t) / 3600) dt over [0, 3600] = 3600 / ln 2 x (1 - 1/2) = 2,596.9.
    at_one_hour = 1800 / math.log(2)
    assert usage.usage("team", now=HOUR) == pytest.approx(at_one_hour, rel=1e-12)
    # Every further half-life halves it.
    assert usage.usage("team", now=2 * HOUR) == pytest.approx(at_one_hour / 2, rel=1e-12)
    assert usage.usage("team", now=4 * HOUR) == pytest.approx(at_one_hour / 8, rel=1e-12)


def test_decayed_usage_of_a_steady_job_approaches_its_limit_over_many_half_lives() -> None:
    # One GPU forever with a 60 s half-life: usage tends to 60 / ln 2 = 86.56 GPU-seconds.
    # A day is 1,440 half-lives, far past the point where stored values are rescaled.
    usage = UsageTracker(window=2 * DAY, bucket=HOUR, half_life=60)
    usage.start("team", 1, now=0)
    for hour in range(1, 25):
        assert usage.usage("team", now=hour * HOUR) == pytest.approx(60 / math.log(2), rel=1e-9)


def test_stop_beyond_what_is_held_is_refused_and_changes_nothing() -> None:
    usage = UsageTracker()
    usage.start("team", 2, now=0)
    with pytest.raises(InputError) as error:
        usage.stop("team", 3, now=10)
    assert error.value.field == "gpus" and "more than the 2 GPUs team holds" in error.value.rule
    assert usage.running("team") == 2
    assert usage.version == 1


def test_time_cannot_go_backwards() -> None:
    usage = UsageTracker()
    usage.start("team", 1, now=100)
    with pytest.raises(InputError) as error:
        usage.stop("team", 1, now=50)
    assert error.value.field == "now"
    assert usage.running("team") == 1


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"window": 0}, "window"),
        ({"window": -1}, "window"),
        ({"bucket": math.inf}, "bucket"),
        ({"window": 10, "bucket": 20}, "bucket"),
        ({"half_life": 0}, "half_life"),
        ({"half_life": "1h"}, "half_life"),
    ],
)
def test_bad_settings_are_rejected(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as error:
        UsageTracker(**kwargs)
    assert error.value.field == field


@pytest.mark.parametrize("gpus", [0, -1, math.nan, True, "4"])
def test_bad_gpu_counts_are_rejected(gpus: Any) -> None:
    with pytest.raises(InputError) as error:
        UsageTracker().start("team", gpus, now=0)
    assert error.value.field == "gpus"


def test_one_job_finishing_touches_only_its_own_path() -> None:
    # The cost promise of the tracker: stopping a job updates the meters of its account and its
    # ancestors and no others, however many accounts exist. Read through the private meters
    # because no public answer can tell whether other meters were brought up to date.
    usage = UsageTracker()
    accounts = [f"org/program-{p}/team-{t}" for p in range(5) for t in range(20)]
    for account in accounts:
        usage.start(account, 1, now=0)
    usage.stop("org/program-3/team-7", 1, now=500)
    updated = {path for path, meter in usage._meters.items() if meter.accrued_until == 500}
    assert updated == {ROOT, "org", "org/program-3", "org/program-3/team-7"}


@dataclass(frozen=True)
class _Interval:
    account: str
    gpus: int
    begin: int
    end: int | None  # None: still running


def _from_scratch(
    intervals: list[_Interval], account: str, now: int, window: int, bucket: int
) -> int:
    """Usage recomputed from every interval, using the tracker's bucket rule."""
    counted_from = math.floor((now - window) / bucket) * bucket
    total = 0
    for interval in intervals:
        if interval.account != account and not interval.account.startswith(account + "/"):
            continue
        end = now if interval.end is None else min(interval.end, now)
        total += interval.gpus * max(0, end - max(interval.begin, counted_from))
    return total


_ACCOUNTS = ["a/x", "a/y", "b", "a/y/deep"]


@settings(max_examples=150, deadline=None)
@given(
    events=st.lists(
        st.tuples(st.sampled_from(_ACCOUNTS), st.integers(1, 4), st.integers(0, 30), st.booleans()),
        max_size=25,
    ),
    window=st.integers(5, 40),
    bucket=st.integers(1, 5),
)
def test_incremental_usage_equals_a_from_scratch_recount(
    events: list[tuple[str, int, int, bool]], window: int, bucket: int
) -> None:
    """Random starts and stops at increasing times; every account and ancestor is checked."""
    usage = UsageTracker(window=window, bucket=bucket)
    intervals: list[_Interval] = []
    running: list[_Interval] = []
    now = 0
    for account, gpus, gap, stop_one in events:
        now += gap
        if stop_one and running:
            done = running.pop(0)
            usage.stop(done.account, done.gpus, now)
            intervals.remove(done)
            intervals.append(_Interval(done.account, done.gpus, done.begin, now))
        else:
            started = _Interval(account, gpus, now, None)
            usage.start(account, gpus, now)
            running.append(started)
            intervals.append(started)
        for query in ("a", "a/x", "a/y", "a/y/deep", "b", ROOT):
            expected = (
                _from_scratch(intervals, query, now, window, bucket)
                if query
                else sum(_from_scratch(intervals, top, now, window, bucket) for top in ("a", "b"))
            )
            assert usage.usage(query, now) == expected


_ACCOUNTS = ("lab/a", "lab/b", "ops")


@settings(max_examples=60, deadline=None)
@given(
    half_life=st.sampled_from([None, HOUR, DAY]),
    steps=st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.5, 90.0, HOUR, 3 * HOUR]),
            st.sampled_from(_ACCOUNTS),
            st.integers(min_value=1, max_value=8),
        ),
        min_size=1,
        max_size=40,
    ),
)
def test_usage_read_at_a_time_reads_the_same_after_starts_and_stops_then(
    half_life: float | None, steps: list[tuple[float, str, int]]
) -> None:
    """What lets a ranking at `now` stand through the cycle's starts and stops at `now`
    (`readings_version`): they change what accrues after `now`, never what was read at it."""
    usage = UsageTracker(window=DAY, bucket=HOUR, half_life=half_life)
    now = 0.0
    held: dict[str, int] = dict.fromkeys(_ACCOUNTS, 0)
    for wait, account, gpus in steps:
        now += wait
        paths = (*_ACCOUNTS, "lab", ROOT)
        before = [usage.usage(path, now) for path in paths]
        if held[account] >= gpus:
            usage.stop(account, gpus, now)
            held[account] -= gpus
        else:
            usage.start(account, gpus, now)
            held[account] += gpus
        assert [usage.usage(path, now) for path in paths] == before
    assert usage.readings_version == 0
