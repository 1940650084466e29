"""The budget tree: accounts, each holding a percent share of its parent's GPU time."""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from toposched.cluster.documents import Document, parse_documents, read_text
from toposched.cluster.errors import InputError, unknown_field_rule

__all__ = ["ROOT", "BudgetTree", "account_ancestors", "split_account_path"]

ROOT = ""
"""The implicit root account: the whole cluster. Top-level accounts are its children."""

# The same rule the job model applies to `account`, so every submitted path can name an account.
_ACCOUNT_NAME = re.compile(r"[A-Za-z0-9._-]+")
_NAME_RULE = "account names use letters, digits and . _ - (no spaces, no '/')"
_PATH_RULE = "must be a slash-separated path of account names, e.g. research/pretraining/team-a"
_SHARE_RULE = "must be a number from 0 to 100 (percent of the parent's share)"
_MAX_SIBLING_SHARES = 100.0
# Shares written as decimals (33.4 + 33.3 + 33.3) must not fail the sum check on rounding.
_SUM_TOLERANCE = 1e-9
_NESTED_KEYS = frozenset({"share", "children"})
_FLAT_KEYS = frozenset({"name", "parent", "share"})


def split_account_path(path: Any, field: str = "account") -> tuple[str, ...]:
    """The names along `path` from the top level down; InputError if it is not a valid path."""
    names = _valid_names(path) if isinstance(path, str) else None
    if names is None:
        raise InputError(field, path, _PATH_RULE)
    return names


def account_ancestors(path: str) -> tuple[str, ...]:
    """Every account from the top level down to `path` itself: a/b/c -> (a, a/b, a/b/c)."""
    ancestors = _ancestors(path) if isinstance(path, str) else None
    if ancestors is None:
        raise InputError("account", path, _PATH_RULE)
    return ancestors


# Every job start and stop asks about its account's path: parsed once per distinct path.
@functools.lru_cache(maxsize=4096)
def _valid_names(path: str) -> tuple[str, ...] | None:
    names = tuple(path.split("/"))
    if not path or not all(_ACCOUNT_NAME.fullmatch(name) for name in names):
        return None
    return names


@functools.lru_cache(maxsize=4096)
def _ancestors(path: str) -> tuple[str, ...] | None:
    names = _valid_names(path)
    if names is None:
        return None
    return tuple("/".join(names[: depth + 1]) for depth in range(len(names)))


def _parent_of(path: str) -> str:
    head, _, _ = path.rpartition("/")
    return head


def _share_value(field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(field, value, _SHARE_RULE)
    share = float(value)
    if not math.isfinite(share) or share < 0 or share > _MAX_SIBLING_SHARES:
        raise InputError(field, value, _SHARE_RULE)
    return share


def _check_name(field: str, name: Any) -> str:
    if not isinstance(name, str) or not _ACCOUNT_NAME.fullmatch(name):
        raise InputError(field, name, _NAME_RULE)
    return name


def _shown(share: float) -> int | float:
    """A share as written: 35 rather than 35.0."""
    return int(share) if share.is_integer() else share


@dataclass
class _Account:
    share: float
    children: list[str] = field(default_factory=list)


class BudgetTree:
    """Accounts in a tree (org > program > project > team, any depth), each with a percent share.

    An account's `share` is its claim on its parent, in percent; siblings' shares sum to at most
    100 and the rest is unbudgeted. Jobs charge to leaf accounts, named by their path from the top
    ("research/pretraining/team-a"). Every change is validated first and either applies whole or
    raises InputError leaving the tree as it was; `version` counts applied changes so that
    orderings built on the tree know when to recompute.
    """

    def __init__(self) -> None:
        self._accounts: dict[str, _Account] = {ROOT: _Account(share=_MAX_SIBLING_SHARES)}
        self.version = 0
        self._budgeted: dict[str, bool] = {}
        """`has_budget` by path, for the tree at `_budgeted_version`: every job start asks."""
        self._budgeted_version = 0

    # ----------------------------------------------------------------------------- loading

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        """Build a tree from `{"accounts": ...}` in nested or flat form.

        Nested: `accounts` maps names to `{share, children}` (or to a bare share number), with
        `children` nested the same way. Flat: `accounts` is a list of `{name, share, parent}`,
        where `parent` names another entry (omitted or null for top level); names must then be
        unique, and parent links must not form a cycle.
        """
        if not isinstance(data, Mapping):
            raise InputError("budget", data, "must be a mapping with an 'accounts' key")
        unknown = sorted((key for key in data if key != "accounts"), key=str)
        if unknown:
            raise InputError(
                str(unknown[0]), data[unknown[0]], unknown_field_rule(unknown[0], ("accounts",))
            )
        if "accounts" not in data:
            raise InputError("accounts", None, "is required: the accounts of the budget tree")
        accounts = data["accounts"]
        tree = cls()
        if isinstance(accounts, Mapping):
            tree._load_nested(ROOT, accounts, "accounts")
        elif isinstance(accounts, Sequence) and not isinstance(accounts, str):
            tree._load_flat(accounts)
        elif accounts is not None:
            raise InputError(
                "accounts", accounts, "must be a mapping of name -> account or a list of accounts"
            )
        return tree

    @classmethod
    def from_yaml(cls, source: str | os.PathLike[str]) -> Self:
        """Build a tree from a YAML file (a path) or from YAML text; see `from_dict`. Files are
        read within the limits of `toposched.cluster.limits`; errors name the file and line."""
        file = None
        if isinstance(source, os.PathLike) or (
            "\n" not in source and Path(source).suffix in (".yaml", ".yml")
        ):
            file = str(source)
            text = read_text(Path(source), "budget file")
        else:
            text = str(source)
        documents = parse_documents(text, file)
        if len(documents) > 1:
            raise InputError(
                "budget", f"{len(documents)} documents", "a budget holds one document", file=file
            )
        document = documents[0] if documents else Document(None, file)
        document.check_no_duplicate_keys()
        try:
            return cls.from_dict(document.data)
        except InputError as error:
            raise document.locate(error, root="budget") from None

    def to_dict(self) -> dict[str, Any]:
        """The tree in nested form; `from_dict(tree.to_dict())` rebuilds an equal tree."""

        def nested(parent: str) -> dict[str, Any]:
            written: dict[str, Any] = {}
            for child in self._accounts[parent].children:
                entry: dict[str, Any] = {"share": _shown(self._accounts[child].share)}
                if self._accounts[child].children:
                    entry["children"] = nested(child)
                written[child.rpartition("/")[2]] = entry
            return written

        return {"accounts": nested(ROOT)}

    def _load_nested(self, parent: str, accounts: Mapping[Any, Any], where: str) -> None:
        # Validate the whole level before inserting any of it, so a sum error lists every sibling.
        level: list[tuple[str, float, Any, str]] = []
        for name, spec in accounts.items():
            field_path = f"{where}.{name}"
            _check_name(field_path, name)
            if isinstance(spec, Mapping):
                unknown = sorted((key for key in spec if key not in _NESTED_KEYS), key=str)
                if unknown:
                    raise InputError(
                        f"{field_path}.{unknown[0]}",
                        spec[unknown[0]],
                        unknown_field_rule(unknown[0], ("share", "children")),
                    )
                if "share" not in spec:
                    raise InputError(f"{field_path}.share", None, f"is required; {_SHARE_RULE}")
                share = _share_value(f"{field_path}.share", spec["share"])
                children = spec.get("children")
            else:
                # A bare number is shorthand for {share: number}.
                share = _share_value(f"{field_path}.share", spec)
                children = None
            if children is not None and not isinstance(children, Mapping):
                raise InputError(
                    f"{field_path}.children", children, "must be a mapping of name -> account"
                )
            level.append((name, share, children, field_path))
        total = sum(share for _, share, _, _ in level)
        if total > _MAX_SIBLING_SHARES + _SUM_TOLERANCE:
            terms = " + ".join(f"{name} {_shown(share)}" for name, share, _, _ in level)
            raise InputError(
                where,
                _shown(total),
                f"shares of siblings must sum to at most 100 ({terms} = {_shown(total)})",
            )
        for name, share, children, field_path in level:
            path = name if parent == ROOT else f"{parent}/{name}"
            self._insert(path, share)
            if children is not None:
                self._load_nested(path, children, f"{field_path}.children")

    def _load_flat(self, entries: Sequence[Any]) -> None:
        parent_of: dict[str, str | None] = {}
        share_of: dict[str, float] = {}
        index_of: dict[str, int] = {}
        for index, entry in enumerate(entries):
            where = f"accounts[{index}]"
            if not isinstance(entry, Mapping):
                raise InputError(where, entry, "must be a mapping with name, share and parent")
            unknown = sorted((key for key in entry if key not in _FLAT_KEYS), key=str)
            if unknown:
                raise InputError(
                    f"{where}.{unknown[0]}",
                    entry[unknown[0]],
                    unknown_field_rule(unknown[0], ("name", "share", "parent")),
                )
            name = _check_name(f"{where}.name", entry.get("name"))
            if name in index_of:
                raise InputError(
                    f"{where}.name",
                    name,
                    f"duplicate account name (also accounts[{index_of[name]}]); "
                    "the flat form refers to parents by name, so names must be unique",
                )
            if "share" not in entry:
                raise InputError(f"{where}.share", None, f"is required; {_SHARE_RULE}")
            share_of[name] = _share_value(f"{where}.share", entry["share"])
            parent = entry.get("parent")
            if parent is not None:
                _check_name(f"{where}.parent", parent)
            parent_of[name] = parent
            index_of[name] = index
        for name, parent in parent_of.items():
            if parent is not None and parent not in parent_of:
                raise InputError(
                    f"accounts[{index_of[name]}].parent", parent, "names no account in the list"
                )
        path_of: dict[str, str] = {}
        for name in parent_of:
            self._resolve_flat_path(name, parent_of, index_of, path_of)
        # Parents first, in the order the list gives, so children keep their written order.
        for name in sorted(parent_of, key=lambda name: (path_of[name].count("/"), index_of[name])):
            path = path_of[name]
            parent = _parent_of(path)
            claimed = self._children_shares(parent) + share_of[name]
            if claimed > _MAX_SIBLING_SHARES + _SUM_TOLERANCE:
                raise InputError(
                    f"accounts[{index_of[name]}].share",
                    _shown(share_of[name]),
                    "shares of siblings must sum to at most 100 "
                    f"({self._sum_text(parent, name, share_of[name])})",
                )
            self._insert(path, share_of[name])

    @staticmethod
    def _resolve_flat_path(
        name: str,
        parent_of: Mapping[str, str | None],
        index_of: Mapping[str, int],
        path_of: dict[str, str],
    ) -> str:
        chain = [name]
        while True:
            parent = parent_of[chain[-1]]
            if parent is None or parent in path_of:
                break
            if parent in chain:
                cycle = chain[chain.index(parent) :] + [parent]
                raise InputError(
                    f"accounts[{index_of[chain[-1]]}].parent",
                    parent,
                    f"parent links form a cycle: {' -> '.join(cycle)}",
                )
            chain.append(parent)
        top = parent_of[chain[-1]]
        prefix = path_of[top] if top is not None else ROOT
        for link in reversed(chain):
            prefix = link if prefix == ROOT else f"{prefix}/{link}"
            path_of[link] = prefix
        return path_of[name]

    # ----------------------------------------------------------------------------- queries

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and path != ROOT and path in self._accounts

    def __len__(self) -> int:
        return len(self._accounts) - 1

    def __iter__(self) -> Iterator[str]:
        """Every account path, depth-first in the order children were added."""
        stack = list(reversed(self._accounts[ROOT].children))
        while stack:
            path = stack.pop()
            yield path
            stack.extend(reversed(self._accounts[path].children))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BudgetTree):
            return NotImplemented
        return self._accounts == other._accounts

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"BudgetTree({len(self)} accounts, {len(self.leaves())} leaves)"

    def require(self, path: Any, field: str = "account") -> str:
        """`path` itself if it names an account; InputError naming `field` otherwise."""
        split_account_path(path, field)
        if path not in self._accounts:
            raise InputError(field, path, "names no account of the budget tree")
        return str(path)

    def share(self, path: str) -> float:
        """The account's claim on its parent, in percent."""
        return self._accounts[self.require(path)].share

    def effective_share(self, path: str) -> float:
        """The account's claim on the whole cluster as a fraction: the product of shares/100."""
        fraction = 1.0
        for ancestor in account_ancestors(self.require(path)):
            fraction *= self._accounts[ancestor].share / _MAX_SIBLING_SHARES
        return fraction

    def has_budget(self, path: str) -> bool:
        """Whether any GPU time is budgeted to the account (no share of 0 on its path)."""
        if self._budgeted_version != self.version:
            self._budgeted.clear()
            self._budgeted_version = self.version
        known = self._budgeted.get(path) if isinstance(path, str) else None
        if known is None:
            self.require(path)
            known = all(self._accounts[ancestor].share > 0 for ancestor in account_ancestors(path))
            self._budgeted[path] = known
        return known

    def parent(self, path: str) -> str:
        """The parent's path; ROOT ("") for a top-level account."""
        return _parent_of(self.require(path))

    def children(self, path: str = ROOT) -> tuple[str, ...]:
        """Paths of the account's children (of the top-level accounts for ROOT), as added."""
        if path != ROOT:
            self.require(path)
        return tuple(self._accounts[path].children)

    def shares_below(self, path: str = ROOT) -> tuple[tuple[str, float, bool], ...]:
        """(child path, share, is leaf) for each child: one call per level for rankings."""
        if path != ROOT:
            self.require(path)
        accounts = self._accounts
        return tuple(
            (child, accounts[child].share, not accounts[child].children)
            for child in accounts[path].children
        )

    def is_leaf(self, path: str) -> bool:
        """Whether the account has no children, so jobs can charge to it."""
        return not self._accounts[self.require(path)].children

    def names_leaf(self, path: str) -> bool:
        """Whether `path` names a leaf account: `is_leaf`, but False rather than an error for
        a path the tree does not name (one lookup, for a caller with a path already checked)."""
        account = self._accounts.get(path)
        return account is not None and path != ROOT and not account.children

    def leaves(self) -> tuple[str, ...]:
        """Every leaf account, depth-first."""
        return tuple(path for path in self if not self._accounts[path].children)

    # ----------------------------------------------------------------------------- changes

    def add_account(self, path: str, share: float) -> None:
        """Add an account under an existing parent (top level if `path` has no '/')."""
        split_account_path(path)
        if path in self._accounts:
            raise InputError("account", path, "already exists in the budget tree")
        parent = _parent_of(path)
        if parent != ROOT and parent not in self._accounts:
            raise InputError("account", path, f"parent {parent!r} is not an account of the tree")
        share = _share_value(f"{path}.share", share)
        self._check_sibling_sum(path, share)
        self._insert(path, share)
        self.version += 1

    def set_share(self, path: str, share: float) -> None:
        """Change the account's percent claim on its parent."""
        self.require(path)
        share = _share_value(f"{path}.share", share)
        self._check_sibling_sum(path, share)
        self._accounts[path].share = share
        self.version += 1

    def set_shares(self, shares: Mapping[str, float]) -> None:
        """Change several shares at once, checked together: rebalance siblings in one step."""
        updated = {
            self.require(path): _share_value(f"{path}.share", share)
            for path, share in shares.items()
        }
        for parent in dict.fromkeys(_parent_of(path) for path in updated):
            children = self._accounts[parent].children
            total = sum(updated.get(child, self._accounts[child].share) for child in children)
            if total > _MAX_SIBLING_SHARES + _SUM_TOLERANCE:
                terms = " + ".join(
                    f"{child.rpartition('/')[2]} "
                    f"{_shown(updated.get(child, self._accounts[child].share))}"
                    for child in children
                )
                where = "top-level accounts" if parent == ROOT else f"children of {parent}"
                raise InputError(
                    "shares",
                    _shown(total),
                    f"shares of siblings must sum to at most 100 ({where}: {terms})",
                )
        for path, share in updated.items():
            self._accounts[path].share = share
        self.version += 1

    def remove_account(self, path: str, *, recursive: bool = False) -> None:
        """Remove an account; one with children only if `recursive` (then its subtree too)."""
        self.require(path)
        account = self._accounts[path]
        if account.children and not recursive:
            raise InputError(
                "account",
                path,
                f"has {len(account.children)} child accounts; remove them first or pass "
                "recursive=True",
            )
        stack = [path]
        while stack:
            doomed = stack.pop()
            stack.extend(self._accounts.pop(doomed).children)
        self._accounts[_parent_of(path)].children.remove(path)
        self.version += 1

    # ----------------------------------------------------------------------------- internals

    def _insert(self, path: str, share: float) -> None:
        self._accounts[path] = _Account(share=share)
        self._accounts[_parent_of(path)].children.append(path)

    def _children_shares(self, parent: str) -> float:
        return sum(self._accounts[child].share for child in self._accounts[parent].children)

    def _check_sibling_sum(self, path: str, share: float) -> None:
        parent = _parent_of(path)
        others = sum(
            self._accounts[sibling].share
            for sibling in self._accounts[parent].children
            if sibling != path
        )
        if others + share > _MAX_SIBLING_SHARES + _SUM_TOLERANCE:
            raise InputError(
                f"{path}.share",
                _shown(share),
                "shares of siblings must sum to at most 100 "
                f"({self._sum_text(parent, path.rpartition('/')[2], share)})",
            )

    def _sum_text(self, parent: str, name: str, share: float) -> str:
        """'a 60 + b 50 = 110' for the siblings under `parent` with `name` at `share`."""
        terms = [
            f"{child.rpartition('/')[2]} {_shown(self._accounts[child].share)}"
            for child in self._accounts[parent].children
            if child.rpartition("/")[2] != name
        ]
        terms.append(f"{name} {_shown(share)}")
        total = sum(
            self._accounts[child].share
            for child in self._accounts[parent].children
            if child.rpartition("/")[2] != name
        )
        where = "top-level accounts" if parent == ROOT else f"children of {parent}"
        return f"{where}: {' + '.join(terms)} = {_shown(total + share)}"
