"""Tests for the budget tree: loading, validation, lookups and run-time changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from toposched.cluster.errors import InputError
from toposched.policy.budget import ROOT, BudgetTree, account_ancestors, split_account_path

BUDGET_YAML = """
accounts:
  research:
    share: 70
    children:
      pretraining: {share: 60, children: {team-a: {share: 50}, team-b: {share: 50}}}
      eval: {share: 40}
  product: {share: 30}
"""


@pytest.fixture
def tree() -> BudgetTree:
    return BudgetTree.from_yaml(BUDGET_YAML)


def test_nested_yaml_builds_the_tree_depth_first(tree: BudgetTree) -> None:
    assert list(tree) == [
        "research",
        "research/pretraining",
        "research/pretraining/team-a",
        "research/pretraining/team-b",
        "research/eval",
        "product",
    ]
    assert tree.leaves() == (
        "research/pretraining/team-a",
        "research/pretraining/team-b",
        "research/eval",
        "product",
    )
    assert tree.children() == ("research", "product")
    assert tree.children("research") == ("research/pretraining", "research/eval")
    assert tree.parent("research/eval") == "research"
    assert tree.parent("product") == ROOT
    assert tree.share("research/pretraining") == 60
    assert len(tree) == 6
    assert "research/eval" in tree and "research/nothing" not in tree and ROOT not in tree


def test_effective_share_is_the_product_of_shares_down_the_path(tree: BudgetTree) -> None:
    # team-a: 70% x 60% x 50% = 21% of the cluster; eval: 70% x 40% = 28%; product: 30%.
    assert tree.effective_share("research/pretraining/team-a") == pytest.approx(0.21)
    assert tree.effective_share("research/eval") == pytest.approx(0.28)
    assert tree.effective_share("product") == pytest.approx(0.30)
    assert tree.effective_share("research") == pytest.approx(0.70)


def test_shares_summing_to_less_than_100_leave_the_rest_unbudgeted() -> None:
    tree = BudgetTree.from_dict({"accounts": {"a": {"share": 20}, "b": {"share": 30}}})
    assert tree.effective_share("a") == pytest.approx(0.2)
    assert tree.has_budget("a") and tree.has_budget("b")


def test_decimal_shares_that_sum_to_100_are_accepted() -> None:
    # 33.4 + 33.3 + 33.3 is 100.00000000000001 in floating point; it must still load.
    tree = BudgetTree.from_dict({"accounts": {"a": 33.4, "b": 33.3, "c": 33.3}})
    assert tree.share("c") == pytest.approx(33.3)


def test_a_zero_share_anywhere_on_the_path_means_no_budget() -> None:
    tree = BudgetTree.from_dict(
        {
            "accounts": {
                "lab": {"share": 0, "children": {"team": {"share": 100}}},
                "ops": {"share": 100, "children": {"idle": {"share": 0}, "busy": {"share": 100}}},
            }
        }
    )
    assert not tree.has_budget("lab/team")  # its parent has 0
    assert not tree.has_budget("ops/idle")  # it has 0 itself
    assert tree.has_budget("ops/busy")
    assert tree.effective_share("lab/team") == 0


def test_bare_numbers_are_shorthand_for_a_share(tree: BudgetTree) -> None:
    short = BudgetTree.from_dict(
        {
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
    )
    assert short == tree


def test_to_dict_round_trips(tree: BudgetTree) -> None:
    assert BudgetTree.from_dict(tree.to_dict()) == tree
    assert tree.to_dict()["accounts"]["product"] == {"share": 30}


def test_flat_parent_pointer_form_equals_the_nested_form(tree: BudgetTree) -> None:
    # Children listed before their parents still land in the right place.
    flat = BudgetTree.from_dict(
        {
            "accounts": [
                {"name": "team-a", "parent": "pretraining", "share": 50},
                {"name": "research", "share": 70},
                {"name": "pretraining", "parent": "research", "share": 60},
                {"name": "team-b", "parent": "pretraining", "share": 50},
                {"name": "eval", "parent": "research", "share": 40},
                {"name": "product", "parent": None, "share": 30},
            ]
        }
    )
    assert flat == tree


def test_from_yaml_reads_a_file(tmp_path: Path, tree: BudgetTree) -> None:
    path = tmp_path / "budget.yaml"
    path.write_text(BUDGET_YAML)
    assert BudgetTree.from_yaml(path) == tree
    assert BudgetTree.from_yaml(str(path)) == tree


def test_from_yaml_names_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError) as error:
        BudgetTree.from_yaml(str(tmp_path / "absent.yaml"))
    assert error.value.field == "budget file"
    assert error.value.rule == "file not found"


def test_empty_accounts_make_an_empty_tree() -> None:
    tree = BudgetTree.from_yaml("accounts: {}\n")
    assert len(tree) == 0 and tree.leaves() == ()


# Each case: the input, then the field, value and a fragment of the rule the error must name.
LOAD_ERRORS: list[tuple[str, Any, str, Any, str]] = [
    (
        "siblings over 100",
        {"accounts": {"a": {"share": 70}, "b": {"share": 40}}},
        "accounts",
        110,
        "must sum to at most 100 (a 70 + b 40 = 110)",
    ),
    (
        "nested siblings over 100",
        {"accounts": {"a": {"share": 50, "children": {"x": 60, "y": 50}}}},
        "accounts.a.children",
        110,
        "must sum to at most 100",
    ),
    ("negative share", {"accounts": {"a": -5}}, "accounts.a.share", -5, "from 0 to 100"),
    ("share over 100", {"accounts": {"a": 150}}, "accounts.a.share", 150, "from 0 to 100"),
    ("share as text", {"accounts": {"a": {"share": "35%"}}}, "accounts.a.share", "35%", "number"),
    ("share as bool", {"accounts": {"a": {"share": True}}}, "accounts.a.share", True, "number"),
    ("missing share", {"accounts": {"a": {"children": {}}}}, "accounts.a.share", None, "required"),
    (
        "unknown key",
        {"accounts": {"a": {"shares": 5}}},
        "accounts.a.shares",
        5,
        "unknown field (did you mean 'share'?)",
    ),
    ("name with a space", {"accounts": {"team a": 5}}, "accounts.team a", "team a", "names use"),
    ("name with a slash", {"accounts": {"a/b": 5}}, "accounts.a/b", "a/b", "no '/'"),
    (
        "no accounts key",
        {"acounts": {}},
        "acounts",
        {},
        "unknown field (did you mean 'accounts'?)",
    ),
    ("not a mapping", ["a"], "budget", ["a"], "mapping"),
    (
        "children not a mapping",
        {"accounts": {"a": {"share": 5, "children": [1]}}},
        "accounts.a.children",
        [1],
        "mapping",
    ),
    (
        "flat duplicate name",
        {"accounts": [{"name": "a", "share": 5}, {"name": "a", "share": 5}]},
        "accounts[1].name",
        "a",
        "duplicate account name (also accounts[0])",
    ),
    (
        "flat cycle",
        {
            "accounts": [
                {"name": "a", "share": 5, "parent": "c"},
                {"name": "b", "share": 5, "parent": "a"},
                {"name": "c", "share": 5, "parent": "b"},
            ]
        },
        # Following parents from a: a -> c -> b -> a, closed by b's link (accounts[1]).
        "accounts[1].parent",
        "a",
        "parent links form a cycle: a -> c -> b -> a",
    ),
    (
        "flat self parent",
        {"accounts": [{"name": "a", "share": 5, "parent": "a"}]},
        "accounts[0].parent",
        "a",
        "cycle: a -> a",
    ),
    (
        "flat unknown parent",
        {"accounts": [{"name": "a", "share": 5, "parent": "nobody"}]},
        "accounts[0].parent",
        "nobody",
        "names no account",
    ),
    (
        "flat siblings over 100",
        {"accounts": [{"name": "a", "share": 60}, {"name": "b", "share": 60}]},
        "accounts[1].share",
        60,
        "top-level accounts: a 60 + b 60 = 120",
    ),
]


@pytest.mark.parametrize(
    ("data", "field", "value", "rule"),
    [case[1:] for case in LOAD_ERRORS],
    ids=[case[0] for case in LOAD_ERRORS],
)
def test_invalid_budgets_name_field_value_and_rule(
    data: Any, field: str, value: Any, rule: str
) -> None:
    with pytest.raises(InputError) as error:
        BudgetTree.from_dict(data)
    assert error.value.field == field
    assert error.value.value == value
    assert rule in error.value.rule
    assert str(error.value).startswith(f"{field}: {value!r} is invalid: ")


def test_a_yaml_key_written_twice_is_an_error_not_a_silent_overwrite() -> None:
    with pytest.raises(InputError) as error:
        BudgetTree.from_yaml("accounts:\n  a: 50\n  b: 10\n  a: 30\n")
    assert (error.value.field, error.value.line) == ("accounts.a", 4)
    assert error.value.value == "a"
    assert "already given at line 2" in error.value.rule


def test_invalid_yaml_is_an_input_error() -> None:
    with pytest.raises(InputError, match="not valid YAML"):
        BudgetTree.from_yaml("accounts: {a: [\n")


@pytest.mark.parametrize(
    "path", ["", "/a", "a/", "a//b", "a b", 7, None], ids=lambda value: repr(value)
)
def test_bad_account_paths_are_rejected(path: Any) -> None:
    with pytest.raises(InputError) as error:
        split_account_path(path)
    assert error.value.field == "account"


def test_account_ancestors_run_from_the_top() -> None:
    assert account_ancestors("a/b/c") == ("a", "a/b", "a/b/c")


def test_unknown_account_lookups_name_the_path(tree: BudgetTree) -> None:
    with pytest.raises(InputError) as error:
        tree.share("research/pretraining/team-z")
    assert error.value.value == "research/pretraining/team-z"
    assert "names no account" in error.value.rule
    for lookup in (tree.effective_share, tree.has_budget, tree.is_leaf, tree.children):
        with pytest.raises(InputError):
            lookup("nowhere")


def test_set_share_changes_the_budget_and_the_version(tree: BudgetTree) -> None:
    version = tree.version
    tree.set_share("research", 40)
    assert tree.share("research") == 40
    assert tree.effective_share("research/eval") == pytest.approx(0.16)  # 40% x 40%
    assert tree.version == version + 1


@pytest.mark.parametrize(
    ("path", "share", "field", "rule"),
    [
        ("product", 31, "product.share", "top-level accounts: research 70 + product 31 = 101"),
        ("research/eval", -1, "research/eval.share", "from 0 to 100"),
        ("research/eval", float("nan"), "research/eval.share", "from 0 to 100"),
        ("research/nope", 10, "account", "names no account"),
    ],
)
def test_rejected_share_changes_leave_the_tree_unchanged(
    tree: BudgetTree, path: str, share: float, field: str, rule: str
) -> None:
    before, version = tree.to_dict(), tree.version
    with pytest.raises(InputError) as error:
        tree.set_share(path, share)
    assert error.value.field == field
    assert rule in error.value.rule
    assert tree.to_dict() == before and tree.version == version


def test_set_shares_rebalances_siblings_in_one_checked_step(tree: BudgetTree) -> None:
    # One at a time, raising product first would break the sum; together they fit.
    tree.set_shares({"product": 60, "research": 40, "research/eval": 10})
    assert (tree.share("product"), tree.share("research"), tree.share("research/eval")) == (
        60,
        40,
        10,
    )
    before, version = tree.to_dict(), tree.version
    with pytest.raises(InputError) as error:
        tree.set_shares({"research/eval": 5, "product": 61})
    assert error.value.field == "shares"
    assert error.value.value == 101
    assert "top-level accounts: research 40 + product 61" in error.value.rule
    assert tree.to_dict() == before and tree.version == version
    with pytest.raises(InputError):
        tree.set_shares({"research/eval": 5, "nowhere": 1})
    assert tree.to_dict() == before


def test_add_account_under_a_leaf_makes_it_inner(tree: BudgetTree) -> None:
    tree.add_account("research/eval/red-team", 25)
    assert not tree.is_leaf("research/eval")
    assert tree.is_leaf("research/eval/red-team")
    assert tree.effective_share("research/eval/red-team") == pytest.approx(0.07)  # 28% x 25%
    tree.add_account("ops", 0)  # a top-level account with no budget; 70 + 30 + 0 <= 100
    assert not tree.has_budget("ops")


@pytest.mark.parametrize(
    ("path", "share", "rule"),
    [
        ("research/eval", 10, "already exists"),
        ("research/missing/team", 10, "parent 'research/missing' is not an account"),
        ("research/ads", 1, "children of research: pretraining 60 + eval 40 + ads 1 = 101"),
        ("bad name", 1, "slash-separated path"),
        ("research/x", 101, "from 0 to 100"),
    ],
)
def test_rejected_additions_leave_the_tree_unchanged(
    tree: BudgetTree, path: str, share: float, rule: str
) -> None:
    before, version = tree.to_dict(), tree.version
    with pytest.raises(InputError) as error:
        tree.add_account(path, share)
    assert rule in error.value.rule
    assert tree.to_dict() == before and tree.version == version


def test_remove_account(tree: BudgetTree) -> None:
    tree.remove_account("research/eval")
    assert "research/eval" not in tree
    assert tree.children("research") == ("research/pretraining",)
    # Its share is free again.
    tree.add_account("research/ads", 40)


def test_removing_an_inner_account_needs_recursive(tree: BudgetTree) -> None:
    before = tree.to_dict()
    with pytest.raises(InputError, match="has 2 child accounts"):
        tree.remove_account("research/pretraining")
    assert tree.to_dict() == before
    tree.remove_account("research/pretraining", recursive=True)
    assert list(tree) == ["research", "research/eval", "product"]
    assert tree.is_leaf("research") is False and tree.leaves() == ("research/eval", "product")


def test_names_leaf_is_is_leaf_without_the_errors() -> None:
    tree = BudgetTree.from_dict({"accounts": {"research": {"share": 70, "children": {"eval": 40}}}})
    assert tree.names_leaf("research/eval") and tree.is_leaf("research/eval")
    assert not tree.names_leaf("research") and not tree.is_leaf("research")
    assert not tree.names_leaf("research/nowhere")
    assert not tree.names_leaf(ROOT)
