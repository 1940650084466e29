"""What one pod of a job needs on its node: whole GPUs or a share of one, CPU, memory, and
the GPU models it may run on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationInfo, field_validator, model_validator

from toposched.cluster.units import MILLI_PER_GPU, format_cpu_milli, format_memory_mib
from toposched.jobs import rules
from toposched.jobs.input_model import InputModel, parsed

__all__ = ["Resources", "asking_for_something"]


class Resources(InputModel):
    """What one pod needs on its node.

    Stored normalised: a whole-GPU or CPU-only pod has `gpu_milli == 1000` (each of its `gpus`
    is a whole GPU); a fractional pod has `gpus == 1` and `gpu_milli < 1000` (its share of one
    shared GPU). CPU-only pods have `gpus == 0`.

    Every constructor reads values as a user writes them, so a number given for `cpu` is cores
    (`cpu=64` stores 64000) while the stored `cpu` is millicores: rebuild from `to_dict()`, not
    from `model_dump()`, or write millicores as a string (`cpu="64000m"`).
    """

    gpus: int = 0
    gpu_milli: int = MILLI_PER_GPU
    cpu: int = 0
    """Millicores."""
    memory: int = 0
    """MiB."""
    gpu_models: tuple[str, ...] | None = None
    """Allowed GPU models; None means any model."""

    @model_validator(mode="before")
    @classmethod
    def _one_shared_gpu_when_fractional(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            return rules.one_shared_gpu_when_fractional(data)
        return data

    @field_validator("gpus", mode="before")
    @classmethod
    def _whole_gpus(cls, value: Any) -> int:
        return parsed(rules.whole_gpus, value)

    @field_validator("gpu_milli", mode="before")
    @classmethod
    def _gpu_share(cls, value: Any, info: ValidationInfo) -> int:
        return parsed(lambda share: rules.gpu_share(share, info.data.get("gpus")), value)

    @field_validator("cpu", mode="before")
    @classmethod
    def _cpu_millicores(cls, value: Any) -> int:
        return parsed(rules.cpu_millicores, value)

    @field_validator("memory", mode="before")
    @classmethod
    def _memory_mib(cls, value: Any) -> int:
        return parsed(rules.memory_mib, value)

    @field_validator("gpu_models", mode="before")
    @classmethod
    def _model_names(cls, value: Any) -> tuple[str, ...] | None:
        return parsed(rules.gpu_model_names, value)

    @property
    def is_fractional(self) -> bool:
        """True when the pod takes a share of one GPU rather than whole GPUs."""
        return self.gpu_milli < MILLI_PER_GPU

    @property
    def gpu_milli_total(self) -> int:
        """GPU demand in milli-GPU: 4 whole GPUs -> 4000, half a GPU -> 500, no GPU -> 0."""
        return self.gpus * self.gpu_milli

    def to_dict(self) -> dict[str, Any]:
        """The user's spelling of these resources; `Resources.from_dict` reads it back equal."""
        written: dict[str, Any] = {"gpus": self.gpus}
        if self.is_fractional:
            written["gpu_milli"] = self.gpu_milli
        written["cpu"] = self.cpu // 1000 if self.cpu % 1000 == 0 else format_cpu_milli(self.cpu)
        written["memory"] = format_memory_mib(self.memory)
        if self.gpu_models is not None:
            written["gpu_models"] = list(self.gpu_models)
        return written


def asking_for_something(pod: Resources) -> Resources:
    """`pod`, when it asks for some GPU, CPU or memory (a job's or a pod set's validator)."""
    parsed(
        lambda checked: rules.asks_for_something(
            checked.gpu_milli_total, checked.cpu, checked.memory
        ),
        pod,
    )
    return pod
