"""`toposched cluster`: build or load a cluster and summarise it."""

from __future__ import annotations

import argparse
import time
from typing import Any

from toposched.cli.options import check_count
from toposched.cluster.errors import InputError
from toposched.cluster.limits import MAX_NODES

# The builders, loaders and rich load when a command runs, not for its parser (--help).

NODES_PER_RACK = 18
"""Compute trays (nodes) of one NVL72 rack."""
NODES_PER_UNIT = 32
"""Nodes of one SuperPOD scalable unit."""
_FLAGS = {
    "zones": "--zones",
    "blocks_per_zone": "--blocks",
    "racks_per_block": "--racks",
    "spine_groups": "--groups",
    "units_per_group": "--units",
    "k": "-k",
    "model": "--model",
}
"""The builders' parameters by the flags that set them, so that errors name the flag."""


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "cluster",
        help="summarise a cluster from a file or a builder",
        description="Summarise a cluster: levels, domains per level, nodes and GPUs.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = actions.add_parser(
        "show",
        help="load a cluster file (YAML/JSON description or openb node CSV) and summarise it",
        description="Load a cluster description and print its summary. YAML/JSON files hold "
        "`levels` (outermost first), optional `gpu_models` {name: memory GiB}, optional "
        "`defaults` for every node, and `nodes`, each with `name`, `labels` (one per level), "
        "`gpus`, `gpu_model`, `cpu` (cores or '500m') and `memory` (MiB or '512Gi'). A .csv "
        "file is read as an openb node list (sn,cpu_milli,memory_mib,gpu,model).",
    )
    show.add_argument("path", help="cluster file (.yaml, .yml, .json or openb .csv)")
    show.set_defaults(handler=run_show)
    build = actions.add_parser(
        "build",
        help="build a standard shape (nvl72, superpod, fattree) and summarise it",
        description="Build a standard cluster shape and print its summary.",
    )
    build.add_argument("shape", choices=["nvl72", "superpod", "fattree"])
    build.add_argument("--zones", type=int, default=1, help="nvl72: zones (default 1)")
    build.add_argument("--blocks", type=int, default=1, help="nvl72: blocks per zone (default 1)")
    build.add_argument("--racks", type=int, default=8, help="nvl72: racks per block (default 8)")
    build.add_argument(
        "--model", default=None, help="GPU model (nvl72: GB300|GB200; superpod: H100|B200)"
    )
    build.add_argument("--groups", type=int, default=1, help="superpod: spine groups (default 1)")
    build.add_argument("--units", type=int, default=4, help="superpod: SUs per group (default 4)")
    build.add_argument("-k", type=int, default=8, help="fattree: arity k, even (default 8)")
    build.set_defaults(handler=run_build)


def run_show(args: argparse.Namespace) -> int:
    from toposched.cluster.loaders import load_topology

    # The file is read before rich and the compiled loops load: a bad one answers sooner.
    # The time shown is reading plus building the state, without those imports.
    started = time.perf_counter()
    topology = load_topology(args.path)
    elapsed = time.perf_counter() - started
    from toposched.cli.console import output_console
    from toposched.cli.summary import cluster_table
    from toposched.cluster.state import ClusterState

    started = time.perf_counter()
    state = ClusterState(topology)
    elapsed += time.perf_counter() - started
    output_console().print(cluster_table(state, f"cluster {args.path}", elapsed))
    return 0


def run_build(args: argparse.Namespace) -> int:
    # The shape's arguments are checked (`toposched.cluster.builders`, light) before the cluster
    # is built and the state and rich load (numpy, the compiled loops): a bad size or model
    # answers at once.
    _check_size(args)
    from toposched.cluster.builders import fat_tree_shape, nvl72_shape, superpod_shape

    try:
        if args.shape == "nvl72":
            shape = nvl72_shape(args.zones, args.blocks, args.racks, model=args.model or "GB300")
        elif args.shape == "superpod":
            shape = superpod_shape(args.groups, args.units, model=args.model or "H100")
        else:
            shape = fat_tree_shape(args.k)
    except InputError as error:
        raise InputError(_FLAGS.get(error.field, error.field), error.value, error.rule) from None
    from toposched.cli.console import output_console
    from toposched.cli.summary import cluster_table
    from toposched.cluster.state import ClusterState

    started = time.perf_counter()
    state = ClusterState(shape.topology())
    elapsed = time.perf_counter() - started
    output_console().print(cluster_table(state, f"{args.shape} cluster", elapsed))
    return 0


def _check_size(args: argparse.Namespace) -> None:
    """Refuse a shape of more nodes than a cluster may hold (docs/limits.md) before building."""
    for flag in ("zones", "blocks", "racks", "groups", "units", "k"):
        check_count(f"-{flag}" if flag == "k" else f"--{flag}", getattr(args, flag), MAX_NODES)
    if args.shape == "nvl72":
        flags = "--zones x --blocks x --racks x 18 nodes"
        nodes = args.zones * args.blocks * args.racks * NODES_PER_RACK
    elif args.shape == "superpod":
        flags = "--groups x --units x 32 nodes"
        nodes = args.groups * args.units * NODES_PER_UNIT
    else:
        flags = "-k^3/4 hosts"
        nodes = args.k**3 // 4
    if nodes > MAX_NODES:
        raise InputError(
            args.shape, f"{nodes:,} nodes", f"{flags} must be at most {MAX_NODES:,} nodes"
        )
