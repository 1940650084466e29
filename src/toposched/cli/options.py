"""The rules of the options several commands share: one check and one message per flag.

Each `*_option` is an argparse `type`: it turns the text given into the value, or refuses it
with `'TEXT' is invalid: RULE`, which argparse prints after the flag's name (exit code 2). A rule
that depends on another option (how many GPUs a workload can be built on) is checked once the
arguments are read, by `check_workload_gpus`, and reported as an InputError naming the flag.
docs/limits.md lists every rule.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from toposched.cluster.errors import InputError, shown
from toposched.cluster.limits import MAX_NODES, MAX_PODS_PER_JOB
from toposched.workloads.catalog import FRONTIER_BLOCKS, FRONTIER_GPUS

__all__ = [
    "GPUS_RULE",
    "MAX_DAYS",
    "MAX_OPTION_GPUS",
    "MAX_SEED",
    "check_workload_gpus",
    "count_option",
    "days_option",
    "gpus_option",
    "pods_option",
    "seed_option",
    "seconds_option",
]

NODE_GPUS = 8
"""GPUs per node of the workloads built on 8-GPU nodes (ai2, itp)."""
MAX_OPTION_GPUS = MAX_NODES * NODE_GPUS
"""The most GPUs --gpus may ask for: the node limit (docs/limits.md) in 8-GPU nodes."""
MAX_DAYS = 3650.0
"""The longest simulation --days may ask for: ten years."""
MAX_SEED = 2**63 - 1
"""Seeds are stored as int64 beside the results."""

GPUS_RULE = f"must be a whole number of GPUs from 1 to {MAX_OPTION_GPUS:,}"
DAYS_RULE = f"must be a number of days > 0 and at most {MAX_DAYS:,g}"
SEED_RULE = f"must be a whole number from 0 to {MAX_SEED:,}"


def _invalid(text: str, rule: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"{shown(text)} is invalid: {rule}")


def _whole(text: str, rule: str, smallest: int, largest: int) -> int:
    """`text` as a whole number from `smallest` to `largest`, or refused with `rule`."""
    digits = text.strip().replace("_", "")
    if not digits.lstrip("+-").isdigit() or len(digits) > 25:
        raise _invalid(text, rule)
    value = int(digits)
    if not smallest <= value <= largest:
        raise _invalid(text, rule)
    return value


def gpus_option(text: str) -> int:
    """--gpus: a cluster size in GPUs. Where a workload needs more, or rounds to whole nodes or
    racks, `check_workload_gpus` says so as that workload's rule."""
    return _whole(text, GPUS_RULE, 1, MAX_OPTION_GPUS)


def days_option(text: str) -> float:
    """--days: simulated days, finite, > 0 and at most MAX_DAYS."""
    try:
        value = float(text)
    except ValueError:
        raise _invalid(text, DAYS_RULE) from None
    if not (math.isfinite(value) and 0 < value <= MAX_DAYS):
        raise _invalid(text, DAYS_RULE)
    return value


def seed_option(text: str) -> int:
    """--seed: the seed of the generators and random policies."""
    return _whole(text, SEED_RULE, 0, MAX_SEED)


def pods_option(text: str) -> int:
    """--pods: how many pods of each job to list."""
    return _whole(
        text, f"must be a whole number from 0 to {MAX_PODS_PER_JOB:,}", 0, MAX_PODS_PER_JOB
    )


def count_option(largest: int) -> Callable[[str], int]:
    """A type for a count of things (--workers, --seeds, a builder's --racks...): a whole
    number from 1 to `largest`."""
    rule = f"must be a whole number from 1 to {largest:,}"

    def count(text: str) -> int:
        return _whole(text, rule, 1, largest)

    return count


def seconds_option(positive: bool) -> Callable[[str], float]:
    """A type for a number of seconds: finite and > 0 (`positive`) or >= 0."""
    rule = f"must be a number of seconds {'> 0' if positive else '>= 0'}"

    def seconds(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise _invalid(text, rule) from None
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            raise _invalid(text, rule)
        return value

    return seconds


def check_workload_gpus(workload: str, gpus: int | None) -> None:
    """Refuse a --gpus the workload named cannot be built on, with that workload's rule: ai2
    and itp build whole 8-GPU nodes (at least one); frontier shrinks its fleet by whole racks
    in each of its blocks; openb and workload files bring their own cluster."""
    if gpus is None:
        return
    smallest = FRONTIER_BLOCKS * 72
    if workload == "frontier" and not smallest <= gpus <= FRONTIER_GPUS:
        rule = (
            f"the frontier fleet holds {smallest:,} to {FRONTIER_GPUS:,} GPUs (whole NVL72 racks "
            f"in each of its {FRONTIER_BLOCKS} blocks, so a multiple of {smallest:,}; other "
            "sizes are rounded); leave --gpus out for the full fleet"
        )
    elif workload.split(":")[0] in ("ai2", "itp") and gpus < NODE_GPUS:
        name = workload.split(":")[0]
        rule = (
            f"the {name} workload's cluster has 8-GPU nodes: at least {NODE_GPUS} GPUs (other "
            "sizes are rounded to whole nodes)"
        )
    elif workload.split(":")[0] == "openb":
        rule = "the openb workload runs on its trace's own cluster: leave --gpus out"
    elif workload.split(":")[0] not in ("ai2", "itp", "frontier"):
        rule = "a workload file brings its own cluster: leave --gpus out"
    else:
        return
    raise InputError("--gpus", gpus, rule)
