"""Bad cluster and job files: each gives one clear error, `FILE:LINE: field: 'value' is invalid:
rule`, from the loaders and as exit code 2 from `toposched place` and `toposched cluster show`.

Every row is a case that once gave a traceback, a flood of output or a silent wrong result.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from toposched.cli.main import main
from toposched.cluster.errors import InputError
from toposched.cluster.limits import MAX_PODS_PER_JOB
from toposched.cluster.loaders import load_topology
from toposched.cluster.topology import GpuModel, build_regular
from toposched.jobs.files import load_job_files, read_job_files
from toposched.jobs.spec import JobSpec, load_jobs

CLUSTER = """\
levels: [zone, rack]
defaults: {gpus: 8, gpu_model: H100, cpu: 96, memory: 1Ti}
nodes:
  - {name: n1, labels: {zone: z1, rack: r1}}
  - {name: n2, labels: {zone: z1, rack: r2}}
"""
JOB = "name: train\npods: 2\nresources_per_pod: {gpus: 8}\n"
# Seven levels of nine: 9^7 = 4,782,969 strings from 63 written.
BILLION_LAUGHS = "".join(
    f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]\n"
    for previous, name in zip("abcdef", "bcdefg", strict=True)
)
BILLION_LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + BILLION_LAUGHS
LONG_NAME = "a" * 2_000_000


@dataclass(frozen=True)
class Case:
    """A file's text (or bytes), and what the error says: its line, field and part of its rule."""

    id: str
    text: str | bytes
    line: int | None
    field: str
    rule: str
    suffix: str = ".yaml"


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def one_line(text: str) -> str:
    """The CLI's stderr with rich's line wrapping undone."""
    return " ".join(text.split())


# --- cluster files ------------------------------------------------------------------------------

CLUSTER_CASES = [
    Case("binary", b"\x89PNG\r\n\x1a\n\x00\x00", None, "cluster file", "is not UTF-8 text"),
    Case("int64 GPUs", "nodes:\n  - {name: a, gpus: 9223372036854775808}\n", 2,
         "nodes[0].gpus", "must be <= 64 GPUs per node"),
    Case("memory beyond int64", "nodes:\n  - name: a\n    memory: 99999999999999999999Pi\n", 3,
         "nodes[0].memory", "must be at most 1Ei (1024Pi) per node"),
    Case("cpu beyond int64", "defaults: {cpu: 99999999999999999999}\nnodes:\n  - {name: a}\n", 1,
         "defaults.cpu", "per node"),
    Case("defaults typo", "defaults: {gpu: 4}\nnodes:\n  - {name: a}\n", 1,
         "defaults.gpu", "unknown field (did you mean 'gpus'?)"),
    Case("node typo gpuz", "nodes:\n  - name: a\n    gpuz: 4\n", 3,
         "nodes[0].gpuz", "unknown field (did you mean 'gpus'?)"),
    Case("node typo memroy", "nodes:\n  - name: a\n    memroy: 4Gi\n", 3,
         "nodes[0].memroy", "unknown field (did you mean 'memory'?)"),
    Case("no such node field", "nodes:\n  - name: a\n    health: draining\n", 3,
         "nodes[0].health", "unknown field; valid fields are name, labels, gpus"),
    Case("top-level typo", "level: [zone]\nnodes:\n  - {name: a}\n", 1,
         "level", "unknown field (did you mean 'levels'?)"),
    Case("label level typo", "levels: [rack]\nnodes:\n  - {name: a, labels: {rak: r1}}\n", 3,
         "nodes[0].labels.rak", "unknown level (did you mean 'rack'?)"),
    Case("billion laughs", BILLION_LAUGHS, 1, "text", "YAML aliases expand"),
    Case("alias loop", "nodes: &n [*n]\n", 1, "text", "refers to a value that contains it"),
    Case("two documents", CLUSTER + "---\n" + CLUSTER, None, "cluster", "in one YAML document"),
    Case("empty", "# nothing yet\n", None, "cluster", "the file is empty"),
    Case("syntax", "levels: [zone\nnodes: :\n", 2, "text", "is not valid YAML"),
    Case("long node name", f"nodes:\n  - {{name: {LONG_NAME}}}\n", 2,
         "nodes[0].name", "at most 253 letters"),
    Case("json typo", '{"nodes": [\n{"name": "a",\n "gpuz": 1}]}', 3,
         "nodes[0].gpuz", "did you mean 'gpus'?", ".json"),
    Case("json syntax", '{"nodes": [\n{"name": "a",,}]}', 2, "text", "is not valid JSON", ".json"),
    Case("csv bad count", "sn,cpu_milli,memory_mib,gpu,model\nx,1,1,99999999999999999999,T4\n",
         2, "gpu", "must be an integer >= 0", ".csv"),
    Case("csv too many GPUs", "sn,cpu_milli,memory_mib,gpu,model\nx,1,1,1,T4\ny,1,1,65,T4\n",
         3, "gpu", "<= 64 GPUs per node", ".csv"),
    Case("csv binary", b"sn,cpu_milli\n\xff\xfe", None, "cluster file", "UTF-8", ".csv"),
]  # fmt: skip


def expected_start(case: Case, path: Path) -> str:
    """The message's start: `FILE:LINE: field:` (a whole-file error names the file as value)."""
    if case.field in ("cluster file", "job file"):
        return f"{case.field}: {str(path)!r} is invalid: "
    where = f"{path}:{case.line}" if case.line is not None else str(path)
    return f"{where}: {case.field}: "


@pytest.mark.parametrize("case", CLUSTER_CASES, ids=[case.id for case in CLUSTER_CASES])
def test_bad_cluster_file(tmp_path: Path, case: Case) -> None:
    path = write(tmp_path, "cluster" + case.suffix, case.text)
    with pytest.raises(InputError) as caught:
        load_topology(path)
    error = caught.value
    assert error.field == case.field
    assert error.line == case.line
    assert case.rule in error.rule
    message = str(error)
    assert message.startswith(expected_start(case, path))
    assert len(message) < 600


@pytest.mark.parametrize("case", CLUSTER_CASES, ids=[case.id for case in CLUSTER_CASES])
@pytest.mark.parametrize("command", ["cluster show", "place"])
def test_bad_cluster_file_exits_2(
    tmp_path: Path, case: Case, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "cluster" + case.suffix, case.text)
    if command == "place":
        job = write(tmp_path, "job.yaml", JOB)
        argv = ["place", str(job), "--cluster", str(path)]
    else:
        argv = ["cluster", "show", str(path)]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "Traceback" not in captured.err
    err = one_line(captured.err)
    assert err.startswith(f"error: {expected_start(case, path)}".strip())
    assert case.rule in err
    assert len(captured.err) < 800


def test_a_long_path_is_named_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Values are cut to about 80 characters in messages, but a file's path is what the user
    # needs: shown whole, however deep it lies.
    folder = tmp_path / ("projects-of-a-team-with-a-long-name/" * 3)
    folder.mkdir(parents=True)
    cluster, job = folder / "cluster.yaml", folder / "job-with-a-descriptive-name.yaml"
    cluster.write_text("levels: [rack]\nnodes: [{name: n1, labels: {rack: r1}, gpus: 8}]\n")
    assert len(str(job)) > 2 * 80
    assert main(["place", str(job), "--cluster", str(cluster)]) == 2
    assert f"'{job}' is invalid: file not found" in one_line(capsys.readouterr().err)
    assert main(["simulate", "--traces-dir", str(folder / "traces"), "--days", "1"]) == 2
    assert f"'{folder / 'traces'}' is invalid: not found" in one_line(capsys.readouterr().err)


def test_a_directory_is_not_a_cluster_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "cluster.yaml"
    folder.mkdir()
    with pytest.raises(InputError) as caught:
        load_topology(folder)
    assert (caught.value.field, caught.value.value) == ("cluster file", folder)
    assert caught.value.rule == "is a directory; give a file"
    assert main(["cluster", "show", str(folder)]) == 2
    assert "is a directory" in one_line(capsys.readouterr().err)


def test_a_value_from_defaults_is_named_as_the_default(tmp_path: Path) -> None:
    path = write(tmp_path, "c.yaml", "defaults: {gpus: 100, gpu_model: H100}\nnodes: [{name: a}]\n")
    with pytest.raises(InputError) as caught:
        load_topology(path)
    assert (caught.value.field, caught.value.line, caught.value.value) == ("defaults.gpus", 1, 100)


def test_anchors_within_the_limit_are_read(tmp_path: Path) -> None:
    # `<<: *node` on every node: the usual use of aliases in a cluster file.
    nodes = "".join(f"  - {{<<: *node, name: n{i}}}\n" for i in range(300))
    path = write(tmp_path, "c.yaml", f"shared: &node {{gpus: 4, gpu_model: H100}}\nnodes:\n{nodes}")
    path.write_text(path.read_text().replace("shared:", "defaults:"))
    topology = load_topology(path)
    assert (topology.n_nodes, topology.n_gpus) == (300, 1200)


# --- job files ---------------------------------------------------------------------------------

JOB_CASES = [
    Case("binary", bytes(range(256)), None, "job file", "is not UTF-8 text"),
    Case("int64 GPUs", "name: j\npods: 1\nresources_per_pod: {gpus: 9223372036854775808}\n", 3,
         "resources_per_pod.gpus", "must be at most 64: a pod runs on one node"),
    Case("memory beyond int64",
         "name: j\npods: 1\nresources_per_pod:\n  gpus: 1\n  memory: 99999999999999999999Pi\n",
         5, "resources_per_pod.memory", "at most 1Ei (1024Pi) per pod"),
    Case("2 MB name", f"name: {LONG_NAME}\npods: 1\nresources_per_pod: {{gpus: 1}}\n", 1,
         "name", "1 to 253 characters"),
    Case("billion laughs", BILLION_LAUGHS + "name: *g\n", 1, "text", "YAML aliases expand"),
    Case("10^12 pods", "name: j\npods: 1000000000000\nresources_per_pod: {gpus: 1}\n", 2,
         "pods", f"must be at most {MAX_PODS_PER_JOB:,}, the limit of pods in one job"),
    Case("1e30 pods", '{"name": "j",\n"pods": 1e30,\n"resources_per_pod": {"gpus": 1}}', 2,
         "pods", f"must be at most {MAX_PODS_PER_JOB:,}, the limit of pods in one job", ".json"),
    Case("gpus null", "name: j\npods: 1\nresources_per_pod: {gpus: null}\n", 3,
         "resources_per_pod", "a pod must ask for something"),
    Case("no resources", "name: j\npods: 1\nresources_per_pod: {}\n", 3,
         "resources_per_pod", "a pod must ask for something"),
    Case("empty", "# nothing queued\n", None, "jobs", "no job in"),
    Case("same name twice",
         "- {name: dupjob, pods: 1, resources_per_pod: {gpus: 1}}\n"
         "- {name: dupjob, pods: 1, resources_per_pod: {gpus: 1}}\n",
         2, "jobs[1].name", "another job has this name (line 1)"),
    Case("priority beyond int64", JOB + "priority: 9223372036854775808\n", 4,
         "priority", "from -1,000,000,000 to 1,000,000,000"),
    Case("typo", JOB + "min_runtme: 1h\n", 4, "min_runtme",
         "unknown field (did you mean 'min_runtime'?)"),
    Case("syntax", "name: a\npods: [2\n", 3, "text", "is not valid YAML"),
]  # fmt: skip


@pytest.mark.parametrize("case", JOB_CASES, ids=[case.id for case in JOB_CASES])
def test_bad_job_file(tmp_path: Path, case: Case) -> None:
    path = write(tmp_path, "job" + case.suffix, case.text)
    with pytest.raises(InputError) as caught:
        load_jobs(path)
    error = caught.value
    assert error.field == case.field
    assert error.line == case.line
    assert case.rule in error.rule
    message = str(error)
    assert message.startswith(expected_start(case, path))
    assert len(message) < 600


@pytest.mark.parametrize("case", JOB_CASES, ids=[case.id for case in JOB_CASES])
def test_bad_job_file_exits_2(
    tmp_path: Path, case: Case, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = write(tmp_path, "cluster.yaml", CLUSTER)
    path = write(tmp_path, "job" + case.suffix, case.text)
    assert main(["place", str(path), "--cluster", str(cluster)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "Traceback" not in captured.err
    err = one_line(captured.err)
    assert err.startswith(f"error: {expected_start(case, path)}".strip())
    assert case.rule in err
    assert len(captured.err) < 800


def test_the_2mb_name_is_shown_cut_with_its_length(tmp_path: Path) -> None:
    path = write(tmp_path, "job.yaml", JOB_CASES[3].text)
    with pytest.raises(InputError) as caught:
        load_jobs(path)
    assert caught.value.value == LONG_NAME  # the attribute keeps the whole value
    shown = re.search(r"name: ('a+\.\.\.) \(2,000,000 characters\) is invalid", str(caught.value))
    assert shown is not None and len(shown[1]) == 80


def test_the_same_job_name_in_two_files(tmp_path: Path) -> None:
    first = write(tmp_path, "a.yaml", JOB)
    second = write(tmp_path, "b.yaml", "# the same again\n" + JOB)
    with pytest.raises(InputError) as caught:
        load_job_files([first, second])
    error = caught.value
    assert (error.file, error.line, error.field, error.value) == (str(second), 2, "name", "train")
    assert f"another job has this name ({first}:1)" in error.rule
    assert str(error).startswith(f"{second}:2: name: 'train' is invalid: another job")
    with pytest.raises(InputError) as twice:
        load_job_files([first, first])
    assert (twice.value.file, twice.value.line) == (str(first), 1)
    assert "another job has this name (line 1)" in twice.value.rule


def test_a_cpu_only_pod_is_a_valid_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = write(tmp_path, "cluster.yaml", CLUSTER)
    path = write(tmp_path, "cpu.yaml", "name: etl\npods: 3\nresources_per_pod: {gpus: 0, cpu: 8}\n")
    assert JobSpec.from_yaml(path).resources_per_pod.gpus == 0
    assert main(["place", str(path), "--cluster", str(cluster), "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert result["placed"] and len(result["pods"]) == 3


def test_further_failures_are_listed_with_their_own_lines(tmp_path: Path) -> None:
    path = write(tmp_path, "job.yaml", "name: j\npods: 0\nresources_per_pod:\n  gpus: -1\n")
    with pytest.raises(InputError) as caught:
        load_jobs(path)
    error = caught.value
    assert (error.line, error.field) == (2, "pods")
    assert [(other.line, other.field) for other in error.also] == [(4, "resources_per_pod.gpus")]
    assert str(error).endswith(
        f"; also line 4: resources_per_pod.gpus: -1 is invalid: {error.also[0].rule}"
    )


def test_errors_found_against_a_cluster_are_located(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "jobs.yaml",
        "- {name: a, pods: 1, resources_per_pod: {gpus: 1}}\n"
        "- name: b\n  pods: 1\n  resources_per_pod: {gpus: 1}\n  topology: {required: block}\n",
    )
    _, second = read_job_files([path])
    with pytest.raises(InputError) as caught:
        second.spec.validate_topology(("zone", "rack"))
    located = second.locate(caught.value)
    assert (located.file, located.line) == (str(path), 5)
    assert str(located).startswith(f"{path}:5: jobs[1].topology.required: 'block' is invalid: ")


@pytest.mark.parametrize(
    ("nodes", "gpus", "memory_mib", "field", "rule"),
    [
        (5_000_000, 8, 1024, "nodes", "a cluster has at most 4,194,304 nodes"),
        (2, 65, 1024, "gpus", "must be from 0 to 64 per node"),
        (2, 8, 1 << 41, "memory", "per node"),
    ],
)
def test_built_clusters_are_checked_before_any_node_array_exists(
    nodes: int, gpus: int, memory_mib: int, field: str, rule: str
) -> None:
    with pytest.raises(InputError) as caught:
        build_regular(
            levels=("rack",),
            children_per_level=[[1]],
            nodes_per_leaf=[nodes],
            prefixes=("r", "n"),
            gpus_per_node=gpus,
            gpu_model=GpuModel("H100"),
            cpu_milli=1000,
            memory_mib=memory_mib,
        )
    assert caught.value.field == field
    assert rule in caught.value.rule
