"""Jobs found running after a restart, as the scheduler adopts them (`Scheduler.adopt`,
`Scheduler.adopt_many`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation
from toposched.jobs.spec import JobSpec


@dataclass(frozen=True)
class Adoption:
    """A job found running (after a restart): its spec, what it holds, and since when."""

    spec: JobSpec
    allocation: Allocation
    start_time: float


@dataclass(frozen=True)
class Adoptions:
    """Many jobs found running, as columns (one entry per job in each): a restart's hundred
    thousand, read from the store without an `Adoption` made for each."""

    specs: Sequence[JobSpec]
    allocations: Sequence[Allocation]
    start_times: Sequence[float]

    def __post_init__(self) -> None:
        if not len(self.specs) == len(self.allocations) == len(self.start_times):
            raise InputError("adoptions", len(self.specs), "need one allocation and start each")

    @staticmethod
    def of(adoptions: Sequence[Adoption]) -> Adoptions:
        return Adoptions(
            [adoption.spec for adoption in adoptions],
            [adoption.allocation for adoption in adoptions],
            [adoption.start_time for adoption in adoptions],
        )
