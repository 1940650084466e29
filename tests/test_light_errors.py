"""Error exits load only what finding the error needs (docs/limits.md, "How soon an error comes").

Each case runs the command in a fresh interpreter and reports the exit code and which heavy
packages were imported by the time it returned: the import discipline is pinned, not a time.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

_PROBE = """
import sys
from toposched.cli.main import main
code = main({argv!r})
heavy = ("pydantic", "numpy", "numba", "rich", "uvicorn", "httpx")
print(code, sorted(name for name in heavy if name in sys.modules))
"""

CLUSTER = (
    "levels: [rack]\ngpu_models: {H100: 80}\n"
    "nodes:\n  - {name: n1, rack: r1, gpus: 8, gpu_model: H100}\n"
)
JOB = "name: j\npods: 1\nresources_per_pod: {gpus: 1}\n"


def _probe(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[str, str]:
    """The probe's last line ("CODE [heavy modules]") and its stderr; `env` adds to the
    environment."""
    run = subprocess.run(
        [sys.executable, "-c", _PROBE.format(argv=argv)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=cwd,
        env=None if env is None else {**os.environ, **env},
    )
    return run.stdout.strip().splitlines()[-1], run.stderr


@pytest.mark.parametrize(
    ("name", "cluster", "message"),
    [
        (
            "cluster.yaml",
            "levels: [rack]\ndefaults: {gpu: 4}\nnodes:\n  - {name: n1, rack: r1}\n",
            "'gpus'",
        ),
        (
            "cluster.yaml",
            "levels: [rack]\nnodes:\n  - {name: n1, rack: r1, gpus: 65, gpu_model: H}\n",
            "<= 64",
        ),
        (
            "cluster.yaml",
            "levels: [rack]\nnodes:\n  - {name: n1, rack: r1, cpu: 1000000000000}\n",
            "cores per node",
        ),
        (
            "cluster.yaml",
            "levels: [rack]\nnodes:\n  - {name: n1, rack: r1}\n  - {name: n2, rack: r1}\n"
            "  - {name: n1, rack: r2}\n",
            "duplicate node name",
        ),
        ("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn1,1000,1024,x,V100\n", "gpu: 'x'"),
    ],
)
def test_a_bad_cluster_file_is_refused_before_numpy_loads(
    name: str, cluster: str, message: str, tmp_path: Path
) -> None:
    (tmp_path / name).write_text(cluster)
    last, stderr = _probe(["cluster", "show", name], tmp_path)
    assert last == "2 []", stderr
    assert message in stderr and "Traceback" not in stderr


def test_place_refuses_a_bad_cluster_file_without_numpy(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text("levels: [rack]\nnodes:\n  - {name: n1, rakc: r1}\n")
    (tmp_path / "job.yaml").write_text(JOB)
    last, stderr = _probe(["place", "job.yaml", "--cluster", "cluster.yaml"], tmp_path)
    # The cluster file is checked before the job model reads the job files.
    assert last == "2 []", stderr
    assert "cluster.yaml:3: nodes[0].rakc" in stderr


@pytest.mark.parametrize(
    ("job", "message"),
    [
        (
            "name: j\npods: 1\nresources_per_pod: {gpus: -1}\n",
            "job.yaml:3: resources_per_pod.gpus: -1 is invalid: must be an integer >= 0",
        ),
        ("name: j\npods: abc\nresources_per_pod: {gpus: 1}\n", "job.yaml:2: pods: 'abc'"),
        (
            "name: j\npods: 1\nmin_runtime: 3x\nresources_per_pod: {gpus: 1}\n",
            "job.yaml:3: min_runtime: '3x' is invalid: must be a duration >= 0",
        ),
        (
            "name: j\npods: 1\nresources_per_pod: {gpus: 1}\ntopology: {required: ''}\n",
            "job.yaml:4: topology.required: '' is invalid: must be a topology level name",
        ),
        (
            "name: j\npods: 4\nresources_per_pod: {gpus: 1}\n"
            "topology: {slices: [{level: rack, pods: 3}]}\n",
            "job.yaml:4: topology.slices[0].pods: 3 is invalid: must divide the job's pods (4)",
        ),
        ("name: j\npods: 1\nresources_per_pod: {gpus: null}\n", "must ask for something"),
        ("name: j\npods: 1\nresources_per_pod: {gpus: 9223372036854775808}\n", "at most 64"),
        ("- {name: j, pods: 1, resources_per_pod: {gpus: 1}}\n- 3\n", "job.yaml:2: jobs[1]: 3"),
    ],
)
def test_a_bad_value_in_a_job_file_is_refused_before_the_job_model_loads(
    job: str, message: str, tmp_path: Path
) -> None:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "job.yaml").write_text(job)
    last, stderr = _probe(["place", "job.yaml", "--cluster", "cluster.yaml"], tmp_path)
    assert last == "2 []", stderr
    assert message in stderr and "Traceback" not in stderr


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"job.yaml": JOB + "---\n" + JOB},
            "job.yaml:5: jobs[1].name: 'j' is invalid: another job has this name (line 1)",
        ),
        (
            {"a.yaml": JOB, "b.yaml": "# nothing\n" + JOB},
            "b.yaml:2: name: 'j' is invalid: another job has this name (a.yaml:1)",
        ),
        ({"a.yaml": JOB, "b.yaml": "# no job here\n"}, "b.yaml: jobs: None is invalid: no job in"),
    ],
)
def test_names_used_twice_and_files_without_jobs_are_refused_before_the_job_model_loads(
    files: dict[str, str], message: str, tmp_path: Path
) -> None:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    last, stderr = _probe(["place", *files, "--cluster", "cluster.yaml"], tmp_path)
    assert last == "2 []", stderr
    assert message in stderr and "Traceback" not in stderr


def test_the_light_pass_leaves_names_to_the_job_model_after_a_job_it_cannot_check(
    tmp_path: Path,
) -> None:
    # A job of pod sets is the model's to check whole: a name used again after it is found by
    # the model's reader, with the same words.
    pod_sets = "name: j\npod_sets:\n  - {name: a, pods: 1, resources_per_pod: {gpus: 1}}\n"
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "job.yaml").write_text(pod_sets + "---\n" + JOB)
    last, stderr = _probe(["place", "job.yaml", "--cluster", "cluster.yaml"], tmp_path)
    assert last == "2 ['pydantic']", stderr
    assert "job.yaml:5: jobs[1].name: 'j' is invalid: another job has this name (line 1)" in stderr


@pytest.mark.parametrize(
    ("topology", "message"),
    [
        ("topology: {required: zone}\n", "topology.required: 'zone' is invalid: unknown level"),
        ("topology: {preferred: zone}\n", "topology.preferred: 'zone' is invalid: unknown level"),
        (
            "topology: {slices: [{level: zone, pods: 1}]}\n",
            "topology.slices[0].level: 'zone' is invalid: unknown level",
        ),
    ],
)
def test_a_job_refused_by_the_cluster_is_refused_before_the_job_model_loads(
    topology: str, message: str, tmp_path: Path
) -> None:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "job.yaml").write_text(JOB + topology)
    last, stderr = _probe(["place", "job.yaml", "--cluster", "cluster.yaml"], tmp_path)
    # The light pass's checked job against the cluster file: no job model, no arrays.
    assert last == "2 []", stderr
    assert f"job.yaml:4: {message}" in stderr


def test_a_job_asking_for_gpu_models_the_cluster_lacks_is_refused_before_the_job_model_loads(
    tmp_path: Path,
) -> None:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "job.yaml").write_text(
        "name: j\npods: 1\nresources_per_pod: {gpus: 1, gpu_models: [B200, GB300]}\n"
    )
    last, stderr = _probe(["place", "job.yaml", "--cluster", "cluster.yaml"], tmp_path)
    assert last == "2 []", stderr
    assert stderr == (
        "error: job.yaml:3: resources_per_pod.gpu_models: ['B200', 'GB300'] is invalid: "
        "no GPU of these models in this cluster; it has H100\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["serve", "--tick", "0"], "--tick: 0.0 is invalid"),
        (["serve", "--port", "0"], "--port: 0 is invalid"),
        (["serve", "--gpus", "65"], "--gpus: 65 is invalid: the served cluster is one node"),
        (["serve", "--ssl-keyfile", "k.pem"], "give both TLS files or neither"),
        (
            ["serve", "--ssl-keyfile", "k.pem", "--ssl-certfile", "c.pem"],
            "--ssl-certfile: 'c.pem' is invalid: cannot be read: No such file or directory",
        ),
        (["serve", "--host", "0.0.0.0"], "allowed only on a loopback address"),
    ],
)
def test_an_option_the_service_checks_is_refused_before_the_service_loads(
    argv: list[str], message: str, tmp_path: Path
) -> None:
    last, stderr = _probe(argv, tmp_path)
    assert last == "2 []", stderr
    assert message in stderr


def test_tls_files_that_hold_no_certificate_are_refused_before_the_service_loads(
    tmp_path: Path,
) -> None:
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    argv = ["serve", "--ssl-keyfile", "junk.pem", "--ssl-certfile", "junk.pem"]
    last, stderr = _probe(argv, tmp_path)
    assert last == "2 []", stderr
    assert "--ssl-certfile: 'junk.pem' is invalid: with --ssl-keyfile junk.pem: not a PEM" in stderr


def test_the_service_configuration_has_one_gpus_rule() -> None:
    from toposched.cluster.errors import InputError
    from toposched.cluster.limits import check_one_node_gpus
    from toposched.service.config import ServiceConfig

    for gpus in (0, 65):
        with pytest.raises(InputError) as from_config:
            ServiceConfig(gpus=gpus).check()
        with pytest.raises(InputError) as from_option:
            check_one_node_gpus(gpus)
        assert str(from_config.value) == str(from_option.value)
    ServiceConfig(gpus=64).check()


INLINE = "cluster: {levels: [rack], nodes: [{name: n1, rack: r1, gpus: 8, gpu_model: H100}]}\n"
ONE_JOB = "jobs:\n  - {name: a, submit: 0, runtime: 1h, pods: 1, resources_per_pod: {gpus: 1}}\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            INLINE + "jobs:\n  - {name: a, submit: 0, runtime: 1h, pods: -1, "
            "resources_per_pod: {gpus: 1}}\n",
            "w.yaml:3: jobs[0].pods: -1 is invalid: must be an integer >= 1",
        ),
        (
            INLINE + "jobs:\n  - {name: a, submit: 0, runtime: 1h, pods: 1, "
            "resources_per_pod: {gpuz: 1}}\n",
            "did you mean 'gpus'",
        ),
        (INLINE + "settings: {horizon: -1h}\n" + ONE_JOB, "w.yaml:2: settings.horizon"),
        (INLINE + "job:\n  - {}\n", "w.yaml:2: job: [{}] is invalid: unknown field"),
        (
            INLINE + "jobs:\n  - {name: a, submit: 0, runtime: 1h, pods: 1, account: nlp, "
            "resources_per_pod: {gpus: 1}}\n",
            "jobs[0].account: 'nlp' is invalid: names no account of the budget tree",
        ),
        (
            "cluster: {builder: superpod}\njobs:\n  - {name: a, submit: 0, runtime: 0, pods: 1, "
            "resources_per_pod: {gpus: 1}}\n",
            "w.yaml:3: jobs[0].runtime: 0 is invalid",
        ),
        (
            "cluster: {file: cluster.yaml}\n"
            "jobs:\n  - {name: a, submit: 0, runtime: 1h, pods: 1, topology: {required: zone}, "
            "resources_per_pod: {gpus: 1}}\n",
            "w.yaml:3: jobs[0].topology.required: 'zone' is invalid: unknown level",
        ),
        (
            "cluster: {file: cluster.yaml}\nfailures: [{time: 1h, nodes: [n9]}]\n" + ONE_JOB,
            "w.yaml:2: failures[0].nodes[0]: 'n9' is invalid: no node of that name",
        ),
        ("cluster: {file: cluster.yaml}\njobs: [{name: a}]\n", "jobs[0].submit"),
        (None, "workload: 'w.yaml' is invalid: must be ai2"),
    ],
)
def test_a_bad_workload_file_is_refused_before_the_job_model_and_numpy_load(
    text: str | None, message: str, tmp_path: Path
) -> None:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    if text is not None:
        (tmp_path / "w.yaml").write_text(text)
    argv = ["simulate", "--workload", "w.yaml", "--no-progress", "--out", "out"]
    last, stderr = _probe(argv, tmp_path)
    assert last == "2 []", stderr
    assert message in stderr and "Traceback" not in stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            INLINE + "jobs:\n  - {name: a, submit: 0, runtime: 1h, pods: 1, "
            "resources_per_pod: {gpus: 1, gpu_models: [B200]}}\n",
            "w.yaml:3: jobs[0].resources_per_pod.gpu_models: ['B200'] is invalid",
        ),
        (
            INLINE + "jobs:\n  - {name: a, submit: 0, runtime: 1h, pods: 1, "
            "topology: {required: zone}, resources_per_pod: {gpus: 1}}\n",
            "w.yaml:3: jobs[0].topology.required: 'zone' is invalid: unknown level",
        ),
        (
            INLINE + "failures: [{time: 1h, nodes: [n9]}]\n" + ONE_JOB,
            "w.yaml:2: failures[0].nodes[0]: 'n9' is invalid: no node of that name",
        ),
        (
            "cluster: {builder: nvl72, model: GB200}\njobs:\n  - {name: a, submit: 0, "
            "runtime: 1h, pods: 1, resources_per_pod: {gpus: 1, gpu_models: [GB300]}}\n",
            "w.yaml:3: jobs[0].resources_per_pod.gpu_models: ['GB300'] is invalid",
        ),
        (
            "cluster: {builder: superpod}\njobs:\n  - {name: a, submit: 0, runtime: 1h, pods: 1,"
            " topology: {required: rack}, resources_per_pod: {gpus: 1}}\n",
            "w.yaml:3: jobs[0].topology.required: 'rack' is invalid: unknown level",
        ),
        (
            "cluster: {builder: nvl72, racks_per_block: 2}\n"
            "failures: [{time: 1h, nodes: [z0-b0-r2-n0]}]\n" + ONE_JOB,
            "w.yaml:2: failures[0].nodes[0]: 'z0-b0-r2-n0' is invalid: no node of that name",
        ),
        (
            "cluster: {builder: nvl72, model: H100}\n" + ONE_JOB,
            "w.yaml:1: cluster.model: 'H100' is invalid: must be one of GB300, GB200",
        ),
    ],
)
def test_a_workload_job_against_an_inline_or_builder_cluster_is_refused_before_numpy_loads(
    text: str, message: str, tmp_path: Path
) -> None:
    (tmp_path / "w.yaml").write_text(text)
    argv = ["simulate", "--workload", "w.yaml", "--no-progress", "--out", "out"]
    last, stderr = _probe(argv, tmp_path)
    # The cluster is checked, not built: its levels, GPU models and node names are known.
    assert last == "2 []", stderr
    assert message in stderr and "Traceback" not in stderr


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        (
            "ai2:bogus",
            "workload: 'ai2:bogus' is invalid: must be ai2, ai2:team-sized, frontier, itp:NN",
        ),
        ("itp:11", "workload: 'itp:11' is invalid: ITP clusters are itp:01 to itp:10"),
        ("itp:04", "cluster04.csv' is invalid: file not found"),
        ("openb", "trace: 'default' is invalid: no openb_pod_list_default.csv in"),
        ("openb:nosuch", "trace: 'nosuch' is invalid: no openb_pod_list_nosuch.csv in"),
    ],
)
def test_an_unknown_workload_or_a_missing_trace_is_refused_before_numpy_loads(
    workload: str, message: str, tmp_path: Path
) -> None:
    (tmp_path / "traces").mkdir()
    traces = [] if workload.startswith("ai2") else ["--traces-dir", "traces"]
    argv = ["simulate", "--workload", workload, *traces, "--no-progress", "--out", "out"]
    last, stderr = _probe(argv, tmp_path)
    assert last == "2 []", stderr
    assert message in stderr and "Traceback" not in stderr


def test_itp_with_no_traces_folder_is_refused_before_numpy_loads(tmp_path: Path) -> None:
    argv = ["simulate", "--workload", "itp:04", "--no-progress", "--out", "out"]
    last, stderr = _probe(argv, tmp_path, {"TOPOSCHED_TRACES": str(tmp_path / "none")})
    assert last == "2 []", stderr
    assert stderr.startswith("error: ITP trace: '")  # the path, cut past 80 characters
    assert stderr.endswith("is invalid: file not found\n")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "traces folder: '{tmp}/none' is invalid: not found; pass --traces-dir PATH"),
        (
            ["--traces-dir", "empty"],
            "traces folder: 'empty' is invalid: has no openb_node_list_gpu_node.csv",
        ),
    ],
)
def test_eval_packing_without_its_traces_is_refused_before_numpy_loads(
    argv: list[str], message: str, tmp_path: Path
) -> None:
    (tmp_path / "empty").mkdir()
    env = {"TOPOSCHED_TRACES": str(tmp_path / "none")}
    last, stderr = _probe(["eval", "packing", *argv], tmp_path, env)
    assert last == "2 []", stderr
    assert message.format(tmp=tmp_path) in stderr and "Traceback" not in stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nvl72", "--model", "X"], "--model: 'X' is invalid: must be one of GB300, GB200"),
        (
            ["superpod", "--model", "GB300"],
            "--model: 'GB300' is invalid: must be one of H100, B200",
        ),
        (["fattree", "-k", "3"], "-k: 3 is invalid: must be even"),
    ],
)
def test_cluster_build_refuses_a_bad_model_before_numpy_loads(
    argv: list[str], message: str, tmp_path: Path
) -> None:
    last, stderr = _probe(["cluster", "build", *argv], tmp_path)
    assert last == "2 []", stderr
    assert message in stderr and "Traceback" not in stderr


@pytest.mark.parametrize(
    "job",
    [
        "name: j\npods: -1\nresources_per_pod: {gpus: 1}\n",
        "name: j\npods: 1\nresources_per_pod: {gpus: 1}\nnmae: x\n",
        "name: j\npods: 1\nresources_per_pod: {gpus: 1, gpu: 2}\nrun: {command: [ls]}\n",
        "name: j\npods: 1\nresources_per_pod: {gpus: 1}\ntopology: {slices: [3]}\n",
    ],
)
def test_submit_refuses_a_bad_job_file_as_place_does_before_connecting(
    job: str, tmp_path: Path
) -> None:
    (tmp_path / "job.yaml").write_text(job)
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    # Port 9 on loopback: nothing listens, so a request sent would exit 4 (unreachable).
    argv = ["submit", "job.yaml", "--server", "http://127.0.0.1:9"]
    last, stderr = _probe(argv, tmp_path)
    code, loaded = last.split(" ", 1)
    assert code == "2", stderr
    # No connection (httpx) and no job model; the client commands print with rich.
    assert not {"pydantic", "numpy", "numba", "httpx"} & set(ast.literal_eval(loaded))
    place_last, place_stderr = _probe(["place", "job.yaml", "--cluster", "cluster.yaml"], tmp_path)
    assert place_last.startswith("2 ")
    if "valid fields are name," in stderr:
        # A job document's fields are JobSpec's but those the server sets, and `run`.
        rule, fields = stderr.split("; valid fields are ")
        assert place_stderr.startswith(rule + "; valid fields are ")
        assert fields.rstrip().endswith("pod_sets, run") and "submit_time" not in fields
    elif "run:" not in job:  # place reads no `run` section; submit leaves it to the server
        assert stderr == place_stderr
    assert stderr.startswith("error: job.yaml:") and "Traceback" not in stderr
