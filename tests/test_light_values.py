"""The light pass over job files (`toposched.cli.jobcheck`) says what the job model says.

Random jobs, valid ones with values replaced, fields dropped or misspelt, go to both the light
pass and `JobSpec.from_dict`: each refuses the same jobs with the same message (the further
problems listed after the first included), and accepts the same jobs with the same values. A
job it accepts is checked against random clusters by both, with the same errors.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from toposched.cli.jobcheck import (
    JOB,
    CheckedJob,
    FieldRule,
    ModelRules,
    check_job,
    check_job_files,
    check_jobs_against_cluster,
)
from toposched.cluster.documents import Document
from toposched.cluster.errors import InputError
from toposched.jobs.entries import JobEntry
from toposched.jobs.files import read_job_files
from toposched.jobs.resources import Resources
from toposched.jobs.spec import JobSpec
from toposched.jobs.topology_spec import Slice, TopologySpec
from toposched.placement.request import check_against_cluster

# TOPOSCHED_FUZZ_EXAMPLES=5000 searches longer; the default keeps the file to a few seconds.
EXAMPLES = settings(
    max_examples=int(os.environ.get("TOPOSCHED_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

VALID_JOBS: list[dict[str, Any]] = [
    {
        "name": "train",
        "account": "research/nlp",
        "priority": 5,
        "min_runtime": "1h",
        "resumable": True,
        "expected_runtime": "3d",
        "grace_period": "2m",
        "pods": 8,
        "resources_per_pod": {"gpus": 2, "cpu": 8, "memory": "64Gi", "gpu_models": ["H100"]},
        "topology": {
            "required": "zone",
            "preferred": "rack",
            "slices": [{"level": "rack", "pods": 4}, {"level": "node", "pods": 2}],
        },
        "submit_time": 30,
    },
    {"name": "share", "pods": 3, "resources_per_pod": {"gpu_milli": 500}},
    {"name": "cpu", "pods": 1, "resources_per_pod": {"cpu": "500m"}},
]
MODELS: dict[str, type[BaseModel]] = {
    "": JobSpec,
    "resources_per_pod": Resources,
    "topology": TopologySpec,
    "slices": Slice,
}
EDGE_VALUES = [
    None, True, False, -1, 0, 1, 2, 3, 4, 64, 65, 500, 999, 1000, 1001, 500.0, 2.0, 1.5,
    2**22, 2**22 + 1, 2**63, 2**70, -(10**9) - 1, float("inf"), float("nan"), -0.0,
    "", " ", "x", "a b", "-1", "1e30", "1h30m", "30m1h", "0s", "500m", "0.5", "4Gi",
    "99999999999999999999Pi", "zone", "rack", "node", "H100", "B200", "a/b", "a//b",
    [], [1], ["H100", "H100"], ["", "H100"], {}, {"a": 1}, {"level": "rack", "pods": 2},
    [{"level": "rack", "pods": 3}], [{"level": "rack"}, 3], [None], "x" * 300,
]  # fmt: skip
values = st.one_of(
    st.sampled_from(EDGE_VALUES),
    st.integers(),
    st.floats(),
    st.text(max_size=6),
    st.lists(st.sampled_from(EDGE_VALUES[:20]), max_size=3),
)


def _mappings(data: Any, kind: str = "") -> list[tuple[str, dict[Any, Any]]]:
    """Every mapping in a job with the kind of model that reads it ("" for the job)."""
    found = [(kind, data)] if isinstance(data, dict) else []
    if isinstance(data, dict):
        for key, value in data.items():
            inner = key if key in MODELS else "?"
            for item in value if isinstance(value, list) else [value]:
                found += _mappings(item, inner)
    return found


@st.composite
def jobs(draw: st.DrawFn) -> Any:
    """A valid job with one to four random edits: a field (known or not) set to a random
    value, or a field dropped; now and then a job that is not a mapping at all."""
    if draw(st.integers(0, 30)) == 0:
        return copy.deepcopy(draw(values))
    job = copy.deepcopy(draw(st.sampled_from(VALID_JOBS)))
    for _ in range(draw(st.integers(1, 4))):
        kind, mapping = draw(st.sampled_from(_mappings(job)))
        known = list(MODELS[kind].model_fields) if kind in MODELS else ["a"]
        field = draw(st.sampled_from([*known, "gpuz", "nmae", "levle", 3]))
        if field in mapping and draw(st.booleans()):
            del mapping[field]
        else:
            mapping[field] = copy.deepcopy(draw(values))
    return job


LEVEL_NAMES = st.sampled_from(["zone", "rack", "block", "node"])


@st.composite
def jobs_on_levels(draw: st.DrawFn) -> Any:
    """A job of 8 pods with random level names in its topology and GPU models in its pods,
    and now and then a random edit (which the model may refuse)."""
    sizes = sorted(draw(st.lists(st.sampled_from([1, 2, 4, 8]), max_size=3)), reverse=True)
    topology: dict[str, Any] = {
        "slices": [{"level": draw(LEVEL_NAMES), "pods": pods} for pods in sizes]
    }
    for field in ("required", "preferred"):
        if draw(st.booleans()):
            topology[field] = draw(LEVEL_NAMES)
    gpu_models = st.lists(st.sampled_from(["H100", "GB300", "B200"]), min_size=1, max_size=2)
    resources = {"gpus": draw(st.integers(0, 2)), "cpu": 1, "gpu_models": draw(gpu_models)}
    job = {"name": "j", "pods": 8, "resources_per_pod": resources, "topology": topology}
    if draw(st.integers(0, 4)) == 0:
        kind, mapping = draw(st.sampled_from(_mappings(job)))
        mapping[draw(st.sampled_from(list(MODELS[kind].model_fields)))] = draw(values)
    return job


def _model_says(data: Any) -> JobSpec | str:
    try:
        return JobSpec.from_dict(data)
    except InputError as error:
        return str(error)


@EXAMPLES
@given(jobs())
def test_the_light_pass_refuses_what_the_job_model_refuses_in_its_words(data: Any) -> None:
    model = _model_says(data)
    try:
        checked = check_job(data)
    except InputError as error:
        assert str(error) == model
        return
    if checked is None:
        return  # a job writing a field the light pass leaves to the model (`defer`)
    assert isinstance(model, JobSpec), model
    resources = checked["resources_per_pod"]
    assert (checked["name"], checked["pods"]) == (model.name, model.pods)
    assert resources["gpus"] == model.resources_per_pod.gpus
    assert resources.get("gpu_models") == model.resources_per_pod.gpu_models


@EXAMPLES
@given(
    data=jobs_on_levels(),
    levels=st.lists(LEVEL_NAMES, unique=True),
    gpu_models=st.lists(st.sampled_from(["H100", "GB300", ""]), unique=True),
)
# `pod_sets: null` is the one-set shorthand to the model: read by the light pass, not left
# to the model.
@example(
    data={
        "name": "j",
        "pods": 8,
        "resources_per_pod": {"gpus": 1, "gpu_models": ["H100"]},
        "pod_sets": None,
    },
    levels=[],
    gpu_models=[],
)
def test_the_light_pass_refuses_a_job_the_cluster_cannot_hold_in_the_models_words(
    data: Any, levels: list[str], gpu_models: list[str]
) -> None:
    model = _model_says(data)
    if not isinstance(model, JobSpec):
        return
    values = check_job(data)
    assert values is not None
    job = CheckedJob(values, JobEntry(Document(data, "job.yaml"), (), data))
    try:
        check_against_cluster(model, levels, gpu_models)
    except InputError as error:
        with pytest.raises(InputError) as light:
            check_jobs_against_cluster([job], levels, gpu_models)
        assert str(light.value) == str(job.locate(error))
        return
    check_jobs_against_cluster([job], levels, gpu_models)


@pytest.mark.parametrize(
    "text",
    [
        "name: x\npods: 0\nresources_per_pod: {gpus: null}\ntopology: {slices: [3]}\n",
        "[1, 2, {a: 1}]\n",
        "jobs: 3\n",
        "topology: 3\nresources_per_pod: [1]\n",
        "- {name: a, pods: 1, resources_per_pod: {gpus: 1}}\n"
        "- {name: b, pods: 2, resources_per_pod: {gpus: 2, gpu_milli: 500}}\n",
        "name: a\npods: 6\nresources_per_pod: {gpus: 1}\n"
        "topology:\n  slices:\n    - {level: rack, pods: 3}\n    - {level: node, pods: 2}\n",
        "name: a\npods: x\npriority: 1e10\nresumable: yes\nresources_per_pod: {cpu: -1, "
        "memory: 2Ei, gpu_models: []}\ntopology: {required: 3, slices: {}}\nsubmit_time: -1\n",
    ],
)
def test_a_job_file_gets_the_job_models_message_with_its_lines(text: str, tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(text)
    with pytest.raises(InputError) as light:
        check_job_files([job])
    with pytest.raises(InputError) as model:
        read_job_files([job])
    assert str(light.value) == str(model.value)


def test_a_job_writing_a_field_without_light_rules_is_left_to_the_model() -> None:
    fields = dict(JOB.fields)
    fields["later"] = FieldRule(defer=True)
    rules = ModelRules(fields, JOB.before, JOB.after)
    assert check_job({"later": 1, "pods": -1, "nmae": "x"}, rules) is None
    with pytest.raises(InputError) as refused:
        check_job({"name": "x", "pods": -1, "resources_per_pod": {"gpus": 1}}, rules)
    assert str(refused.value) == "pods: -1 is invalid: must be an integer >= 1"


# --- workload files: the light pass before `simulate --workload FILE` --------------------------

CLUSTERS: list[Any] = [
    {"levels": ["zone", "rack"], "nodes": [{"name": "n1", "zone": "z", "rack": "r", "gpus": 8,
     "gpu_model": "H100"}, {"name": "n2", "zone": "z", "rack": "r2", "gpus": 4,
     "gpu_model": "B200"}]},
    {"file": "cluster.yaml"},
    {"builder": "superpod", "spine_groups": 1, "units_per_group": 1, "nodes_per_unit": 2},
    {"builder": "nvl72", "racks_per_block": 1, "nodes_per_rack": 2, "model": "GB200"},
    {"builder": "fat_tree", "k": 2},
    {"builder": "nvl72", "racks_per_block": 1, "model": "H100"},
    {"levels": ["rack"], "gpu_models": {"B200": 180}, "nodes": [{"name": "n1", "rack": "r",
     "gpus": 8, "gpu_model": "B200"}, {"name": "g0-su0-n1", "rack": "r"}]},
]  # fmt: skip
CLUSTER_FILE = (
    "levels: [zone, rack]\ndefaults: {gpus: 8, gpu_model: H100}\n"
    "nodes:\n  - {name: n1, zone: z, rack: r}\n  - {name: n2, zone: z, rack: r2}\n"
)
BUDGETS: list[Any] = [
    None,
    None,
    {"accounts": {"research": {"share": 70, "children": {"nlp": 50, "vision": 50}}, "ops": 30}},
    {"accounts": {"research": {"share": 70, "children": {"nlp": 50, "vision": 50}}, "ops": 30}},
    {"accounts": {"a": 200}},
]
ACCOUNTS = st.sampled_from([None, "default", "research/nlp", "research", "ops", "nobody"])


def _mostly(good: Any) -> st.SearchStrategy[Any]:
    """`good` about seven times in eight, else a random value."""
    return st.sampled_from([True] * 7 + [False]).flatmap(
        lambda keep: st.just(good) if keep else values
    )


@st.composite
def workload_documents(draw: st.DrawFn) -> dict[str, Any]:
    """A workload of a few random jobs (`jobs()`, with random workload fields), a random
    cluster, budget, settings and failures, and now and then a random top-level field."""
    entries = []
    for _ in range(draw(st.integers(0, 3))):
        job = draw(jobs())
        if isinstance(job, dict):
            job.pop("submit_time", None)  # a workload's job arrives at `submit`
            for key, good in (("submit", 0), ("runtime", "1h"), ("cancel_after", None)):
                job[key] = draw(_mostly(good))
            account = draw(ACCOUNTS)
            if account is not None:
                job["account"] = account
        entries.append(job)
    document: dict[Any, Any] = {"cluster": copy.deepcopy(draw(st.sampled_from(CLUSTERS)))}
    budget = draw(st.sampled_from(BUDGETS))
    if budget is not None:
        document["budget"] = budget
    if draw(st.booleans()):
        document["settings"] = {"horizon": draw(_mostly("2d"))}
    if draw(st.booleans()):
        names = ["n1", "n2", "n9", 0, 1, 7, True, "g0-su0-n1", "z0-b0-r0-n1", "p1-e0-h0", "h9"]
        nodes = st.lists(st.sampled_from(names), min_size=1, max_size=2)
        document["failures"] = [{"time": draw(_mostly("1h")), "nodes": draw(nodes)}]
    document["jobs"] = entries
    if not draw(_mostly(True)):
        document[draw(st.sampled_from(["jbos", "notes", "name", "format", 3]))] = draw(values)
    return document


@EXAMPLES
@given(workload_documents())
def test_the_light_pass_refuses_what_the_workload_reader_refuses_in_its_words(
    document: dict[str, Any],
) -> None:
    import tempfile

    import yaml

    from toposched.cli.workloadcheck import check_workload_file
    from toposched.workloads.files import load_workload

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "cluster.yaml").write_text(CLUSTER_FILE)
        path = Path(folder) / "w.yaml"
        path.write_text(yaml.safe_dump(document))
        try:
            load_workload(path)
            model = None
        except InputError as error:
            model = str(error)
        try:
            check_workload_file(path)
        except InputError as error:
            assert str(error) == model
            return
    # Passed by the light pass: the model accepts it too, but where the pass leaves a job (pod
    # sets) to the model.
    left = any(isinstance(job, dict) and "pod_sets" in job for job in document["jobs"])
    assert model is None or left, model
