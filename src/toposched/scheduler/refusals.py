"""Refusals: why no preemption or move makes room for a job, as values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class RefusalCode(StrEnum):
    """Why no preemption or move of running jobs makes room for a job, as a code."""

    NO_ALLOWED_VICTIM = "no-allowed-victim"
    """The contract lets the job preempt no running job."""
    NO_ROOM = "no-room"
    """Even with every job it may preempt gone, the gang would not fit."""
    BUDGET_CAPS = "budget-caps"
    """Room exists, but only by taking some account below its budget."""
    TOPOLOGY = "topology"
    """No victim set found gives the gang the shape its topology asks for."""
    NOT_TOPOLOGY = "not-topology"
    """Moves cannot help: the job asks for no required level or slices."""
    NO_FREE_CAPACITY = "no-free-capacity"
    """Moves cannot help: the cluster lacks the free GPUs in total."""
    NO_MOVABLE_SET = "no-movable-set"
    """No set of movable jobs opens a domain for the job."""
    NOT_WORTH_IT = "not-worth-it"
    """Moving jobs would cost more work than the job's earlier start gains."""
    WAITING_FOR_CHECKPOINTS = "waiting-for-checkpoints"
    """The victims checkpoint soon: waiting for that saves more work than the wait costs."""


@dataclass(frozen=True)
class Refusal:
    """No preemption for a job: the code, the reason in words, and the figures the reason
    quotes (e.g. `most`: the pods the gang could get at most, `pods`: the pods it needs)."""

    code: RefusalCode
    reason: str
    figures: Mapping[str, float] = field(default_factory=dict)
    most_pods: int | None = field(default=None, compare=False)
    """Set by a proof from per-domain counts (whole-GPU pods): with every job the preemptor
    may take gone, no domain of the gang's required level (the whole cluster without one)
    holds more than this many of its pods, its innermost domains' room counted each in whole
    slices from their free GPUs and those of such jobs, an upper bound of what the placement
    engine could place there. A kept refusal weighs releases against it by the innermost
    domains they touch (see `KeptRefusals`)."""

    def __str__(self) -> str:
        return self.reason
