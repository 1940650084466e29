"""The explicit limits on what toposched reads: every loader checks its input against these.

They bound what one value may cost (memory, time, integer width), not what a real cluster or job
needs: each is far above the largest real case. docs/limits.md lists them with their reasons.
"""

from __future__ import annotations

from toposched.cluster.errors import InputError

__all__ = [
    "MAX_ALIAS_FACTOR",
    "MAX_ALIAS_NODES",
    "MAX_CPU_MILLI",
    "MAX_FILE_BYTES",
    "MAX_GPUS_PER_NODE",
    "MAX_GPUS_PER_POD",
    "MAX_MEMORY_MIB",
    "MAX_NAME_LENGTH",
    "MAX_NODES",
    "MAX_PODS_PER_JOB",
    "MAX_OPTION_GPUS",
    "MAX_PRIORITY",
    "MAX_TEAMS",
    "NODE_GPUS",
    "check_gpus",
    "check_one_node_gpus",
]

MAX_NAME_LENGTH = 253
"""Characters in a name (job, node, level, domain label, GPU model) and in an account path: a DNS
subdomain, so that a name can also label a Kubernetes object."""

MAX_GPUS_PER_NODE = 64
"""GPUs on one node; GPU counts per node are stored as int8, and real nodes have a few dozen."""

MAX_GPUS_PER_POD = MAX_GPUS_PER_NODE
"""Whole GPUs one pod asks for: a pod runs on one node."""

MAX_NODES = 1 << 22
"""Nodes in one cluster (4,194,304): sixteen times the 1M-GPU fleet's 250,020 nodes."""

MAX_PODS_PER_JOB = 1 << 22
"""Pods in one job (4,194,304): four times the 1M-GPU fleet's GPU count. A gang is placed all or
nothing, so a larger one could never run."""

MAX_CPU_MILLI = 1 << 40
"""CPU of one node or one pod, in millicores (about 1.1 billion cores). With at most MAX_NODES
nodes, sums over a whole cluster stay within int64."""

MAX_MEMORY_MIB = 1 << 40
"""Memory of one node or one pod, in MiB (1 EiB). Sums stay within int64 as for CPU."""

MAX_PRIORITY = 1_000_000_000
"""A job's priority lies from -MAX_PRIORITY to MAX_PRIORITY."""

MAX_FILE_BYTES = 64 << 20
"""Bytes in one YAML or JSON file (64 MiB): a 250,000-node cluster description is about 15 MB."""

MAX_ALIAS_NODES = 100_000
"""YAML aliases (`*name`) may expand a document to this many values (keys, scalars, lists and
mappings counted alike), or to MAX_ALIAS_FACTOR times the values written if that is more: enough
for `<<: *defaults` on every node, never the exponential expansion of a "billion laughs" file."""

MAX_ALIAS_FACTOR = 10

MAX_TEAMS = 100
"""Teams a replay's jobs may be split among (`simulate --teams`)."""

NODE_GPUS = 8
"""GPUs per node of the clusters built on 8-GPU nodes (the ai2 and itp workloads)."""
MAX_OPTION_GPUS = MAX_NODES * NODE_GPUS
"""The most GPUs `--gpus` may ask for: the node limit in 8-GPU nodes."""


def check_gpus(gpus: int | None) -> int | None:
    """`--gpus`: a cluster size in GPUs (None: the workload's own)."""
    if gpus is not None and not 1 <= gpus <= MAX_OPTION_GPUS:
        rule = f"must be a whole number of GPUs >= 1 (at most {MAX_OPTION_GPUS:,})"
        raise InputError("--gpus", gpus, rule)
    return gpus


def check_one_node_gpus(gpus: int | None) -> int | None:
    """`--gpus` where the cluster is one node, this machine (`serve`): the shared rule, then a
    node's own limit of GPUs."""
    if check_gpus(gpus) is not None and gpus is not None and gpus > MAX_GPUS_PER_NODE:
        rule = (
            f"the served cluster is one node, this machine, and a node holds at most "
            f"{MAX_GPUS_PER_NODE} GPUs; give a cluster file (--cluster) for more"
        )
        raise InputError("--gpus", gpus, rule)
    return gpus
