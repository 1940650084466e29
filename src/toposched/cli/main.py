"""The `toposched` command: subcommands for the demo, benchmarks, evaluations and clusters."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import import_module
from typing import NamedTuple

from toposched import __version__

DESCRIPTION = """\
toposched decides where and when every job on a GPU fleet runs: gang placement inside the right
topology domain, bin packing that keeps whole domains free, fair budgeted sharing, preemption
that loses the least work. Every subcommand has its own --help.
"""

EPILOG = """\
examples:
  toposched demo                          simulate an Ai2-like research cluster for a few days
  toposched simulate --workload frontier  the 1,000,080-GPU frontier-lab fleet (see --help)
  toposched eval packing --traces default openb packing next to the published FGD table
  toposched bench placement --json        placement speed at 1M GPUs, as JSON
  toposched cluster show cluster.yaml     summarise a cluster described in YAML/JSON/CSV
  toposched place job.yaml --cluster c.yaml  where every pod of a job lands, or why not
  toposched submit job.yaml               submit a job to a running `toposched serve`
  toposched why JOB                       why a submitted job waits, and what it would take
"""


class Command(NamedTuple):
    """A subcommand: the module that registers its parser, and its one-line help."""

    module: str
    help: str


# Every subcommand, in the order `--help` lists them. Only the module of the command being run
# is imported (its parser registered in full); the others are listed by name and help alone, so
# that `toposched --help` and errors before a command starts never load numpy or the compiled
# loops. tests/test_cli_start.py checks that each help here is the one its module registers.
COMMANDS: dict[str, Command] = {
    "demo": Command(
        "demo", "simulate an Ai2-like research cluster for a few days and print the summary"
    ),
    "cluster": Command("cluster", "summarise a cluster from a file or a builder"),
    "place": Command("place", "place jobs on a cluster: every pod's node and GPUs, or why not"),
    "bench": Command(
        "bench", "run a benchmark suite and print its figures next to calibration figures"
    ),
    "eval": Command(
        "evaluate", "measure scheduling quality on published traces against published results"
    ),
    "simulate": Command(
        "simulate",
        "replay a workload (ai2, frontier, itp:NN, openb, or a file) through the scheduler",
    ),
    "serve": Command("serve", "run the scheduler as a service (HTTP API, durable store, backend)"),
    "submit": Command("jobs", "submit jobs from YAML/JSON files"),
    "jobs": Command("jobs", "list jobs, oldest submission first"),
    "show": Command("jobs", "one job: state, times, nodes, what it runs"),
    "cancel": Command("jobs", "cancel a job: pending ones leave the queue, running ones stop"),
    "prio": Command("jobs", "change a job's priority within its team"),
    "queue": Command("jobs", "pending jobs in the order the scheduler will try them"),
    "why": Command("why", "why a job waits (or what it is doing), in sentences"),
    "nodes": Command("fleet", "nodes with health and free GPUs, or one row per domain of a level"),
    "drain": Command("fleet", "no new work on a node; the work running there finishes (admin)"),
    "cordon": Command("fleet", "no new work on a node (admin)"),
    "uncordon": Command("fleet", "a drained or cordoned node takes work again (admin)"),
    "accounts": Command("fleet", "accounts: budgets, GPUs in use, usage and fair-share standing"),
    "policy": Command(
        "fleet", "the scheduling policy the server runs: the settings it changed from the defaults"
    ),
    "watch": Command("follow", "follow job state changes and decisions as they happen"),
    "logs": Command("follow", "a pod's captured output (local backend)"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser, with `command`'s module registered in full (every module when None: the
    whole parser, as tests use it) and the other commands by name and help alone."""
    parser = argparse.ArgumentParser(
        prog="toposched",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"toposched {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    full = {entry.module for entry in COMMANDS.values()} if command is None else set()
    if command in COMMANDS:
        full.add(COMMANDS[command].module)
    registered: set[str] = set()
    for name, entry in COMMANDS.items():
        if entry.module not in full:
            commands.add_parser(name, help=entry.help, add_help=False)
        elif entry.module not in registered:
            registered.add(entry.module)
            import_module(f"toposched.cli.{entry.module}").register(commands)
    return parser


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand named in `argv`: its first word that is not an option."""
    return next((word for word in argv if not word.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    command = _command_in(words)
    parser = build_parser(command if command in COMMANDS else "")
    args = parser.parse_args(words)
    # Imported once the arguments are read: --help, --version and usage errors exit before.
    from toposched.cluster.errors import ToposchedError

    try:
        result: int = args.handler(args)
        return result
    except ToposchedError as error:
        # One line, never wrapped, so that `FILE:LINE:` stays whole for editors and grep.
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
