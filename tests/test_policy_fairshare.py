"""Tests for Fair Tree ranking and the pending queue it orders."""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toposched.cluster.errors import InputError
from toposched.cluster.units import HOUR
from toposched.policy.budget import ROOT, BudgetTree
from toposched.policy.fairshare import NOT_OWED, PendingQueue
from toposched.policy.queue_entry import QueueEntry, QueueTier
from toposched.policy.ranking import level_fair_share, rank_accounts
from toposched.policy.usage import UsageTracker

# research 70 { pretraining 60 { team-a 50, team-b 50 }, eval 40 }, product 30
BUDGET = {
    "accounts": {
        "research": {
            "share": 70,
            "children": {
                "pretraining": {"share": 60, "children": {"team-a": 50, "team-b": 50}},
                "eval": 40,
            },
        },
        "product": 30,
    }
}
TEAM_A = "research/pretraining/team-a"
TEAM_B = "research/pretraining/team-b"
EVAL = "research/eval"
PRODUCT = "product"


def used_for_an_hour(gpus_by_account: Mapping[str, float]) -> UsageTracker:
    """Usage after each account held its GPUs over [0, 1 h): GPU-hours = GPUs; read at 1 h."""
    usage = UsageTracker()
    for account, gpus in gpus_by_account.items():
        if gpus:
            usage.start(account, gpus, now=0)
    for account, gpus in gpus_by_account.items():
        if gpus:
            usage.stop(account, gpus, now=HOUR)
    return usage


# GPU-hours: team-a 300, team-b 100, eval 100, product 300.
GOLDEN_USAGE = {TEAM_A: 300, TEAM_B: 100, EVAL: 100, PRODUCT: 300}


@pytest.fixture
def tree() -> BudgetTree:
    return BudgetTree.from_dict(BUDGET)


def test_level_fair_share_is_s_over_u() -> None:
    # S = 30 / 100, U = 300 / 800: 0.3 / 0.375 = 0.8.
    assert level_fair_share(30, 100, 300, 800) == pytest.approx(0.8)
    assert level_fair_share(30, 100, 0, 800) == math.inf  # no usage: goes first
    assert level_fair_share(0, 100, 0, 0) == 0  # no share: nothing owed


def test_fair_tree_golden_ranking(tree: BudgetTree) -> None:
    ranking = rank_accounts(tree, used_for_an_hour(GOLDEN_USAGE), now=HOUR)
    # Top level, usage research 300 + 100 + 100 = 500 vs product 300 (of 800):
    #   research S = 0.7, U = 500/800 = 0.625 -> 1.12;  product S = 0.3, U = 0.375 -> 0.8.
    # Under research (usage 500): pretraining S = 0.6, U = 400/500 = 0.8 -> 0.75;
    #   eval S = 0.4, U = 100/500 = 0.2 -> 2.0.  eval first.
    # Under pretraining (usage 400): team-a S = 0.5, U = 0.75 -> 0.667; team-b U = 0.25 -> 2.0.
    # Depth-first in that order: eval, team-b, team-a, then product.
    assert ranking.leaves == (EVAL, TEAM_B, TEAM_A, PRODUCT)
    assert [ranking.rank(leaf) for leaf in (EVAL, TEAM_B, TEAM_A, PRODUCT)] == [0, 1, 2, 3]
    assert ranking.standing(TEAM_A).level_fs == pytest.approx((1.12, 0.75, 2 / 3))
    assert ranking.standing(EVAL).level_fs == pytest.approx((1.12, 2.0))
    assert ranking.standing(PRODUCT).level_fs == pytest.approx((0.8,))
    level = ranking.standing(TEAM_B).levels[-1]
    assert (level.share, level.usage) == pytest.approx((0.5, 0.25))


def test_hierarchy_not_the_leaf_value_decides_across_subtrees(tree: BudgetTree) -> None:
    # product's own level FS (0.8) beats team-a's (0.667), but team-a is under research, which
    # beats product at the top level: so every research leaf, team-a included, goes first.
    ranking = rank_accounts(tree, used_for_an_hour(GOLDEN_USAGE), now=HOUR)
    assert ranking.standing(PRODUCT).level_fs[-1] > ranking.standing(TEAM_A).level_fs[-1]
    assert ranking.prefers(TEAM_A, PRODUCT)


def test_accounts_without_usage_rank_first_and_ties_go_by_name(tree: BudgetTree) -> None:
    # Nobody has used anything: every U is 0, every level FS infinite, every tie broken by name:
    # product < research; under research eval < pretraining; team-a < team-b.
    ranking = rank_accounts(tree, UsageTracker(), now=0)
    assert ranking.leaves == (PRODUCT, EVAL, TEAM_A, TEAM_B)
    # team-b has used a little; its siblings have not, so they rank above it.
    ranking = rank_accounts(tree, used_for_an_hour({TEAM_B: 1}), now=HOUR)
    assert ranking.leaves == (PRODUCT, EVAL, TEAM_A, TEAM_B)
    assert ranking.standing(TEAM_B).level_fs == (0.7, 0.6, 0.5)


def test_equal_level_fair_share_ties_by_name() -> None:
    # a: share 20, 2 GPU-hours; b: share 40, 4 GPU-hours: both S / U = 1 exactly.
    tree = BudgetTree.from_dict({"accounts": {"b": 40, "a": 20}})
    ranking = rank_accounts(tree, used_for_an_hour({"a": 2, "b": 4}), now=HOUR)
    assert ranking.standing("a").level_fs == ranking.standing("b").level_fs == (1.0,)
    assert ranking.leaves == ("a", "b")


def test_leaves_without_budget_rank_after_every_budgeted_leaf() -> None:
    # lab ranks first by name (no usage anywhere), but lab/idle has share 0: it goes after ops.
    tree = BudgetTree.from_dict(
        {"accounts": {"lab": {"share": 50, "children": {"idle": 0, "team": 100}}, "ops": 50}}
    )
    ranking = rank_accounts(tree, UsageTracker(), now=0)
    assert ranking.leaves == ("lab/team", "ops", "lab/idle")
    assert ranking.standing("lab/idle").budgeted is False
    assert ranking.standing("lab/idle").level_fs == (math.inf, 0.0)
    assert ranking.budgeted_leaves == ("lab/team", "ops")


def job(job_id: str, account: str, priority: int = 0, submit: float = 0.0) -> QueueEntry:
    return QueueEntry(job_id, account, priority, submit)


def ids(queue: PendingQueue, now: float) -> list[str]:
    return [entry.job_id for entry in queue.ordered(now)]


def test_jobs_of_one_account_go_by_priority_then_submit_time_then_id(tree: BudgetTree) -> None:
    queue = PendingQueue(tree, UsageTracker())
    queue.add(job("late-low", EVAL, priority=0, submit=50))
    queue.add(job("early-low", EVAL, priority=0, submit=10))
    queue.add(job("late-high", EVAL, priority=5, submit=90))
    queue.add(job("b-same", EVAL, priority=0, submit=10))
    assert ids(queue, now=100) == ["late-high", "b-same", "early-low", "late-low"]


def golden_queue(tree: BudgetTree, usage: UsageTracker) -> PendingQueue:
    queue = PendingQueue(tree, usage)
    # Priorities differ across teams on purpose: priority only orders jobs within a team.
    queue.add(job("a1", TEAM_A, priority=9, submit=1))
    queue.add(job("a2", TEAM_A, priority=1, submit=2))
    queue.add(job("b1", TEAM_B, priority=0, submit=3))
    queue.add(job("e1", EVAL, priority=0, submit=4))
    queue.add(job("p1", PRODUCT, priority=100, submit=0))
    return queue


def test_queue_follows_the_fair_tree_ranking(tree: BudgetTree) -> None:
    queue = golden_queue(tree, used_for_an_hour(GOLDEN_USAGE))
    # Leaf order eval, team-b, team-a, product (see test_fair_tree_golden_ranking).
    assert ids(queue, now=HOUR) == ["e1", "b1", "a1", "a2", "p1"]
    assert [queue.position(job_id, HOUR) for job_id in ("e1", "b1", "a1", "a2", "p1")] == [
        0,
        1,
        2,
        3,
        4,
    ]


def test_owed_accounts_go_first_in_rank_order(tree: BudgetTree) -> None:
    queue = golden_queue(tree, used_for_an_hour(GOLDEN_USAGE))
    queue.add(QueueEntry("a-scavenge", TEAM_A, 0, 5, unallocated=True))
    # team-a and product run below their budgets: their allocated work goes before eval's and
    # team-b's, each group in Fair Tree order (eval, team-b, team-a, product); team-a's
    # unallocated job stays in the unallocated tier.
    owed = {TEAM_A, PRODUCT}
    order = ["a1", "a2", "p1", "e1", "b1", "a-scavenge"]
    assert [entry.job_id for entry in queue.ordered(HOUR, owed)] == order
    assert [queue.position(job_id, HOUR, owed) for job_id in order] == list(range(6))
    keys = [queue.sort_key(job_id, HOUR, owed) for job_id in order]
    assert keys == sorted(keys)
    assert [key[1] for key in keys] == [0, 0, 0, NOT_OWED, NOT_OWED, NOT_OWED]
    explained = list(queue.explanations(HOUR, owed))
    assert [item.entry.job_id for item in explained] == order
    assert [item.owed for item in explained] == [True, True, True, False, False, False]
    assert explained[0].reason == f"allocated; account {TEAM_A} runs below its budget"
    assert queue.explain("b1", HOUR, owed).reason == "allocated"
    # Nobody owed: plain Fair Tree order, the same as without the argument.
    assert [entry.job_id for entry in queue.ordered(HOUR, ())] == ids(queue, HOUR)
    assert ids(queue, HOUR) == ["e1", "b1", "a1", "a2", "p1", "a-scavenge"]


def test_a_budget_change_reorders_the_queue(tree: BudgetTree) -> None:
    queue = golden_queue(tree, used_for_an_hour(GOLDEN_USAGE))
    tree.set_share("research", 40)
    # Top-level shares now 40 : 30, so S = 4/7 and 3/7; usage unchanged (U 0.625 / 0.375):
    #   research 0.571 / 0.625 = 0.914 < product 0.429 / 0.375 = 1.143. product goes first.
    assert ids(queue, now=HOUR) == ["p1", "e1", "b1", "a1", "a2"]
    assert queue.position("p1", HOUR) == 0 and queue.position("a2", HOUR) == 4


def test_a_queue_ordered_before_a_tree_change_reads_the_changed_tree(tree: BudgetTree) -> None:
    usage = used_for_an_hour(GOLDEN_USAGE)
    queue = golden_queue(tree, usage)
    assert ids(queue, now=HOUR) == ["e1", "b1", "a1", "a2", "p1"]
    assert queue.tier(queue.get("p1")) is QueueTier.ALLOCATED
    # What the queue kept of the tree (its layout for rankings, the jobs' tiers) is read
    # again: product loses its budget, research its eval team's place as a leaf.
    tree.set_share(PRODUCT, 0)
    tree.add_account("research/eval/red-team", 10)
    later = HOUR + 1
    assert ids(queue, now=later) == ["b1", "a1", "a2", "p1", "e1"]
    assert queue.ranking(later).leaves == rank_accounts(tree, usage, later).leaves
    assert "research/eval/red-team" in queue.ranking(later).leaves
    assert queue.tier(queue.get("p1")) is QueueTier.UNALLOCATED
    assert queue.tier(queue.get("e1")) is QueueTier.DETACHED


def test_a_usage_change_reorders_the_queue(tree: BudgetTree) -> None:
    usage = used_for_an_hour(GOLDEN_USAGE)
    queue = golden_queue(tree, usage)
    assert ids(queue, now=HOUR) == ["e1", "b1", "a1", "a2", "p1"]
    # eval runs 400 GPUs for one hour: eval 500, team-a 300, team-b 100, product 300 GPU-hours.
    # Top level: research 0.7 / (900/1200) = 0.933 < product 0.3 / (300/1200) = 1.2.
    # Under research: pretraining 0.6 / (400/900) = 1.35 > eval 0.4 / (500/900) = 0.72.
    # Under pretraining nothing changed: team-b, then team-a.
    usage.start(EVAL, 400, now=HOUR)
    usage.stop(EVAL, 400, now=2 * HOUR)
    assert ids(queue, now=2 * HOUR) == ["p1", "b1", "a1", "a2", "e1"]


def test_unbudgeted_accounts_queue_after_all_budgeted_work() -> None:
    tree = BudgetTree.from_dict(
        {"accounts": {"lab": {"share": 50, "children": {"idle": 0, "team": 100}}, "ops": 50}}
    )
    queue = PendingQueue(tree, UsageTracker())
    queue.add(job("idle-urgent", "lab/idle", priority=1000, submit=0))
    queue.add(job("ops-1", "ops", submit=5))
    queue.add(job("team-1", "lab/team", submit=9))
    assert ids(queue, now=10) == ["team-1", "ops-1", "idle-urgent"]
    explanation = queue.explain("idle-urgent", now=10)
    assert explanation.tier is QueueTier.UNALLOCATED
    assert explanation.reason == "unallocated: account lab/idle has no budget"
    # Giving the account a budget makes its work allocated, and it ranks by fair share again.
    tree.set_shares({"lab/idle": 0.5, "lab/team": 99.5})
    assert ids(queue, now=10) == ["idle-urgent", "team-1", "ops-1"]


def test_declared_unallocated_jobs_queue_after_allocated_work_in_rank_order(
    tree: BudgetTree,
) -> None:
    queue = golden_queue(tree, used_for_an_hour(GOLDEN_USAGE))
    queue.add(QueueEntry("p-fill", PRODUCT, 50, 0.0, unallocated=True))
    queue.add(QueueEntry("e-fill", EVAL, 0, 7.0, unallocated=True))
    # Allocated work first (as before), then unallocated work by account rank: eval, product.
    assert ids(queue, now=HOUR) == ["e1", "b1", "a1", "a2", "p1", "e-fill", "p-fill"]
    assert queue.position("p-fill", HOUR) == 6
    assert queue.explain("e-fill", HOUR).tier is QueueTier.UNALLOCATED


def test_jobs_of_accounts_that_stop_being_leaves_go_last(tree: BudgetTree) -> None:
    queue = golden_queue(tree, used_for_an_hour(GOLDEN_USAGE))
    tree.add_account("research/eval/red-team", 10)  # eval is no longer a leaf
    tree.remove_account(PRODUCT)
    # Detached jobs go after everything else, by account name.
    assert ids(queue, now=HOUR) == ["b1", "a1", "a2", "p1", "e1"]
    explanation = queue.explain("e1", HOUR)
    assert explanation.tier is QueueTier.DETACHED
    assert explanation.standing is None
    assert "no longer a leaf" in explanation.reason
    assert queue.position("e1", HOUR) == 4
    assert queue.remove("e1").job_id == "e1"


def test_explanation_carries_the_standing_of_each_ancestor(tree: BudgetTree) -> None:
    queue = golden_queue(tree, used_for_an_hour(GOLDEN_USAGE))
    explanation = queue.explain("a2", HOUR)
    assert explanation.position == 3
    assert explanation.tier is QueueTier.ALLOCATED
    assert explanation.standing is not None
    assert [level.account for level in explanation.standing.levels] == [
        "research",
        "research/pretraining",
        TEAM_A,
    ]
    assert explanation.sort_key == queue.sort_key("a2", HOUR)
    assert explanation.sort_key[0] == QueueTier.ALLOCATED
    assert explanation.sort_key[3:] == (-1, 2.0, "a2")
    assert explanation.describe() == (
        "#4 a2 [research/pretraining/team-a] research FS=1.12 (S=0.700 U=0.625) > "
        "pretraining FS=0.75 (S=0.600 U=0.800) > team-a FS=0.667 (S=0.500 U=0.750); "
        "priority 1, waiting 60 min; allocated"
    )
    explained = list(queue.explanations(HOUR))
    assert [item.entry.job_id for item in explained] == ids(queue, HOUR)
    assert [item.position for item in explained] == list(range(5))
    keys = [item.sort_key for item in explained]
    assert keys == sorted(keys)


def test_remove_takes_a_job_out_and_positions_close_up(tree: BudgetTree) -> None:
    queue = golden_queue(tree, used_for_an_hour(GOLDEN_USAGE))
    removed = queue.remove("b1")
    assert removed == job("b1", TEAM_B, priority=0, submit=3)
    assert "b1" not in queue and len(queue) == 4
    assert queue.position("a1", HOUR) == 1
    with pytest.raises(InputError, match="not in the pending queue"):
        queue.remove("b1")


@pytest.mark.parametrize(
    ("entry", "field", "rule"),
    [
        (job("x", "research/nowhere"), "account", "names no account"),
        (job("x", "research"), "account", "jobs charge to leaf accounts"),
        (job("x", "bad path"), "account", "slash-separated"),
        (job("", EVAL), "job_id", "non-empty"),
        (QueueEntry("x", EVAL, 1.5, 0.0), "priority", "integer"),  # type: ignore[arg-type]
        (QueueEntry("x", EVAL, 0, math.nan), "submit_time", "finite"),
    ],
)
def test_bad_entries_are_rejected(
    tree: BudgetTree, entry: QueueEntry, field: str, rule: str
) -> None:
    queue = PendingQueue(tree, UsageTracker())
    with pytest.raises(InputError) as error:
        queue.add(entry)
    assert error.value.field == field and rule in error.value.rule
    assert len(queue) == 0


def test_a_job_id_can_be_queued_once(tree: BudgetTree) -> None:
    queue = PendingQueue(tree, UsageTracker())
    queue.add(job("x", EVAL))
    with pytest.raises(InputError, match="already in the pending queue"):
        queue.add(job("x", TEAM_A))
    assert queue.get("x").account == EVAL


def test_a_job_queued_again_keeps_its_place_and_still_needs_a_leaf(tree: BudgetTree) -> None:
    queue = PendingQueue(tree, UsageTracker())
    first = job("x", EVAL, priority=1, submit=0)
    queue.add(first)
    queue.add(job("y", EVAL, priority=1, submit=5))
    queue.remove("x")
    queue.add_again(first)
    assert [entry.job_id for entry in queue.ordered(HOUR)] == ["x", "y"]
    with pytest.raises(InputError, match="already in the pending queue"):
        queue.add_again(first)
    queue.remove("x")
    # The tree changed while the job ran: its account is no longer a leaf, or is gone.
    tree.add_account("research/eval/red-team", 25)
    with pytest.raises(InputError, match="jobs charge to leaf accounts"):
        queue.add_again(first)
    with pytest.raises(InputError, match="names no account"):
        queue.add_again(job("z", "research/nowhere"))
    assert [entry.job_id for entry in queue.ordered(HOUR)] == ["y"]


class CountingUsage:
    """Usage of 1 GPU-second per account, counting how often it is asked."""

    def __init__(self) -> None:
        self.readings_version = 0
        self.calls = 0

    def usage(self, account: str, now: float) -> float:
        self.calls += 1
        return 1.0


def test_reranking_asks_for_usage_once_per_account_not_per_job(tree: BudgetTree) -> None:
    usage = CountingUsage()
    queue = PendingQueue(tree, usage)
    for index in range(2000):
        queue.add(job(f"j{index}", tree.leaves()[index % 4], priority=index % 7, submit=index))
    assert len(list(queue.ordered(now=1))) == 2000
    assert usage.calls == len(tree)  # 6 accounts
    # Same time and nothing changed: the ranking is reused.
    queue.position("j5", now=1)
    assert usage.calls == len(tree)
    usage.readings_version += 1  # usage moved: one more lookup per account
    queue.position("j5", now=1)
    assert usage.calls == 2 * len(tree)


def test_an_empty_queue_is_ordered_without_ranking_the_accounts(tree: BudgetTree) -> None:
    usage = CountingUsage()
    queue = PendingQueue(tree, usage)
    assert list(queue.ordered(now=1)) == []
    assert usage.calls == 0
    queue.add(job("j1", TEAM_A))
    queue.add(job("j2", PRODUCT))
    assert [entry.job_id for entry in queue.ordered(now=2)] == ["j1", "j2"]
    assert usage.calls == len(tree)  # two accounts waiting: ranked once
    queue.remove("j1")
    queue.remove("j2")
    assert list(queue.ordered(now=3)) == []
    assert usage.calls == len(tree)


def test_the_queue_can_change_while_it_is_walked(tree: BudgetTree) -> None:
    queue = golden_queue(tree, used_for_an_hour(GOLDEN_USAGE))
    seen = []
    for entry in queue.ordered(HOUR):
        seen.append(entry.job_id)
        queue.remove(entry.job_id)  # as a cycle does with each job it places
    assert seen == ["e1", "b1", "a1", "a2", "p1"] and len(queue) == 0


def test_many_jobs_in_one_account_stay_sorted_through_adds_and_removes(tree: BudgetTree) -> None:
    # Enough jobs to split the per-account storage into several chunks.
    queue = PendingQueue(tree, UsageTracker())
    entries = [
        job(f"j{(i * 7919) % 3000:04d}", EVAL, (i * 31) % 11, (i * 17) % 101) for i in range(3000)
    ]
    for entry in entries:
        queue.add(entry)
    for entry in entries[::3]:
        queue.remove(entry.job_id)
    kept = [entry for index, entry in enumerate(entries) if index % 3]
    expected = sorted(kept, key=lambda e: (-e.priority, e.submit_time, e.job_id))
    assert list(queue.ordered(now=0)) == expected
    for position in (0, 1, 999, 1000, len(expected) - 1):
        assert queue.position(expected[position].job_id, now=0) == position


# --------------------------------------------------------------------------- property test

_NAMES = ("ash", "birch", "cedar")


@st.composite
def budget_trees(draw: st.DrawFn) -> BudgetTree:
    """Random trees up to 3 levels deep and 3 wide; shares 0..100 summing to at most 100."""
    tree = BudgetTree()

    def grow(parent: str, depth: int) -> None:
        width = draw(st.integers(1 if depth == 0 else 0, 3 if depth < 3 else 0))
        if parent != ROOT and width == 0:
            return
        names = draw(st.permutations(_NAMES))[:width]
        shares = draw(st.lists(st.integers(0, 100), min_size=width, max_size=width))
        if sum(shares) > 100:
            shares = [share * 100 // sum(shares) for share in shares]
        for name, share in zip(names, shares, strict=True):
            path = name if parent == ROOT else f"{parent}/{name}"
            tree.add_account(path, share)
            grow(path, depth + 1)

    grow(ROOT, 0)
    return tree


def _exact_level_fs(share: int, shares: int, used: int, usages: int) -> Fraction | float:
    if share == 0:
        return Fraction(0)
    if used == 0:
        return math.inf
    return Fraction(share, shares) / Fraction(used, usages)


def _oracle_order(
    tree: BudgetTree, used: Mapping[str, int], entries: list[QueueEntry]
) -> tuple[list[str], dict[str, list[tuple[Fraction | float, str]]]]:
    """The queue order recomputed from scratch with exact arithmetic, and each leaf's path."""

    def subtree_usage(account: str) -> int:
        return sum(
            amount
            for leaf, amount in used.items()
            if leaf == account or leaf.startswith(account + "/")
        )

    paths: dict[str, list[tuple[Fraction | float, str]]] = {}
    budgeted: dict[str, bool] = {}
    for leaf in tree.leaves():
        path: list[tuple[Fraction | float, str]] = []
        has_budget = True
        ancestors = leaf.split("/")
        for depth in range(len(ancestors)):
            account = "/".join(ancestors[: depth + 1])
            siblings = tree.children("/".join(ancestors[:depth]))
            shares = sum(int(tree.share(sibling)) for sibling in siblings)
            usages = sum(subtree_usage(sibling) for sibling in siblings)
            share = int(tree.share(account))
            path.append(
                (_exact_level_fs(share, shares, subtree_usage(account), usages), ancestors[depth])
            )
            has_budget = has_budget and share > 0
        paths[leaf] = path
        budgeted[leaf] = has_budget

    def key(entry: QueueEntry) -> tuple[object, ...]:
        budget = budgeted[entry.account]
        tier = 0 if budget and not entry.unallocated else 1
        levels = tuple((-fs, name) for fs, name in paths[entry.account])
        return (tier, 0 if budget else 1, levels, -entry.priority, entry.submit_time, entry.job_id)

    return [entry.job_id for entry in sorted(entries, key=key)], paths


@settings(max_examples=200, deadline=None)
@given(data=st.data(), tree=budget_trees())
def test_queue_order_matches_a_from_scratch_fair_tree_ordering(
    data: st.DataObject, tree: BudgetTree
) -> None:
    leaves = tree.leaves()
    usage = UsageTracker()
    used = dict.fromkeys(leaves, 0)
    # Each leaf holds 0..4 GPUs from 0; some stop at 1,800 s, the rest still run at 3,600 s.
    holdings = {leaf: data.draw(st.tuples(st.integers(0, 4), st.booleans())) for leaf in leaves}
    for leaf, (gpus, _) in holdings.items():
        if gpus:
            usage.start(leaf, gpus, now=0)
    for leaf, (gpus, stops_early) in holdings.items():
        if gpus and stops_early:
            usage.stop(leaf, gpus, now=1800)
        used[leaf] = gpus * (1800 if stops_early else 3600)
    now = 3600.0

    queue = PendingQueue(tree, usage)
    # Half the cases queue jobs of one account only (the queue then orders without a ranking).
    waiting = [data.draw(st.sampled_from(leaves))] if data.draw(st.booleans()) else leaves
    entries = [
        QueueEntry(f"j{index}", account, priority, submit, unallocated)
        for index, (account, priority, submit, unallocated) in enumerate(
            data.draw(
                st.lists(
                    st.tuples(
                        st.sampled_from(waiting),
                        st.integers(0, 2),
                        st.integers(0, 3).map(float),
                        st.sampled_from([False, False, False, True]),  # mostly allocated
                    ),
                    max_size=30,
                )
            )
        )
    ]
    for entry in entries:
        queue.add(entry)
    job_ids = [entry.job_id for entry in entries]
    removed = data.draw(st.sets(st.sampled_from(job_ids), max_size=5)) if job_ids else set()
    for job_id in removed:
        queue.remove(job_id)
    entries = [entry for entry in entries if entry.job_id not in removed]

    def check() -> None:
        order = ids(queue, now)
        expected, paths = _oracle_order(tree, used, entries)
        assert order == expected
        assert [queue.position(job_id, now) for job_id in order] == list(range(len(order)))
        # The tier from the tree alone (no ranking computed) is the ranking's.
        ranking = queue.ranking(now)
        assert all(queue.tier(e) == queue.tier(e, ranking) for e in entries)
        # The Fair Tree promise, stated directly: where two siblings' exact level FS differ,
        # every allocated job under the higher one precedes every allocated job under the other.
        place = {job_id: index for index, job_id in enumerate(order)}
        allocated = [e for e in entries if not e.unallocated and tree.has_budget(e.account)]
        for first in allocated:
            for second in allocated:
                a, b = paths[first.account], paths[second.account]
                # The first level where the paths part holds two siblings.
                depth = next((d for d in range(min(len(a), len(b))) if a[d][1] != b[d][1]), None)
                if depth is not None and a[depth][0] > b[depth][0]:
                    assert place[first.job_id] < place[second.job_id]

    check()
    # Usage moves: one leaf runs more GPUs for another hour; the queue re-ranks, not re-sorts.
    busy = data.draw(st.sampled_from(leaves))
    usage.start(busy, 3, now=now)
    usage.stop(busy, 3, now=now + 3600)
    for leaf, (gpus, stops_early) in holdings.items():
        if gpus and not stops_early:
            used[leaf] += gpus * 3600
    used[busy] += 3 * 3600
    now += 3600
    check()
    # A budget changes: some account's share moves within what its siblings leave free.
    account = data.draw(st.sampled_from(list(tree)))
    siblings = [other for other in tree.children(tree.parent(account)) if other != account]
    room = 100 - sum(int(tree.share(other)) for other in siblings)
    tree.set_share(account, data.draw(st.integers(0, room)))
    check()
