"""A fast start: `toposched --help`, `--version` and usage errors load no numpy or numba."""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import Any

import pytest

import toposched
from toposched.cli.main import COMMANDS, build_parser, main

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


def test_the_place_policy_names_are_the_placement_policies() -> None:
    from toposched.cli.place import POLICY_NAMES
    from toposched.placement.policies import POLICIES

    assert sorted(POLICY_NAMES) == sorted(POLICIES)
