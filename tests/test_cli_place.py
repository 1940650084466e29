"""`toposched place` end to end: jobs from files placed in order, JSON and tables, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toposched.cli.main import main

CLUSTER = """\
levels: [zone, rack]
defaults: {gpus: 8, gpu_model: H100, cpu: 96, memory: 1Ti}
nodes:
  - {name: n1, labels: {zone: z1, rack: r1}}
  - {name: n2, labels: {zone: z1, rack: r1}}
  - {name: n3, labels: {zone: z1, rack: r2}, gpus: 4}
  - {name: n4, labels: {zone: z2, rack: r3}}
"""

# `train` takes rack r1 whole; `big` then finds 12 free GPUs where it needs 24; `shared` halves
# one GPU twice.
JOBS = """\
- name: train
  pods: 2
  resources_per_pod: {gpus: 8}
  topology: {required: rack}
- name: big
  pods: 3
  resources_per_pod: {gpus: 8}
  topology: {required: zone}
- name: shared
  pods: 2
  resources_per_pod: {gpu_milli: 500}
"""


@pytest.fixture()
def files(tmp_path: Path) -> tuple[Path, Path]:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(JOBS)
    return cluster, jobs


def test_jobs_are_placed_in_order_each_taking_its_gpus(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, jobs = files
    assert main(["place", str(jobs), "--cluster", str(cluster), "--json"]) == 1  # one refused
    results = json.loads(capsys.readouterr().out)["results"]
    train, big, shared = results
    assert train["placed"] and train["domains_used"] == {"zone": 1, "rack": 1, "node": 2}
    assert sorted(pod["node"] for pod in train["pods"]) == ["n1", "n2"]
    assert all(pod["gpus"] == list(range(8)) for pod in train["pods"])
    assert not big["placed"] and big["code"] == "capacity"
    assert "room for 1 such pod (12 free GPUs)" in big["reason"]
    assert shared["placed"] and {pod["gpu_milli"] for pod in shared["pods"]} == {500}
    # Both halves on one GPU: best fit keeps whole GPUs free.
    assert len({(pod["node"], tuple(pod["gpus"])) for pod in shared["pods"]}) == 1


def test_tables_show_where_and_why_not_and_the_first_pods(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, _ = files
    fits = tmp_path / "fits.yaml"
    fits.write_text("name: fits\npods: 2\nresources_per_pod: {gpus: 4}\n")
    assert main(["place", str(fits), "--cluster", str(cluster), "--pods", "1"]) == 0
    out = capsys.readouterr().out
    assert "placed" in out and "fits: first 1 of 2 pods" in out
    # Best fit: zone z2 (8 free GPUs, against z1's 20) is the fullest that holds the gang.
    assert "n4" in out and "1 zone, 1 rack, 1 node" in out


def test_a_bad_job_anywhere_stops_before_anything_is_placed(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, jobs = files
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\npods: 0\nresources_per_pod: {gpus: 1}\n")
    assert main(["place", str(jobs), str(bad), "--cluster", str(cluster)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "bad.yaml" in captured.err and "pods" in captured.err and ">= 1" in captured.err


@pytest.mark.parametrize(
    ("job", "words"),
    [
        (
            "name: j\npods: 1\nresources_per_pod: {gpus: 1}\ntopology: {required: block}\n",
            ["topology.required", "block", "zone, rack"],
        ),
        (
            "name: j\npods: 1\nresources_per_pod: {gpus: 1, gpu_models: [B200]}\n",
            ["B200", "H100"],
        ),
    ],
    ids=["unknown level", "unknown model"],
)
def test_names_that_the_cluster_lacks_are_clear_errors(
    files: tuple[Path, Path],
    tmp_path: Path,
    job: str,
    words: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster, _ = files
    path = tmp_path / "job.yaml"
    path.write_text(job)
    assert main(["place", str(path), "--cluster", str(cluster)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    for word in words:
        assert word in captured.err


def test_a_missing_cluster_file_and_a_negative_pod_count_are_clear_errors(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, jobs = files
    assert main(["place", str(jobs), "--cluster", str(tmp_path / "none.yaml")]) == 2
    assert "file not found" in capsys.readouterr().err
    cluster, _ = files
    assert main(["place", str(jobs), "--cluster", str(cluster), "--pods", "-1"]) == 2
    assert "--pods" in capsys.readouterr().err
    for where in (["--cluster", str(cluster), "--policy", "random"], ["--fleet"]):
        assert main(["place", str(jobs), *where, "--seed", "-3"]) == 2
        err = capsys.readouterr().err
        assert "seed: -3 is invalid: must be a whole number >= 0" in err
        assert "Traceback" not in err


def test_the_busy_fleet_places_a_rack_sliced_training_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "pretrain.yaml"
    job.write_text(
        "name: pretrain\npods: 2304\n"
        "resources_per_pod: {gpus: 4, cpu: 64, memory: 512Gi, gpu_models: [GB300]}\n"
        "topology: {required: zone, preferred: block, slices: [{level: rack, pods: 18}]}\n"
    )
    assert main(["place", str(job), "--fleet", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["results"][0]
    assert result["placed"] and len(result["pods"]) == 2304
    # 128 whole racks of 18 nodes, one pod of 4 GPUs on each node.
    assert result["domains_used"]["zone"] == 1
    assert result["domains_used"]["rack"] == 128
    assert result["domains_used"]["node"] == 2304
