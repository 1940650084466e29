"""`toposched place`: place jobs from YAML/JSON files on a cluster, one after another."""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING, Any, NamedTuple

from toposched.cli.options import check_pods, check_seed
from toposched.cluster.errors import InputError
from toposched.cluster.units import MILLI_PER_GPU, format_timing

if TYPE_CHECKING:
    from toposched.cluster.loaders import CheckedCluster
    from toposched.cluster.state import ClusterState
    from toposched.cluster.topology import Topology
    from toposched.jobs.files import JobInFile
    from toposched.jobs.spec import JobSpec
    from toposched.placement.request import GangRequest
    from toposched.placement.search import Placement, PlacementResult

# pydantic (the job model), numpy, the compiled loops and rich load when they are needed, in
# that order: `--help` and bad job files answer without any of them (cli/jobcheck.py).
POLICY_NAMES = ("bestfit", "random", "spread")
"""toposched.placement.policies.POLICIES (tests/test_cli_start.py checks they agree)."""

DESCRIPTION = """\
Place jobs on a cluster and show where every pod runs, or exactly why a job cannot run now.
Jobs are placed in the order given (files in order, jobs in a file in order), each placement
taking its GPUs before the next job is tried, as a scheduler would bind them. Nothing is
written anywhere: the cluster file is only read.

A job file holds one job, a list of jobs, a `jobs:` list or several YAML documents (see the
README for the fields). The cluster is a YAML/JSON description or an openb node CSV (see
`toposched cluster show --help`), or --fleet: the 1,000,080-GPU GB300 fleet at 70% occupancy
that `toposched bench placement` uses.
"""

EPILOG = """\
examples:
  toposched place job.yaml --cluster cluster.yaml
  toposched place jobs.yaml --cluster cluster.yaml --pods 8   # also list the first 8 pods
  toposched place pretrain.yaml --fleet --json                # every pod, as JSON
"""


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "place",
        help="place jobs on a cluster: every pod's node and GPUs, or why not",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("jobs", nargs="+", metavar="JOB_FILE", help="job files (.yaml/.json)")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--cluster", metavar="PATH", help="cluster file (.yaml, .json or .csv)")
    where.add_argument(
        "--fleet",
        action="store_true",
        help="the 1,000,080-GPU GB300 fleet at 70%% occupancy (built in a few seconds)",
    )
    parser.add_argument(
        "--policy",
        default="bestfit",
        choices=POLICY_NAMES,
        help="placement policy (default bestfit: the fullest domain that fits, so that whole "
        "domains stay free)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the random policy and the fleet's layout"
    )
    parser.add_argument(
        "--pods",
        type=int,
        default=0,
        metavar="N",
        help="also list the first N pods of every placed job: node and GPU indices (default 0)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print JSON instead of tables, with every pod"
    )
    parser.set_defaults(handler=run)


class Outcome(NamedTuple):
    """One job's placement (or why not) and the wall time of its search."""

    job: JobSpec
    result: PlacementResult
    seconds: float


def run(args: argparse.Namespace) -> int:
    from toposched.cli.jobcheck import check_job_files, check_jobs_against_cluster

    check_pods(args.pods)
    check_seed(args.seed)
    # Every file is read and validated before anything is placed: a bad job later in the list
    # should not leave half the output printed. The light pass checks every job as the job
    # model would, with its rules, before the model loads.
    checked_jobs = check_job_files(args.jobs)
    # The cluster file is checked next, and the jobs against it, before the job model and numpy
    # load (its topology is built after the jobs are read); every job is resolved against the
    # cluster again before the placement engine (the compiled loops) loads: each error answers
    # without what comes after.
    cluster_file = None
    if not args.fleet:
        from toposched.cluster.loaders import read_cluster

        cluster_file = read_cluster(args.cluster)
        check_jobs_against_cluster(checked_jobs, cluster_file.levels, cluster_file.gpu_model_names)
    from toposched.jobs.files import read_job_files

    # Job names must be unique across the files (the same file given twice says so, with file
    # and line), and errors found against the cluster name the job's file and line.
    jobs_read = read_job_files(args.jobs)
    jobs = [job.spec for job in jobs_read]
    fleet = None
    if cluster_file is None:
        from toposched.workloads.fleet import occupied_fleet

        fleet = occupied_fleet(seed=args.seed)
        topology = fleet.topology
        cluster_name = "1,000,080-GPU GB300 fleet at 70% occupancy"
    else:
        for job_read in jobs_read:
            _check_against(job_read, cluster_file)
        topology = cluster_file.topology()
        cluster_name = str(args.cluster)
    requests = [_request(job, topology) for job in jobs_read]
    from toposched.cluster.state import ClusterState
    from toposched.placement.policies import policy_by_name
    from toposched.placement.search import Placement, place

    state = ClusterState(topology) if fleet is None else fleet
    policy = policy_by_name(args.policy, seed=args.seed)
    outcomes: list[Outcome] = []
    for job, request in zip(jobs, requests, strict=True):
        started = time.perf_counter()
        result = place(state, request, policy)
        elapsed = time.perf_counter() - started
        if isinstance(result, Placement):
            state.allocate(job.name, result.allocation)
        outcomes.append(Outcome(job, result, elapsed))
    if args.json:
        print(json.dumps(_as_json(state, cluster_name, args.policy, outcomes), indent=2))
    else:
        _print_tables(state, cluster_name, args.policy, outcomes, args.pods)
    return 0 if all(isinstance(outcome.result, Placement) for outcome in outcomes) else 1


def _check_against(job: JobInFile, cluster: CheckedCluster) -> None:
    """The errors `_request` would find, before the cluster's arrays are built."""
    from toposched.placement.request import check_against_cluster

    try:
        check_against_cluster(job.spec, cluster.levels, cluster.gpu_model_names)
    except InputError as error:
        raise job.locate(error) from None


def _request(job: JobInFile, topology: Topology) -> GangRequest:
    from toposched.placement.request import GangRequest

    try:
        return GangRequest.from_spec(job.spec, topology)
    except InputError as error:
        raise job.locate(error) from None


def _domains_used(state: ClusterState, placement: Placement) -> dict[str, int]:
    """Distinct domains the gang touches at every level below the cluster, and nodes."""
    import numpy as np

    levels = state.topology.domain_levels
    used = {levels[level]: placement.domains_used(state, level) for level in range(1, len(levels))}
    used["node"] = int(np.unique(placement.allocation.nodes).size)
    return used


def _pod_rows(state: ClusterState, placement: Placement, limit: int | None) -> list[dict[str, Any]]:
    allocation = placement.allocation
    names = state.topology.node_names
    count = allocation.pods if limit is None else min(limit, allocation.pods)
    rows = []
    for pod in range(count):
        row: dict[str, Any] = {
            "pod": pod,
            "node": names[int(allocation.nodes[pod])],
            "gpus": [int(gpu) for gpu in allocation.gpus[pod]],
        }
        if allocation.gpu_milli != MILLI_PER_GPU and allocation.gpus.shape[1]:
            row["gpu_milli"] = allocation.gpu_milli
        rows.append(row)
    return rows


def _as_json(
    state: ClusterState,
    cluster_name: str,
    policy: str,
    outcomes: list[Outcome],
) -> dict[str, Any]:
    from toposched.placement.search import Placement

    results = []
    for job, result, elapsed in outcomes:
        entry: dict[str, Any] = {"job": job.name, "decision_s": elapsed}
        if isinstance(result, Placement):
            entry["placed"] = True
            entry["domains_used"] = _domains_used(state, result)
            entry["pods"] = _pod_rows(state, result, None)
        else:
            entry["placed"] = False
            entry["code"] = result.code
            entry["reason"] = result.reason
        results.append(entry)
    return {"cluster": cluster_name, "policy": policy, "results": results}


def _print_tables(
    state: ClusterState,
    cluster_name: str,
    policy: str,
    outcomes: list[Outcome],
    pods: int,
) -> None:
    from rich.console import Console
    from rich.table import Table

    from toposched.placement.search import Placement

    console = Console()
    table = Table(title=f"placements on {cluster_name} (policy {policy}, in order)")
    table.add_column("job")
    table.add_column("asks", justify="right")
    table.add_column("result")
    table.add_column("where / why not")
    table.add_column("decision", justify="right")
    for job, result, elapsed in outcomes:
        request = result.request
        asks = f"{request.pods:,} x {request.describe_pod(state.topology)}"
        if isinstance(result, Placement):
            used = _domains_used(state, result)
            where = ", ".join(
                f"{count:,} {level}{'' if count == 1 else 's'}" for level, count in used.items()
            )
            table.add_row(job.name, asks, "[green]placed[/]", where, format_timing(elapsed))
        else:
            table.add_row(
                job.name, asks, f"[red]{result.code}[/]", result.reason, format_timing(elapsed)
            )
    console.print(table)
    console.print(
        "decision: wall time of the search; a process's first one includes loading the "
        "compiled loops",
        style="dim",
    )
    if pods <= 0:
        return
    for job, result, _ in outcomes:
        if not isinstance(result, Placement):
            continue
        rows = _pod_rows(state, result, pods)
        shown = Table(title=f"{job.name}: first {len(rows)} of {result.allocation.pods:,} pods")
        shown.add_column("pod", justify="right")
        shown.add_column("node")
        shown.add_column("GPUs")
        for row in rows:
            gpus = ", ".join(str(gpu) for gpu in row["gpus"]) or "-"
            if "gpu_milli" in row:
                gpus += f" ({row['gpu_milli']} milli)"
            shown.add_row(str(row["pod"]), row["node"], gpus)
        console.print(shown)
