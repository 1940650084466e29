"""Client commands about the fleet and the budgets: `nodes`, `drain`, `cordon`, `uncordon`
and `accounts`."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.table import Table

from toposched.cli.client import ApiClient, Node, NodeAction
from toposched.cli.remote import add_client_parser, client_command, gpus, print_json
from toposched.cluster.errors import InputError

JOBS_SHOWN = 3
PAGE_SIZE = 1000

NODE_ACTIONS = {
    NodeAction.DRAIN: (
        "no new work on a node; the work running there finishes (admin)",
        "Drain a node: the scheduler places nothing new on it, and the jobs running there "
        "run to their end. Use it before maintenance; `uncordon` brings the node back.",
    ),
    NodeAction.CORDON: (
        "no new work on a node (admin)",
        "Cordon a node: the scheduler places nothing new on it; running work is left alone. "
        "`uncordon` brings it back.",
    ),
    NodeAction.UNCORDON: (
        "a drained or cordoned node takes work again (admin)",
        "Uncordon a node: it is healthy again and the scheduler places work on it.",
    ),
}


def register(commands: Any) -> None:
    nodes = add_client_parser(
        commands,
        "nodes",
        "nodes with health and free GPUs, or one row per domain of a level",
        "List the cluster's nodes: health, GPU model, GPUs free of the total and the jobs "
        "on each. With --level, one row per domain of that topology level (rack, zone, ...): "
        "nodes, healthy nodes and GPUs free.",
        "  toposched nodes\n  toposched nodes --level rack",
    )
    nodes.add_argument(
        "--level", metavar="L", help="one row per domain of this topology level (e.g. rack)"
    )
    nodes.add_argument(
        "--limit", metavar="N", type=int, default=1000, help="show at most N nodes (default 1000)"
    )
    nodes.set_defaults(handler=client_command(_nodes))
    for action, (help_text, description) in NODE_ACTIONS.items():
        parser = add_client_parser(
            commands,
            action.value,
            help_text,
            description,
            f"  toposched {action.value} node-17",
        )
        parser.add_argument("node", metavar="NODE", help="the node's name (see `toposched nodes`)")
        parser.set_defaults(handler=client_command(_node_action), action=action)
    accounts = add_client_parser(
        commands,
        "accounts",
        "accounts: budgets, GPUs in use, usage and fair-share standing",
        "List the accounts of the budget tree: the GPUs each is budgeted and running, its "
        "usage over the fair-share window in GPU-hours, its fair share of the cluster (its "
        "share times its parents' shares) and how many of its jobs are pending and running.",
        "  toposched accounts\n  toposched accounts --json | jq .tree",
    )
    accounts.set_defaults(handler=client_command(_accounts))


def _nodes(args: argparse.Namespace, client: ApiClient) -> int:
    console = Console()
    if args.level:
        answer = client.domains(args.level)
        if args.json:
            print_json(answer)
            return 0
        table = Table(title=f"{len(answer['domains']):,} domains of level {args.level}")
        for column in ("domain", "nodes", "healthy", "GPUs", "free"):
            table.add_column(column, justify="left" if column == "domain" else "right")
        for domain in answer["domains"]:
            table.add_row(
                domain["domain"],
                f"{domain['nodes']:,}",
                f"{domain['healthy_nodes']:,}",
                gpus(domain["gpus"]),
                gpus(domain["free_gpus"]),
            )
        console.print(table)
        return 0
    if args.limit < 1:
        raise InputError("--limit", args.limit, "must be >= 1")
    found: list[Node] = []
    after: str | None = None
    while True:
        page = client.nodes(min(PAGE_SIZE, args.limit - len(found)), after)
        found.extend(page["nodes"])
        after = page["next"]
        if after is None or len(found) >= args.limit:
            break
    if args.json:
        print_json({"nodes": found, "next": after})
        return 0
    _print_nodes(found)
    if after is not None:
        console.print("more nodes: raise --limit, or see --level for a summary", style="dim")
    return 0


def _print_nodes(nodes: list[Node]) -> None:
    table = Table(title=f"{len(nodes):,} nodes")
    for column in ("node", "health", "model", "GPUs", "free", "jobs"):
        table.add_column(column, justify="right" if column in ("GPUs", "free") else "left")
    for node in nodes:
        jobs = node.get("jobs") or []
        shown = ", ".join(jobs[:JOBS_SHOWN]) + (
            f" +{len(jobs) - JOBS_SHOWN}" if len(jobs) > JOBS_SHOWN else ""
        )
        health = node["health"]
        style = "green" if health == "healthy" else "yellow"
        table.add_row(
            node["name"],
            f"[{style}]{health}[/]",
            node.get("gpu_model") or "-",
            gpus(node["gpus"]),
            gpus(node["free_gpus"]),
            shown or "-",
        )
    Console().print(table)


def _node_action(args: argparse.Namespace, client: ApiClient) -> int:
    node = client.node_action(args.node, args.action)
    if args.json:
        print_json(node)
        return 0
    jobs = node.get("jobs") or []
    running = f"; {len(jobs):,} job{'s' if len(jobs) != 1 else ''} on it" if jobs else ""
    Console().print(f"node [bold]{node['name']}[/]: {node['health']}{running}", highlight=False)
    return 0


def _accounts(args: argparse.Namespace, client: ApiClient) -> int:
    answer = client.accounts()
    if args.json:
        print_json(answer)
        return 0
    table = Table(title="accounts")
    table.add_column("account")
    for column in (
        "budget GPUs",
        "running GPUs",
        "usage GPU-h",
        "fair share",
        "pending",
        "running",
    ):
        table.add_column(column, justify="right")
    for row in answer["accounts"]:
        budget = row.get("budget_gpus")
        share = row.get("fair_share")
        table.add_row(
            row["account"],
            "-" if budget is None else gpus(budget),
            gpus(row.get("running_gpus", 0)),
            f"{row.get('usage_gpu_hours', 0):,.1f}",
            f"{share:.2f}" if isinstance(share, int | float) else str(share or "-"),
            f"{row.get('pending', 0):,}",
            f"{row.get('running', 0):,}",
        )
    Console().print(table)
    return 0
