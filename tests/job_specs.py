"""Shared helper for scheduler tests: job specs of whole-GPU pods."""

from __future__ import annotations

from typing import Any

from toposched.jobs.spec import JobSpec


def job(name: str, account: str, pods: int = 1, gpus: int = 4, **fields: Any) -> JobSpec:
    """`pods` pods of `gpus` GPUs, protected for an hour unless `fields` say otherwise."""
    data: dict[str, Any] = {
        "name": name,
        "account": account,
        "pods": pods,
        "resources_per_pod": {"gpus": gpus},
        "min_runtime": "1h",
    }
    data.update(fields)
    return JobSpec.from_dict(data)
