"""Shared helper for scheduler tests: job specs of four-GPU pods."""

from __future__ import annotations

from typing import Any

from toposched.jobs.spec import JobSpec


def four_gpu_gang(name: str, account: str, pods: int = 1, **fields: Any) -> JobSpec:
    """A gang of `pods` pods of 4 whole GPUs with a one-hour minimum runtime; `fields`
    override or add JobSpec fields."""
    data: dict[str, Any] = {
        "name": name,
        "account": account,
        "pods": pods,
        "resources_per_pod": {"gpus": 4},
        "min_runtime": "1h",
    }
    data.update(fields)
    return JobSpec.from_dict(data)
