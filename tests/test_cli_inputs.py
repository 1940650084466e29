"""Bad input to the commands, through `main([...])`: one error form, file and line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from toposched.cli.main import main
from toposched.cluster.errors import InputError
from toposched.policy.budget import BudgetTree
from toposched.workloads.files import load_workload

CLUSTER = """\
levels: [rack]
defaults: {gpus: 8, gpu_model: H100}
nodes:
  - {name: n1, labels: {rack: r1}}
  - {name: n2, labels: {rack: r1}}
"""

JOB = """\
name: train
pods: 1
resources_per_pod: {gpus: 8}
topology: {required: zone}
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_place_refuses_the_same_job_file_twice_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = _write(tmp_path, "cluster.yaml", CLUSTER)
    job = _write(tmp_path, "job.yaml", JOB.replace("zone", "rack"))
    assert main(["place", str(job), str(job), "--cluster", str(cluster)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {job}:1: name: 'train' is invalid: another job has this name")
    assert "job names must be unique" in err and "Traceback" not in err


def test_place_errors_against_the_cluster_name_the_job_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = _write(tmp_path, "cluster.yaml", CLUSTER)
    job = _write(tmp_path, "job.yaml", JOB)
    assert main(["place", str(job), "--cluster", str(cluster)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {job}:4: topology.required: 'zone' is invalid: unknown level")


WORKLOAD = """\
cluster: {file: cluster.yaml}
jobs:
  - {name: a, submit: 0, runtime: 1h, account: research, pods: 1, resources_per_pod: {gpus: 1}}
budget: {accounts: {research: 100}}
"""


def test_a_workload_names_the_cluster_file_where_its_error_is(tmp_path: Path) -> None:
    cluster = _write(
        tmp_path, "cluster.yaml", CLUSTER.replace("{rack: r1}}\n", "{rack: r1}, gpuz: 4}\n", 1)
    )
    workload = _write(tmp_path, "w.yaml", WORKLOAD)
    with pytest.raises(InputError) as caught:
        load_workload(workload)
    assert (caught.value.file, caught.value.line) == (str(cluster), 4)
    assert "did you mean 'gpus'" in caught.value.rule


def test_workload_and_budget_unknown_fields_suggest_the_close_name(tmp_path: Path) -> None:
    _write(tmp_path, "cluster.yaml", CLUSTER)
    workload = _write(
        tmp_path, "w.yaml", WORKLOAD.replace("jobs:", "settings: {horizn: 1d}\njobs:")
    )
    with pytest.raises(InputError) as caught:
        load_workload(workload)
    assert str(caught.value).startswith(f"{workload}:2: settings.horizn: '1d' is invalid: ")
    assert "did you mean 'horizon'" in caught.value.rule
    budget = _write(tmp_path, "b.yaml", "accounts:\n  research: {shares: 5}\n")
    with pytest.raises(InputError) as caught:
        BudgetTree.from_yaml(budget)
    assert str(caught.value).startswith(f"{budget}:2: accounts.research.shares: 5 is invalid: ")
    assert "did you mean 'share'" in caught.value.rule


def test_a_workload_file_within_the_limits(tmp_path: Path) -> None:
    binary = tmp_path / "w.yaml"
    binary.write_bytes(b"\x89PNG\r\n")
    with pytest.raises(InputError, match="is not UTF-8 text"):
        load_workload(binary)
    with pytest.raises(InputError, match="is a directory"):
        load_workload(tmp_path)
