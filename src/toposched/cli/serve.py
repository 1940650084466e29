"""`toposched serve`: the scheduler as a service (HTTP API, durable store, a backend)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys

from toposched.cli.policy_options import add_policy_options, policy_settings
from toposched.cli.simulate_values import (
    FULL_CYCLE_HELP,
    full_cycle_every,
    full_cycle_settings,
)
from toposched.cluster.errors import InputError

# The service's HTTP stack, backends and compiled loops load when a server starts; its
# configuration (toposched.service.config) is light, so `--help` and every option error,
# `--gpus`'s included, answer without them.
BACKENDS = ("local", "dry-run", "ray")
DEFAULT_STORE = "toposched-state/toposched.db"
DEFAULT_MAX_BODY = 1 << 20
"""toposched.service.config's (tests/test_cli_start.py checks they agree)."""

DESCRIPTION = """\
Run toposched as a service: jobs come in over an HTTP API (docs/api.md; OpenAPI at /docs),
every accepted job and decision is committed to a store before it is acknowledged or carried
out, and a backend starts and stops the pods. After a crash (even kill -9), starting again on
the same store rebuilds the queue and the running jobs and reconciles with the backend.

The cluster is this machine (--gpus N, real or pretended GPUs), a cluster file (--cluster,
as for `toposched cluster show`) or the simulated 1,000,080-GPU fleet (--fleet million, with
--backend dry-run). Budgets come from --budgets (the budget tree YAML); without it one
account, `default`, owns everything. Without --tokens the API is open to anyone who can reach
it, which is allowed only on a loopback address.

The scheduling policy takes the flags `toposched simulate` does (--eviction-worth,
--checkpoint-wait, --unallocated-headroom, --unallocated-order and the rest, listed below;
docs/preemption.md): measure a policy on a simulated workload, then serve with the same flags.
Without them the scheduler runs its default contract.

A web dashboard is served at / and Prometheus metrics at /metrics (docs/dashboard.md).
"""

EPILOG = """\
examples:
  toposched serve --backend local --gpus 8
      this 8-GPU box; jobs run as processes, logs under toposched-state/
  toposched serve --fleet million --backend dry-run --store /tmp/fleet.db
      load-test a simulated million-GPU fleet; jobs "finish" after their expected_runtime
  toposched serve --cluster cluster.yaml --budgets budgets.yaml --tokens tokens.yaml \\
      --host 0.0.0.0 --ssl-keyfile key.pem --ssl-certfile cert.pem
      a shared service with tokens and TLS
  toposched serve --cluster cluster.yaml --budgets budgets.yaml --eviction-worth 1 \\
      --eviction-worth-owed --eviction-loss-budget 100 --checkpoint-wait 1h
      evictions only when they pay, at most 100 GPU-hours thrown away a day, victims'
      checkpoints waited for up to an hour
  toposched serve token add alice --role team --account research/team-a --tokens tokens.yaml
      print a new token for alice once (only its SHA-256 is stored)

then, e.g.:
  curl -s localhost:8080/v1/ready
  curl -s -X POST localhost:8080/v1/jobs -H 'Content-Type: application/yaml' --data-binary @job.yaml
  curl -s localhost:8080/v1/jobs/train-7b/explain
"""

log = logging.getLogger("toposched.service")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "serve",
        help="run the scheduler as a service (HTTP API, durable store, backend)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _server_options(parser)
    sub = parser.add_subparsers(dest="serve_command", metavar="{token}")
    token = sub.add_parser("token", help="manage API tokens").add_subparsers(
        dest="token_command", metavar="{add}", required=True
    )
    add = token.add_parser(
        "add",
        help="make a token, print it once, store its hash",
        description="Make a new token for NAME, store its SHA-256 in the token file (created "
        "if missing, mode 0600) and print the token once. Restart the server to load it.",
        epilog="example:\n  toposched serve token add ci --role team --account prod "
        "--tokens tokens.yaml",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add.add_argument("name", metavar="NAME", help="who holds the token, e.g. team-a or ops")
    add.add_argument(
        "--role",
        choices=("team", "admin", "metrics"),
        required=True,
        help="team: its accounts' jobs only; admin: everything; metrics: /metrics only",
    )
    add.add_argument(
        "--account",
        action="append",
        default=[],
        metavar="A",
        help="an account (and its sub-accounts) a team token may use; repeat",
    )
    add.add_argument("--tokens", required=True, metavar="FILE", help="the token file")
    parser.set_defaults(handler=run)


def _server_options(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    add("--port", type=int, default=8080, help="port (default 8080)")
    add(
        "--store",
        default=DEFAULT_STORE,
        metavar="PATH|URL",
        help=f"SQLite file of the durable state (default ./{DEFAULT_STORE}), or a "
        "postgresql://user@host/db URL (needs toposched[postgresql])",
    )
    add(
        "--backend",
        choices=BACKENDS,
        default="dry-run",
        help="local: run every pod as a process on this machine, whatever node it is placed "
        "on; dry-run: simulate (default); ray: run pods on the Ray cluster at --ray-address, "
        "whose labelled nodes are the cluster",
    )
    add(
        "--ray-address",
        metavar="HOST:PORT",
        help="with --backend ray: the Ray cluster's head (HOST:PORT), or 'auto' for the cluster "
        "this machine is part of",
    )
    add(
        "--ray-levels",
        default="rack",
        metavar="LEVELS",
        help="with --backend ray: the topology levels, outermost first, comma-separated, each a "
        "Ray node label, e.g. zone,block,rack (default rack)",
    )
    cluster = parser.add_mutually_exclusive_group()
    cluster.add_argument(
        "--gpus",
        type=int,
        metavar="N",
        help="one node, this machine, with N GPUs, 1 to 64 (default: 8)",
    )
    cluster.add_argument("--cluster", metavar="FILE", help="cluster description YAML/JSON/CSV")
    cluster.add_argument(
        "--fleet", choices=("million",), help="the simulated 1,000,080-GPU GB300 fleet"
    )
    add("--budgets", metavar="FILE", help="budget tree YAML used when the store has none")
    add("--tokens", metavar="FILE", help="token file (see `serve token add`)")
    add(
        "--state-dir",
        default="toposched-state",
        metavar="DIR",
        help="pid file and pod logs (default ./toposched-state)",
    )
    add(
        "--max-body",
        type=int,
        default=DEFAULT_MAX_BODY,
        metavar="BYTES",
        help=f"largest request body accepted (default {DEFAULT_MAX_BODY})",
    )
    add(
        "--tick",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="how often the backend is polled and a cycle runs without events (default 1)",
    )
    add(
        "--full-cycle-every",
        type=full_cycle_every,
        metavar="D|always",
        help=FULL_CYCLE_HELP,
    )
    add("--ssl-keyfile", metavar="FILE", help="TLS private key (serve HTTPS)")
    add("--ssl-certfile", metavar="FILE", help="TLS certificate chain")
    add(
        "--log-level",
        default="info",
        choices=("debug", "info", "warning", "error"),
        help="how much the server logs to stderr (default info)",
    )
    add_policy_options(parser)


def run(args: argparse.Namespace) -> int:
    if args.serve_command == "token":
        return _add_token(args)
    from toposched.service.config import ServiceConfig

    config = ServiceConfig(
        host=args.host,
        port=args.port,
        store=args.store,
        backend=args.backend,
        gpus=args.gpus,
        cluster=args.cluster,
        fleet=args.fleet,
        budgets=args.budgets,
        tokens=args.tokens,
        state_dir=args.state_dir,
        max_body=args.max_body,
        tick_s=args.tick,
        ssl_keyfile=args.ssl_keyfile,
        ssl_certfile=args.ssl_certfile,
        ray_address=args.ray_address,
        ray_levels=tuple(level for level in args.ray_levels.split(",") if level),
    )
    config.check()  # before the HTTP stack loads: a bad option answers sooner
    # The policy's settings are built after: building them loads the scheduler's modules.
    settings = {**policy_settings(args), **full_cycle_settings(args.full_cycle_every)}
    config = dataclasses.replace(config, scheduler=settings)
    from toposched.service.server import serve

    return serve(config, args.log_level)


def _add_token(args: argparse.Namespace) -> int:
    from rich.console import Console

    from toposched.service.auth import add_token

    if args.role == "admin" and args.account:
        raise InputError("--account", args.account, "an admin token has no accounts")
    token = add_token(args.tokens, args.name, args.role, args.account)
    err = Console(stderr=True)
    err.print(f"token for {args.name} ({args.role}) added to {args.tokens}; it is shown once:")
    sys.stdout.write(token + "\n")
    return 0
