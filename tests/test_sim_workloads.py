"""Workloads: the file format round trip, loader errors, generators and the real trace loaders."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from toposched.cluster.errors import InputError
from toposched.policy.budget import BudgetTree
from toposched.workloads.ai2 import ai2_like
from toposched.workloads.catalog import workload_by_name
from toposched.workloads.files import load_workload, save_workload
from toposched.workloads.frontier import frontier_failures, frontier_lab
from toposched.workloads.model import Workload, build_cluster
from toposched.workloads.replay import (
    ITP_CLUSTER_NODES,
    default_traces_dir,
    itp_replay,
    load_itp_trace,
    openb_replay,
)

TRACES = default_traces_dir()
needs_itp = pytest.mark.skipif(
    not (TRACES / "itp").is_dir(), reason=f"ITP traces not found at {TRACES / 'itp'}"
)
needs_openb = pytest.mark.skipif(
    not (TRACES / "openb").is_dir(), reason=f"openb traces not found at {TRACES / 'openb'}"
)

EXAMPLE = """\
format: toposched-workload/1
name: example
cluster: {builder: superpod, spine_groups: 1, units_per_group: 2, nodes_per_unit: 4}
budget:
  accounts:
    research: {share: 70, children: {nlp: 50, vision: 50}}
    ops: 30
settings: {horizon: 1d, checkpoint_interval: 30m}
failures:
  - {time: 2h, nodes: [g0-su0-n1], repair_after: 4h}
jobs:
  - name: warmup
    submit: 0
    runtime: 20m
    class: debug
    account: research/nlp
    pods: 1
    resources_per_pod: {gpus: 1}
    min_runtime: 10m
  - name: pretrain
    submit: 1h
    runtime: 3h
    class: training
    account: research/vision
    pods: 2
    resources_per_pod: {gpus: 8}
    resumable: true
    topology: {preferred: su}
"""


def write(tmp_path: Path, text: str, name: str = "w.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _jobs(workload: Workload) -> list[tuple[object, ...]]:
    return [
        (j.spec, j.submit_time, j.runtime, j.job_class, j.cancel_after, j.checkpoint_interval)
        for j in workload.jobs
    ]


# --- the file format ------------------------------------------------------------------------------


def test_example_file_loads_with_every_section(tmp_path: Path) -> None:
    workload = load_workload(write(tmp_path, EXAMPLE))
    assert workload.name == "example"
    assert workload.topology.n_gpus == 64
    assert workload.horizon == 86400.0 and workload.checkpoint_interval == 1800.0
    assert [j.name for j in workload.jobs] == ["warmup", "pretrain"]
    pretrain = workload.jobs[1]
    assert (pretrain.submit_time, pretrain.runtime, pretrain.job_class) == (
        3600.0,
        10800.0,
        "training",
    )
    assert pretrain.spec.resumable and pretrain.spec.pods == 2
    failure = workload.failures[0]
    assert (failure.time, failure.repair_after) == (7200.0, 14400.0)
    assert workload.topology.node_names[failure.nodes[0]] == "g0-su0-n1"


@pytest.mark.parametrize("suffix", [".yaml", ".json", ".jsonl"])
def test_generated_workload_round_trips_through_a_file(tmp_path: Path, suffix: str) -> None:
    workload = ai2_like(seed=2, days=0.1, gpus=256)
    workload.failures = frontier_failures(2, 5.0, workload.topology.n_nodes, 8)[:3]
    path = save_workload(workload, tmp_path / f"ai2{suffix}")
    again = load_workload(path)
    assert _jobs(again) == _jobs(workload)
    assert again.budget == workload.budget and again.cluster == workload.cluster
    assert again.failures == workload.failures
    assert (again.horizon, again.name, again.notes) == (
        workload.horizon,
        workload.name,
        workload.notes,
    )
    assert again.topology.n_gpus == workload.topology.n_gpus


def test_frontier_round_trips_with_slices_and_checkpoints(tmp_path: Path) -> None:
    workload = frontier_lab(seed=4, days=0.5, racks_per_block=1)
    again = load_workload(save_workload(workload, tmp_path / "f.jsonl"))
    assert _jobs(again) == _jobs(workload)
    assert again.failures == workload.failures


def _error(tmp_path: Path, text: str, name: str = "w.yaml") -> InputError:
    with pytest.raises(InputError) as caught:
        load_workload(write(tmp_path, text, name))
    return caught.value


def test_errors_name_file_line_and_field(tmp_path: Path) -> None:
    bad = EXAMPLE.replace("resources_per_pod: {gpus: 8}", "resources_per_pod: {gpus: -8}")
    error = _error(tmp_path, bad)
    line = bad.splitlines().index("    resources_per_pod: {gpus: -8}") + 1
    assert (error.file, error.line) == (str(tmp_path / "w.yaml"), line)
    assert error.field == "jobs[1].resources_per_pod.gpus"
    assert str(error).startswith(f"{tmp_path / 'w.yaml'}:{line}: jobs[1].resources_per_pod.gpus: ")
    assert "-8" in str(error)


@pytest.mark.parametrize(
    ("old", "new", "field", "rule"),
    [
        ("    runtime: 3h\n", "", "jobs[1].runtime", "is required"),
        ("    runtime: 3h\n", "    runtime: 0\n", "jobs[1].runtime", "> 0"),
        ("    class: debug\n", "    class: debug\n    colour: red\n", "jobs[0].colour", "unknown"),
        ("account: research/vision", "account: research", "jobs[1].account", "leaf"),
        ("account: research/vision", "account: legal", "jobs[1].account", "no account"),
        ("name: pretrain", "name: warmup", "jobs[1].name", "duplicate"),
        (
            "topology: {preferred: su}",
            "topology: {preferred: rack}",
            "jobs[1].topology.preferred",
            "unknown level",
        ),
        ("nodes: [g0-su0-n1]", "nodes: [n99]", "failures[0].nodes[0]", "no node"),
        ("submit: 1h", "submit: soon", "jobs[1].submit", "duration"),
        ("nlp: 50, vision: 50", "nlp: 60, vision: 50", "budget.accounts.research.children", "sum"),
        ("units_per_group: 2", "units: 2", "cluster.units", "not an argument"),
        ("horizon: 1d", "horizon: -1", "settings.horizon", "duration"),
    ],
)
def test_loader_errors(tmp_path: Path, old: str, new: str, field: str, rule: str) -> None:
    text = EXAMPLE.replace(old, new, 1)
    assert text != EXAMPLE
    error = _error(tmp_path, text)
    assert error.field == field
    line = error.line
    assert error.file == str(tmp_path / "w.yaml") and line is not None and line >= 1
    assert rule in error.rule
    # The line holds the field's key (or its entry when the key is missing).
    key = field.rsplit(".", 1)[-1].split("[")[0]
    listed = text.splitlines()[line - 1]
    assert key in listed or "- " in listed or key in ("runtime", "children")


def test_jsonl_errors_name_the_line_of_the_job(tmp_path: Path) -> None:
    header = '{"cluster": {"builder": "superpod", "units_per_group": 1, "nodes_per_unit": 2}}'
    good = '{"name": "a", "submit": 0, "runtime": 60, "pods": 1, "resources_per_pod": {"gpus": 1}}'
    bad = '{"name": "b", "submit": 0, "runtime": 60, "pods": 0, "resources_per_pod": {"gpus": 1}}'
    error = _error(tmp_path, "\n".join([header, good, "", bad]) + "\n", "w.jsonl")
    assert (error.file, error.line, error.field) == (str(tmp_path / "w.jsonl"), 4, "jobs[1].pods")
    broken = _error(tmp_path, header + "\n{not json\n", "w.jsonl")
    assert (broken.file, broken.line) == (str(tmp_path / "w.jsonl"), 2)


def test_yaml_syntax_errors_name_the_line(tmp_path: Path) -> None:
    error = _error(tmp_path, "name: x\njobs: [\n  {a: 1\n")
    assert error.file == str(tmp_path / "w.yaml") and error.line is not None
    assert "YAML" in error.rule


def test_cluster_descriptions() -> None:
    assert build_cluster({"builder": "nvl72", "racks_per_block": 2}).n_gpus == 144
    inline = {
        "levels": ["rack"],
        "defaults": {"gpus": 8, "gpu_model": "H100"},
        "nodes": [{"name": "a", "rack": "r0"}, {"name": "b", "rack": "r0"}],
    }
    assert build_cluster(inline).n_gpus == 16
    with pytest.raises(InputError, match="builder"):
        build_cluster({"builder": "torus"})


# --- generators ----------------------------------------------------------------------------------


def test_ai2_like_teams_budgets_and_classes() -> None:
    workload = ai2_like(seed=1, days=2.0, gpus=3072)
    tree = BudgetTree.from_dict(workload.budget)
    budgeted = [leaf for leaf in tree.leaves() if tree.has_budget(leaf)]
    assert len(budgeted) == 15
    assert math.isclose(sum(tree.effective_share(leaf) for leaf in budgeted), 1.0)
    assert not tree.has_budget("scratch/shared")
    assert workload.topology.n_gpus == 3072
    classes = {job.job_class for job in workload.jobs}
    assert classes == {"debug", "training", "eval", "unallocated"}
    debug = [job for job in workload.jobs if job.job_class == "debug"]
    assert max(job.gpus for job in debug) <= 8 and all(job.spec.pods == 1 for job in debug)
    assert all(job.spec.min_runtime <= 600 for job in debug)
    training = [job for job in workload.jobs if job.job_class == "training"]
    assert all(job.spec.resumable for job in training)
    assert any(job.spec.pods > 1 for job in training)
    unallocated = [job for job in workload.jobs if job.job_class == "unallocated"]
    assert all(
        job.spec.min_runtime == 0 or not tree.has_budget(job.spec.account) for job in unallocated
    )
    assert all(0 <= job.submit_time < 2 * 86400 for job in workload.jobs)
    # Offered work above what the cluster can run in the period, and training already queued
    # beyond the cluster's size at the start: queues form at once.
    offered = sum(job.gpus * job.runtime for job in workload.jobs)
    assert offered > 1.2 * 3072 * 2 * 86400
    queued_at_start = sum(job.gpus for job in training if job.submit_time < 600)
    assert queued_at_start > 3072


@pytest.mark.parametrize(("seed", "gpus"), [(0, 1024), (1, 1024), (0, 3072), (1, 3072)])
def test_ai2_like_budgeted_work_offers_about_80_percent(seed: int, gpus: int) -> None:
    """Every seed and size offers the same budgeted load over 30 days (Ai2: 18% of GPU time
    went to unallocated work); only its spread between teams and phases is random."""
    workload = ai2_like(seed=seed, days=30.0, gpus=gpus)
    capacity = workload.topology.n_gpus * workload.horizon
    offered: dict[str, float] = {}
    for job in workload.jobs:
        offered[job.job_class] = offered.get(job.job_class, 0.0) + job.gpus * job.runtime
    budgeted = sum(offered.values()) - offered["unallocated"]
    assert 0.77 <= budgeted / capacity <= 0.84
    assert 0.33 <= offered["unallocated"] / capacity <= 0.37
    # The workload's notes (and so every run's summary) say the same.
    noted = workload.notes["offered_share_by_class"]
    assert noted == {name: round(value / capacity, 4) for name, value in sorted(offered.items())}


def _largest_training_run(workload: Workload) -> dict[str, int]:
    largest: dict[str, int] = {}
    for job in workload.jobs:
        if job.job_class == "training":
            account = job.spec.account
            largest[account] = max(largest.get(account, 0), job.spec.total_gpus)
    return largest


def test_ai2_like_team_sized_training_fits_each_budget() -> None:
    """`ai2:team-sized` caps each team's runs at its budget in whole nodes; the default draws
    every team's runs from sizes up to a sixth of the cluster, so small teams get runs larger
    than their whole budget."""
    sized = workload_by_name("ai2:team-sized", days=10.0, gpus=3072)
    default = workload_by_name("ai2", days=10.0, gpus=3072)
    tree = BudgetTree.from_dict(sized.budget)
    budget_gpus = {
        leaf: tree.effective_share(leaf) * 3072 for leaf in tree.leaves() if tree.has_budget(leaf)
    }
    sized_largest, default_largest = _largest_training_run(sized), _largest_training_run(default)
    assert set(sized_largest) == set(budget_gpus)
    for account, gpus in sized_largest.items():
        assert gpus <= budget_gpus[account]
    assert any(gpus > budget_gpus[account] for account, gpus in default_largest.items())
    assert max(sized_largest.values()) > 8  # multi-node runs remain
    assert sized.name == "ai2:team-sized" and sized.notes["training_sizes"] == "team"
    # Only sizes change: the budgeted load offered stays at its level.
    for workload in (sized, default):
        training = sum(j.gpus * j.runtime for j in workload.jobs if j.job_class == "training")
        assert 0.68 <= training / (3072 * workload.horizon) <= 0.78
    with pytest.raises(InputError, match="training_sizes"):
        ai2_like(seed=0, days=1.0, gpus=256, training_sizes="huge")


@pytest.mark.parametrize("seed", [-1, 1.5, True, "7"])
def test_generators_reject_a_seed_numpy_cannot_take(seed: object) -> None:
    for build in (
        lambda: ai2_like(seed=seed, days=1.0, gpus=64),  # type: ignore[arg-type]
        lambda: frontier_lab(seed=seed, days=1.0, racks_per_block=2),  # type: ignore[arg-type]
        lambda: workload_by_name("ai2", seed=seed, days=1.0, gpus=64),  # type: ignore[arg-type]
    ):
        with pytest.raises(InputError, match="seed: .* is invalid: must be a whole number >= 0"):
            build()


def test_frontier_lab_on_the_million_gpu_fleet() -> None:
    workload = frontier_lab(seed=0, days=1.0)
    assert workload.topology.n_gpus == 1_000_080
    training = [job for job in workload.jobs if job.job_class == "training"]
    assert training
    for job in training:
        assert 10_000 <= job.gpus <= 200_016 and job.gpus % 72 == 0
        assert job.spec.topology.slices[0].pods == 18
        assert job.spec.topology.preferred == "block"
    assert {job.job_class for job in workload.jobs} >= {"training", "inference", "eval"}
    # Llama 3's rate: one interruption per 3 h per 16,000 GPUs, so ~500 a day on 1M GPUs.
    assert 400 <= len(workload.failures) <= 600
    assert all(f.repair_after is not None and f.repair_after >= 1800 for f in workload.failures)


def test_workload_names() -> None:
    assert workload_by_name("ai2", days=0.1, gpus=256).topology.n_gpus == 256
    with pytest.raises(InputError, match="must be ai2"):
        workload_by_name("bogus")
    with pytest.raises(InputError, match="itp:01"):
        workload_by_name("itp:99")


# --- the real traces -----------------------------------------------------------------------------


@needs_itp
def test_itp_traces_load_with_their_documented_sizes() -> None:
    counts = {1: 1595, 2: 5778, 3: 3011, 4: 15802, 5: 3629, 6: 2396, 7: 12699, 8: 13047}
    for cluster, count in counts.items():
        rows = load_itp_trace(TRACES / "itp" / f"cluster{cluster:02d}.csv")
        assert len(rows) == count
    workload = itp_replay(4)
    assert workload.topology.n_gpus == ITP_CLUSTER_NODES[4] * 8
    assert len(workload.jobs) == counts[4]
    assert workload.jobs[0].submit_time == 0.0
    big = [job for job in workload.jobs if job.gpus == 64]
    assert big and all(job.spec.pods == 8 for job in big)


@needs_itp
def test_itp_loader_errors_name_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "cluster99.csv"
    path.write_text("job_id,submission_time,duration,num_gpu\na,0,10,1\nb,5,ten,2\n")
    with pytest.raises(InputError) as caught:
        load_itp_trace(path)
    assert (caught.value.file, caught.value.line, caught.value.field) == (str(path), 3, "duration")
    path.write_text("id,time\n")
    with pytest.raises(InputError, match="expected the columns"):
        load_itp_trace(path)


@needs_openb
def test_openb_timed_replay() -> None:
    workload = openb_replay("default")
    assert workload.topology.n_gpus == 6212
    assert len(workload.jobs) > 7000
    assert {job.job_class for job in workload.jobs} >= {"ls", "be"}
    assert all(job.spec.min_runtime == 0 for job in workload.jobs if job.job_class == "be")
    never_placed = [job for job in workload.jobs if job.cancel_after is not None]
    assert never_placed and all(job.cancel_after > 0 for job in never_placed)
    shared = [job for job in workload.jobs if job.spec.resources_per_pod.is_fractional]
    assert shared
