"""Shared helper for scheduler tests: job specs of whole-GPU pods."""

from __future__ import annotations

from typing import Any

from toposched.jobs.spec import JobSpec


def spec(name: str, account: str, pods: int = 1, gpus: int = 4, **fields: Any) -> JobSpec:
    """A gang of `pods` pods of `gpus` whole GPUs; `fields` adds any other JobSpec field."""
    data: dict[str, Any] = {
        "name": name,
        "account": account,
        "pods": pods,
        "resources_per_pod": {"gpus": gpus},
    }
    data.update(fields)
    return JobSpec.from_dict(data)


def job(name: str, account: str, pods: int = 1, gpus: int = 4, **fields: Any) -> JobSpec:
    """`spec`'s gang, protected for an hour unless `fields` say otherwise."""
    return spec(name, account, pods, gpus, **{"min_runtime": "1h", **fields})
