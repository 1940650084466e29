"""A synthetic research cluster after Ai2's: 15 budgeted teams, demand well above capacity."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from toposched.cluster.errors import InputError, checked_seed
from toposched.cluster.units import DAY, HOUR, MINUTE
from toposched.workloads.catalog import AI2_TRAINING_SIZES
from toposched.workloads.model import SpecFactory, Workload, WorkloadJob, build_cluster

__all__ = ["AI2_PROGRAMS", "TRAINING_SIZES", "ai2_like", "ai2_budget", "ai2_cluster"]

GPUS_PER_NODE = 8
NODES_PER_UNIT = 32
UNITS_PER_GROUP = 4
RESEARCHERS_PER_GPU = 150 / 3072
"""Ai2's ~150 researchers on a few thousand GPUs, scaled with the cluster."""

AI2_PROGRAMS: dict[str, tuple[int, tuple[str, ...]]] = {
    "foundation": (40, ("pretrain", "data", "scaling", "efficiency", "infra")),
    "alignment": (25, ("rlhf", "safety", "evals", "tooling")),
    "science": (20, ("climate", "bio", "reasoning")),
    "applied": (15, ("search", "agents", "products")),
}
"""Programs with their percent of the cluster and their teams: 15 teams in all."""
UNBUDGETED_ACCOUNT = "scratch/shared"
"""An account with a share of 0: everything it runs is unallocated."""

# How each team's allocated GPU-hours split between the classes of work.
TRAINING_FRACTION = 0.86
EVAL_FRACTION = 0.06
# Demand of each team moves between phases (busy, quiet) lasting days; a phase's level is the
# team's offered load over its budget. Ai2 reports outstanding requests of 2-3x the cluster and
# 18% of GPU time delivered to unallocated work: budgeted work offers about 80% of the cluster.
PHASE_MEAN_DAYS = 3.0
LEVEL_SIGMA = 0.6
LEVEL_MEDIAN = 0.68
LEVEL_RANGE = (0.25, 3.0)
PHASED_LOAD = 0.78
"""Training and evaluation GPU-hours offered per hour over the horizon, as a fraction of the
cluster (debug adds about 2%): the drawn levels are scaled to it, so that every seed and size
offers the same total and only its spread between teams and phases is random."""
UNALLOCATED_LOAD = 0.35
"""Offered unallocated GPU-hours per hour, as a fraction of the cluster."""
SCRATCH_SHARE_OF_UNALLOCATED = 0.3
DEBUG_RATE_WORKING_HOURS = 0.8
"""Debug sessions per researcher per working hour (09-18, Monday to Friday)."""
OFF_HOURS_FACTOR = 0.15
TRAINING_SIZES = AI2_TRAINING_SIZES
"""How multi-node training runs are sized (`catalog.AI2_TRAINING_SIZES`)."""


class _Phase(NamedTuple):
    """A span of a team's demand at one level: its offered load over its budget."""

    start: float
    end: float
    level: float


@dataclass(frozen=True)
class _Team:
    account: str
    share: float
    """Fraction of the cluster."""
    researchers: int


def ai2_budget(seed: int = 0) -> tuple[dict[str, Any], list[_Team]]:
    """The budget tree: four programs of 3-5 teams, shares summing to 100 at every level,
    plus `scratch/shared` with a share of 0 for unbudgeted work."""
    rng = np.random.default_rng([seed, 1])
    accounts: dict[str, Any] = {}
    teams: list[_Team] = []
    for program, (share, names) in AI2_PROGRAMS.items():
        weights = rng.dirichlet(np.full(len(names), 4.0))
        percents = _integer_percents(weights)
        accounts[program] = {
            "share": share,
            "children": {name: {"share": p} for name, p in zip(names, percents, strict=True)},
        }
        for name, p in zip(names, percents, strict=True):
            teams.append(_Team(f"{program}/{name}", share / 100 * p / 100, 0))
    accounts["scratch"] = {"share": 0, "children": {"shared": {"share": 100}}}
    return {"accounts": accounts}, teams


def _integer_percents(weights: np.ndarray) -> list[int]:
    """Whole percents proportional to `weights`, each >= 5, summing to exactly 100."""
    raw = 5 + weights * (100 - 5 * len(weights))
    floors = np.floor(raw).astype(int)
    short = 100 - int(floors.sum())
    for index in np.argsort(-(raw - floors), kind="stable")[:short]:
        floors[index] += 1
    return [int(value) for value in floors]


def ai2_cluster(gpus: int) -> dict[str, Any]:
    """A DGX-style cluster of about `gpus` GPUs: 8-GPU nodes in scalable units of 32 nodes,
    four units per spine group where the count allows."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < GPUS_PER_NODE:
        raise InputError("gpus", gpus, f"must be an integer >= {GPUS_PER_NODE}")
    nodes = max(1, round(gpus / GPUS_PER_NODE))
    if nodes < NODES_PER_UNIT:
        return {
            "builder": "superpod",
            "spine_groups": 1,
            "units_per_group": 1,
            "nodes_per_unit": nodes,
        }
    units = max(1, round(nodes / NODES_PER_UNIT))
    groups = units // UNITS_PER_GROUP if units % UNITS_PER_GROUP == 0 else 1
    return {
        "builder": "superpod",
        "spine_groups": groups,
        "units_per_group": units // groups,
        "nodes_per_unit": NODES_PER_UNIT,
    }


class _Generator:
    def __init__(
        self,
        seed: int,
        days: float,
        topology_nodes: int,
        levels: tuple[str, ...],
        budget_nodes: dict[str, int] | None = None,
    ):
        self.rng = np.random.default_rng(seed)
        # Largest training run per account, in nodes, when runs are sized to team budgets.
        self.budget_nodes = budget_nodes or {}
        self.horizon = days * DAY
        self.nodes = topology_nodes
        self.levels = levels
        self.capacity = topology_nodes * GPUS_PER_NODE
        self.factory = SpecFactory()
        self.jobs: list[WorkloadJob] = []
        self.counter = 0

    def name(self, account: str, job_class: str) -> str:
        self.counter += 1
        return f"{account.replace('/', '.')}.{job_class}.{self.counter}"

    def lognormal(self, median: float, sigma: float, low: float, high: float) -> float:
        return float(np.clip(median * math.exp(sigma * self.rng.standard_normal()), low, high))

    def declared(self, runtime: float, step: float) -> float | None:
        """What a user declares: the runtime padded by up to 2x, rounded up; sometimes nothing."""
        if self.rng.random() < 0.2:
            return None
        return math.ceil(runtime * self.rng.uniform(1.0, 2.0) / step) * step

    def add(
        self,
        account: str,
        job_class: str,
        submit: float,
        runtime: float,
        pods: int,
        gpus: int,
        *,
        min_runtime: float,
        resumable: bool,
        expected: float | None,
        priority: int = 0,
        cancel_after: float | None = None,
        topology: dict[str, Any] | None = None,
    ) -> None:
        spec = self.factory.make(
            self.name(account, job_class),
            account,
            pods,
            {"gpus": gpus, "cpu": 12 * gpus, "memory": f"{100 * gpus}Gi"},
            topology=topology,
            min_runtime=min_runtime,
            resumable=resumable,
            expected_runtime=expected,
            priority=priority,
        )
        self.jobs.append(WorkloadJob(spec, submit, runtime, job_class, cancel_after=cancel_after))

    # --- the classes of work ---------------------------------------------------------------------
    def training(self, account: str, submit: float) -> float:
        """One training run; returns the GPU-hours it asks for."""
        rng = self.rng
        largest = min(max(1, self.nodes // 6), self.budget_nodes.get(account, self.nodes))
        if rng.random() < 0.5 or largest < 2:
            nodes, runtime = 1, self.lognormal(8 * HOUR, 0.8, HOUR, 4 * DAY)
        else:
            choices = [n for n in (2, 4, 8, 16, 32, 64) if n <= largest]
            weights = np.array([0.3, 0.25, 0.2, 0.13, 0.08, 0.04][: len(choices)])
            nodes = int(rng.choice(choices, p=weights / weights.sum()))
            runtime = self.lognormal(24 * HOUR, 0.8, 2 * HOUR, 7 * DAY)
        topology = None
        if nodes > 1 and len(self.levels) >= 2:
            topology = {"preferred": self.levels[-1] if nodes <= NODES_PER_UNIT else self.levels[0]}
        self.add(
            account,
            "training",
            submit,
            runtime,
            nodes,
            GPUS_PER_NODE,
            min_runtime=float(rng.choice([2 * HOUR, 4 * HOUR, 8 * HOUR])),
            resumable=True,
            expected=self.declared(runtime, HOUR),
            priority=int(rng.random() < 0.2),
            cancel_after=5 * DAY,
            topology=topology,
        )
        return nodes * GPUS_PER_NODE * runtime / HOUR

    def eval_sweep(self, account: str, submit: float) -> float:
        """A sweep of evaluation jobs submitted together; returns their GPU-hours."""
        rng = self.rng
        count = int(rng.integers(5, 41))
        gpus = int(rng.choice([1, 2, 4, 8], p=[0.15, 0.2, 0.25, 0.4]))
        total = 0.0
        for _ in range(count):
            runtime = self.lognormal(HOUR, 0.7, 5 * MINUTE, 6 * HOUR)
            expected = self.declared(runtime, HOUR)
            self.add(
                account,
                "eval",
                submit,
                runtime,
                1,
                gpus,
                # An evaluation cannot resume, so it asks to be protected for as long as it
                # expects to run (the contract caps that at 8 h).
                min_runtime=expected if expected is not None else 2 * HOUR,
                resumable=False,
                expected=expected,
                cancel_after=2 * DAY,
            )
            total += gpus * runtime / HOUR
        return total

    def debug(self, account: str, submit: float) -> None:
        rng = self.rng
        gpus = int(rng.choice([1, 2, 4, 8], p=[0.4, 0.25, 0.2, 0.15]))
        runtime = self.lognormal(15 * MINUTE, 1.0, MINUTE, 4 * HOUR)
        self.add(
            account,
            "debug",
            submit,
            runtime,
            1,
            gpus,
            min_runtime=10 * MINUTE,
            resumable=False,
            expected=HOUR if runtime <= HOUR else 4 * HOUR,
            priority=10,
            cancel_after=6 * HOUR,
        )

    def unallocated(self, account: str, submit: float, budgeted: bool) -> float:
        rng = self.rng
        nodes = int(rng.choice([1, 2, 4], p=[0.5, 0.3, 0.2]))
        nodes = min(nodes, max(1, self.nodes // 4))
        runtime = self.lognormal(6 * HOUR, 0.8, 30 * MINUTE, 2 * DAY)
        self.add(
            account,
            "unallocated",
            submit,
            runtime,
            nodes,
            GPUS_PER_NODE,
            # Budgeted teams mark scavenger work with min_runtime 0; the scratch account has no
            # budget, so its jobs are unallocated whatever they declare.
            min_runtime=0.0 if budgeted else HOUR,
            resumable=True,
            expected=self.declared(runtime, HOUR),
            cancel_after=2 * DAY,
        )
        return nodes * GPUS_PER_NODE * runtime / HOUR

    # --- arrivals --------------------------------------------------------------------------------
    def phases(self) -> list[_Phase]:
        """A team's demand phases across the horizon."""
        rng = self.rng
        phases = []
        start = 0.0
        while start < self.horizon:
            length = rng.exponential(PHASE_MEAN_DAYS * DAY)
            level = float(
                np.clip(LEVEL_MEDIAN * math.exp(LEVEL_SIGMA * rng.standard_normal()), *LEVEL_RANGE)
            )
            end = min(start + length, self.horizon)
            phases.append(_Phase(start, end, level))
            start = end
        return phases

    def poisson_work(
        self, gpu_hours_per_hour: float, start: float, end: float, make: Any, excess: float = 0.0
    ) -> float:
        """Submit units of work (each `make(submit)` returns its GPU-hours) at uniform random
        times in [start, end) until they add up to the offered load over that span.

        `excess` is what earlier spans offered beyond their share (negative: short of it); it
        is taken off this one. A unit that would pass the span's share is kept with the
        probability that makes the expected offer equal to the share: always keeping it would
        add half a unit or more per team, and a 512-GPU week is days of a small team's load.
        Returns the new excess.
        """
        budget = gpu_hours_per_hour * (end - start) / HOUR - excess
        offered = 0.0
        while offered < budget:
            first_new_job = len(self.jobs)
            unit = make(float(self.rng.uniform(start, end)))
            if offered + unit > budget and self.rng.random() * unit > budget - offered:
                del self.jobs[first_new_job:]
                break
            offered += unit
        return offered - budget

    def scaled_phases(self, teams: list[_Team]) -> list[list[_Phase]]:
        """Each team's phases, levels scaled together so that the teams' phased work offers
        `PHASED_LOAD` of the cluster over the horizon."""
        drawn = [self.phases() for _ in teams]
        offered = (
            sum(
                team.share * sum((end - start) * level for start, end, level in phases)
                for team, phases in zip(teams, drawn, strict=True)
            )
            * (TRAINING_FRACTION + EVAL_FRACTION)
            / self.horizon
        )
        scale = PHASED_LOAD / offered
        return [[phase._replace(level=phase.level * scale) for phase in phases] for phases in drawn]

    def team(self, team: _Team, phases: list[_Phase]) -> None:
        capacity = self.capacity
        # Training already queued at the start (1.5x the GPUs the team's first phase asks
        # for), so the cluster opens as busy as it will stay. It counts against the phases'
        # offered load, so the total over the horizon stays at its level.
        backlog_gpus = team.share * capacity * phases[0].level * 1.5
        queued_gpus = 0
        training_excess = eval_excess = 0.0
        while queued_gpus < backlog_gpus:
            training_excess += self.training(team.account, float(self.rng.uniform(0, 10 * MINUTE)))
            queued_gpus += self.jobs[-1].spec.total_gpus
        for start, end, level in phases:
            load = team.share * capacity * level
            training_excess = self.poisson_work(
                load * TRAINING_FRACTION,
                start,
                end,
                lambda t: self.training(team.account, t),
                training_excess,
            )
            eval_excess = self.poisson_work(
                load * EVAL_FRACTION,
                start,
                end,
                lambda t: self.eval_sweep(team.account, t),
                eval_excess,
            )
        self.debug_sessions(team)

    def debug_sessions(self, team: _Team) -> None:
        rng = self.rng
        hours = math.ceil(self.horizon / HOUR)
        for hour in range(hours):
            day, hour_of_day = divmod(hour, 24)
            working = day % 7 < 5 and 9 <= hour_of_day < 18
            rate = team.researchers * DEBUG_RATE_WORKING_HOURS
            rate *= 1.0 if working else OFF_HOURS_FACTOR
            for _ in range(int(rng.poisson(rate))):
                submit = hour * HOUR + float(rng.uniform(0, HOUR))
                if submit < self.horizon:
                    self.debug(team.account, submit)

    def unallocated_work(self, teams: list[_Team]) -> None:
        load = UNALLOCATED_LOAD * self.capacity
        scratch = load * SCRATCH_SHARE_OF_UNALLOCATED
        self.poisson_work(
            scratch, 0.0, self.horizon, lambda t: self.unallocated(UNBUDGETED_ACCOUNT, t, False)
        )
        for team in teams:
            self.poisson_work(
                (load - scratch) * team.share,
                0.0,
                self.horizon,
                lambda t, account=team.account: self.unallocated(account, t, True),
            )


def ai2_like(
    seed: int = 0, days: float = 30.0, gpus: int = 3072, training_sizes: str = "cluster"
) -> Workload:
    """An Ai2-like research cluster of about `gpus` GPUs over `days` days.

    Fifteen teams in four programs hold budgets summing to the cluster; a zero-share account
    runs unbudgeted work. Each team's demand moves between busy and quiet phases (a few days
    each) around its budget; budgeted work offers about 80% of the cluster and unallocated work
    35% more, so outstanding requests run at 2-3x the cluster. The work:
    debug/interactive sessions (1-8 GPUs, minutes, min runtime 10 min, submitted in working
    hours), single- and multi-node training (8-512 GPUs, hours to a week, resumable, min runtime
    2-8 h), evaluation sweeps (5-40 jobs of 1-8 GPUs submitted together) and unallocated work
    (min runtime 0, or the zero-share account). Every job is tagged debug, training, eval or
    unallocated. The same seed gives the same workload. With `training_sizes="team"`, no team's
    training run is larger than its budget in whole nodes (a 60-GPU team runs at most 7 nodes).
    """
    checked_seed(seed)
    if training_sizes not in TRAINING_SIZES:
        raise InputError(
            "training_sizes", training_sizes, f"must be one of {', '.join(TRAINING_SIZES)}"
        )
    if not isinstance(days, int | float) or isinstance(days, bool) or not 0 < days <= 366:
        raise InputError("days", days, "must be a number of days > 0 and <= 366")
    cluster = ai2_cluster(gpus)
    topology = build_cluster(cluster)
    budget, teams = ai2_budget(seed)
    researchers = max(1.0, RESEARCHERS_PER_GPU * topology.n_gpus)
    teams = [
        _Team(team.account, team.share, max(1, round(researchers * team.share))) for team in teams
    ]
    budget_nodes = None
    if training_sizes == "team":
        budget_nodes = {
            team.account: max(1, int(team.share * topology.n_gpus) // GPUS_PER_NODE)
            for team in teams
        }
    generator = _Generator(seed, days, topology.n_nodes, topology.levels, budget_nodes)
    for team, phases in zip(teams, generator.scaled_phases(teams), strict=True):
        generator.team(team, phases)
    generator.unallocated_work(teams)
    jobs = [job for job in generator.jobs if job.submit_time < generator.horizon]
    offered: dict[str, float] = {}
    for job in jobs:
        offered[job.job_class] = offered.get(job.job_class, 0.0) + job.gpus * job.runtime
    capacity = topology.n_gpus * days * DAY
    return Workload(
        name=TRAINING_SIZES[training_sizes],
        topology=topology,
        cluster=cluster,
        budget=budget,
        jobs=jobs,
        horizon=days * DAY,
        description=(
            f"Ai2-like research cluster: {topology.n_gpus:,} GPUs, 15 budgeted teams, "
            f"{days:g} days, seed {seed}"
            + ("" if training_sizes == "cluster" else ", training runs sized to team budgets")
        ),
        notes={
            "generator": "ai2_like",
            "seed": seed,
            "days": days,
            "gpus": topology.n_gpus,
            "training_sizes": training_sizes,
            "researchers": sum(team.researchers for team in teams),
            # GPU-hours each class offers (runtimes in full) over the cluster's GPU-hours.
            "offered_share_by_class": {
                job_class: round(gpu_seconds / capacity, 4)
                for job_class, gpu_seconds in sorted(offered.items())
            },
        },
    )
