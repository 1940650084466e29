"""A fast start: `toposched --help`, `--version` and usage errors load no numpy or numba, and
most bad job files are refused before the job model (pydantic) loads."""

from __future__ import annotations

import argparse
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest

import toposched
from toposched.cli.jobcheck import JOB_FIELDS, Fields, check_job_files
from toposched.cli.main import COMMANDS, build_parser, main
from toposched.cluster.errors import InputError

_PROBE = """
import sys
from typing import Any
from toposched.cli.main import main
try:
    main({argv!r})
except SystemExit:
    pass
print(sorted(name for name in ("numpy", "numba", "rich", "yaml") if name in sys.modules))
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["--version"],
        ["no-such-command"],
        [],
        ["simulate", "--help"],
        ["demo", "--help"],
        ["simulate", "--days", "many"],
        ["cluster", "--help"],
        ["place", "--help"],
        ["serve", "--help"],
        ["serve", "--bogus"],
        ["serve", "--gpus", "0"],
        ["serve", "--gpus", "65"],
        ["eval", "--help"],
        ["eval", "packing", "--help"],
        ["eval", "packing", "--seeds", "x"],
        ["bench", "--help"],
        ["bench", "nosuch"],
    ],
)
def test_help_version_and_usage_errors_load_no_heavy_module(argv: list[str]) -> None:
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE.format(argv=argv)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert probe.stdout.strip().splitlines()[-1] == "[]"


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out == f"toposched {toposched.__version__}\n"


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[Any]:
    return next(
        action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
    )


def test_every_command_is_listed_with_the_help_its_module_registers() -> None:
    listed = {action.dest: action.help for action in _subcommands(build_parser())._choices_actions}
    assert listed == {name: command.help for name, command in COMMANDS.items()}
    lazy = _subcommands(build_parser(""))
    assert [action.dest for action in lazy._choices_actions] == list(COMMANDS)


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert all(f"    {name}" in out for name in COMMANDS)


def test_the_frontier_shape_the_catalog_states_is_the_fleets() -> None:
    from toposched.cluster.builders import MILLION_GPU_SHAPE
    from toposched.workloads import catalog

    blocks = MILLION_GPU_SHAPE["zones"] * MILLION_GPU_SHAPE["blocks_per_zone"]
    assert catalog.FRONTIER_BLOCKS == blocks
    assert catalog.FRONTIER_GPUS == 1_000_080


def test_the_simulate_default_sample_interval_is_the_simulators() -> None:
    from toposched.cli import simulate
    from toposched.sim import engine

    assert simulate.DEFAULT_SAMPLE_INTERVAL == engine.DEFAULT_SAMPLE_INTERVAL


def test_the_eval_help_figures_are_the_evaluations() -> None:
    from toposched.cli import evaluate
    from toposched.evaluation import packing

    assert evaluate.DEFAULT_TRACES == packing.DEFAULT_TRACES
    assert evaluate.DEFAULT_POLICIES == packing.DEFAULT_POLICIES
    assert list(evaluate.KNOWN_POLICIES) == packing.known_policies()
    assert (evaluate.FIRST_SEED, evaluate.TUNE_RATIO) == (packing.FIRST_SEED, packing.TUNE_RATIO)


def test_the_serve_defaults_are_the_services() -> None:
    from toposched.cli import serve
    from toposched.service import config

    assert serve.BACKENDS == config.BACKENDS
    assert serve.DEFAULT_STORE == config.DEFAULT_STORE
    assert serve.DEFAULT_MAX_BODY == config.DEFAULT_MAX_BODY


def test_the_place_policy_names_are_the_placement_policies() -> None:
    from toposched.cli.place import POLICY_NAMES
    from toposched.placement.policies import POLICIES

    assert sorted(POLICY_NAMES) == sorted(POLICIES)


# --- bad job files answer before the job model loads ------------------------------------------

_PROBE_HEAVY = """
import sys
from toposched.cli.main import main
code = main({argv!r})
heavy = ("pydantic", "numpy", "numba", "rich")
print(code, sorted(name for name in heavy if name in sys.modules))
"""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\xff", "is not UTF-8 text (byte 0x89 at offset 0)"),
        (b"name: [unclosed\n", "job.yaml:"),
        (
            b"a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
            + b"b: &b ["
            + b"*a, " * 60
            + b"*a]\n"
            + b"c: ["
            + b"*b, " * 400
            + b"*b]\n",
            "YAML aliases expand",
        ),
        (b"name: x\npods: 1\nresources_per_pod: {gpus: 1, gpuz: 2}\n", "did you mean 'gpus'"),
        (b"name: x\nnmae: y\npods: 1\nresources_per_pod: {gpus: 1}\n", "did you mean 'name'"),
        # Larger than a light pass reads in general, but of few values.
        (
            b"name: " + b"a" * 2_000_000 + b"\npods: 1\nresources_per_pod: {gpus: 1}\n",
            "(2,000,000 characters) is invalid",
        ),
    ],
)
def test_a_bad_job_file_is_refused_before_the_job_model_loads(
    text: bytes, message: str, tmp_path: Path
) -> None:
    job = tmp_path / "job.yaml"
    job.write_bytes(text)
    argv = ["place", str(job), "--cluster", str(tmp_path / "cluster.yaml")]
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE_HEAVY.format(argv=argv)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert probe.stdout.strip().splitlines()[-1] == "2 []", probe.stdout
    assert message in probe.stderr and "Traceback" not in probe.stderr


def _model_fields(model: Any) -> Fields:
    """The shape of a pydantic model: its field names and the models its fields hold."""
    nested = {}
    for name, field in model.model_fields.items():
        inner = [field.annotation, *typing.get_args(field.annotation)]
        inner += [arg for each in inner for arg in typing.get_args(each)]
        found = [arg for arg in inner if isinstance(arg, type) and hasattr(arg, "model_fields")]
        if found:
            nested[name] = _model_fields(found[0])
    return Fields(tuple(model.model_fields), nested)


def test_the_light_pass_knows_the_job_models_fields() -> None:
    assert _model_fields(toposched.JobSpec) == JOB_FIELDS


def test_the_light_pass_knows_the_job_models_default_account() -> None:
    from toposched.jobs.rules import DEFAULT_ACCOUNT

    assert toposched.JobSpec.model_fields["account"].default == DEFAULT_ACCOUNT


JOBS_WITH_UNKNOWN_FIELDS = [
    "name: x\npods: 1\nresources_per_pod: {gpus: 1, gpuz: 2}\n",
    "name: x\npods: 1\nresources_per_pod: {gpus: 1}\nnmae: 3\n",
    "name: x\npods: 1\nresources_per_pod: {gpus: 1}\n3: x\n",
    "name: x\npods: 1\nresources_per_pod: {gpus: 1, cpus: 2}\n"
    "topology: {slices: [{level: r, pods: 1, x: 1}], prefered: rack}\nnmae: 3\n",
    "jobs:\n  - {name: a, pods: 1, resources_per_pod: {gpus: 1}}\n"
    "  - {name: b, pods: 1, resources_per_pod: {gpus: 1}, topolgy: {}}\n",
    "- {name: a, pods: 1, resources_per_pod: {gpus: 1}}\n---\n"
    "- {name: b, pods: 1, resources_per_pod: {gpus: 1, memroy: 1Gi}}\n",
]


@pytest.mark.parametrize("text", JOBS_WITH_UNKNOWN_FIELDS)
def test_the_light_pass_says_what_the_job_model_says(text: str, tmp_path: Path) -> None:
    from toposched.jobs.files import read_job_files

    job = tmp_path / "job.yaml"
    job.write_text(text)
    with pytest.raises(InputError) as light:
        check_job_files([job])
    with pytest.raises(InputError) as model:
        read_job_files([job])
    assert str(light.value) == str(model.value)


JOB = "name: x\npods: 1\nresources_per_pod: {gpus: 1}\n"

FILES_REFUSED_ACROSS_JOBS = [
    {"job.yaml": ""},
    {"job.yaml": "# only a comment\n"},
    {"job.yaml": JOB + "---\n" + JOB},
    {
        "job.yaml": "- {name: x, pods: 1, resources_per_pod: {gpus: 1}}\n"
        "- {name: x, pods: 2, resources_per_pod: {gpus: 1}}\n"
    },
    {"a.yaml": JOB, "b.yaml": JOB},
    {"a.yaml": JOB, "b.yaml": ""},
    # A bad value in the second file comes first: the model reads a file whole, then its names.
    {"a.yaml": JOB, "b.yaml": JOB + "---\nname: y\npods: 0\nresources_per_pod: {gpus: 1}\n"},
]


@pytest.mark.parametrize("files", FILES_REFUSED_ACROSS_JOBS)
def test_names_used_twice_and_files_with_no_job_get_the_job_models_error(
    files: dict[str, str], tmp_path: Path
) -> None:
    from toposched.jobs.files import read_job_files

    paths = []
    for name, text in files.items():
        paths.append(tmp_path / name)
        paths[-1].write_text(text)
    with pytest.raises(InputError) as light:
        check_job_files(paths)
    with pytest.raises(InputError) as model:
        read_job_files(paths)
    assert str(light.value) == str(model.value)


def test_a_job_file_given_twice_is_said_plainly(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: x\npods: 1\nresources_per_pod: {gpus: 1}\n")
    with pytest.raises(InputError) as given:
        check_job_files([job, tmp_path / "." / "job.yaml"])
    assert str(given.value) == (
        f"job file: '{tmp_path}/job.yaml' is invalid: is given twice (job files 1 and 2); "
        "give each file once"
    )


def test_a_job_left_to_the_model_keeps_the_models_order_of_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The first job is valid but names a level the cluster lacks; the second, of pod sets, which
    # the light pass leaves to the model, has a bad value: the model reads every job before it
    # checks any against the cluster, so the second job's error comes first.
    (tmp_path / "cluster.yaml").write_text("levels: [rack]\nnodes: [{name: n1, rack: r1}]\n")
    job = tmp_path / "job.yaml"
    job.write_text(
        "- {name: a, pods: 1, resources_per_pod: {gpus: 1}, topology: {required: zone}}\n"
        "- {name: b, pod_sets: [{name: s, pods: 0, resources_per_pod: {gpus: 1}}]}\n"
    )
    assert main(["place", str(job), "--cluster", str(tmp_path / "cluster.yaml")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {job}:2: jobs[1].pod_sets[0].pods: 0 is")
