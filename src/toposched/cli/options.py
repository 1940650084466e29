"""The rules of the options several commands share: one check and one message per flag.

argparse reads each option's syntax (a whole number, a number); the checks here apply its rule
once the arguments are read, before anything runs or is written, and refuse a value with the
one error form, `--flag: VALUE is invalid: RULE` (exit code 2). `check_workload_options`
refuses a workload option (--gpus, --seed, --traces-dir) the workload named does not read, and
a --gpus the workload cannot be built on, as that workload's rule. docs/limits.md lists every
rule.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from toposched.cluster.errors import InputError
from toposched.cluster.limits import MAX_PODS_PER_JOB, NODE_GPUS
from toposched.workloads.catalog import (
    FRONTIER_BLOCKS,
    FRONTIER_GPUS,
    WorkloadKind,
    WorkloadOption,
    unread_option_rule,
    workload_kind,
)

__all__ = [
    "MAX_DAYS",
    "MAX_SEED",
    "check_count",
    "check_days",
    "check_pods",
    "check_seed",
    "check_traces_dir",
    "check_workload_options",
]

RACK_GPUS = 72
"""GPUs of one NVL72 rack, the unit the frontier fleet shrinks by in each block."""
MAX_DAYS = 3650.0
"""The longest simulation --days may ask for: ten years."""
MAX_SEED = 2**63 - 1
"""Seeds are stored as int64 beside the results."""


def _whole_in(flag: str, value: int, smallest: int, largest: int, rule: str) -> int:
    if not smallest <= value <= largest:
        raise InputError(flag, value, rule)
    return value


def check_days(days: float | None) -> float | None:
    """--days: simulated days, finite, > 0 and at most MAX_DAYS (None: the workload's own)."""
    if days is not None and not (math.isfinite(days) and 0 < days <= MAX_DAYS):
        raise InputError("--days", days, f"must be a number of days > 0 (at most {MAX_DAYS:,g})")
    return days


def check_seed(seed: int | None) -> int | None:
    """--seed: the seed of the generators and random policies (None: not given)."""
    if seed is None:
        return None
    return _whole_in("--seed", seed, 0, MAX_SEED, "must be a whole number >= 0 (at most 2^63-1)")


def check_pods(pods: int) -> int:
    """--pods: how many pods of each job to list."""
    rule = f"must be a whole number >= 0 (at most {MAX_PODS_PER_JOB:,})"
    return _whole_in("--pods", pods, 0, MAX_PODS_PER_JOB, rule)


def check_count(flag: str, value: int, largest: int) -> int:
    """A count of things (--workers, --seeds, a builder's --racks...): 1 to `largest`."""
    return _whole_in(flag, value, 1, largest, f"must be a whole number >= 1 (at most {largest:,})")


def check_traces_dir(path: str | None) -> str | None:
    """--traces-dir: an existing folder (None: $TOPOSCHED_TRACES or ../shared/traces). Which
    trace files it must hold is each workload's rule, said when the workload is read."""
    if path is not None and not os.path.isdir(path):
        what = "is not a folder" if os.path.exists(path) else "not found"
        raise InputError(
            "--traces-dir",
            Path(path),
            f"{what}: must be an existing folder holding itp/ and openb/ (or the openb traces "
            "themselves); see the README for where the public traces come from",
        )
    return path


def check_workload_options(
    workload: str,
    gpus: int | None,
    seed: int | None,
    traces_dir: str | None,
    teams: int | None = None,
) -> None:
    """Refuse an option the workload named does not read (catalog.WORKLOAD_OPTIONS) rather
    than ignore it, and a --gpus it cannot be built on, with that workload's rule: ai2 and itp
    build whole 8-GPU nodes (at least one); frontier shrinks its fleet by whole racks in each
    of its blocks. None is an option not given."""
    given = (
        ("--gpus", WorkloadOption.GPUS, gpus),
        ("--seed", WorkloadOption.SEED, seed),
        ("--traces-dir", WorkloadOption.TRACES_DIR, traces_dir),
        ("--teams", WorkloadOption.TEAMS, teams),
    )
    for flag, option, value in given:
        unread = None if value is None else unread_option_rule(workload, option)
        if unread is not None:
            raise InputError(flag, value, unread)
    if gpus is None:
        return
    kind = workload_kind(workload)
    smallest = FRONTIER_BLOCKS * RACK_GPUS
    if kind is WorkloadKind.FRONTIER and not smallest <= gpus <= FRONTIER_GPUS:
        rule = (
            f"the frontier fleet holds {smallest:,} to {FRONTIER_GPUS:,} GPUs (whole NVL72 racks "
            f"in each of its {FRONTIER_BLOCKS} blocks, so a multiple of {smallest:,}; other "
            "sizes are rounded); leave --gpus out for the full fleet"
        )
    elif kind in (WorkloadKind.AI2, WorkloadKind.ITP) and gpus < NODE_GPUS:
        rule = (
            f"the {kind.value} workload's cluster has 8-GPU nodes: at least {NODE_GPUS} GPUs "
            "(other sizes are rounded to whole nodes)"
        )
    else:
        return
    raise InputError("--gpus", gpus, rule)
