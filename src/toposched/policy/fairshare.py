"""The pending queue in Fair Tree order: jobs kept sorted per account, accounts merged by rank."""

from __future__ import annotations

import heapq
import itertools
import math
import operator
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from toposched.cluster.errors import InputError
from toposched.cluster.units import format_span
from toposched.policy.budget import BudgetTree, split_account_path
from toposched.policy.owed_standing import owed_places
from toposched.policy.queue_entry import QueueEntry, QueueTier
from toposched.policy.ranking import (
    Ranking,
    Standing,
    StandingKey,
    TreeLayout,
    UsageSource,
    rank_accounts,
)
from toposched.policy.sorted_entries import EntryKey, SortedEntries, item_key

__all__ = [
    "NOT_OWED",
    "JobExplanation",
    "JobSortKey",
    "PendingQueue",
    "Segment",
    "UnallocatedOrder",
]

JobSortKey = tuple[int, int, StandingKey, int, float, str]
"""(queue tier, the account's place among those owed GPUs or `NOT_OWED`, account standing,
-priority, submit time, job id); smaller runs first."""


NOT_OWED = 1 << 30
"""The owed part of the sort key of jobs outside the owed accounts' allocated work."""


Segment = tuple[QueueTier, str]
"""A run of the queue that keeps its jobs in one sorted sequence: its tier and account (no
account for the unallocated tier kept oldest first, one run of every account's jobs)."""


class UnallocatedOrder(Enum):
    """How the unallocated tier orders its jobs."""

    RANK = "rank"
    """Account by account in Fair Tree rank order, each account's jobs by priority, then
    submit time: the tier is shared out as budgeted work is."""
    OLDEST = "oldest"
    """Oldest submission first across accounts (then job id), priority aside: the job that
    has waited longest, the one a workload that withdraws jobs after a fixed wait withdraws
    first, runs first, so the newest are those still waiting when GPUs fall idle."""


OLDEST_STANDING: StandingKey = (0, ())
"""The standing part of an unallocated job's sort key under `UnallocatedOrder.OLDEST`, where
the account's standing plays no part: the same for every job of the tier."""


@dataclass(frozen=True, slots=True)
class JobExplanation:
    """Why a pending job is where it is in the queue."""

    entry: QueueEntry
    position: int
    """0 for the job that goes first."""
    tier: QueueTier
    standing: Standing | None
    """The account's standing; None if the account is no longer a leaf of the tree."""
    sort_key: JobSortKey
    owed: bool = False
    """Allocated work of an account running below its budget: it goes before the other
    accounts' allocated work."""
    waiting_s: float = 0.0
    """Seconds since the job was submitted, at the ranking's moment."""
    oldest_first: bool = False
    """The unallocated tier runs oldest submission first across accounts
    (`UnallocatedOrder.OLDEST`)."""

    @property
    def reason(self) -> str:
        """Why the job is in its tier, in words."""
        if self.tier is QueueTier.DETACHED:
            return f"account {self.entry.account} is no longer a leaf of the budget tree"
        if self.tier is QueueTier.UNALLOCATED:
            order = "; oldest submission first across accounts" if self.oldest_first else ""
            if self.entry.unallocated:
                return (
                    "unallocated (min_runtime 0): runs only on GPUs budgeted work leaves idle"
                    + order
                )
            return f"unallocated: account {self.entry.account} has no budget{order}"
        if self.owed:
            return f"allocated; account {self.entry.account} runs below its budget"
        return "allocated"

    def describe(self) -> str:
        """One line: position, job, account, standing of each ancestor, priority, tier reason."""
        entry = self.entry
        standing = self.standing.describe() if self.standing is not None else "-"
        return (
            f"#{self.position + 1} {entry.job_id} [{entry.account}] {standing}; "
            f"priority {entry.priority}, waiting {format_span(self.waiting_s)}; {self.reason}"
        )


_entry_of = operator.itemgetter(1)
"""The entry of a (key, entry) item of `SortedEntries`."""


def _entry_key(entry: QueueEntry) -> EntryKey:
    return -entry.priority, entry.submit_time, entry.job_id


def _oldest_key(entry: QueueEntry) -> EntryKey:
    """A job's place in `UnallocatedOrder.OLDEST`: submit time, then id."""
    return 0, entry.submit_time, entry.job_id


def _account_of(entry: QueueEntry) -> str:
    return entry.account


class _AccountQueue:
    """One account's pending jobs: its allocated run and its unallocated run."""

    __slots__ = ("allocated", "unallocated")

    def __init__(self) -> None:
        self.allocated: SortedEntries[QueueEntry] = SortedEntries()
        self.unallocated: SortedEntries[QueueEntry] = SortedEntries()

    def __len__(self) -> int:
        return len(self.allocated) + len(self.unallocated)


class PendingQueue:
    """Pending jobs in Fair Tree order, kept per leaf account and merged in rank order.

    Each account's jobs stay sorted by priority (higher first), then submit time, then job id;
    adding or removing a job costs O(log n). The global order is the accounts' queues laid end
    to end in rank order, so when usage or budgets move only the accounts are re-ranked, never
    the jobs. Three tiers follow each other: allocated work, unallocated work, and jobs whose
    account stopped being a leaf of the tree while they waited.

    Within allocated work, the accounts the caller names as *owed* (running below their budget,
    which only the scheduler knows) go first, in rank order, then the others in rank order: a
    budget is what an account is owed, so idle GPUs serve it before they serve borrowing.

    With `UnallocatedOrder.OLDEST` the unallocated tier is instead every account's
    unallocated jobs merged oldest submission first (see `UnallocatedOrder`), kept in one
    more sorted sequence of all pending jobs; the other tiers do not change.

    Rankings are cached per (now, tree version, usage readings' version); nothing here reads a
    clock.
    """

    def __init__(
        self,
        tree: BudgetTree,
        usage: UsageSource,
        unallocated_order: UnallocatedOrder = UnallocatedOrder.RANK,
    ) -> None:
        if not isinstance(unallocated_order, UnallocatedOrder):
            raise InputError("unallocated_order", unallocated_order, "must be an UnallocatedOrder")
        self.tree = tree
        self.usage = usage
        self.unallocated_order = unallocated_order
        # Every pending job oldest first, kept only for `UnallocatedOrder.OLDEST`.
        self._oldest: SortedEntries[QueueEntry] | None = (
            SortedEntries() if unallocated_order is UnallocatedOrder.OLDEST else None
        )
        self._entries: dict[str, QueueEntry] = {}
        self._accounts: dict[str, _AccountQueue] = {}
        self._version = 0
        self._ranking: tuple[tuple[float, int, int], Ranking] | None = None
        self._layout: tuple[BudgetTree, TreeLayout] | None = None
        # Tiers read from the tree alone, by (account, declared unallocated), for the tree at
        # `_tiers_version`: every job's turn asks.
        self._tiers: dict[tuple[str, bool], QueueTier] = {}
        self._tiers_version = -1
        self._offsets: (
            tuple[Ranking, int, Mapping[str, int], dict[tuple[QueueTier, str], int]] | None
        ) = None

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._entries

    def __repr__(self) -> str:
        return f"PendingQueue({len(self)} jobs in {len(self._accounts)} accounts)"

    def accounts(self) -> list[str]:
        """The accounts with pending jobs."""
        return list(self._accounts)

    def get(self, job_id: str) -> QueueEntry:
        if job_id not in self._entries:
            raise InputError("job_id", job_id, "is not in the pending queue")
        return self._entries[job_id]

    def add(self, entry: QueueEntry) -> None:
        """Queue a job; its account must be a leaf of the budget tree."""
        _check_entry(entry)
        self._add(entry)

    def add_again(self, entry: QueueEntry) -> None:
        """`add` of a job queued before with the same fields (back from running): they were
        checked then and are not again, but for its account, which must still be a leaf of
        the budget tree (the tree may have changed since)."""
        self._add(entry)

    def _add(self, entry: QueueEntry) -> None:
        if entry.job_id in self._entries:
            raise InputError("job_id", entry.job_id, "is already in the pending queue")
        tree = self.tree
        if not tree.names_leaf(entry.account):
            tree.require(entry.account)
            raise InputError(
                "account",
                entry.account,
                f"has child accounts ({', '.join(tree.children(entry.account))}); "
                "jobs charge to leaf accounts",
            )
        queue = self._accounts.get(entry.account)
        if queue is None:
            queue = self._accounts[entry.account] = _AccountQueue()
        run = queue.unallocated if entry.unallocated else queue.allocated
        run.add(_entry_key(entry), entry)
        if self._oldest is not None:
            self._oldest.add(_oldest_key(entry), entry)
        self._entries[entry.job_id] = entry
        self._version += 1

    def remove(self, job_id: str) -> QueueEntry:
        """Take a job out of the queue (it started, or was cancelled) and return its entry."""
        entry = self.get(job_id)
        queue = self._accounts[entry.account]
        run = queue.unallocated if entry.unallocated else queue.allocated
        run.remove(_entry_key(entry))
        if self._oldest is not None:
            self._oldest.remove(_oldest_key(entry))
        if not len(queue):
            del self._accounts[entry.account]
        del self._entries[job_id]
        self._version += 1
        return entry

    def ranking(self, now: float) -> Ranking:
        """The accounts' standings at `now`, recomputed only if time, budgets or usage moved."""
        tree = self.tree
        cache_key = (now, tree.version, self.usage.readings_version)
        if self._ranking is None or self._ranking[0] != cache_key:
            layout = self._layout
            if layout is None or layout[0] is not tree or layout[1].version != tree.version:
                layout = self._layout = (tree, TreeLayout.of(tree))
            self._ranking = (cache_key, rank_accounts(tree, self.usage, now, layout[1]))
        return self._ranking[1]

    def ordered(self, now: float, owed: Collection[str] = ()) -> Iterator[QueueEntry]:
        """Every pending job, first to run first; the allocated work of the accounts in `owed`
        before that of the others (among themselves by standing if `owed` is a set, in its
        order if a sequence).

        Safe to change the queue while iterating: each account's jobs are read a chunk at a
        time as the walk reaches them, so a job added before the walk's place is not seen.
        """
        for run in self.runs(now, owed):
            yield from run

    def runs(self, now: float, owed: Collection[str] = ()) -> Iterator[Iterator[QueueEntry]]:
        """`ordered`'s jobs as runs, each a sequence of one account's jobs of one tier (both
        its runs merged where its account has no budget or is detached), read as the caller
        reaches them: a caller may leave a run before its end and go on with the next."""
        if not self._accounts:
            # Nothing waiting: nothing to order, so no ranking is computed (on a large tree
            # it is most of a quiet cycle's cost).
            return
        if len(self._accounts) == 1:
            # One account waiting: its runs follow one another whatever the standings, and
            # its tier comes from the tree, so the ranking is not computed.
            (account,) = self._accounts
            queue = self._accounts[account]
            tree = self.tree
            leaf = account in tree and tree.is_leaf(account)
            if leaf and self._oldest is not None:
                # One account's unallocated tier, oldest first.
                if tree.has_budget(account):
                    yield map(_entry_of, queue.allocated.items())
                yield from self._oldest_runs(None)
            elif leaf and tree.has_budget(account):
                yield map(_entry_of, queue.allocated.items())
                yield map(_entry_of, queue.unallocated.items())
            else:
                merged = heapq.merge(
                    queue.allocated.items(), queue.unallocated.items(), key=item_key
                )
                yield map(_entry_of, merged)
            return
        ranking = self.ranking(now)
        oldest = self._oldest is not None
        for tier, account in list(self._segments(ranking, owed_places(owed))):
            if oldest and tier is QueueTier.UNALLOCATED:
                # The whole tier at its first account, then none of its per-account runs.
                yield from self._oldest_runs(ranking)
                oldest = False
            if tier is QueueTier.UNALLOCATED and self._oldest is not None:
                continue
            yield map(_entry_of, self._segment_items(tier, account, ranking))

    def segments(self, ranking: Ranking, owed: Collection[str] = ()) -> list[Segment]:
        """The queue's runs under `ranking`, in order: jobs already queued keep their order
        among themselves for as long as the segments holding them do (jobs joining or leaving
        move none)."""
        oldest = self._oldest is not None
        segments: list[Segment] = []
        for tier, account in self._segments(ranking, owed_places(owed)):
            if oldest and tier is QueueTier.UNALLOCATED:
                oldest = False
                segments.append((tier, ""))
            elif tier is not QueueTier.UNALLOCATED or self._oldest is None:
                segments.append((tier, account))
        return segments

    def sort_keys(
        self, job_ids: Iterable[str], ranking: Ranking, owed: Collection[str] = ()
    ) -> dict[str, JobSortKey]:
        """`sort_key` of each job under `ranking`."""
        owed_rank, entries = owed_places(owed), self._entries
        return {job_id: self._sort_key(entries[job_id], ranking, owed_rank) for job_id in job_ids}

    def runs_after(
        self, after: JobSortKey, ranking: Ranking, owed: Collection[str] = ()
    ) -> Iterator[Iterator[QueueEntry]]:
        """`runs` under `ranking` from the first job whose sort key follows `after` (which
        need not be a pending job's), read as the caller reaches them."""
        owed_rank = owed_places(owed)
        head, within = after[:3], after[3:]
        oldest = self._oldest is not None
        for tier, account in list(self._segments(ranking, owed_rank)):
            if oldest and tier is QueueTier.UNALLOCATED:
                oldest = False
                oldest_start: tuple[QueueTier, int, StandingKey] = (tier, NOT_OWED, OLDEST_STANDING)
                if oldest_start >= head:
                    after_key = within if oldest_start == head else None
                    yield from self._oldest_runs(ranking, after_key)
            if tier is QueueTier.UNALLOCATED and self._oldest is not None:
                continue
            owed_flag = (
                owed_rank.get(account, NOT_OWED) if tier is QueueTier.ALLOCATED else NOT_OWED
            )
            start = (tier, owed_flag, ranking.sort_key(account))
            if start >= head:
                after_key = within if start == head else None
                yield map(_entry_of, self._segment_items(tier, account, ranking, after_key))

    def _oldest_runs(
        self, ranking: Ranking | None, after: EntryKey | None = None
    ) -> Iterator[Iterator[QueueEntry]]:
        """The unallocated tier under `ranking` (the tree's if None) oldest first (those after
        the key `after`, if given), in runs of consecutive jobs of one account, read as the
        caller reaches them."""
        assert self._oldest is not None
        tier, unallocated = self.tier, QueueTier.UNALLOCATED
        entries = (
            entry
            for entry in map(_entry_of, self._oldest.items(after))
            if tier(entry, ranking) is unallocated
        )
        for _account, run in itertools.groupby(entries, key=_account_of):
            yield run

    def tier(self, entry: QueueEntry, ranking: Ranking | None = None) -> QueueTier:
        """Which run of the queue the job belongs to under `ranking` (the current one if None:
        the tier depends on the tree alone, so none is computed)."""
        if ranking is None:
            tree, key = self.tree, (entry.account, entry.unallocated)
            if self._tiers_version != tree.version:
                self._tiers.clear()
                self._tiers_version = tree.version
            tier = self._tiers.get(key)
            if tier is None:
                tier = self._tiers[key] = self._tier_in_tree(*key)
            return tier
        if not ranking.is_ranked_leaf(entry.account):
            return QueueTier.DETACHED
        if entry.unallocated or not ranking.budgeted(entry.account):
            return QueueTier.UNALLOCATED
        return QueueTier.ALLOCATED

    def _tier_in_tree(self, account: str, unallocated: bool) -> QueueTier:
        tree = self.tree
        if account not in tree or not tree.is_leaf(account):
            return QueueTier.DETACHED
        if unallocated or not tree.has_budget(account):
            return QueueTier.UNALLOCATED
        return QueueTier.ALLOCATED

    def sort_key(self, job_id: str, now: float, owed: Collection[str] = ()) -> JobSortKey:
        """The key the queue orders by: tier, owed first, account standing, -priority, submit
        time, id (with `UnallocatedOrder.OLDEST`, an unallocated job's standing and priority
        parts are the same for every job of the tier)."""
        entry = self.get(job_id)
        return self._sort_key(entry, self.ranking(now), owed_places(owed))

    def position(self, job_id: str, now: float, owed: Collection[str] = ()) -> int:
        """How many pending jobs go before this one."""
        entry = self.get(job_id)
        ranking = self.ranking(now)
        tier = self.tier(entry, ranking)
        queue = self._accounts[entry.account]
        key = _entry_key(entry)
        offsets = self._segment_offsets(ranking, owed_places(owed))
        if tier is QueueTier.UNALLOCATED and self._oldest is not None:
            # The tier starts where its first account's run would; the jobs before this one
            # are counted one by one, since which are in the tier depends on the tree.
            start = min(offset for (part, _), offset in offsets.items() if part is tier)
            before = itertools.takewhile(
                lambda item: item[0] < _oldest_key(entry), self._oldest.items()
            )
            within = sum(
                1 for _key, other in before if self.tier(other, ranking) is QueueTier.UNALLOCATED
            )
            return start + within
        if tier is QueueTier.ALLOCATED:
            within = queue.allocated.count_before(key)
        elif tier is QueueTier.UNALLOCATED and ranking.budgeted(entry.account):
            within = queue.unallocated.count_before(key)
        else:
            within = queue.allocated.count_before(key) + queue.unallocated.count_before(key)
        return offsets[(tier, entry.account)] + within

    def explain(self, job_id: str, now: float, owed: Collection[str] = ()) -> JobExplanation:
        """The job's position, tier, account standing and sort key."""
        entry = self.get(job_id)
        ranking = self.ranking(now)
        owed_rank = owed_places(owed)
        return self._explanation(entry, self.position(job_id, now, owed_rank), ranking, owed_rank)

    def explanations(self, now: float, owed: Collection[str] = ()) -> Iterator[JobExplanation]:
        """`explain` for every pending job, in queue order."""
        ranking = self.ranking(now)
        owed_rank = owed_places(owed)
        for position, entry in enumerate(self.ordered(now, owed_rank)):
            yield self._explanation(entry, position, ranking, owed_rank)

    # ----------------------------------------------------------------------------- internals

    def _sort_key(self, entry: QueueEntry, ranking: Ranking, owed: Mapping[str, int]) -> JobSortKey:
        tier = self.tier(entry, ranking)
        if tier is QueueTier.UNALLOCATED and self._oldest is not None:
            return (tier, NOT_OWED, OLDEST_STANDING, 0, entry.submit_time, entry.job_id)
        return (
            tier,
            owed.get(entry.account, NOT_OWED) if tier is QueueTier.ALLOCATED else NOT_OWED,
            ranking.sort_key(entry.account),
            -entry.priority,
            entry.submit_time,
            entry.job_id,
        )

    def _explanation(
        self, entry: QueueEntry, position: int, ranking: Ranking, owed: Mapping[str, int]
    ) -> JobExplanation:
        tier = self.tier(entry, ranking)
        standing = None if tier is QueueTier.DETACHED else ranking.standings[entry.account]
        sort_key = self._sort_key(entry, ranking, owed)
        return JobExplanation(
            entry,
            position,
            tier,
            standing,
            sort_key,
            sort_key[1] != NOT_OWED,
            max(ranking.now - entry.submit_time, 0.0),
            self._oldest is not None,
        )

    def _segments(
        self, ranking: Ranking, owed: Mapping[str, int]
    ) -> Iterator[tuple[QueueTier, str]]:
        """(tier, account) runs of the queue in order; each run is one sorted sequence."""
        budgeted = []
        for leaf in ranking.leaves:
            if not ranking.budgeted(leaf):
                break  # budgeted leaves come first in `leaves`
            queue = self._accounts.get(leaf)
            if queue is not None and len(queue.allocated):
                budgeted.append(leaf)
        if owed:
            # Stable: the owed accounts first in their places, then the rest, alike places in
            # rank order.
            budgeted.sort(key=lambda leaf: owed.get(leaf, NOT_OWED))
        for leaf in budgeted:
            yield QueueTier.ALLOCATED, leaf
        for leaf in ranking.leaves:
            queue = self._accounts.get(leaf)
            if queue is None:
                continue
            if not ranking.budgeted(leaf) or len(queue.unallocated):
                yield QueueTier.UNALLOCATED, leaf
        detached = (account for account in self._accounts if not ranking.is_ranked_leaf(account))
        for account in sorted(detached):
            yield QueueTier.DETACHED, account

    def _segment_items(
        self, tier: QueueTier, account: str, ranking: Ranking, after: EntryKey | None = None
    ) -> Iterable[tuple[EntryKey, QueueEntry]]:
        queue = self._accounts.get(account)
        if queue is None:
            return ()
        if tier is QueueTier.ALLOCATED:
            return queue.allocated.items(after)
        if tier is QueueTier.UNALLOCATED and ranking.budgeted(account):
            return queue.unallocated.items(after)
        # Without a budget, or detached, both runs are unallocated alike: one merged run.
        return heapq.merge(
            queue.allocated.items(after), queue.unallocated.items(after), key=item_key
        )

    def _segment_offsets(
        self, ranking: Ranking, owed: Mapping[str, int]
    ) -> dict[tuple[QueueTier, str], int]:
        if (
            self._offsets is None
            or self._offsets[0] is not ranking
            or self._offsets[1] != self._version
            or self._offsets[2] != owed
        ):
            offsets: dict[tuple[QueueTier, str], int] = {}
            offset = 0
            for tier, account in self._segments(ranking, owed):
                offsets[tier, account] = offset
                queue = self._accounts[account]
                if tier is QueueTier.ALLOCATED:
                    offset += len(queue.allocated)
                elif tier is QueueTier.UNALLOCATED and ranking.budgeted(account):
                    offset += len(queue.unallocated)
                else:
                    offset += len(queue)
            self._offsets = (ranking, self._version, owed, offsets)
        return self._offsets[3]


def _check_entry(entry: Any) -> None:
    if not isinstance(entry, QueueEntry):
        raise InputError("entry", entry, "must be a QueueEntry")
    if not isinstance(entry.job_id, str) or not entry.job_id:
        raise InputError("job_id", entry.job_id, "must be a non-empty string")
    split_account_path(entry.account)
    if isinstance(entry.priority, bool) or not isinstance(entry.priority, int):
        raise InputError("priority", entry.priority, "must be an integer; higher runs first")
    if (
        isinstance(entry.submit_time, bool)
        or not isinstance(entry.submit_time, int | float)
        or not math.isfinite(entry.submit_time)
    ):
        raise InputError("submit_time", entry.submit_time, "must be a finite number of seconds")
    if not isinstance(entry.unallocated, bool):
        raise InputError("unallocated", entry.unallocated, "must be true or false")
