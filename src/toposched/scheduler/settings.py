"""The scheduler's settings: one validated object for every choice a site makes."""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass, field
from typing import Any

from toposched.cluster.errors import InputError
from toposched.cluster.units import DAY
from toposched.placement.policies import BestFit, PlacementPolicy
from toposched.policy.contract import Contract
from toposched.policy.fairshare import UnallocatedOrder
from toposched.policy.owed_standing import OwedOrder
from toposched.scheduler.admission import AdmissionRule
from toposched.scheduler.interruptions import KeptFrom
from toposched.scheduler.preemption import ImpactPolicy


def _seconds(name: str, value: object, allow_none: bool = False) -> None:
    """An InputError unless `value` is a finite number of seconds >= 0 (or None if allowed)."""
    if value is None and allow_none:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        rule = "must be a number of seconds >= 0" + (", or None for no cap" if allow_none else "")
        raise InputError(name, value, rule)


def _alike(value: object, usual: object) -> bool:
    """Equal, or of one class that compares by identity only (e.g. a placement policy) with
    the same attributes: two of those are the same choice."""
    if value == usual:
        return True
    return (
        type(value) is type(usual)
        and type(value).__eq__ is object.__eq__
        and getattr(value, "__dict__", None) == getattr(usual, "__dict__", None)
    )


@dataclass(frozen=True)
class SchedulerSettings:
    """How the scheduler decides: the contract, placement and preemption choices, and limits.

    Every field has a default; `Scheduler(state, tree, name=value, ...)` takes the same names.
    """

    contract: Contract = field(default_factory=Contract)
    """Protection, unallocated work and who may preempt whom."""
    policy: PlacementPolicy = field(default_factory=BestFit)
    """How the placement engine ranks the places a gang fits."""
    impact: ImpactPolicy | None = None
    """How victim sets are compared (None: least work lost)."""
    reserve_min_gpus: float = 8
    """A blocked allocated job this large or larger gets a reservation."""
    grace_s: float = 30.0
    """Seconds an evicted job gets to exit when it asks for no grace period."""
    max_grace_s: float = 600.0
    """The most seconds an evicted job's own grace period may give it."""
    max_preemptions_per_cycle: int = 8
    """Preemptors one cycle may evict for."""
    defragment: bool = True
    """Whether resumable jobs may be moved so that a reserved job starts now."""
    compaction_moves_per_hour: int = 0
    """Moves background compaction may make per hour (0: none)."""
    spares: tuple[str, int] | None = None
    """(level, nodes per domain): idle nodes held back to replace failed ones in place."""
    protect_beyond_budget: bool = True
    """False: a job that takes its team beyond its budget is not protected at all."""
    borrowed_min_runtime: float | None = None
    """Seconds of protection at most for a job that takes its team's running allocated GPUs
    past its budget (None: no cap). A cap suits many small teams' jobs; on a fleet of
    100,000-GPU runs an hour's cap evicts borrowed runs over and over (docs/policy.md), so it
    is the site's choice."""
    failed_first: bool = True
    """Whether a gang a node failure interrupted within its budget heads the next cycle, so
    that its surviving nodes are not handed to the queue while it waits."""
    keep_failed_nodes: float | None = None
    """Seconds a budgeted gang a node failure interrupted (resumable, without a spare) keeps
    the nodes it ran on from other jobs (`keep_failed_nodes_from`), while it does not restart:
    the surviving ones, and the failed ones once repaired (None: not kept). It restarts there
    when they and what is free hold it, else preempts the least it needs around them (see
    `Interruptions`)."""
    keep_failed_nodes_from: KeptFrom = KeptFrom.ALL
    """Whom those nodes are kept from: every other job, only unallocated work, or every job
    but the allocated work of teams running below their budget (`KeptFrom`)."""

    keep_failures_through_releases: bool = True
    """Whether a placement failure outlives GPUs freed where the gang could not use them (see
    `FailureMemo.outlive_release`); False: any release sends every shape back to a search."""
    verify_kept_failures: bool = False
    """Debugging: search again, at each cycle's start, every failure kept through a release,
    and raise `InternalError` if one fits (the shortcut would have changed a decision)."""

    incremental: bool = True
    """Whether a cycle after submissions only skips the pending jobs the last cycle answered
    alike, with the same decisions (see `toposched.scheduler.incremental`); False: every cycle
    walks every pending job."""
    full_cycle_every: float = 300.0
    """Seconds after which a cycle walks every pending job regardless, as a safety net
    (0: never forced)."""
    check_incremental: bool = False
    """Debugging: run a full cycle on a copy of the scheduler beside each cycle that skips
    jobs, and raise `InternalError` if their decisions differ."""

    admission: AdmissionRule | None = None
    """Where unallocated work may start (None: anywhere it fits, reserved nodes too; see
    `toposched.scheduler.admission`)."""

    charge_unallocated: bool = False
    """Whether unallocated work is charged to its account's usage too (Slurm charges every
    job; toposched charges budgeted work only)."""

    unallocated_order: UnallocatedOrder = UnallocatedOrder.RANK
    """How the queue orders unallocated work: by its accounts' Fair Tree rank, or oldest
    submission first across accounts (see `UnallocatedOrder`). Read by Fair Tree's queue
    only: a queue given to the scheduler keeps its own order."""

    owed_order: OwedOrder = OwedOrder.STANDING
    """How the accounts below their budget, whose allocated work goes first, are ordered among
    themselves (see `OwedOrder`). Read by Fair Tree's queue only."""
    owed_half_life: float = DAY
    """With `OwedOrder.LEAST_MET`: seconds after which a GPU-second owed or delivered counts
    half as much in the accounts' order."""

    def __post_init__(self) -> None:
        _seconds("borrowed_min_runtime", self.borrowed_min_runtime, allow_none=True)
        _seconds("grace_s", self.grace_s)
        _seconds("max_grace_s", self.max_grace_s)
        _seconds("full_cycle_every", self.full_cycle_every)
        _seconds("keep_failed_nodes", self.keep_failed_nodes, allow_none=True)
        if not isinstance(self.unallocated_order, UnallocatedOrder):
            raise InputError(
                "unallocated_order", self.unallocated_order, "must be an UnallocatedOrder"
            )
        if not isinstance(self.owed_order, OwedOrder):
            raise InputError("owed_order", self.owed_order, "must be an OwedOrder")
        _seconds("owed_half_life", self.owed_half_life)
        if self.owed_half_life <= 0:
            raise InputError("owed_half_life", self.owed_half_life, "must be more than 0 seconds")
        if isinstance(self.reserve_min_gpus, bool) or not isinstance(
            self.reserve_min_gpus, int | float
        ):
            raise InputError("reserve_min_gpus", self.reserve_min_gpus, "must be a number of GPUs")
        for name in ("max_preemptions_per_cycle", "compaction_moves_per_hour"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InputError(name, value, "must be a whole number >= 0")

    @property
    def protection_cap(self) -> float | None:
        """The most seconds a borrowing job is protected (None: no cap)."""
        return 0.0 if not self.protect_beyond_budget else self.borrowed_min_runtime

    def changes(self) -> dict[str, object]:
        """The settings that differ from the defaults, by name, the contract's by its own
        fields' names: what a site chose (e.g. for a server's log)."""
        default = SchedulerSettings()
        chosen: dict[str, object] = {}
        for item in dataclasses.fields(self):
            value, usual = getattr(self, item.name), getattr(default, item.name)
            if item.name == "contract" and value != usual:
                chosen.update(
                    (part.name, getattr(value, part.name))
                    for part in dataclasses.fields(value)
                    if not _alike(getattr(value, part.name), getattr(usual, part.name))
                )
            elif not _alike(value, usual):
                chosen[item.name] = value
        return chosen

    def changes_as_json(self) -> dict[str, object]:
        """`changes` as plain JSON: a rule by its fields, an enumeration by its value, a
        placement or impact policy by its name, no bound (infinity) as null."""
        return {name: _plain(value) for name, value in self.changes().items()}

    @classmethod
    def of(cls, settings: SchedulerSettings | None, changes: dict[str, Any]) -> SchedulerSettings:
        """`settings` (the defaults if None) with `changes` by field name; None for `contract`
        or `policy` means its default."""
        names = {item.name for item in dataclasses.fields(cls)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise TypeError(f"unknown scheduler setting(s): {', '.join(unknown)}")
        given = {
            name: value
            for name, value in changes.items()
            if value is not None or name not in ("contract", "policy")
        }
        base = settings if settings is not None else cls()
        return dataclasses.replace(base, **given) if given else base


def _plain(value: object) -> object:
    """A setting as JSON (see `SchedulerSettings.changes_as_json`)."""
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {item.name: _plain(getattr(value, item.name)) for item in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None  # no bound: JSON has no infinity
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(getattr(value, "name", type(value).__name__))
