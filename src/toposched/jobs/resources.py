"""What one pod of a job needs on its node: whole GPUs or a share of one, CPU, memory, and
the GPU models it may run on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationInfo, field_validator, model_validator

from toposched.cluster.limits import (
    MAX_CPU_MILLI,
    MAX_GPUS_PER_POD,
    MAX_MEMORY_MIB,
    MAX_NAME_LENGTH,
)
from toposched.cluster.units import (
    MILLI_PER_GPU,
    format_cpu_milli,
    format_memory_mib,
    parse_cpu_milli,
    parse_memory_mib,
)
from toposched.jobs.input_model import InputModel, integer, parsed, rule_error

__all__ = ["Resources"]


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
        # A fraction with no `gpus` means one shared GPU; no fraction and no `gpus`, a CPU-only
        # pod. Only the default is filled in here: the fields' own checks judge the values.
        if isinstance(data, Mapping) and data.get("gpus") is None:
            share = data.get("gpu_milli")
            fractional = (
                isinstance(share, int) and not isinstance(share, bool) and 0 < share < MILLI_PER_GPU
            )
            return {**data, "gpus": 1 if fractional else 0}
        return data

    @field_validator("gpus", mode="before")
    @classmethod
    def _whole_gpus(cls, value: Any) -> int:
        return integer(
            value,
            "must be an integer >= 0 (whole GPUs on one node); "
            "for a fraction of one GPU give gpu_milli, e.g. gpu_milli: 500",
            minimum=0,
            limit=(
                MAX_GPUS_PER_POD,
                f"must be at most {MAX_GPUS_PER_POD}: a pod runs on one node, and a node has "
                f"at most {MAX_GPUS_PER_POD} GPUs",
            ),
        )

    @field_validator("gpu_milli", mode="before")
    @classmethod
    def _gpu_share(cls, value: Any, info: ValidationInfo) -> int:
        rule = (
            "must be an integer from 1 to 999: the share of one GPU in thousandths "
            "(1000 means whole GPUs)"
        )
        share = integer(value, rule)
        if not 0 < share <= MILLI_PER_GPU:
            raise rule_error(rule)
        gpus = info.data.get("gpus")
        if share < MILLI_PER_GPU and gpus is not None and gpus != 1:
            raise rule_error(
                f"a fraction of a GPU is a share of one GPU, so gpus must be 1 or omitted "
                f"(gpus is {gpus})"
            )
        return share

    @field_validator("cpu", mode="before")
    @classmethod
    def _cpu_millicores(cls, value: Any) -> int:
        milli: int = parsed(parse_cpu_milli, value)
        if milli > MAX_CPU_MILLI:
            raise rule_error(f"must be at most {MAX_CPU_MILLI // 1000:,} cores per pod")
        return milli

    @field_validator("memory", mode="before")
    @classmethod
    def _memory_mib(cls, value: Any) -> int:
        mib: int = parsed(parse_memory_mib, value)
        if mib > MAX_MEMORY_MIB:
            raise rule_error("must be at most 1Ei (1024Pi) per pod")
        return mib

    @field_validator("gpu_models", mode="before")
    @classmethod
    def _model_names(cls, value: Any) -> tuple[str, ...] | None:
        rule = (
            "must be a non-empty list of GPU model names (e.g. [GB300, H100]), or omitted for any"
        )
        if value is None:
            return None
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list | tuple) or not names:
            raise rule_error(rule)
        for name in names:
            if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_LENGTH:
                raise rule_error(f"{rule}; names of at most {MAX_NAME_LENGTH} characters")
        return tuple(dict.fromkeys(names))  # duplicates dropped, first-listed order kept

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
