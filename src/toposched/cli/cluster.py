"""`toposched cluster`: build or load a cluster and summarise it."""

from __future__ import annotations

import argparse
import time
from typing import Any

# The builders, loaders and rich load when a command runs, not for its parser (--help).


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
    from rich.console import Console

    from toposched.cli.summary import cluster_table
    from toposched.cluster.loaders import load_topology
    from toposched.cluster.state import ClusterState

    started = time.perf_counter()
    state = ClusterState(load_topology(args.path))
    elapsed = time.perf_counter() - started
    Console().print(cluster_table(state, f"cluster {args.path}", elapsed))
    return 0


def run_build(args: argparse.Namespace) -> int:
    from rich.console import Console

    from toposched.cli.summary import cluster_table
    from toposched.cluster.builders import fat_tree_cluster, nvl72_cluster, superpod_cluster
    from toposched.cluster.state import ClusterState

    started = time.perf_counter()
    if args.shape == "nvl72":
        topology = nvl72_cluster(args.zones, args.blocks, args.racks, model=args.model or "GB300")
    elif args.shape == "superpod":
        topology = superpod_cluster(args.groups, args.units, model=args.model or "H100")
    else:
        topology = fat_tree_cluster(args.k)
    state = ClusterState(topology)
    elapsed = time.perf_counter() - started
    Console().print(cluster_table(state, f"{args.shape} cluster", elapsed))
    return 0
