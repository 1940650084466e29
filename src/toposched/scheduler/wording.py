"""The words of the scheduler's reasons: quantities and lists as users read them."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.topology import Topology
from toposched.scheduler.jobs import Job
from toposched.scheduler.refusals import Refusal

_VICTIM_KINDS = {
    "unallocated-victim": "unallocated",
    "higher-priority": "of lower priority in the team",
    "better-fair-share": "of accounts further above their share",
    "reclaim-budget": "of accounts running beyond their budget",
}


def needs(job: Job) -> str:
    """E.g. "needs 2 pods of 4 GPUs (8 GPUs)"."""
    request = job.request
    text = f"needs {request.pods:,} pod{'s' if request.pods > 1 else ''} of "
    text += request.describe_pod_plain()
    if request.gpus_per_pod and not request.is_fractional and request.pods > 1:
        text += f" ({request.pods * request.gpus_per_pod:,} GPUs)"
    return text


def victims_by_rule(rules: Iterable[str]) -> str:
    """E.g. "2 unallocated jobs and 1 job of lower priority in the team"."""
    counts: dict[str, int] = {}
    for rule in rules:
        counts[rule] = counts.get(rule, 0) + 1
    parts = []
    for rule, count in counts.items():
        kind = _VICTIM_KINDS.get(rule, f"({rule})")
        noun = "job" if count == 1 else "jobs"
        parts.append(
            f"{count} {kind} {noun}" if kind == "unallocated" else f"{count} {noun} {kind}"
        )
    return " and ".join(parts)


def hours(seconds: float) -> str:
    """E.g. "1.5 h", "20 min"."""
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def gpus_text(gpus: float) -> str:
    """GPUs as written in reasons: whole numbers plain, fractions to a tenth."""
    return f"{gpus:,.0f}" if float(gpus).is_integer() else f"{gpus:,.1f}"


def domain_of(topology: Topology, nodes: NDArray[np.int64]) -> str:
    """The smallest domain holding every node, as "<level> <name>"."""
    for level in range(len(topology.domain_levels) - 1, 0, -1):
        domains = topology.node_domain[level][nodes]
        if (domains == domains[0]).all():
            name = topology.domain_levels[level]
            return f"{name} {topology.domain_name(level, int(domains[0]))}"
    return "cluster"


def no_preemption(reason: str, refusal: Refusal, note: str = "") -> str:
    """`reason`, and why no preemption makes room (with `note`, what the job should know)."""
    return f"{reason}; no preemption: {refusal.reason}{note}"


def no_defragmentation(reason: str, refusal: Refusal) -> str:
    """`reason`, and why no moves open a domain for the job."""
    return f"{reason}; no defragmentation: {refusal.reason}"
