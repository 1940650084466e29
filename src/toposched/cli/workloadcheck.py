"""A first, light pass over a workload file, before the workload is built: a bad file answers
fast.

`toposched simulate --workload FILE` would otherwise import the job model (pydantic) and the
cluster's arrays (numpy) before the first error could be found. This pass reads the file with
the workload reader's own steps (`toposched.workloads.reader`, so the same checks in the same
order and the same `FILE:LINE:` errors) and checks every job's spec with the light pass over job
files (`toposched.cli.jobcheck`, whose errors equal the job model's). What it cannot check
without the job model it leaves to the model's reader, which runs next: a job the light rules
leave to the model (one written with `pod_sets`) and what follows it, and files too large for a
light pass (`jobcheck.left_to_the_model`: reading them twice would cost more than the imports).

The cluster comes last, once every field of the file's own is valid, and is checked without
building it (`toposched.workloads.model.check_cluster`: a cluster file or an inline description
by `toposched.cluster.loaders`, a builder's arguments by `toposched.cluster.builders`); the jobs
and failures are checked against what that check knows of it: levels, GPU models, node names.
tests/test_light_values.py checks that the errors equal the model reader's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from toposched.cli.jobcheck import check_job, check_values_against_cluster, left_to_the_model
from toposched.cluster.errors import InputError
from toposched.jobs.rules import DEFAULT_ACCOUNT
from toposched.workloads.model import check_cluster
from toposched.workloads.reader import (
    ClusterFacts,
    check_against_cluster,
    cluster_facts,
    read_document,
    read_own_fields,
    read_workload_text,
)

__all__ = ["check_workload_file"]


class _LightRules:
    """`reader.JobRules` by the light pass: a job is its checked values (`check_job`)."""

    def read(self, fields: dict[str, Any]) -> dict[str, Any] | None:
        return check_job(fields)

    def name(self, job: dict[str, Any]) -> str:
        return str(job["name"])

    def account(self, job: dict[str, Any]) -> str:
        return str(job.get("account", DEFAULT_ACCOUNT))

    def check_against(self, job: dict[str, Any], cluster: ClusterFacts) -> None:
        check_values_against_cluster(job, cluster.levels, cluster.gpu_models)


_LIGHT_RULES = _LightRules()


def check_workload_file(path: str | os.PathLike[str]) -> None:
    """Refuse a workload file the model's reader (`toposched.workloads.files.load_workload`)
    would refuse, with its error, as far as this pass can tell (see the module); return
    quietly otherwise. A file that does not exist or cannot be read is refused here too."""
    file = Path(path)
    text = read_workload_text(file)
    if left_to_the_model(text):
        return
    document = read_document(file, text)
    parts = read_own_fields(document, _LIGHT_RULES)
    if parts is None:
        return
    try:
        cluster = check_cluster(parts.cluster, document.base_dir)
    except InputError as error:
        raise document.lines.located((), "", error) from None
    check_against_cluster(parts, document.lines, cluster_facts(cluster), _LIGHT_RULES)
