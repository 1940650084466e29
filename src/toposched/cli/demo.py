"""`toposched demo`: the main job on an embedded default."""

from __future__ import annotations

import argparse
import time
from typing import Any

from rich.console import Console

from toposched.cli.summary import cluster_table
from toposched.cluster.builders import million_gpu_cluster
from toposched.cluster.state import ClusterState


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "demo",
        help="build the 1,000,080-GPU GB300 fleet and print its summary",
        description="Build the reference 1,000,080-GPU GB300 NVL72 fleet (2 zones x 15 spine "
        "blocks x 463 racks x 18 nodes x 4 GPUs) with its array-backed state, and print a "
        "summary: levels, domains per level, nodes, GPUs, memory used and build time.",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    state = ClusterState(million_gpu_cluster())
    elapsed = time.perf_counter() - started
    Console().print(cluster_table(state, "toposched: 1,000,080-GPU GB300 NVL72 fleet", elapsed))
    return 0
