"""Random and mutated YAML/JSON documents fed to the job, cluster, workload and budget loaders.

Whatever the input, a loader returns a valid result or raises InputError with a message of
bounded length; never another exception. Inputs are random values, valid documents with one
part replaced or misspelled, and valid files with random edits to their text.
"""

from __future__ import annotations

import copy
import io
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toposched.cli.main import main
from toposched.cluster.errors import InputError
from toposched.cluster.loaders import load_topology, topology_from_dict
from toposched.cluster.topology import Topology
from toposched.jobs.spec import JobSpec, load_jobs
from toposched.policy.budget import BudgetTree
from toposched.workloads.files import load_workload, save_workload

# TOPOSCHED_FUZZ_EXAMPLES=5000 searches longer; the default keeps the file to ~20 s.
FUZZ = settings(
    max_examples=int(os.environ.get("TOPOSCHED_FUZZ_EXAMPLES", "120")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# A message names a few fields, cut values and rules: never the input itself.
MAX_MESSAGE = 4000

VALID_JOB: dict[str, Any] = {
    "name": "train",
    "account": "research/nlp",
    "priority": 5,
    "min_runtime": "1h",
    "resumable": True,
    "expected_runtime": "3d",
    "grace_period": "2m",
    "pods": 4,
    "resources_per_pod": {"gpus": 2, "cpu": 8, "memory": "64Gi", "gpu_models": ["H100"]},
    "topology": {"required": "zone", "preferred": "rack", "slices": [{"level": "rack", "pods": 2}]},
}
VALID_CLUSTER: dict[str, Any] = {
    "levels": ["zone", "rack"],
    "gpu_models": {"H100": 80},
    "defaults": {"gpus": 8, "gpu_model": "H100", "cpu": 96, "memory": "1Ti"},
    "nodes": [
        {"name": "n1", "labels": {"zone": "z1", "rack": "r1"}},
        {"name": "n2", "labels": {"zone": "z1", "rack": "r2"}, "gpus": 4},
        {"name": "n3", "zone": "z2", "rack": "r3", "cpu": "500m", "memory": 4096},
    ],
}
VALID_BUDGET: dict[str, Any] = {
    "accounts": {"research": {"share": 70, "children": {"nlp": 50, "vision": 50}}, "ops": 30}
}
VALID_WORKLOAD: dict[str, Any] = {
    "format": "toposched-workload/1",
    "name": "lab",
    "cluster": VALID_CLUSTER,
    "budget": VALID_BUDGET,
    "settings": {"horizon": "2d", "checkpoint_interval": "1h"},
    "failures": [{"time": "2h", "nodes": ["n2"], "repair_after": "4h"}],
    "jobs": [
        {**VALID_JOB, "account": "research/nlp", "submit": 0, "runtime": "20m", "class": "debug"},
        {
            "name": "eval",
            "account": "ops",
            "submit": "1h",
            "runtime": 600,
            "pods": 1,
            "resources_per_pod": {"gpu_milli": 500},
            "cancel_after": "30m",
        },
    ],
}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**62, max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["", "-1", "1e30", "4Gi", "99999999999999999999Pi", "500m", "1h30m", "*"]),
    st.text(min_size=300, max_size=400),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=8), st.integers()), inner, max_size=4),
    ),
    max_leaves=12,
)


def paths_in(document: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a value in `document`, the root's () included."""
    yield path
    if isinstance(document, dict):
        for key, value in document.items():
            yield from paths_in(value, (*path, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            yield from paths_in(value, (*path, index))


def with_value(document: Any, path: tuple[Any, ...], value: Any, rename: bool) -> Any:
    """A copy of `document` with the value at `path` replaced (or its key misspelled)."""
    if not path:
        return value
    copied = copy.deepcopy(document)
    parent = copied
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if rename and isinstance(parent, dict):
        name = str(last)
        parent[name[:-2] + name[-1:] + name[-2:-1]] = parent.pop(last)  # "gpus" -> "gpsu"
    else:
        parent[last] = value
    return copied


@st.composite
def mutated(draw: st.DrawFn, valid: dict[str, Any]) -> Any:
    document: Any = valid
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(list(paths_in(document))))
        document = with_value(document, path, draw(values), draw(st.booleans()))
    return document


def checked(load: Callable[[], Any]) -> Any:
    """`load()`'s result, or None after an InputError of bounded length."""
    try:
        return load()
    except InputError as error:
        assert len(str(error)) < MAX_MESSAGE, str(error)[:200]
        assert error.rule
        return None


def check_job(job: JobSpec | None) -> None:
    if job is not None:
        assert JobSpec.from_dict(job.to_dict()) == job


def check_cluster(topology: Topology | None, nodes: Any) -> None:
    if topology is not None:
        assert topology.n_nodes == len(nodes)


def as_text(document: Any, kind: str) -> str:
    if kind == "json":
        return json.dumps(document)
    return yaml.safe_dump(document, allow_unicode=True)


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as name:
        yield Path(name)


# --- documents as data ----------------------------------------------------------------------


@FUZZ
@given(document=st.one_of(values, mutated(VALID_JOB)))
def test_job_documents(document: Any) -> None:
    check_job(checked(lambda: JobSpec.from_dict(document)))


@FUZZ
@given(document=st.one_of(values, mutated(VALID_CLUSTER)))
def test_cluster_documents(document: Any) -> None:
    topology = checked(lambda: topology_from_dict(document))
    if topology is not None:
        check_cluster(topology, document["nodes"])


# --- documents as files ---------------------------------------------------------------------


@FUZZ
@given(
    document=st.one_of(mutated(VALID_JOB), st.lists(mutated(VALID_JOB), max_size=3)),
    kind=st.sampled_from(["yaml", "json"]),
)
def test_job_files(folder: Path, document: Any, kind: str) -> None:
    path = folder / f"job.{kind}"
    path.write_text(as_text(document, kind))
    for job in checked(lambda: load_jobs(path)) or []:
        check_job(job)


@FUZZ
@given(document=mutated(VALID_CLUSTER), kind=st.sampled_from(["yaml", "json"]))
def test_cluster_files(folder: Path, document: Any, kind: str) -> None:
    path = folder / f"cluster.{kind}"
    path.write_text(as_text(document, kind))
    topology = checked(lambda: load_topology(path))
    if topology is not None:
        check_cluster(topology, document["nodes"])


@FUZZ
@given(document=st.one_of(values, mutated(VALID_BUDGET)))
def test_budget_documents(document: Any) -> None:
    tree = checked(lambda: BudgetTree.from_dict(document))
    if tree is not None:
        assert BudgetTree.from_dict(tree.to_dict()).leaves() == tree.leaves()


@FUZZ
@given(document=mutated(VALID_WORKLOAD), suffix=st.sampled_from([".yaml", ".json"]))
def test_workload_files(folder: Path, document: Any, suffix: str) -> None:
    path = folder / f"workload{suffix}"
    path.write_text(as_text(document, suffix[1:]))
    workload = checked(lambda: load_workload(path))
    if workload is not None:
        saved = save_workload(workload, folder / "saved.jsonl")
        again = load_workload(saved)
        assert [job.spec for job in again.jobs] == [job.spec for job in workload.jobs]


# Characters that matter to YAML and JSON syntax, and a few that matter to decoding.
EDIT_CHARACTERS = list("&*!|>-:,[]{}#'\"?%@`\n\t 0123456789e.") + ["\x00", "\ufeff", "\u2028"]


@st.composite
def edited_text(draw: st.DrawFn, valid: dict[str, Any]) -> str:
    """A valid document's YAML or JSON text with a few characters inserted, deleted or replaced."""
    text = as_text(valid, draw(st.sampled_from(["yaml", "json"])))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        piece = draw(st.text(st.sampled_from(EDIT_CHARACTERS), min_size=1, max_size=3))
        cut = draw(st.integers(0, 3))
        text = text[:at] + piece + text[at + cut :]
    return text


@FUZZ
@given(
    text=st.one_of(edited_text(VALID_JOB), st.text(max_size=200)),
    suffix=st.sampled_from([".yaml", ".json"]),
)
def test_edited_job_text(folder: Path, text: str, suffix: str) -> None:
    path = folder / f"edited{suffix}"
    path.write_text(text, encoding="utf-8")
    for job in checked(lambda: load_jobs(path)) or []:
        check_job(job)


@FUZZ
@given(
    text=st.one_of(edited_text(VALID_CLUSTER), st.text(max_size=200)),
    suffix=st.sampled_from([".yaml", ".json", ".csv"]),
)
def test_edited_cluster_text(folder: Path, text: str, suffix: str) -> None:
    path = folder / f"edited{suffix}"
    path.write_text(text, encoding="utf-8")
    checked(lambda: load_topology(path))


@FUZZ
@given(data=st.binary(max_size=200), suffix=st.sampled_from([".yaml", ".json", ".csv"]))
def test_random_bytes(folder: Path, data: bytes, suffix: str) -> None:
    path = folder / f"bytes{suffix}"
    path.write_bytes(data)
    checked(lambda: load_topology(path))
    checked(lambda: load_jobs(path))


@FUZZ
@given(
    text=st.one_of(edited_text(VALID_WORKLOAD), st.text(max_size=200)),
    suffix=st.sampled_from([".yaml", ".json", ".jsonl"]),
)
def test_edited_workload_text(folder: Path, text: str, suffix: str) -> None:
    path = folder / f"edited-workload{suffix}"
    path.write_text(text, encoding="utf-8")
    checked(lambda: load_workload(path))


# --- through the command line ----------------------------------------------------------------


@settings(FUZZ, max_examples=max(FUZZ.max_examples // 5, 1))
@given(text=edited_text(VALID_CLUSTER))
def test_cluster_show_exits_0_or_2(folder: Path, text: str) -> None:
    path = folder / "shown.yaml"
    path.write_text(text, encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["cluster", "show", str(path)])
    assert code in (0, 2)
    assert (code == 2) == err.getvalue().startswith("error:")
    assert (code == 0) == ("GPUs" in out.getvalue())
