"""Workload files (YAML, JSON, JSONL): read with errors naming file, line and field; write back.

A workload file holds one mapping:

    format: toposched-workload/1          # optional
    name: my-lab
    description: one line
    cluster: {builder: superpod, spine_groups: 1, units_per_group: 4}
    budget: {accounts: {research: {share: 70, children: {...}}, ops: 30}}
    settings: {horizon: 3d, checkpoint_interval: 1h}
    failures:
      - {time: 2h, nodes: [g0-su1-n3], repair_after: 4h}
    jobs:
      - {name: a, submit: 0, runtime: 20m, class: debug, account: research/nlp,
         pods: 1, resources_per_pod: {gpus: 1}, min_runtime: 10m}

A JSONL file has the same content split by line: the first line is the mapping without `jobs`,
and every further line is one job. Durations are seconds or strings such as 90s, 4h, 1h30m, 3d.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from toposched.cluster.errors import InputError
from toposched.cluster.units import format_duration
from toposched.jobs.rules import check_models_present
from toposched.workloads.model import (
    DEFAULT_CHECKPOINT_INTERVAL,
    Workload,
    WorkloadJob,
    build_cluster,
)
from toposched.workloads.paths import JSONL_SUFFIXES, WORKLOAD_SUFFIXES, check_workload_path
from toposched.workloads.reader import (
    FORMAT,
    ClusterFacts,
    check_against_cluster,
    cluster_facts,
    read_document,
    read_own_fields,
)

if TYPE_CHECKING:
    from toposched.jobs.spec import JobSpec

__all__ = [
    "FORMAT",
    "WORKLOAD_SUFFIXES",
    "check_workload_path",
    "load_workload",
    "save_workload",
    "workload_to_dict",
]


# --- reading -----------------------------------------------------------------------------------


class _ModelRules:
    """`reader.JobRules` by the job model (pydantic), imported when the first job is read."""

    def read(self, fields: dict[str, Any]) -> JobSpec:
        from toposched.jobs.spec import JobSpec

        return JobSpec.from_dict(fields)

    def name(self, job: JobSpec) -> str:
        return job.name

    def account(self, job: JobSpec) -> str:
        return job.account

    def check_against(self, job: JobSpec, cluster: ClusterFacts) -> None:
        job.validate_topology(cluster.levels)
        if job.pod_sets is None:
            resources = job.resources_per_pod
            check_models_present(resources.gpu_models, resources.gpus, cluster.gpu_models)
            return
        if cluster.topology is not None:
            # Refused here as the scheduler would at its submit, with the file's line.
            from toposched.scheduler.jobs import job_sets

            job_sets(job, cluster.topology)
        for index, pod_set in enumerate(job.pod_sets):
            resources = pod_set.resources_per_pod
            try:
                check_models_present(resources.gpu_models, resources.gpus, cluster.gpu_models)
            except InputError as error:
                raise InputError(
                    f"pod_sets[{index}].{error.field}", error.value, error.rule
                ) from None


_MODEL_RULES = _ModelRules()


def load_workload(path: str | os.PathLike[str]) -> Workload:
    """Read a workload file (.yaml/.yml/.json, or .jsonl/.ndjson with one job per line).

    Files are read within the limits of `toposched.cluster.limits` and checked in the order of
    `toposched.workloads.reader`; every error is an InputError with the file and line, e.g.
    `w.yaml:14: jobs[2].resources_per_pod.gpus: ...`.
    """
    document = read_document(Path(path))
    parts = read_own_fields(document, _MODEL_RULES)
    assert parts is not None  # the model leaves no job to another reader
    try:
        topology = build_cluster(parts.cluster, document.base_dir)
    except InputError as error:
        raise document.lines.located((), "", error) from None
    failures = check_against_cluster(parts, document.lines, cluster_facts(topology), _MODEL_RULES)
    jobs = [
        WorkloadJob(
            spec=job.spec,
            submit_time=job.submit_time,
            runtime=job.runtime,
            job_class=job.job_class,
            cancel_after=job.cancel_after,
            checkpoint_interval=job.checkpoint_interval,
        )
        for job in parts.jobs
    ]
    return Workload(
        name=parts.name,
        topology=topology,
        cluster=dict(parts.cluster),
        budget=parts.budget,
        jobs=jobs,
        failures=failures,
        horizon=parts.horizon,
        checkpoint_interval=parts.checkpoint_interval,
        description=parts.description,
        notes=parts.notes,
    )


# --- writing -----------------------------------------------------------------------------------


def _duration(seconds: float) -> str | float:
    """Whole seconds as a duration string ("1h30m"); fractions stay numbers (exact in YAML)."""
    return format_duration(seconds) if float(seconds).is_integer() else seconds


def _job_entry(job: WorkloadJob) -> dict[str, Any]:
    spec = job.spec.to_dict()
    entry: dict[str, Any] = {"name": spec.pop("name"), "submit": job.submit_time}
    entry["runtime"] = _duration(job.runtime)
    entry["class"] = job.job_class
    if job.cancel_after is not None:
        entry["cancel_after"] = _duration(job.cancel_after)
    if job.checkpoint_interval is not None:
        entry["checkpoint_interval"] = _duration(job.checkpoint_interval)
    entry.update(spec)
    return entry


def workload_to_dict(workload: Workload, with_jobs: bool = True) -> dict[str, Any]:
    """The workload as a file would hold it; `load_workload` reads it back equal."""
    data: dict[str, Any] = {"format": FORMAT, "name": workload.name}
    if workload.description:
        data["description"] = workload.description
    data["cluster"] = workload.cluster
    data["budget"] = workload.budget
    settings: dict[str, Any] = {}
    if workload.horizon is not None:
        settings["horizon"] = _duration(workload.horizon)
    if workload.checkpoint_interval != DEFAULT_CHECKPOINT_INTERVAL:
        settings["checkpoint_interval"] = _duration(workload.checkpoint_interval)
    if settings:
        data["settings"] = settings
    if workload.notes:
        data["notes"] = workload.notes
    if workload.failures:
        data["failures"] = [
            {
                "time": failure.time,
                "nodes": [str(workload.topology.node_names[node]) for node in failure.nodes],
                **(
                    {"repair_after": _duration(failure.repair_after)}
                    if failure.repair_after is not None
                    else {}
                ),
            }
            for failure in workload.failures
        ]
    if with_jobs:
        data["jobs"] = [_job_entry(job) for job in workload.jobs]
    return data


def save_workload(workload: Workload, path: str | os.PathLike[str]) -> Path:
    """Write a workload file: JSONL for .jsonl/.ndjson (best for many jobs), JSON for .json,
    YAML for .yaml/.yml; see `check_workload_path` for what is refused."""
    file_path = check_workload_path(path)
    suffix = file_path.suffix.lower()
    try:
        with file_path.open("w", encoding="utf-8") as handle:
            if suffix in JSONL_SUFFIXES:
                handle.write(json.dumps(workload_to_dict(workload, with_jobs=False)) + "\n")
                for job in workload.jobs:
                    handle.write(json.dumps(_job_entry(job)) + "\n")
            elif suffix == ".json":
                json.dump(workload_to_dict(workload), handle, indent=1)
                handle.write("\n")
            else:
                yaml.safe_dump(
                    workload_to_dict(workload), handle, sort_keys=False, default_flow_style=None
                )
    except OSError as error:
        raise InputError(
            "workload file", str(path), f"cannot be written: {error.strerror}"
        ) from None
    return file_path
