"""InputError's one message form, values shown cut, close names, and errors that cross processes."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from toposched.cluster.errors import InputError, did_you_mean, shown, unknown_field_rule


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("abc", "'abc'"),
        (None, "None"),
        ([1, "a", {"k": 2.5}], "[1, 'a', {'k': 2.5}]"),
        ((1,), "(1,)"),
        ({"gpus": None}, "{'gpus': None}"),
        ("x" * 200, "'" + "x" * 76 + "... (200 characters)"),
        (list(range(100)), repr(list(range(100)))[:77] + "..."),
        pytest.param(10**5000, "<an integer of about 5,000 digits>", id="5000 digits"),
    ],
)
def test_values_are_shown_as_repr_cut_to_80_characters(value: Any, text: str) -> None:
    assert shown(value) == text


def test_a_value_shared_many_times_over_costs_no_more_to_show() -> None:
    # Nine levels of nine references to one list: 9^9 strings if written out.
    value: Any = ["lol"] * 9
    for _ in range(8):
        value = [value] * 9
    assert shown(value).startswith("[[[[[[[[['lol', 'lol'")
    assert len(shown(value)) == 80


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (InputError("pods", 0, "must be >= 1"), "pods: 0 is invalid: must be >= 1"),
        (
            InputError("pods", 0, "must be >= 1", file="job.yaml"),
            "job.yaml: pods: 0 is invalid: must be >= 1",
        ),
        (
            InputError("nodes[1].gpus", -2, "must be >= 0", file="c.yaml", line=7),
            "c.yaml:7: nodes[1].gpus: -2 is invalid: must be >= 0",
        ),
        (
            InputError("pods", 0, "r1", file="j.yaml", line=2).with_also(
                [
                    InputError("gpus", -1, "r2", file="j.yaml", line=4),
                    InputError("cpu", "x", "r3", file="other.yaml", line=1),
                    InputError("memory", "y", "r4"),
                ]
            ),
            "j.yaml:2: pods: 0 is invalid: r1; also line 4: gpus: -1 is invalid: r2; "
            "other.yaml:1: cpu: 'x' is invalid: r3; memory: 'y' is invalid: r4",
        ),
    ],
)
def test_one_message_form(error: InputError, message: str) -> None:
    assert str(error) == message


def test_at_most_four_further_failures_are_listed() -> None:
    others = [InputError(f"f{i}", i, "r") for i in range(7)]
    error = InputError("first", 0, "r").with_also(others)
    assert [other.field for other in error.also] == ["f0", "f1", "f2", "f3"]
    assert str(error).endswith("f3: 3 is invalid: r; and 3 more")


def test_errors_survive_a_process_boundary() -> None:
    error = InputError("a", [1], "r", file="f.yaml", line=3).with_also([InputError("b", 2, "q")])
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.field, copy.value, copy.rule, copy.file, copy.line) == ("a", [1], "r", "f.yaml", 3)
    assert str(copy) == str(error)


@pytest.mark.parametrize(
    ("name", "valid", "hint"),
    [
        ("gpuz", ["gpus", "cpu"], " (did you mean 'gpus'?)"),
        ("memroy", ["gpus", "memory"], " (did you mean 'memory'?)"),
        ("health", ["name", "gpus", "memory"], ""),
        (3, ["gpus"], ""),
    ],
)
def test_close_names(name: object, valid: list[str], hint: str) -> None:
    assert did_you_mean(name, valid) == hint
    assert unknown_field_rule(name, valid) == f"unknown field{hint}; valid fields are " + ", ".join(
        valid
    )
