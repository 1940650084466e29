"""Job files with `pod_sets`: what they read as, their errors (file, line, field, value, rule),
workload files holding them, and `toposched place` / `simulate` on them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_jobspec import assert_refused_naming

from toposched.cli.main import main
from toposched.cluster.errors import InputError
from toposched.cluster.limits import MAX_PODS_PER_JOB
from toposched.jobs.files import read_job_files
from toposched.jobs.spec import JobSpec
from toposched.workloads.files import load_workload, save_workload


def two_sets(**fields: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "name": "rl",
        "topology": {"required": "block"},
        "pod_sets": [
            {"name": "trainer", "pods": 4, "resources_per_pod": {"gpus": 8}},
            {
                "name": "rollout",
                "pods": 2,
                "resources_per_pod": {"gpus": 8},
                "topology": {"required": "rack"},
            },
        ],
    }
    job.update(fields)
    return job


def with_set(index: int, **fields: Any) -> dict[str, Any]:
    job = two_sets()
    job["pod_sets"][index] = {**job["pod_sets"][index], **fields}
    return job


def test_a_job_of_two_sets_reads_as_written() -> None:
    spec = JobSpec.from_dict(two_sets())
    assert spec.pod_sets is not None
    assert [s.name for s in spec.pod_sets] == ["trainer", "rollout"]
    assert spec.pods == 6 and spec.total_gpus == 48 and spec.has_one_shape
    assert spec.pod_sets[1].topology.required == "rack"
    written = spec.to_dict()
    assert "pods" not in written and "resources_per_pod" not in written
    assert JobSpec.from_dict(written) == spec


def test_the_one_set_shorthand_has_no_pod_sets() -> None:
    spec = JobSpec.from_dict({"name": "a", "pods": 2, "resources_per_pod": {"gpus": 1}})
    assert spec.pod_sets is None and spec.has_one_shape


def test_sets_of_different_shapes_count_every_set() -> None:
    spec = JobSpec.from_dict(
        {
            "name": "launch",
            "pod_sets": [
                {"name": "launcher", "pods": 1, "resources_per_pod": {"cpu": 8}},
                {"name": "workers", "pods": 4, "resources_per_pod": {"gpus": 4}},
                {"name": "probe", "pods": 2, "resources_per_pod": {"gpu_milli": 250}},
            ],
        }
    )
    assert spec.total_gpus == 16 and spec.total_gpu_milli == 16_500
    assert not spec.has_one_shape


def test_a_job_without_pods_is_told_of_pod_sets_too() -> None:
    with pytest.raises(InputError) as caught:
        JobSpec.from_dict({"name": "a", "resources_per_pod": {"gpus": 1}})
    assert (caught.value.field, caught.value.value) == ("pods", None)
    assert caught.value.rule == (
        "is required (or pod_sets: a list of sets, each with its own pods and resources_per_pod)"
    )


BAD_JOBS = [
    ("both forms", two_sets(pods=6), "pods", 6, "either pod_sets or the one-set shorthand"),
    ("both forms, resources", two_sets(resources_per_pod={"gpus": 8}), "resources_per_pod",
     {"gpus": 8}, "not both"),
    ("no set", two_sets(pod_sets=[]), "pod_sets", [], "at least one pod set"),
    ("not a list", two_sets(pod_sets={"trainer": 4}), "pod_sets", {"trainer": 4},
     "must be a list of pod sets"),
    ("set not a mapping", two_sets(pod_sets=[4]), "pod_sets[0]", 4, "must be a mapping"),
    ("set name twice", with_set(1, name="trainer"), "pod_sets[1].name", "trainer",
     "pod_sets[0] has this name"),
    ("set name with a space", with_set(0, name="the trainer"), "pod_sets[0].name",
     "the trainer", "letters, digits and . _ -"),
    ("set without pods", {**two_sets(), "pod_sets": [{"name": "a", "resources_per_pod": {}}]},
     "pod_sets[0].pods", None, "is required"),
    ("set pods zero", with_set(1, pods=0), "pod_sets[1].pods", 0, "integer >= 1"),
    ("set asks nothing", with_set(0, resources_per_pod={}), "pod_sets[0].resources_per_pod", {},
     "a pod must ask for something"),
    ("set bad gpus", with_set(0, resources_per_pod={"gpus": 1.5}),
     "pod_sets[0].resources_per_pod.gpus", 1.5, "integer >= 0"),
    ("set unknown field", with_set(0, replicas=3), "pod_sets[0].replicas", 3,
     "valid fields are name, pods, resources_per_pod, topology, min_pods"),
    ("set slice does not divide", with_set(0, topology={"slices": [{"level": "rack", "pods": 3}]}),
     "pod_sets[0].topology.slices[0].pods", 3, "must divide the set's pods (4)"),
    ("minimum above pods", with_set(1, min_pods=3), "pod_sets[1].min_pods", 3,
     "must be at most the set's pods (2)"),
    ("minimum zero", with_set(1, min_pods=0), "pod_sets[1].min_pods", 0, "integer >= 1"),
    ("minimum not whole slices",
     with_set(0, min_pods=1, topology={"slices": [{"level": "rack", "pods": 2}]}),
     "pod_sets[0].min_pods", 1, "must be a multiple of the set's outermost slice, 2 pods per rack"),
    ("job-level slices", two_sets(topology={"slices": [{"level": "rack", "pods": 2}]}),
     "topology.slices", [{"level": "rack", "pods": 2}], "slices belong to each set's topology"),
    ("too many pods", two_sets(pod_sets=[
        {"name": "a", "pods": MAX_PODS_PER_JOB, "resources_per_pod": {"gpus": 1}},
        {"name": "b", "pods": 1, "resources_per_pod": {"gpus": 1}},
    ]), "pod_sets", f"{MAX_PODS_PER_JOB + 1:,} pods", "the limit of pods in one job"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("written", "field", "value", "rule_fragment"),
    [case[1:] for case in BAD_JOBS],
    ids=[case[0] for case in BAD_JOBS],
)
def test_bad_pod_sets_are_named(
    written: dict[str, Any], field: str, value: object, rule_fragment: str
) -> None:
    assert_refused_naming(written, field, value, rule_fragment)


JOB_FILE = """\
name: rl
topology: {required: block}
pod_sets:
  - name: trainer
    pods: 4
    resources_per_pod: {gpus: 8}
  - name: rollout
    pods: 2
    resources_per_pod: {gpus: 8}
    min_pods: 3
"""


def test_a_file_error_names_file_line_and_set(tmp_path: Path) -> None:
    path = tmp_path / "rl.yaml"
    path.write_text(JOB_FILE)
    with pytest.raises(InputError) as caught:
        read_job_files([path])
    error = caught.value
    assert (error.file, error.line) == (str(path), 10)
    assert str(error).startswith(
        f"{path}:10: pod_sets[1].min_pods: 3 is invalid: must be at most the set's pods (2)"
    )


def test_both_forms_in_a_file_point_at_the_shorthand(tmp_path: Path) -> None:
    path = tmp_path / "rl.yaml"
    path.write_text(
        JOB_FILE.replace("min_pods: 3\n", "").replace("name: rl\n", "name: rl\npods: 6\n")
    )
    with pytest.raises(InputError) as caught:
        read_job_files([path])
    assert (caught.value.field, caught.value.line) == ("pods", 2)


def test_an_error_against_the_cluster_names_the_sets_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    path = tmp_path / "rl.yaml"
    path.write_text(JOB_FILE.replace("min_pods: 3", "topology: {required: spine}"))
    assert main(["place", str(path), "--cluster", str(cluster)]) == 2
    assert (
        f"{path}:10: pod_sets[1].topology.required: 'spine' is invalid: unknown level; "
        "valid levels are block, rack, node" in capsys.readouterr().err
    )


# --- toposched place ----------------------------------------------------------------------------

CLUSTER = """\
levels: [block, rack]
defaults: {gpus: 4, gpu_model: A100, cpu: 64, memory: 512Gi}
nodes:
""" + "".join(
    f"  - {{name: b{b}-r{r}-n{n}, labels: {{block: b{b}, rack: b{b}-r{r}}}}}\n"
    for b in range(2)
    for r in range(2)
    for n in range(2)
)

JOBS = """\
- name: rl
  topology: {required: block}
  pod_sets:
    - name: trainer
      pods: 2
      resources_per_pod: {gpus: 4}
      topology: {slices: [{level: rack, pods: 2}]}
    - name: rollout
      pods: 4
      resources_per_pod: {gpus: 2}
- name: launch
  topology: {required: block}
  pod_sets:
    - {name: launcher, pods: 1, resources_per_pod: {cpu: 8}}
    - {name: workers, pods: 4, resources_per_pod: {gpus: 4}}
"""


def test_place_shows_every_set_with_its_ranks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(JOBS)
    # `rl` takes block b0 (16 GPUs); `launch` needs 16 GPUs and a CPU in one block: b1.
    assert main(["place", str(jobs), "--cluster", str(cluster), "--json"]) == 0
    rl, launch = json.loads(capsys.readouterr().out)["results"]
    assert rl["placed"] and rl["domains_used"] == {"block": 1, "rack": 2, "node": 4}
    trainer, rollout = rl["pod_sets"]
    assert (trainer["name"], trainer["ranks"], trainer["asks"]) == ("trainer", [0, 1], "2 x 4 GPUs")
    assert trainer["domains_used"] == {"block": 1, "rack": 1, "node": 2}
    assert [pod["pod"] for pod in rollout["pods"]] == [2, 3, 4, 5]
    # Consecutive ranks share a node: the rollout's pods two by two.
    assert [pod["node"] for pod in rollout["pods"]][::2] == [
        pod["node"] for pod in rollout["pods"]
    ][1::2]
    launcher, workers = launch["pod_sets"]
    assert launcher["pods"][0]["gpus"] == [] and launcher["ranks"] == [0, 0]
    assert {pod["node"][:2] for pod in [*launcher["pods"], *workers["pods"]]} == {"b1"}
    assert main(["place", str(jobs), "--cluster", str(cluster), "--pods", "2"]) == 0
    printed = " ".join(capsys.readouterr().out.split())  # titles wrap at the table's width
    assert "set trainer" in printed and "ranks 2-5" in printed
    assert "launch, set workers: ranks 1-4, first 2 shown" in printed
    assert "rl, set trainer: ranks 0-1" in printed and "rl, set trainer: ranks 0-1," not in printed


def test_place_says_which_set_does_not_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(
        JOBS.replace(
            "pods: 4, resources_per_pod: {gpus: 4}}", "pods: 5, resources_per_pod: {gpus: 4}}"
        )
    )
    assert main(["place", str(jobs), "--cluster", str(cluster), "--json"]) == 1
    _, launch = json.loads(capsys.readouterr().out)["results"]
    # 20 GPUs where `rl` left 16 free: the workers fit nowhere, even alone.
    assert not launch["placed"] and launch["code"] == "capacity"
    assert launch["reason"].startswith("role workers: ")
    assert "(the roles share one block)" in launch["reason"]


# --- workload files and the simulator ------------------------------------------------------------

WORKLOAD = """\
format: toposched-workload/1
name: rl-lab
cluster: {builder: nvl72, zones: 1, blocks_per_zone: 2, racks_per_block: 2, nodes_per_rack: 2}
budget: {accounts: {rl: 60, lm: 40}}
jobs:
  - name: rl-0
    submit: 0
    runtime: 2h
    account: rl
    topology: {required: block}
    pod_sets:
      - {name: trainer, pods: 2, resources_per_pod: {gpus: 4}}
      - {name: rollout, pods: 2, resources_per_pod: {gpus: 4}, topology: {required: rack}}
  - name: lm-0
    submit: 10m
    runtime: 1h
    account: lm
    pods: 3
    resources_per_pod: {gpus: 4}
"""


def test_a_workload_file_holds_jobs_of_several_sets(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(WORKLOAD)
    workload = load_workload(path)
    rl = workload.jobs[0].spec
    assert rl.pod_sets is not None and rl.total_gpus == 16
    saved = save_workload(workload, tmp_path / "again.jsonl")
    assert [job.spec for job in load_workload(saved).jobs] == [job.spec for job in workload.jobs]


@pytest.mark.parametrize(
    ("change", "line", "message"),
    [
        (
            ("topology: {required: rack}", "topology: {required: spine}"),
            13,
            "jobs[0].pod_sets[1].topology.required: 'spine' is invalid: unknown level",
        ),
        (
            ("resources_per_pod: {gpus: 4}}\n      - ", "resources_per_pod: {gpus: 4, "
             "gpu_models: [H100]}}\n      - "),
            12,
            "jobs[0].pod_sets[0].resources_per_pod.gpu_models: ['H100'] is invalid: no GPU of "
            "these models",
        ),
    ],
)  # fmt: skip
def test_a_workload_job_of_several_sets_is_checked_with_its_line(
    tmp_path: Path, change: tuple[str, str], line: int, message: str
) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(WORKLOAD.replace(*change))
    with pytest.raises(InputError) as caught:
        load_workload(path)
    assert str(caught.value).startswith(f"{path}:{line}: {message}")


def simulated_summary(
    workload: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    """`toposched simulate --json` of the workload file's text over 0.2 days: its summary."""
    path = tmp_path / "w.yaml"
    path.write_text(workload)
    arguments = ["simulate", "--workload", str(path), "--days", "0.2", "--no-progress", "--json"]
    assert main([*arguments, "--out", str(tmp_path / "out")]) == 0
    summary: dict[str, Any] = json.loads(capsys.readouterr().out)
    return summary


def test_simulate_runs_a_workload_file_with_jobs_of_several_sets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = simulated_summary(WORKLOAD, tmp_path, capsys)
    assert summary["jobs"]["finished"] == 2
    # Both sets of rl-0 (16 GPUs) ran its 2 hours; lm-0 12 GPUs for 1 hour.
    teams = summary["fairness"]["teams"]
    assert teams["rl"]["delivered_gpu_hours"] == pytest.approx(32.0)
    assert teams["lm"]["delivered_gpu_hours"] == pytest.approx(12.0)


# --- the documented examples ---------------------------------------------------------------------

ROOT = Path(__file__).parent.parent


@pytest.mark.parametrize("document", ["README.md", "docs/placement.md"])
def test_the_documented_jobs_of_several_sets_read_as_written(document: str) -> None:
    text = (ROOT / document).read_text()
    blocks = [block.split("```")[0] for block in text.split("```yaml\n")[1:]]
    jobs = [JobSpec.from_yaml(block) for block in blocks if "pod_sets:" in block]
    assert jobs, f"no job with pod_sets in {document}"
    for job in jobs:
        assert job.pod_sets is not None and [s.name for s in job.pod_sets] == ["trainer", "rollout"]
        assert job.pods == 44
        assert job.total_gpus == sum(s.pods * s.resources_per_pod.gpus for s in job.pod_sets)


def test_simulate_runs_a_job_whose_sets_ask_different_resources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "w.yaml"
    rollout = "{name: rollout, pods: 2, resources_per_pod: {gpus: 4}"
    shapes = (
        "{name: rollout, pods: 2, resources_per_pod: {gpus: 2}, topology: {required: rack}}\n"
        "      - {name: launcher, pods: 1, resources_per_pod: {cpu: 8}"
    )
    path.write_text(WORKLOAD.replace(rollout + ", topology: {required: rack}", shapes))
    arguments = ["simulate", "--workload", str(path), "--days", "0.2", "--no-progress", "--json"]
    assert main([*arguments, "--out", str(tmp_path / "out")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["jobs"]["finished"] == 2
    # rl-0 holds 2 x 4 + 2 x 2 GPUs (the launcher none) for its 2 hours.
    teams = summary["fairness"]["teams"]
    assert teams["rl"]["delivered_gpu_hours"] == pytest.approx(24.0)
    assert teams["lm"]["delivered_gpu_hours"] == pytest.approx(12.0)
