"""`toposched simulate`'s options (also the demo's): the flags with their help, and the rules
checked before anything loads or is made (`check_outputs`)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from toposched.cli.options import (
    check_days,
    check_seed,
    check_traces_dir,
    check_workload_options,
)
from toposched.cli.policy_options import add_policy_options, checked_policy
from toposched.cli.simulate_values import (
    FULL_CYCLE_HELP,
    FullCycleEvery,
    cycle_interval,
    full_cycle_every,
    percentage,
    process_count,
    sample_interval,
    team_count,
    topology_price_option,
)
from toposched.cluster.errors import InputError
from toposched.cluster.limits import check_gpus
from toposched.cluster.units import HOUR
from toposched.sim.baseline_names import chosen_baselines
from toposched.workloads.catalog import WorkloadKind, check_workload_named, workload_kind
from toposched.workloads.paths import check_workload_path

__all__ = ["DEFAULT_SAMPLE_INTERVAL", "add_options", "check_options", "check_outputs"]

# The simulator, the scheduler and rich are imported where a run needs them, so that the
# parser (`--help`, usage errors) loads none of them.
DEFAULT_SAMPLE_INTERVAL = HOUR
"""toposched.sim.engine.DEFAULT_SAMPLE_INTERVAL (tests/test_cli_start.py checks they agree)."""


def add_options(
    parser: argparse.ArgumentParser,
    workload_default: str = "ai2",
    days: float | None = None,
    gpus: int | None = None,
) -> None:
    """The options of a simulation; `days` and `gpus` set defaults other than the workload's
    own (as the demo does), and the help says them."""
    parser.add_argument(
        "--workload",
        default=workload_default,
        metavar="W",
        help=f"ai2, ai2:team-sized, frontier, itp:NN, openb[:TRACE] or a workload FILE (default: "
        f"{workload_default})",
    )
    parser.add_argument(
        "--days",
        type=float,
        default=days,
        metavar="N",
        help="simulated days (generators: how much work to make; replays and files: stop "
        "after N days; default: "
        + (
            f"{days:g}"
            if days is not None
            else "30 for ai2 and frontier, the whole trace otherwise"
        )
        + ")",
    )
    parser.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="seed of the generators, ai2 and frontier (default: 0)",
    )
    parser.add_argument(
        "--gpus",
        type=int,
        metavar="N",
        help=f"cluster size in GPUs (ai2: about N in 8-GPU nodes, default {gpus or 3072:,}; "
        "frontier: shrinks the 1,000,080-GPU fleet, 2,160 to 1,000,080; itp: N/8 nodes; "
        "openb and files bring their own cluster and refuse it)",
    )
    # Set apart from --gpus so that only a size given on the command line is checked against
    # workloads that do not read one.
    parser.set_defaults(ai2_gpus=gpus)
    parser.add_argument(
        "--out",
        default="out",
        metavar="DIR",
        help="folder for summary.json (default: out/)",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument(
        "--sample-interval",
        type=sample_interval,
        default=DEFAULT_SAMPLE_INTERVAL,
        metavar="S",
        help="seconds between timeline samples (default: 3600)",
    )
    parser.add_argument(
        "--cycle-every",
        type=cycle_interval,
        default=0.0,
        metavar="S",
        help="at most one scheduler cycle per S simulated seconds (default: 0, a cycle after "
        "every instant with events)",
    )
    parser.add_argument(
        "--traces-dir",
        metavar="PATH",
        help="folder holding itp/ and openb/ (default: $TOPOSCHED_TRACES or ../shared/traces)",
    )
    parser.add_argument(
        "--teams",
        type=team_count,
        metavar="N",
        help="itp and openb: split the replay's jobs among N teams (2-100; each job to one by a "
        "hash of its name, team k getting about 1/k of them), each team's budget its share of "
        "the GPU-time, jobs classed debug (<= 30 min), training (>= 16 GPUs) or other "
        "(default: one account holds everything)",
    )
    parser.add_argument(
        "--resumable",
        type=percentage,
        metavar="PERCENT",
        help="make PERCENT of the jobs (0-100, drawn at random with the seed) able to resume "
        "from their checkpoints and the others not (default: as the workload builds them)",
    )
    parser.add_argument(
        "--save-workload",
        metavar="FILE",
        help="also write the workload to FILE (.yaml, .yml, .json, .jsonl or .ndjson: the suffix "
        "picks the format; the folder must exist) to replay or edit later",
    )
    add_policy_options(parser)
    parser.add_argument(
        "--topology-price",
        type=topology_price_option,
        metavar="SPEC",
        help="slow down the runs of jobs with topology constraints that a scheduler spreads "
        "over more domains than they ask for: 'default' (+5%% of the run per extra domain at "
        "the innermost level, e.g. a rack, +10%% at the next, e.g. a block, +25%% further out, "
        "at most 2x) or LEVEL=FRACTION pairs with an optional cap, e.g. "
        "rack=0.05,block=0.1,cap=2 (default: off, placement costs nothing)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on long runs")
    parser.add_argument(
        "--full-cycle-every",
        type=full_cycle_every,
        metavar="D|always",
        help=FULL_CYCLE_HELP,
    )
    parser.add_argument(
        "--check-incremental",
        action="store_true",
        help="debugging: beside every cycle that runs after submissions only (and skips the "
        "pending jobs the last cycle settled), run a full cycle on a copy of the scheduler and "
        "stop with an error if their decisions differ (slow; docs/policy.md)",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also run the baselines (FIFO first-fit, Slurm-like, kube-like) on the same "
        "workload, print them side by side and write DIR/report.html",
    )
    parser.add_argument(
        "--baselines",
        metavar="NAMES",
        help="with --compare, the baselines to run, comma-separated, in this order, from "
        "slurm_like, slurm_like_preempt (Slurm preempting by partition priority, victims "
        "requeued), kube_like, fifo_first_fit (default: slurm_like,kube_like,fifo_first_fit)",
    )
    parser.add_argument(
        "--jobs",
        type=process_count,
        metavar="N",
        help="with the baselines, run the schedulers N at a time, each in a process of its own, "
        "toposched's first; the decisions are the same, and each run's speed figures are its "
        "own process's, measured while the others run (default: one per core, at most one "
        "per scheduler; 1: one after another in this process)",
    )


def check_options(args: argparse.Namespace) -> None:
    """The options' rules (docs/limits.md), checked before anything loads or is made."""
    check_seed(args.seed)
    check_days(args.days)
    check_gpus(args.gpus)
    check_traces_dir(args.traces_dir)
    check_workload_options(
        args.workload, args.gpus, args.seed, args.traces_dir, getattr(args, "teams", None)
    )
    baselines = getattr(args, "baselines", None)
    # The demo compares unless --alone; simulate with --compare.
    if getattr(args, "compare", False) or getattr(args, "alone", True) is False:
        try:
            chosen_baselines(baselines)
        except InputError as error:
            raise InputError("--baselines", error.value, error.rule) from None
    else:
        rule = "applies only with --compare" if not hasattr(args, "alone") else "not with --alone"
        for option, value in (("--baselines", baselines), ("--jobs", getattr(args, "jobs", None))):
            if value is not None:
                raise InputError(option, value, rule)
    if getattr(args, "check_incremental", False) and (
        getattr(args, "full_cycle_every", None) is FullCycleEvery.ALWAYS
    ):
        raise InputError(
            "--check-incremental",
            True,
            "checks the cycles that skip settled jobs: not with --full-cycle-every always",
        )
    checked_policy(args)


def check_outputs(args: argparse.Namespace) -> Path:
    """The output folder, made now, and the --save-workload path checked: a path that cannot
    be written fails before the run rather than after it, losing nothing. The options'
    rules are checked first, before anything is made."""
    check_options(args)
    out = Path(args.out)
    try:
        if out.exists() and not out.is_dir():
            raise InputError(
                "--out", args.out, "is a file, not a folder; give a folder for summary.json"
            )
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as error:
        raise InputError("--out", args.out, f"cannot be written: {error.strerror}") from None
    if args.save_workload:
        check_workload_path(args.save_workload, "--save-workload")
    # Before the workload is built: an unknown name, a missing trace or a bad file answers
    # without the generators, the trace readers, the job model and numpy.
    check_workload_named(args.workload, args.traces_dir)
    if workload_kind(args.workload) is WorkloadKind.FILE:
        from toposched.cli.workloadcheck import check_workload_file

        check_workload_file(args.workload)
    return out
