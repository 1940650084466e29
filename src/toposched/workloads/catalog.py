"""Workloads by the names the command line uses: ai2[:team-sized], frontier, itp:NN, openb, FILE."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from toposched.cluster.errors import InputError, checked_seed
from toposched.cluster.units import DAY
from toposched.workloads.traces import (
    ITP_CLUSTER_NODES,
    default_traces_dir,
    itp_trace_path,
    pod_list_path,
)

if TYPE_CHECKING:
    from toposched.workloads.model import Workload

# The generators and loaders (numpy, the compiled loops) are imported by `workload_by_name`
# alone, so that the command line lists the workloads (WORKLOAD_HELP) without loading them.

__all__ = [
    "AI2_TRAINING_SIZES",
    "WORKLOAD_HELP",
    "WORKLOAD_OPTIONS",
    "WorkloadKind",
    "WorkloadOption",
    "check_workload_file_named",
    "check_workload_named",
    "unread_option_rule",
    "workload_by_name",
    "workload_kind",
]

DEFAULT_DAYS = {"ai2": 30.0, "frontier": 30.0}
AI2_TRAINING_SIZES = {"cluster": "ai2", "team": "ai2:team-sized"}
"""How the ai2 workload sizes its multi-node training runs, and its name for each: `cluster`,
every team draws from the same sizes up to a sixth of the cluster; `team`, no run larger than
its team's budget (in whole nodes)."""
AI2_DEFAULT_GPUS = 3072
_RACK_GPUS = 72

WORKLOAD_HELP = {
    "ai2": "Ai2-like research cluster (default 3,072 GPUs, 30 days): 15 budgeted teams, "
    "outstanding demand 2-3x capacity, debug/training/eval/unallocated jobs",
    "ai2:team-sized": "the same with no training run larger than its team's budget (by default "
    "every team's runs reach a sixth of the cluster, 512 GPUs at 3,072)",
    "frontier": "frontier-lab fleet of 1,000,080 GB300 GPUs (30 days): 10k-200k-GPU training in "
    "rack slices, inference, evals, node failures and repairs; --gpus shrinks the fleet "
    "(2,160 to 1,000,080, rounded to whole racks in each of its 30 blocks)",
    "itp:NN": "timed replay of Microsoft ITP cluster NN (01-10) on a documented number of 8-GPU "
    "nodes (--gpus overrides); runs until the last job ends unless --days is given",
    "openb[:TRACE]": "timed replay of an openb pod list (default: default) on its 6,212-GPU "
    "cluster, pods arriving at creation and running as long as in the trace",
    "FILE": "a workload file (.yaml, .json or .jsonl) in the format of docs/simulator.md",
}


class WorkloadKind(Enum):
    """The kinds of workload `workload_by_name` builds, by how they are made."""

    AI2 = "ai2"
    FRONTIER = "frontier"
    ITP = "itp"
    OPENB = "openb"
    FILE = "file"


class WorkloadOption(Enum):
    """The workload options some kinds read and others do not (every kind reads `days`)."""

    GPUS = "gpus"
    SEED = "seed"
    TRACES_DIR = "traces_dir"
    TEAMS = "teams"


WORKLOAD_OPTIONS: dict[WorkloadKind, frozenset[WorkloadOption]] = {
    WorkloadKind.AI2: frozenset({WorkloadOption.GPUS, WorkloadOption.SEED}),
    WorkloadKind.FRONTIER: frozenset({WorkloadOption.GPUS, WorkloadOption.SEED}),
    WorkloadKind.ITP: frozenset(
        {WorkloadOption.GPUS, WorkloadOption.TRACES_DIR, WorkloadOption.TEAMS}
    ),
    WorkloadKind.OPENB: frozenset({WorkloadOption.TRACES_DIR, WorkloadOption.TEAMS}),
    WorkloadKind.FILE: frozenset(),
}
"""The options each kind reads; given to a kind that does not read it, an option is refused
(`unread_option_rule`) rather than ignored."""

_WHY_UNREAD = {
    (WorkloadKind.OPENB, WorkloadOption.GPUS): "the openb workload runs on the trace's own "
    "cluster (its node list, 6,212 GPUs); leave --gpus out",
    (WorkloadKind.FILE, WorkloadOption.GPUS): "a workload file brings its own cluster (its "
    "`cluster:` section); leave --gpus out, or change the cluster in the file",
    (WorkloadKind.ITP, WorkloadOption.SEED): "the itp workload replays its trace: nothing in "
    "it is drawn at random; leave --seed out",
    (WorkloadKind.OPENB, WorkloadOption.SEED): "the openb workload replays its trace: nothing "
    "in it is drawn at random; leave --seed out",
    (WorkloadKind.FILE, WorkloadOption.SEED): "a workload file holds its jobs as written: "
    "nothing in it is drawn at random; leave --seed out",
}


def workload_kind(name: str) -> WorkloadKind:
    """The kind of the workload `name` names, by its first word (`itp:04` is ITP); any other
    name is a file."""
    try:
        return WorkloadKind(name.partition(":")[0])
    except ValueError:
        return WorkloadKind.FILE


def unread_option_rule(name: str, option: WorkloadOption) -> str | None:
    """Why the workload `name` cannot take `option`, or None when it reads it."""
    kind = workload_kind(name)
    if option in WORKLOAD_OPTIONS[kind]:
        return None
    if option is WorkloadOption.TEAMS:
        made = "a workload file" if kind is WorkloadKind.FILE else f"the {kind.value} workload"
        return (
            f"{made} has its own accounts and budgets (only the itp:NN and openb replays, "
            "charged to one account, are split among teams); leave --teams out"
        )
    if option is WorkloadOption.TRACES_DIR:
        made = "a workload file" if kind is WorkloadKind.FILE else f"the {kind.value} workload"
        return f"{made} reads no traces (only itp:NN and openb do); leave --traces-dir out"
    return _WHY_UNREAD[kind, option]


FRONTIER_BLOCKS = 30
"""Blocks of the 1,000,080-GPU fleet (MILLION_GPU_SHAPE: 2 zones of 15), 463 racks each."""
FRONTIER_GPUS = FRONTIER_BLOCKS * 463 * _RACK_GPUS
"""GPUs of the full frontier fleet: 1,000,080."""


def frontier_racks_per_block(gpus: int) -> int:
    """Racks per block of the frontier fleet nearest `gpus` GPUs: the fleet shrinks by whole
    NVL72 racks in each of its 30 blocks, so it holds a multiple of 2,160 GPUs, from 2,160 to
    the full 1,000,080."""
    smallest = FRONTIER_BLOCKS * _RACK_GPUS
    if not smallest <= gpus <= FRONTIER_GPUS:
        raise InputError(
            "gpus",
            gpus,
            f"the frontier fleet holds {smallest:,} to {FRONTIER_GPUS:,} GPUs (whole NVL72 "
            f"racks in each of its {FRONTIER_BLOCKS} blocks); leave --gpus out for the full fleet",
        )
    return max(1, round(gpus / smallest))


def workload_by_name(
    name: str,
    *,
    seed: int | None = None,
    days: float | None = None,
    gpus: int | None = None,
    traces_dir: str | Path | None = None,
    teams: int | None = None,
    resumable: float | None = None,
) -> Workload:
    """The workload `name` names, built with these options: `days` bounds every kind (how much
    work a generator makes; where a replay or a file stops), `seed` (default 0), `gpus` and
    `teams` are read where WORKLOAD_OPTIONS says, and given to a kind that does not read them
    are refused. `teams` splits a replay's jobs among that many teams
    (`variants.split_among_teams`); `resumable` (0-1) makes that share of any workload's jobs
    able to resume (`variants.with_resumable_share`)."""
    workload = _built(name, seed=seed, days=days, gpus=gpus, traces_dir=traces_dir, teams=teams)
    if teams is not None:
        from toposched.workloads.variants import split_among_teams

        workload = split_among_teams(workload, teams)
    if resumable is not None:
        from toposched.workloads.variants import with_resumable_share

        workload = with_resumable_share(workload, resumable, 0 if seed is None else seed)
    return workload


def _built(
    name: str,
    *,
    seed: int | None,
    days: float | None,
    gpus: int | None,
    traces_dir: str | Path | None,
    teams: int | None,
) -> Workload:
    """The workload `name` names, as built (see `workload_by_name`)."""
    for option, value in (
        (WorkloadOption.SEED, seed),
        (WorkloadOption.GPUS, gpus),
        (WorkloadOption.TRACES_DIR, traces_dir),
        (WorkloadOption.TEAMS, teams),
    ):
        rule = None if value is None else unread_option_rule(name, option)
        if rule is not None:
            raise InputError(option.value, value, rule)
    seed = checked_seed(0 if seed is None else seed)
    if days is not None and (
        isinstance(days, bool) or not isinstance(days, int | float) or not days > 0
    ):
        raise InputError("days", days, "must be a number of days > 0")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1):
        raise InputError("gpus", gpus, "must be a whole number of GPUs >= 1")
    # Before a generator or a trace reader loads (numpy): an unknown name or a missing trace
    # answers at once.
    check_workload_named(name, traces_dir)
    ai2_variants = {name: sizes for sizes, name in AI2_TRAINING_SIZES.items()}
    if name in ai2_variants:
        from toposched.workloads.ai2 import ai2_like

        return ai2_like(
            seed,
            days if days is not None else DEFAULT_DAYS["ai2"],
            gpus if gpus is not None else AI2_DEFAULT_GPUS,
            training_sizes=ai2_variants[name],
        )
    if name == "frontier":
        from toposched.workloads.frontier import frontier_lab

        racks_per_block = None if gpus is None else frontier_racks_per_block(gpus)
        workload = frontier_lab(
            seed, days if days is not None else DEFAULT_DAYS["frontier"], racks_per_block
        )
        if gpus is not None and gpus != workload.topology.n_gpus:
            workload.description += (
                f" (--gpus {gpus:,} rounded to whole racks: {racks_per_block} in each of "
                f"the fleet's {FRONTIER_BLOCKS} blocks)"
            )
        return workload
    if name.startswith("itp:"):
        from toposched.workloads.replay import itp_replay

        nodes = None if gpus is None else max(1, round(gpus / 8))
        number = int(name.partition(":")[2])
        return itp_replay(number, nodes=nodes, days=days, traces_dir=traces_dir)
    if name == "openb" or name.startswith("openb:"):
        from toposched.workloads.replay import openb_replay

        trace = name.partition(":")[2] or "default"
        return openb_replay(trace, days=days, traces_dir=traces_dir)
    return _from_file(name, days)


def check_workload_named(name: str, traces_dir: str | Path | None = None) -> None:
    """Refuse a workload name `workload_by_name` would refuse before building anything: an
    unknown ai2 variant or ITP cluster, a trace file missing from the traces folder
    (`traces_dir`, default `traces.default_traces_dir()`), a file that does not exist. Light:
    the generators and trace readers are not loaded."""
    kind = workload_kind(name)
    if kind is WorkloadKind.AI2 and name in AI2_TRAINING_SIZES.values():
        return
    if kind is WorkloadKind.FRONTIER and name == "frontier":
        return
    if kind is WorkloadKind.ITP:
        number = name.partition(":")[2]
        if not number.isdigit() or int(number) not in ITP_CLUSTER_NODES:
            raise InputError(
                "workload", name, f"ITP clusters are itp:01 to itp:{max(ITP_CLUSTER_NODES):02d}"
            )
        itp_trace_path(_traces_folder(traces_dir), int(number))
        return
    if kind is WorkloadKind.OPENB and (name == "openb" or name.startswith("openb:")):
        trace = name.partition(":")[2] or "default"
        pod_list_path(_traces_folder(traces_dir) / "openb", trace)
        return
    check_workload_file_named(name)


def _traces_folder(traces_dir: str | Path | None) -> Path:
    return Path(traces_dir) if traces_dir is not None else default_traces_dir()


def check_workload_file_named(name: str) -> Path:
    """The path of the workload file `name` names, refused when no such file exists (nor
    workload of that name)."""
    path = Path(name)
    try:
        found = path.exists()
    except OSError as error:  # a name the system cannot look up (e.g. too long)
        raise InputError("workload", name, f"cannot be read: {error.strerror}") from None
    if not found:
        raise InputError(
            "workload",
            name,
            "must be ai2, ai2:team-sized, frontier, itp:NN, openb[:TRACE] or an existing "
            "workload file",
        )
    return path


def _from_file(name: str, days: float | None) -> Workload:
    """The workload file `name`; generators and replays are imported only where they are
    built (they load numpy), so that a workload file's error answers without them."""
    from toposched.workloads.files import load_workload

    path = check_workload_file_named(name)
    workload = load_workload(path)
    if days is not None:
        workload.horizon = days * DAY
    return workload
