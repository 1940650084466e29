"""The `toposched` command: subcommands for the demo, benchmarks, evaluations and clusters."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from toposched.cli import (
    bench,
    cluster,
    demo,
    evaluate,
    fleet,
    follow,
    jobs,
    place,
    serve,
    simulate,
    why,
)
from toposched.cluster.errors import ToposchedError

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toposched",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (
        demo,
        cluster,
        place,
        bench,
        evaluate,
        simulate,
        serve,
        jobs,
        why,
        fleet,
        follow,
    ):
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
