"""The pending queue read from a job on (`PendingQueue.runs_after`), and the runs it lays jobs in
(`PendingQueue.segments`), which cycles after submissions only compare to know that the jobs
already queued kept their order: checked against the whole order on random queues."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from toposched.cluster.units import HOUR
from toposched.policy.budget import BudgetTree
from toposched.policy.fairshare import PendingQueue, UnallocatedOrder
from toposched.policy.queue_entry import QueueEntry
from toposched.policy.usage import UsageTracker
from toposched.scheduler.incremental import same_order

ACCOUNTS = {"team-a": 40, "team-b": 30, "eval": 30, "guests": 0, "interns": 0}
NAMES = sorted(ACCOUNTS)

entries = st.lists(
    st.tuples(
        st.sampled_from(NAMES),
        st.integers(0, 2),  # priority
        st.integers(0, 4),  # submit time
        st.booleans(),  # declared unallocated
    ),
    min_size=1,
    max_size=24,
)
usages = st.lists(st.integers(0, 50), min_size=len(NAMES), max_size=len(NAMES))
owed_sets = st.frozensets(st.sampled_from(NAMES))
orders = st.sampled_from(list(UnallocatedOrder))


def queue_of(
    jobs: list[tuple[str, int, int, bool]], used: list[int], order: UnallocatedOrder
) -> PendingQueue:
    tree = BudgetTree.from_dict({"accounts": ACCOUNTS})
    usage = UsageTracker()
    for account, gpus in zip(NAMES, used, strict=True):
        if gpus:
            usage.start(account, gpus, now=0)
    queue = PendingQueue(tree, usage, order)
    for number, (account, priority, submit, unallocated) in enumerate(jobs):
        queue.add(QueueEntry(f"j{number:02d}", account, priority, submit, unallocated))
    return queue


def ids(queue: PendingQueue, owed: frozenset[str]) -> list[str]:
    return [entry.job_id for entry in queue.ordered(HOUR, owed)]


@settings(max_examples=150, deadline=None)
@given(entries, usages, owed_sets, orders)
def test_runs_after_a_job_read_the_rest_of_the_queue(
    jobs: list[tuple[str, int, int, bool]],
    used: list[int],
    owed: frozenset[str],
    order: UnallocatedOrder,
) -> None:
    queue = queue_of(jobs, used, order)
    whole = ids(queue, owed)
    ranking = queue.ranking(HOUR)
    keys = queue.sort_keys(whole, ranking, owed)
    assert sorted(whole, key=keys.__getitem__) == whole
    for place, job_id in enumerate(whole):
        rest = [e.job_id for run in queue.runs_after(keys[job_id], ranking, owed) for e in run]
        assert rest == whole[place + 1 :]
    # From a job no longer queued: the jobs after its place.
    gone = whole[len(whole) // 2]
    queue.remove(gone)
    rest = [e.job_id for run in queue.runs_after(keys[gone], ranking, owed) for e in run]
    assert rest == whole[len(whole) // 2 + 1 :]


@settings(max_examples=200, deadline=None)
@given(entries, entries, usages, usages, owed_sets, owed_sets, orders)
def test_equal_segments_mean_the_jobs_queued_kept_their_order(
    jobs: list[tuple[str, int, int, bool]],
    joining: list[tuple[str, int, int, bool]],
    used: list[int],
    used_later: list[int],
    owed: frozenset[str],
    owed_later: frozenset[str],
    order: UnallocatedOrder,
) -> None:
    queue = queue_of(jobs, used, order)
    before = ids(queue, owed)
    left = queue.segments(queue.ranking(HOUR), owed)
    # Later: other standings and owed accounts, and jobs joined.
    later = queue_of(jobs + joining, used_later, order)
    now = later.segments(later.ranking(HOUR), owed_later)
    old = set(before)
    kept = [job_id for job_id in ids(later, owed_later) if job_id in old]
    assert same_order(now, left) == (kept == before)
