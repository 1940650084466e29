"""Bad input to the commands, through `main([...])`: one error form, file and line, exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

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


def test_place_refuses_the_same_job_file_twice_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = _write(tmp_path, "cluster.yaml", CLUSTER)
    job = _write(tmp_path, "job.yaml", JOB.replace("zone", "rack"))
    other = _write(tmp_path, "other.yaml", JOB.replace("zone", "rack"))
    assert main(["place", str(job), str(other), str(job), "--cluster", str(cluster)]) == 2
    assert capsys.readouterr().err == (
        f"error: job file: '{job}' is invalid: is given twice (job files 1 and 3); give each "
        "file once\n"
    )
    # Two files holding the same job name: the second is named, with its line and the first's.
    assert main(["place", str(job), str(other), "--cluster", str(cluster)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {other}:1: name: 'train' is invalid: another job has this name")
    assert f"({job}:1); job names must be unique" in err and "Traceback" not in err


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


@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        (
            "{builder: superpod, spine_groups: 100000000}",
            "w.yaml:1: cluster: '12,800,000,000 nodes' is invalid: must be at most 4,194,304 nodes",
        ),
        (
            "{builder: nvl72, zones: 0}",
            "w.yaml:1: cluster.zones: 0 is invalid: must be an integer >= 1",
        ),
        (
            "{builder: superpod, gpus: 8}",
            "w.yaml:1: cluster.gpus: 'gpus' is invalid: is not an argument of the superpod",
        ),
    ],
)
def test_a_workloads_builder_cluster_is_checked_and_named_as_the_cluster(
    cluster: str, message: str, tmp_path: Path
) -> None:
    workload = _write(tmp_path, "w.yaml", f"cluster: {cluster}\njobs: []\n")
    with pytest.raises(InputError) as caught:
        load_workload(workload)
    assert str(caught.value).startswith(f"{tmp_path}/{message}")


# --- simulate: outputs checked first, nothing lost ----------------------------------------------

SMALL = """\
cluster:
  levels: [rack]
  defaults: {gpus: 8, gpu_model: H100}
  nodes:
    - {name: n1, labels: {rack: r1}}
    - {name: n2, labels: {rack: r1}}
budget: {accounts: {research: 100}}
jobs:
  - {name: a, submit: 0, runtime: 1h, account: research, pods: 1, resources_per_pod: {gpus: 4}}
  - {name: b, submit: 0, runtime: 2h, account: research, pods: 2, resources_per_pod: {gpus: 8}}
"""


def _simulate(tmp_path: Path, *options: str, text: str = SMALL) -> int:
    workload = _write(tmp_path, "small.yaml", text)
    return main(["simulate", "--workload", str(workload), "--no-progress", *options])


def test_simulate_refuses_an_output_path_that_is_a_file_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = _write(tmp_path, "taken", "")
    assert _simulate(tmp_path, "--out", str(blocker)) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"error: --out: '{blocker}' is invalid: is a file, not a folder")
    assert captured.out == ""  # no run, no summary
    assert _simulate(tmp_path, "--out", str(blocker / "sub")) == 2
    assert "cannot be written" in capsys.readouterr().err


def test_save_workload_refuses_a_missing_folder_and_an_unknown_suffix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "out")
    missing = tmp_path / "nowhere" / "w.jsonl"
    assert _simulate(tmp_path, "--out", out, "--save-workload", str(missing)) == 2
    assert f"folder {missing.parent} does not exist" in capsys.readouterr().err
    assert not missing.parent.exists()
    text = tmp_path / "w.txt"
    assert _simulate(tmp_path, "--out", out, "--save-workload", str(text)) == 2
    assert "must end in .yaml, .yml, .json, .jsonl, .ndjson" in capsys.readouterr().err
    assert not text.exists()
    saved = tmp_path / "w.jsonl"
    assert _simulate(tmp_path, "--out", out, "--save-workload", str(saved)) == 0
    assert f"workload written to {saved} (2 jobs)" in capsys.readouterr().out
    assert load_workload(saved).jobs == load_workload(tmp_path / "small.yaml").jobs


def test_paths_too_long_for_the_system_are_refused_with_the_option_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long = str(tmp_path / ("x" * 300))
    out = str(tmp_path / "out")
    cases = (
        (("--out", long), "error: --out: ", "cannot be written: File name too long"),
        (
            ("--out", out, "--save-workload", long + ".yaml"),
            "error: --save-workload: ",
            "cannot be written",
        ),
    )
    for options, start, rule in cases:
        assert _simulate(tmp_path, *options) == 2
        err = capsys.readouterr().err
        assert err.startswith(start) and rule in err, err
    assert main(["simulate", "--workload", long + ".yaml", "--out", out, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: workload: ") and "cannot be read" in err, err


def test_frontier_gpus_outside_the_fleet_are_refused_and_rounding_is_said(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", "--workload", "frontier", "--gpus", "3"]) == 2
    assert "the frontier fleet holds 2,160 to 1,000,080 GPUs" in capsys.readouterr().err
    from toposched.workloads.catalog import workload_by_name

    workload = workload_by_name("frontier", gpus=4096, days=0.5)
    assert workload.topology.n_gpus == 4320
    assert workload.description.startswith("frontier lab: 4,320 GB300 GPUs, 1,440-GPU training")
    assert "--gpus 4,096 rounded to whole racks: 2 in each of the fleet's 30 blocks" in (
        workload.description
    )


# Every workload kind, each option it does not read, and the start of the rule that says why.
UNREAD_OPTIONS = [
    ("openb", "--gpus", "64", "the openb workload runs on the trace's own cluster"),
    ("FILE", "--gpus", "64", "a workload file brings its own cluster"),
    ("itp:01", "--seed", "0", "the itp workload replays its trace: nothing in it is drawn"),
    ("openb:default", "--seed", "7", "the openb workload replays its trace"),
    ("FILE", "--seed", "7", "a workload file holds its jobs as written"),
    ("ai2", "--traces-dir", "TRACES", "the ai2 workload reads no traces"),
    ("ai2:team-sized", "--traces-dir", "TRACES", "the ai2 workload reads no traces"),
    ("frontier", "--traces-dir", "TRACES", "the frontier workload reads no traces"),
    ("FILE", "--traces-dir", "TRACES", "a workload file reads no traces"),
]


@pytest.mark.parametrize(("workload", "option", "value", "rule"), UNREAD_OPTIONS)
def test_an_option_the_workload_does_not_read_is_refused_not_ignored(
    workload: str,
    option: str,
    value: str,
    rule: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    workload = str(_write(tmp_path, "small.yaml", SMALL)) if workload == "FILE" else workload
    value = str(tmp_path) if value == "TRACES" else value
    out = tmp_path / "out"
    argv = ["simulate", "--workload", workload, option, value, "--out", str(out)]
    assert main([*argv, "--no-progress"]) == 2
    shown = f"'{value}'" if option == "--traces-dir" else value
    assert f"error: {option}: {shown} is invalid: {rule}" in capsys.readouterr().err
    assert not out.exists()


def test_simulate_help_lists_the_options_each_workload_reads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    shown = capsys.readouterr().out
    for line in (
        "  ai2, ai2:team-sized   --days, --gpus, --seed",
        "  frontier              --days, --gpus, --seed",
        "  itp:NN                --days, --gpus, --teams, --traces-dir",
        "  openb[:TRACE]         --days, --teams, --traces-dir",
        "  FILE                  --days",
    ):
        assert f"\n{line}\n" in shown


def test_the_demos_default_size_is_the_ai2_workloads_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's 1,024 GPUs size its ai2 cluster; another workload is not given a --gpus the
    user did not write (a file keeps its cluster)."""
    workload = str(_write(tmp_path, "small.yaml", SMALL))
    argv = ["demo", "--alone", "--workload", workload, "--no-progress", "--json"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0
    assert json.loads(capsys.readouterr().out)["cluster"]["gpus"] == 16


def test_a_job_larger_than_the_cluster_is_named_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    huge = SMALL + (
        "  - {name: huge, submit: 0, runtime: 1h, account: research, pods: 100,"
        " resources_per_pod: {gpus: 8}}\n"
    )
    assert _simulate(tmp_path, "--out", str(tmp_path / "out"), text=huge) == 0
    err = capsys.readouterr().err
    assert "warning: 1 job(s) ask for more GPUs than the cluster's 16 and can never start: " in err
    assert "huge (800 GPUs)" in err


def _many_jobs(tmp_path: Path, count: int) -> Path:
    """A JSONL workload of `count` one-GPU jobs all submitted at 0, with no horizon."""
    path = tmp_path / "many.jsonl"
    header = {"cluster": json.loads(json.dumps(yaml.safe_load(SMALL)["cluster"]))}
    header["budget"] = {"accounts": {"research": 100}}
    lines = [json.dumps(header)]
    for index in range(count):
        job = {"name": f"j{index}", "submit": 0, "runtime": 60 + index, "account": "research"}
        job.update({"pods": 1, "resources_per_pod": {"gpus": 1}})
        lines.append(json.dumps(job))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_progress_counts_finished_jobs_when_the_workload_has_no_horizon(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich draws its bar only on a terminal
    workload = _many_jobs(tmp_path, 1200)
    arguments = ["simulate", "--workload", str(workload), "--out", str(tmp_path / "out")]
    assert main(arguments) == 0
    err = capsys.readouterr().err
    assert "of 1,200 jobs finished" in err and "day 0.0 of" not in err


def test_sigterm_during_a_run_writes_the_partial_summary_and_says_so(tmp_path: Path) -> None:
    workload = _many_jobs(tmp_path, 60_000)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "toposched.cli.main", "simulate", "--workload", str(workload)]
    command += ["--out", str(out), "--no-progress", "--save-workload", str(tmp_path / "w.jsonl")]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    line = process.stdout.readline()  # written just before the run starts
    assert line.startswith("workload written to")
    time.sleep(8.0)  # past the calibration (about a second), well inside the run
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130
    assert "interrupted: the summary covers the first" in err and "Traceback" not in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["simulated"]["interrupted"] is True
    # Stopped early: the whole workload (runtimes 60 s + index on 16 GPUs) spans ~1,300 days.
    whole_run_days = sum(60 + index for index in range(60_000)) / 16 / 86_400
    assert summary["simulated"]["days"] < whole_run_days / 2


# --- the demo: its own defaults, and a summary that says what each figure means -----------------


def test_demo_help_shows_the_demos_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "after N days; default: 2)" in out and "default 1,024;" in out
    assert "default: 30" not in out and "3,072" not in out


def test_demo_summary_says_what_each_metric_means_and_keeps_targets_for_verbose(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "240")  # tables wide enough not to wrap their words
    options = ["--alone", "--days", "0.05", "--gpus", "64", "--no-progress"]
    assert main(["demo", *options, "--out", str(tmp_path / "plain")]) == 0
    plain = capsys.readouterr().out
    assert "what it means" in plain and "share of GPU time running work" in plain
    assert "missed" not in plain and "numpy.sort" not in plain and "events per second" not in plain
    assert main(["demo", *options, "--verbose", "--out", str(tmp_path / "full")]) == 0
    full = capsys.readouterr().out
    assert "numpy.sort" in full and "events per second" in full


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--baselines", "slurm_like"], "--baselines: 'slurm_like' is invalid: "),
        (["demo", "--alone", "--baselines", "kube_like"], "not with --alone"),
        (["simulate", "--compare", "--baselines", "nope"], "--baselines: 'nope' is invalid: "),
        (
            ["simulate", "--eviction-worth", "off", "--eviction-loss-budget", "5"],
            "--eviction-loss-budget: 5 is invalid: has no effect with --eviction-worth off",
        ),
        (["simulate", "--workload", "no-such.yaml"], "workload: 'no-such.yaml' is invalid"),
    ],
)
def test_an_option_that_would_be_ignored_is_refused_before_the_run(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
