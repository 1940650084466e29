"""Client commands about the fleet, the budgets and the policy: `nodes`, `drain`, `cordon`,
`uncordon`, `accounts` and `policy`."""

from __future__ import annotations

import argparse
from typing import Any

from rich.text import Text

from toposched.cli.client import ApiClient, Domain, Node, NodeAction
from toposched.cli.remote import (
    Cell,
    Column,
    add_client_parser,
    client_command,
    counted,
    gpus,
    note,
    print_json,
    print_table,
    say,
)
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
    policy = add_client_parser(
        commands,
        "policy",
        "the scheduling policy the server runs: the settings it changed from the defaults",
        "Show the scheduler settings the server runs with that differ from the defaults, as "
        "its scheduling policy flags chose them (`toposched serve --help`, docs/preemption.md): "
        "a rule by its fields, in seconds and GPU-seconds.",
        "  toposched policy\n  toposched policy --json | jq .worth",
    )
    policy.set_defaults(handler=client_command(_policy))


def _nodes(args: argparse.Namespace, client: ApiClient) -> int:
    if args.level:
        answer = client.domains(args.level)
        if args.json:
            print_json(answer)
            return 0
        _print_domains(answer["domains"], args.level)
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
        note("more nodes: raise --limit, or see --level for a summary")
    return 0


def _print_domains(domains: list[Domain], level: str) -> None:
    columns = [Column("domain"), Column("nodes", right=True), Column("healthy", right=True)]
    columns += [Column("GPUs", right=True), Column("free", right=True)]
    rows = [
        [
            domain["domain"],
            f"{domain['nodes']:,}",
            f"{domain['healthy_nodes']:,}",
            gpus(domain["gpus"]),
            gpus(domain["free_gpus"]),
        ]
        for domain in domains
    ]
    print_table(f"{counted(len(domains), 'domain')} of level {level}", columns, rows)


def _print_nodes(nodes: list[Node]) -> None:
    columns = [Column("node"), Column("health"), Column("model")]
    columns += [Column("GPUs", right=True), Column("free", right=True), Column("jobs", cut=True)]
    rows: list[list[Cell]] = []
    for node in nodes:
        jobs = node.get("jobs") or []
        more = f" +{len(jobs) - JOBS_SHOWN}" if len(jobs) > JOBS_SHOWN else ""
        health = node["health"]
        rows.append(
            [
                node["name"],
                Text(health, style="green" if health == "healthy" else "yellow"),
                node.get("gpu_model") or "-",
                gpus(node["gpus"]),
                gpus(node["free_gpus"]),
                ", ".join(jobs[:JOBS_SHOWN]) + more or "-",
            ]
        )
    print_table(counted(len(nodes), "node"), columns, rows)


def _node_action(args: argparse.Namespace, client: ApiClient) -> int:
    node = client.node_action(args.node, args.action)
    if args.json:
        print_json(node)
        return 0
    jobs = node.get("jobs") or []
    running = f"; {counted(len(jobs), 'job')} on it" if jobs else ""
    say(f"node {node['name']}: {node['health']}{running}")
    return 0


def _accounts(args: argparse.Namespace, client: ApiClient) -> int:
    answer = client.accounts()
    if args.json:
        print_json(answer)
        return 0
    accounts = answer["accounts"]
    columns = [Column("account")]
    columns += [
        Column(header, right=True)
        for header in (
            "budget",
            "in use",
            "GPU-h",
            "share",
            "owed GPU-h",
            "delivered",
            "pending",
            "running",
        )
    ]
    rows: list[list[Cell]] = []
    for row in accounts:
        budget = row.get("budget_gpus")
        share = row.get("fair_share")
        rows.append(
            [
                row["account"],
                "-" if budget is None else gpus(budget),
                gpus(row.get("running_gpus", 0)),
                f"{row.get('usage_gpu_hours', 0):,.1f}",
                f"{share:.2f}" if isinstance(share, int | float) else str(share or "-"),
                f"{row.get('owed_gpu_hours', 0):,.1f}",
                "-" if (met := row.get("owed_met")) is None else f"{met:.1%}",
                f"{row.get('pending', 0):,}",
                f"{row.get('running', 0):,}",
            ]
        )
    window = answer.get("owed_window_hours")
    over = f" over the last {window:,.0f} h" if window else ""
    title = (
        f"{counted(len(accounts), 'account')}: GPUs budgeted and in use, GPU-hours used, "
        f"owed and the share of it delivered{over}"
    )
    print_table(title, columns, rows)
    return 0


def _policy(args: argparse.Namespace, client: ApiClient) -> int:
    policy = client.policy()
    if args.json:
        print_json(policy)
        return 0
    if not policy:
        say("the default policy: no setting differs from the defaults")
        return 0
    rows: list[list[Cell]] = [[name, _setting(value)] for name, value in policy.items()]
    print_table(
        f"{counted(len(rows), 'setting')} changed from the defaults",
        [Column("setting"), Column("value", wrap=True)],
        rows,
    )
    return 0


def _setting(value: Any) -> str:
    """A setting in one line: a rule's fields as name=value."""
    if isinstance(value, dict):
        return ", ".join(f"{name}={_setting(part)}" for name, part in value.items())
    if isinstance(value, list):
        return ":".join(_setting(part) for part in value)
    return "none" if value is None else str(value)
