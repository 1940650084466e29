"""The scheduler's settings: one validated object, also given by name as keywords."""

from __future__ import annotations

import pytest

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.errors import InputError
from toposched.cluster.state import ClusterState
from toposched.placement.policies import BestFit, Spread
from toposched.policy.budget import BudgetTree
from toposched.policy.contract import Contract
from toposched.scheduler.core import Scheduler
from toposched.scheduler.settings import SchedulerSettings


def parts() -> tuple[ClusterState, BudgetTree]:
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=2))
    return state, BudgetTree.from_dict({"accounts": {"team": 100}})


def test_keywords_and_a_settings_object_say_the_same_and_keywords_win() -> None:
    settings = SchedulerSettings(reserve_min_gpus=16, grace_s=5.0, policy=Spread())
    by_object = Scheduler(*parts(), settings)
    by_keywords = Scheduler(*parts(), reserve_min_gpus=16, grace_s=5.0, policy=settings.policy)
    both = Scheduler(*parts(), settings, grace_s=60.0)

    assert by_object.settings == by_keywords.settings
    assert by_object.policy is settings.policy
    assert (both.settings.reserve_min_gpus, both.settings.grace_s) == (16, 60.0)
    assert settings.grace_s == 5.0  # the object given is left as it was


def test_defaults_are_fresh_per_scheduler_and_none_means_the_default() -> None:
    first, second = Scheduler(*parts()), Scheduler(*parts(), contract=None, policy=None)
    assert first.contract == second.contract == Contract()
    assert isinstance(first.policy, BestFit) and isinstance(second.policy, BestFit)
    assert first.policy is not second.policy
    assert first.settings.protection_cap is None
    assert Scheduler(*parts(), protect_beyond_budget=False).settings.protection_cap == 0.0
    assert Scheduler(*parts(), borrowed_min_runtime=600).settings.protection_cap == 600


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("grace_s", -1.0),
        ("max_grace_s", float("nan")),
        ("borrowed_min_runtime", "1h"),
        ("reserve_min_gpus", True),
        ("max_preemptions_per_cycle", -1),
        ("compaction_moves_per_hour", 1.5),
    ],
)
def test_a_bad_value_is_named_with_its_rule(name: str, value: object) -> None:
    with pytest.raises(InputError) as raised:
        Scheduler(*parts(), **{name: value})
    assert raised.value.field == name
    assert raised.value.rule.startswith("must be")


def test_an_unknown_setting_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="reserve_min_gpu"):
        Scheduler(*parts(), reserve_min_gpu=8)


def test_changes_name_what_differs_from_the_defaults() -> None:
    assert SchedulerSettings().changes() == {}
    # A fresh placement policy of the default's kind and parameters is the same choice.
    assert SchedulerSettings(policy=BestFit()).changes() == {}
    spread = Spread()
    chosen = SchedulerSettings(
        policy=spread, contract=Contract(cross_account="fair_share"), reserve_min_gpus=16
    ).changes()
    # The contract's fields are named on their own: only the one that moved.
    assert chosen == {"policy": spread, "cross_account": "fair_share", "reserve_min_gpus": 16}
