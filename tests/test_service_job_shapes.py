"""Submitted jobs validated once per shape: what `JobShapes` and the fit check remember gives
the specs, documents, errors and verdicts a full validation gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from service_helpers import budgets, job, small_cluster

from toposched.backends.protocol import RunSpec
from toposched.cluster.errors import InputError
from toposched.jobs.spec import JobSpec
from toposched.scheduler.jobs import JobState
from toposched.service.documents import JobShapes, job_spec, split_job, stored_document
from toposched.service.errors import NeverFits
from toposched.service.fits import ClusterLimits
from toposched.service.records import JobRecord
from toposched.service.store import Store


def full(document: dict[str, Any], now: float) -> tuple[JobSpec, dict[str, Any]]:
    fields, run = split_job(document)
    spec = job_spec(fields, submit_time=now)
    return spec, stored_document(spec, run)


DOCUMENTS = [
    job("a", expected_runtime="2h"),
    job("b", expected_runtime="2h"),  # the shape of "a": renamed
    job("c", gpus=2, expected_runtime=7200),  # another shape (a number, not "2h")
    job("d", gpus=2, expected_runtime=7200.0),  # 7200.0 is not 7200: another shape
    job("e", gpus=2, expected_runtime=7200, run={"command": ["sleep", "1"], "env": {"A": 1}}),
    job("f", pods=2, topology={"required": "rack"}, priority=5, resumable=True),
    job("g", pods=2, topology={"required": "rack"}, priority=5, resumable=True),
]


def test_jobs_of_a_known_shape_are_the_specs_and_documents_a_full_validation_gives() -> None:
    shapes, texts = JobShapes(), 0
    for now, document in enumerate(DOCUMENTS * 2, start=1_000):
        fields, run = split_job(document)
        accepted = shapes.accept(fields, run, float(now))
        spec, stored = full(document, float(now))
        assert accepted.spec == spec and hash(accepted.spec) == hash(spec)
        assert accepted.spec.model_fields_set == spec.model_fields_set
        assert accepted.spec.to_dict() == spec.to_dict()
        # The same document, its fields in the same order; its text, where made, the dump's.
        assert list(accepted.document.items()) == list(stored.items())
        assert accepted.text in (None, json.dumps(stored))
        texts += accepted.text is not None
    # Every job of a known shape: b, e (c's, with a run) and g, then all seven again.
    assert texts == 3 + len(DOCUMENTS)


def test_the_store_writes_a_known_shape_s_text_once_and_dumps_the_spec_after(
    tmp_path: Path,
) -> None:
    shapes, store = JobShapes(), Store(str(tmp_path / "s.db"))
    for name in ("a", "b"):
        fields, run = split_job(job(name, run={"command": ["true"]}))
        accepted = shapes.accept(fields, run, 7.5)
        record = JobRecord(
            name,
            "research/team-a",
            0,
            JobState.PENDING,
            accepted.document,
            7.5,
            spec_text=accepted.text,
        )
        with store.transaction():
            store.insert_job(record)
            assert record.spec_text is None
            record.spec = {**record.spec, "priority": 3}
            store.update_job(record, priority=True)
    assert [(r.job_id, r.spec) for r in store.jobs()] == [
        (name, {**full(job(name, run={"command": ["true"]}), 7.5)[1], "priority": 3})
        for name in ("a", "b")
    ]
    store.close()


def test_a_known_shape_under_a_bad_name_is_refused_as_a_full_validation_refuses_it() -> None:
    shapes = JobShapes()
    fields, run = split_job(job("a"))
    shapes.accept(fields, run, 1.0)
    for name in ("", "a b", 7, None):
        bad = {**fields, "name": name}
        with pytest.raises(InputError) as ours:
            shapes.accept(bad, run, 2.0)
        with pytest.raises(InputError) as theirs:
            job_spec(bad, submit_time=2.0)
        assert (ours.value.field, ours.value.rule) == (theirs.value.field, theirs.value.rule)
    without = {key: value for key, value in fields.items() if key != "name"}
    with pytest.raises(InputError, match="name"):
        shapes.accept(without, run, 3.0)


def test_stored_documents_do_not_change_when_later_jobs_of_their_shape_come() -> None:
    shapes = JobShapes()
    fields, _ = split_job(job("a"))
    first = shapes.accept(fields, RunSpec(("true",), {}, None), 1.0).document
    kept = {**first}
    shapes.accept({**fields, "name": "b"}, None, 2.0)
    shapes.accept({**fields, "name": "c"}, RunSpec(("false",), {}, None), 3.0)
    assert first == kept and first["name"] == "a" and first["run"]["command"] == ["true"]


def test_a_renamed_spec_checks_its_name_and_time_by_their_rules() -> None:
    spec = JobSpec.from_dict(job("a", expected_runtime="1h") | {"submit_time": 5.0})
    renamed = spec.renamed("b", 6)
    assert renamed == spec.model_copy(update={"name": "b", "submit_time": 6.0})
    assert renamed.to_dict() == {**spec.to_dict(), "name": "b", "submit_time": 6.0}
    assert spec.name == "a" and spec.submit_time == 5.0
    with pytest.raises(InputError) as caught:
        spec.renamed("no spaces", 6.0)
    assert caught.value.field == "name"
    with pytest.raises(InputError) as caught:
        spec.renamed("b", -1.0)
    assert caught.value.field == "submit_time"


def test_a_shape_seen_to_fit_is_not_checked_again_and_one_that_never_fits_always_is() -> None:
    limits = ClusterLimits.of(small_cluster())
    tree = budgets()
    spec = JobSpec.from_dict(job("a", pods=2, topology={"required": "rack"}))
    limits.check(spec, tree)
    assert len(limits._fitting) == 1
    limits.check(spec.renamed("b", 1.0), tree)  # shares the shape's parts: remembered
    assert len(limits._fitting) == 1
    # The account is checked each time, whatever the shape.
    other = JobSpec.from_dict(job("c", pods=2, topology={"required": "rack"}) | {"account": "x"})
    with pytest.raises(NeverFits, match="no such account"):
        limits.check(other, tree)
    # 12 GPUs in one 8-GPU rack never fit: refused every time, never remembered.
    too_big = JobSpec.from_dict(job("d", pods=3, topology={"required": "rack"}))
    for _ in range(2):
        with pytest.raises(NeverFits, match="largest rack has 8"):
            limits.check(too_big, tree)
    assert len(limits._fitting) == 1
