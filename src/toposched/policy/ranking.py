"""Slurm Fair Tree ranking of accounts: their standing among their siblings, level by level."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from toposched.cluster.errors import InputError
from toposched.policy.budget import ROOT, BudgetTree

__all__ = [
    "LevelStanding",
    "Ranking",
    "Standing",
    "StandingKey",
    "TreeLayout",
    "UsageSource",
    "level_fair_share",
    "rank_accounts",
]

StandingKey = tuple[int, tuple[tuple[float, str], ...]]
"""(group, ((-level FS, name) per level from the top)); smaller sorts first."""

# StandingKey groups: leaves with a budget, leaves without one, accounts outside the tree.
_BUDGETED, _UNBUDGETED, _DETACHED = 0, 1, 2


class UsageSource(Protocol):
    """Where usage comes from: `UsageTracker`, or anything else that answers the same two."""

    @property
    def readings_version(self) -> int:
        """Changes whenever usage already read at some time could read differently at that
        time."""
        ...

    def usage(self, account: str, now: float) -> float:
        """GPU-seconds charged to the account's subtree, as counted at `now`."""
        ...


def level_fair_share(
    share: float, sibling_shares: float, usage: float, sibling_usage: float
) -> float:
    """Fair Tree's Level FS = S / U, with S and U normalised over the account and its siblings.

    S = share / sibling_shares and U = usage / sibling_usage (both sums include the account).
    An account with no share has 0; one with a share and no usage has infinity (it goes first).
    """
    if share <= 0:
        return 0.0
    if usage <= 0:
        return math.inf
    # One division of the cross products instead of (share/shares)/(usage/usages): with whole
    # numbers it rounds once, so siblings whose exact values tie get equal floats and fall to the
    # name tie-break rather than to rounding noise.
    return (share * sibling_usage) / (sibling_shares * usage)


@dataclass(frozen=True, slots=True)
class LevelStanding:
    """One account's place among its siblings."""

    account: str
    share: float
    """S: the account's share over the sum of its and its siblings' shares."""
    usage: float
    """U: the account's usage over the sum of its and its siblings' usage (0 if all are 0)."""
    level_fs: float
    """S / U; larger is more under-served and ranks first."""
    name: str = ""
    """The last part of `account`; filled in from it when not given."""

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.account.rpartition("/")[2])

    def describe(self) -> str:
        return f"{self.name} FS={_number(self.level_fs)} (S={self.share:.3f} U={self.usage:.3f})"


@dataclass(frozen=True, slots=True)
class Standing:
    """An account's fair-share standing: its `LevelStanding` at every level of its path."""

    account: str
    budgeted: bool
    """False if a share of 0 anywhere on the path leaves the account without a budget."""
    levels: tuple[LevelStanding, ...]
    sort_key: StandingKey = field(init=False, compare=False)
    """Orders accounts as Fair Tree does: budgeted first, then level by level, higher FS first.

    Comparing two leaves comes down to the first level where their paths part, that is to two
    siblings, so everything under the better sibling sorts before everything under the other.
    Equal Level FS falls back to the name, so the order is total and deterministic.
    """

    def __post_init__(self) -> None:
        group = _BUDGETED if self.budgeted else _UNBUDGETED
        levels = tuple((-level.level_fs, level.name) for level in self.levels)
        object.__setattr__(self, "sort_key", (group, levels))

    @property
    def level_fs(self) -> tuple[float, ...]:
        """Level FS from the top-level ancestor down to the account."""
        return tuple(level.level_fs for level in self.levels)

    def describe(self) -> str:
        path = " > ".join(level.describe() for level in self.levels)
        return path if self.budgeted else f"{path} [no budget]"


_Level = tuple[str, float, float, float, str]
"""One level of an account's path as a ranking keeps it: (account, S, U, Level FS, name)."""
_Levels = tuple[_Level, ...]


class Ranking:
    """Every account's standing at one moment, and the leaves in Fair Tree order.

    Made every cycle, it holds what ordering reads (each account's sort key and whether it
    has a budget) and makes the `Standing` records, which explanations read, on first ask."""

    def __init__(
        self,
        now: float,
        keys: Mapping[str, StandingKey],
        levels: Mapping[str, _Levels],
        leaves: Iterable[str],
    ) -> None:
        self.now = now
        self._keys = dict(keys)
        self._levels = levels
        self.leaves = tuple(sorted(leaves, key=self._keys.__getitem__))
        """Leaf accounts best first: budgeted leaves in Fair Tree order, then leaves without one."""
        self._rank = {leaf: rank for rank, leaf in enumerate(self.leaves)}
        self._standings: dict[str, Standing] | None = None

    def __contains__(self, account: object) -> bool:
        return account in self._keys

    @property
    def standings(self) -> Mapping[str, Standing]:
        """Every account's `Standing`, made on first ask."""
        if self._standings is None:
            self._standings = {
                account: Standing(
                    account,
                    key[0] == _BUDGETED,
                    tuple(LevelStanding(*level) for level in self._levels[account]),
                )
                for account, key in self._keys.items()
            }
        return self._standings

    def standing(self, account: str) -> Standing:
        if account not in self._keys:
            raise InputError("account", account, "names no account of the budget tree")
        return self.standings[account]

    def budgeted(self, account: str) -> bool:
        """Whether the account has a budget: no share of 0 anywhere on its path."""
        if account not in self._keys:
            raise InputError("account", account, "names no account of the budget tree")
        return self._keys[account][0] == _BUDGETED

    def rank(self, account: str) -> int:
        """The leaf's place in the order, 0 for the most under-served."""
        if account not in self._rank:
            raise InputError("account", account, "names no leaf account of the budget tree")
        return self._rank[account]

    def is_ranked_leaf(self, account: str) -> bool:
        return account in self._rank

    def sort_key(self, account: str) -> StandingKey:
        """The leaf's standing key; accounts that are not leaves of the tree sort after all."""
        if account in self._rank:
            return self._keys[account]
        return _DETACHED, ((0.0, account),)

    def prefers(self, account: str, other: str) -> bool:
        """Whether `account` ranks strictly above `other`."""
        return self.sort_key(account) < self.sort_key(other)

    @property
    def budgeted_leaves(self) -> tuple[str, ...]:
        keys = self._keys
        return tuple(leaf for leaf in self.leaves if keys[leaf][0] == _BUDGETED)


@dataclass(frozen=True, slots=True)
class _Family:
    """An account's children as a ranking reads them: paths, last names, shares (and their
    sum), and which are leaves."""

    parent: str
    children: tuple[str, ...]
    names: tuple[str, ...]
    shares: tuple[float, ...]
    share_sum: float
    leaves: tuple[bool, ...]


@dataclass(frozen=True)
class TreeLayout:
    """The budget tree's families in the order a ranking visits them, read from the tree
    once per version of it (a ranking is computed every cycle; the tree rarely changes)."""

    version: int
    families: tuple[_Family, ...]

    @staticmethod
    def of(tree: BudgetTree) -> TreeLayout:
        families: list[_Family] = []
        pending = [ROOT]
        while pending:
            parent = pending.pop()
            children = tree.shares_below(parent)
            families.append(
                _Family(
                    parent,
                    tuple(child for child, _, _ in children),
                    tuple(child.rpartition("/")[2] for child, _, _ in children),
                    tuple(share for _, share, _ in children),
                    sum(share for _, share, _ in children),
                    tuple(is_leaf for _, _, is_leaf in children),
                )
            )
            pending.extend(child for child, _, is_leaf in children if not is_leaf)
        return TreeLayout(tree.version, tuple(families))


def rank_accounts(
    tree: BudgetTree, usage: UsageSource, now: float, layout: TreeLayout | None = None
) -> Ranking:
    """Compute every account's standing from current usage: one usage lookup per account.
    `layout`: the tree's, when the caller keeps it (`TreeLayout.of(tree)` otherwise)."""
    if layout is None or layout.version != tree.version:
        layout = TreeLayout.of(tree)
    keys: dict[str, StandingKey] = {}
    levels: dict[str, _Levels] = {}
    leaves: list[str] = []
    # Per inner account: its path's levels, its key's levels, and its group.
    above: dict[str, tuple[_Levels, tuple[tuple[float, str], ...], int]] = {
        ROOT: ((), (), _BUDGETED)
    }
    for family in layout.families:
        parent_levels, parent_key, parent_group = above[family.parent]
        share_sum = family.share_sum
        usages = [usage.usage(child, now) for child in family.children]
        usage_sum = sum(usages)
        for child, name, share, is_leaf, used in zip(
            family.children, family.names, family.shares, family.leaves, usages, strict=True
        ):
            level_fs = level_fair_share(share, share_sum, used, usage_sum)
            path = (
                *parent_levels,
                (
                    child,
                    share / share_sum if share_sum > 0 else 0.0,
                    used / usage_sum if usage_sum > 0 else 0.0,
                    level_fs,
                    name,
                ),
            )
            key = (*parent_key, (-level_fs, name))
            group = parent_group if share > 0 else _UNBUDGETED
            keys[child] = (group, key)
            levels[child] = path
            if is_leaf:
                leaves.append(child)
            else:
                above[child] = (path, key, group)
    return Ranking(now, keys, levels, leaves)


def _number(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.3g}"
