"""`toposched place`: place jobs from YAML/JSON files on a cluster, one after another."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
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
    from toposched.placement.job_sets import JobSets, JobSetsPlacement
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
README for the fields). A job of several pod sets (`pod_sets`) is placed every set or none,
and shown set by set, its pods numbered set after set (docs/placement.md); an elastic set
(`min_pods`) shows the pods it got, as many as fit up to its `pods`.

The cluster is a YAML/JSON description or an openb node CSV (see `toposched cluster show
--help`), or --fleet: the 1,000,080-GPU GB300 fleet at 70% occupancy that `toposched bench
placement` uses.
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
    """One job's placement (or why not), the wall time of its search, and what it asks."""

    job: JobSpec
    result: PlacementResult | JobSetsPlacement
    seconds: float
    asks: str


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

    state = ClusterState(topology) if fleet is None else fleet
    policy = policy_by_name(args.policy, seed=args.seed)
    outcomes = [
        _place(state, job, request, policy) for job, request in zip(jobs, requests, strict=True)
    ]
    if args.json:
        print(json.dumps(_as_json(state, cluster_name, args.policy, outcomes), indent=2))
    else:
        _print_tables(state, cluster_name, args.policy, outcomes, args.pods)
    return 0 if all(_placed(outcome) for outcome in outcomes) else 1


def _place(
    state: ClusterState, job: JobSpec, request: GangRequest | JobSets, policy: Any
) -> Outcome:
    """Place one job (every set of it, or none) and hold what it takes."""
    from toposched.placement.job_sets import JobSets, place_job_sets
    from toposched.placement.search import Placement, Unschedulable, place

    started = time.perf_counter()
    if isinstance(request, JobSets):
        sets = place_job_sets(state, request, policy)
        elapsed = time.perf_counter() - started
        if not isinstance(sets, Unschedulable):
            for role, placement in zip(request.roles, sets.placements, strict=True):
                state.allocate(f"{job.name}[{role.name}]", placement.allocation)
        least = request.minimums or [role.pods for role in request.roles]
        asks = " + ".join(
            _asks(state, role, most) for role, most in zip(request.roles, least, strict=True)
        )
        return Outcome(job, sets, elapsed, asks)
    result = place(state, request, policy)
    elapsed = time.perf_counter() - started
    if isinstance(result, Placement):
        state.allocate(job.name, result.allocation)
    return Outcome(job, result, elapsed, _asks(state, request))


def _asks(state: ClusterState, request: GangRequest, least: int | None = None) -> str:
    """The pods asked, e.g. `8 x 4 GPUs`; an elastic set's from its minimum, `2-8 x 4 GPUs`."""
    pods = f"{request.pods:,}" if least in (None, request.pods) else f"{least:,}-{request.pods:,}"
    return f"{pods} x {request.describe_pod(state.topology)}"


def _placed(outcome: Outcome) -> bool:
    from toposched.placement.search import Unschedulable

    return not isinstance(outcome.result, Unschedulable)


def _check_against(job: JobInFile, cluster: CheckedCluster) -> None:
    """The errors `_request` would find, before the cluster's arrays are built."""
    from toposched.placement.request import check_against_cluster

    try:
        if job.spec.pod_sets is not None:
            from toposched.placement.job_sets import check_sets_against_cluster

            check_sets_against_cluster(job.spec, cluster.levels, cluster.gpu_model_names)
        else:
            check_against_cluster(job.spec, cluster.levels, cluster.gpu_model_names)
    except InputError as error:
        raise job.locate(error) from None


def _request(job: JobInFile, topology: Topology) -> GangRequest | JobSets:
    from toposched.placement.job_sets import JobSets
    from toposched.placement.request import GangRequest

    try:
        if job.spec.pod_sets is not None:
            return JobSets.from_spec(job.spec, topology)
        return GangRequest.from_spec(job.spec, topology)
    except InputError as error:
        raise job.locate(error) from None


def _domains_used(state: ClusterState, placements: Sequence[Placement]) -> dict[str, int]:
    """Distinct domains the gangs touch together at every level below the cluster, and
    nodes."""
    import numpy as np

    nodes = np.concatenate([placement.allocation.nodes for placement in placements])
    topology = state.topology
    levels = topology.domain_levels
    used = {
        levels[level]: int(np.unique(topology.node_domain[level][nodes]).size)
        for level in range(1, len(levels))
    }
    used["node"] = int(np.unique(nodes).size)
    return used


def _where(used: dict[str, int]) -> str:
    return ", ".join(
        f"{count:,} {level}{'' if count == 1 else 's'}" for level, count in used.items()
    )


def _pod_rows(
    state: ClusterState, placement: Placement, limit: int | None, first_rank: int = 0
) -> list[dict[str, Any]]:
    """The pods of `placement` (the first `limit`), numbered by rank from `first_rank`."""
    allocation = placement.allocation
    names = state.topology.node_names
    count = allocation.pods if limit is None else min(limit, allocation.pods)
    rows = []
    for pod in range(count):
        row: dict[str, Any] = {
            "pod": first_rank + pod,
            "node": names[int(allocation.nodes[pod])],
            "gpus": [int(gpu) for gpu in allocation.gpus[pod]],
        }
        if allocation.gpu_milli != MILLI_PER_GPU and allocation.gpus.shape[1]:
            row["gpu_milli"] = allocation.gpu_milli
        rows.append(row)
    return rows


def _set_parts(
    state: ClusterState, placed: JobSetsPlacement, limit: int | None
) -> list[dict[str, Any]]:
    """Each set of a placed job: its name, asks, pods placed (an elastic set's as many as
    fitted), ranks, domains and (the first `limit`) pods."""
    from toposched.placement.job_sets import set_ranks

    sets = placed.sets
    least = sets.minimums or [role.pods for role in sets.roles]
    parts = []
    for (name, first, last), role, most, placement in zip(
        set_ranks(placed.placed_sets), sets.roles, least, placed.placements, strict=True
    ):
        parts.append(
            {
                "name": name,
                "asks": _asks(state, role, most),
                "placed_pods": last - first,
                "ranks": [first, last - 1],
                "domains_used": _domains_used(state, [placement]),
                "pods": _pod_rows(state, placement, limit, first),
            }
        )
    return parts


def _as_json(
    state: ClusterState,
    cluster_name: str,
    policy: str,
    outcomes: list[Outcome],
) -> dict[str, Any]:
    from toposched.placement.search import Placement, Unschedulable

    results = []
    for job, result, elapsed, _ in outcomes:
        entry: dict[str, Any] = {"job": job.name, "decision_s": elapsed}
        if isinstance(result, Placement):
            entry["placed"] = True
            entry["domains_used"] = _domains_used(state, [result])
            entry["pods"] = _pod_rows(state, result, None)
        elif not isinstance(result, Unschedulable):
            entry["placed"] = True
            entry["domains_used"] = _domains_used(state, result.placements)
            entry["pod_sets"] = _set_parts(state, result, None)
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
    from rich.table import Table

    from toposched.cli.console import output_console
    from toposched.placement.search import Placement, Unschedulable

    console = output_console()
    table = Table(title=f"placements on {cluster_name} (policy {policy}, in order)")
    table.add_column("job")
    table.add_column("asks", justify="right")
    table.add_column("result")
    table.add_column("where / why not")
    table.add_column("decision", justify="right")
    for job, result, elapsed, asks in outcomes:
        if isinstance(result, Placement):
            where = _where(_domains_used(state, [result]))
            table.add_row(job.name, asks, "[green]placed[/]", where, format_timing(elapsed))
        elif not isinstance(result, Unschedulable):
            where = _where(_domains_used(state, result.placements))
            table.add_row(job.name, asks, "[green]placed[/]", where, format_timing(elapsed))
            for part, role in zip(_set_parts(state, result, 0), result.sets.roles, strict=True):
                first, last = part["ranks"]
                taken = (
                    "" if part["placed_pods"] == role.pods else f"{part['placed_pods']:,} pods, "
                )
                table.add_row(
                    f"  set {part['name']}",
                    part["asks"],
                    f"{taken}ranks {first:,}-{last:,}",
                    _where(part["domains_used"]),
                    "",
                )
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
    for job, result, _, _ in outcomes:
        if isinstance(result, Placement):
            rows = _pod_rows(state, result, pods)
            title = f"{job.name}: first {len(rows)} of {result.allocation.pods:,} pods"
            console.print(_pod_table(title, rows))
        elif not isinstance(result, Unschedulable):
            for part in _set_parts(state, result, pods):
                rows = part["pods"]
                first, last = part["ranks"]
                title = f"{job.name}, set {part['name']}: ranks {first:,}-{last:,}"
                if len(rows) < last - first + 1:
                    title += f", first {len(rows)} shown"
                console.print(_pod_table(title, rows))


def _pod_table(title: str, rows: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    shown = Table(title=title)
    shown.add_column("pod", justify="right")
    shown.add_column("node")
    shown.add_column("GPUs")
    for row in rows:
        gpus = ", ".join(str(gpu) for gpu in row["gpus"]) or "-"
        if "gpu_milli" in row:
            gpus += f" ({row['gpu_milli']} milli)"
        shown.add_row(str(row["pod"]), row["node"], gpus)
    return shown
