"""A synthetic frontier-lab fleet: 1,000,080 GB300 GPUs, 10k-200k-GPU training runs, failures."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from toposched.cluster.builders import MILLION_GPU_SHAPE
from toposched.cluster.errors import InputError, checked_seed
from toposched.cluster.units import DAY, HOUR, MINUTE
from toposched.workloads.model import (
    NodeFailure,
    SpecFactory,
    Workload,
    WorkloadJob,
    build_cluster,
)

__all__ = ["FRONTIER_BUDGET", "frontier_lab", "frontier_failures"]

PODS_PER_RACK = 18
GPUS_PER_POD = 4
GPUS_PER_RACK = PODS_PER_RACK * GPUS_PER_POD
TRAINING_GPUS = (10_000, 200_000)
"""The smallest and largest training run, rounded to whole racks of 72 GPUs."""
GPU_HOURS_PER_INTERRUPTION = 3 * 16_000
"""Llama 3's pre-training saw about one interruption per 3 hours on 16,000 GPUs."""
REPAIR_MEDIAN = 3 * HOUR
TRAINING_CHECKPOINT_INTERVAL = 600.0
"""Frontier runs checkpoint every few minutes; at this scale an hour would lose too much."""

FRONTIER_BUDGET: dict[str, Any] = {
    "accounts": {
        "pretraining": {"share": 55, "children": {"flagship": 65, "scaling": 35}},
        "posttraining": {"share": 15, "children": {"rl": 60, "sft": 40}},
        "inference": {"share": 18, "children": {"serving": 75, "batch": 25}},
        "evals": {"share": 7, "children": {"benchmarks": 100}},
        "research": {"share": 5, "children": {"exploratory": 100}},
        "scavenger": {"share": 0, "children": {"shared": 100}},
    }
}
"""Programs with their percent of the fleet; `scavenger` has no budget (unallocated work)."""

# Offered load per class of work, as a fraction of the fleet's GPU-hours.
TRAINING_LOAD = {
    "pretraining/flagship": 0.40,
    "pretraining/scaling": 0.20,
    "posttraining/rl": 0.09,
    "posttraining/sft": 0.06,
    "research/exploratory": 0.05,
}
INFERENCE_LOAD = {"inference/serving": 0.14, "inference/batch": 0.05}
EVAL_LOAD = 0.06
SCAVENGER_LOAD = 0.05
BACKLOG = 1.2
"""Training work queued at the start, in fleets' worth of GPUs."""


class _Generator:
    def __init__(self, seed: int, days: float, racks: int, levels: tuple[str, ...]) -> None:
        self.rng = np.random.default_rng(seed)
        self.horizon = days * DAY
        self.racks = racks
        self.levels = levels
        self.factory = SpecFactory()
        self.jobs: list[WorkloadJob] = []
        self.counter = 0

    def lognormal(self, median: float, sigma: float, low: float, high: float) -> float:
        return float(np.clip(median * math.exp(sigma * self.rng.standard_normal()), low, high))

    def add(
        self,
        account: str,
        job_class: str,
        submit: float,
        runtime: float,
        racks: int,
        *,
        min_runtime: float,
        resumable: bool,
        checkpoint_interval: float | None = None,
    ) -> float:
        """Queue a job of `racks` whole racks; returns its GPU-hours."""
        self.counter += 1
        name = f"{account.replace('/', '.')}.{job_class}.{self.counter}"
        topology: dict[str, Any]
        if racks == 1:
            pods, topology = PODS_PER_RACK, {"required": "rack"}
        else:
            pods = racks * PODS_PER_RACK
            zone, block, rack = self.levels
            topology = {
                "required": zone,
                "preferred": block,
                "slices": [{"level": rack, "pods": PODS_PER_RACK}],
            }
        declared = math.ceil(runtime * self.rng.uniform(1.0, 1.5) / HOUR) * HOUR
        spec = self.factory.make(
            name,
            account,
            pods,
            {"gpus": GPUS_PER_POD, "cpu": 128, "memory": "800Gi"},
            topology=topology,
            min_runtime=min_runtime,
            resumable=resumable,
            expected_runtime=declared,
        )
        self.jobs.append(
            WorkloadJob(
                spec,
                submit,
                runtime,
                job_class,
                checkpoint_interval=checkpoint_interval,
                cancel_after=None if job_class == "training" else 2 * DAY,
            )
        )
        return pods * GPUS_PER_POD * runtime / HOUR

    def training(self, account: str, submit: float) -> float:
        low, high = training_racks(self.racks)
        # Sizes spread evenly on a log scale: many 10k-GPU runs, a few near 200k.
        racks = int(round(math.exp(self.rng.uniform(math.log(low), math.log(high)))))
        runtime = self.lognormal(4 * DAY, 0.6, DAY, 20 * DAY)
        return self.add(
            account,
            "training",
            submit,
            runtime,
            racks,
            min_runtime=8 * HOUR,
            resumable=True,
            checkpoint_interval=TRAINING_CHECKPOINT_INTERVAL,
        )

    def inference(self, account: str, submit: float) -> float:
        racks = int(self.rng.choice([1, 2, 4, 8, 16], p=[0.35, 0.25, 0.2, 0.12, 0.08]))
        runtime = self.lognormal(2 * DAY, 0.7, 4 * HOUR, 10 * DAY)
        return self.add(
            account, "inference", submit, runtime, racks, min_runtime=8 * HOUR, resumable=True
        )

    def evaluation(self, submit: float) -> float:
        racks = int(self.rng.choice([1, 2, 4, 8, 16], p=[0.2, 0.3, 0.25, 0.15, 0.1]))
        runtime = self.lognormal(3 * HOUR, 0.6, 30 * MINUTE, 12 * HOUR)
        # An evaluation cannot resume: it asks for protection as long as it expects to run.
        protected = min(math.ceil(runtime / HOUR) * HOUR, 8 * HOUR)
        return self.add(
            "evals/benchmarks",
            "eval",
            submit,
            runtime,
            racks,
            min_runtime=protected,
            resumable=False,
        )

    def scavenger(self, submit: float) -> float:
        racks = int(self.rng.choice([1, 2, 4], p=[0.5, 0.3, 0.2]))
        runtime = self.lognormal(4 * HOUR, 0.8, 30 * MINUTE, DAY)
        return self.add(
            "scavenger/shared",
            "unallocated",
            submit,
            runtime,
            racks,
            min_runtime=HOUR,
            resumable=True,
        )

    def poisson_work(self, load: float, make: Any) -> None:
        """Submit work at uniform random times until it adds up to `load` fleets' worth of
        GPU-hours over the horizon."""
        budget = load * self.racks * GPUS_PER_RACK * self.horizon / HOUR
        offered = 0.0
        while offered < budget:
            offered += make(float(self.rng.uniform(0.0, self.horizon)))


def frontier_failures(
    seed: int, days: float, n_nodes: int, gpus_per_node: int = GPUS_PER_POD
) -> list[NodeFailure]:
    """One node down per interruption, at Llama 3's rate (one per 3 h per 16,000 GPUs), each
    repaired after a lognormal time (median 3 h, between 30 min and 2 days)."""
    rng = np.random.default_rng([seed, 2])
    rate_per_hour = n_nodes * gpus_per_node / GPU_HOURS_PER_INTERRUPTION
    count = int(rng.poisson(rate_per_hour * days * 24))
    times = np.sort(rng.uniform(0.0, days * DAY, size=count))
    nodes = rng.integers(0, n_nodes, size=count)
    repairs = np.clip(REPAIR_MEDIAN * np.exp(0.8 * rng.standard_normal(count)), 1800, 2 * DAY)
    return [
        NodeFailure(float(time), (int(node),), float(repair))
        for time, node, repair in zip(times, nodes, repairs, strict=True)
    ]


def training_racks(racks: int) -> tuple[int, int]:
    """The fewest and most racks of a training run on a fleet of `racks` racks: TRAINING_GPUS,
    with the largest run at most a third of a smaller fleet."""
    low, high = (math.ceil(gpus / GPUS_PER_RACK) for gpus in TRAINING_GPUS)
    high = max(1, min(high, racks // 3))
    return min(low, high), high


def frontier_lab(seed: int = 0, days: float = 30.0, racks_per_block: int | None = None) -> Workload:
    """A frontier lab's fleet over `days` days: by default the 1,000,080-GPU GB300 fleet
    (2 zones x 15 blocks x 463 NVL72 racks of 18 nodes x 4 GPUs).

    Training runs of 10,000-200,000 GPUs ask for whole racks (slices of 18 pods x 4 GPUs per
    rack), one zone, as few blocks as possible; they last days, resume from checkpoints taken
    every 10 minutes, and are protected for 8 h. Inference services hold 1-16 racks for days;
    evaluation jobs take 1-8 racks for hours and are protected for their expected runtime; a
    zero-share scavenger account runs unallocated work of 1-4 racks. Nodes fail at Llama 3's
    rate and are repaired after a few hours. `racks_per_block` shrinks the fleet (for tests).
    """
    checked_seed(seed)
    if not isinstance(days, int | float) or isinstance(days, bool) or not 0 < days <= 366:
        raise InputError("days", days, "must be a number of days > 0 and <= 366")
    shape = dict(MILLION_GPU_SHAPE)
    if racks_per_block is not None:
        shape["racks_per_block"] = racks_per_block
    cluster = {"builder": "nvl72", **shape, "model": "GB300"}
    topology = build_cluster(cluster)
    racks = topology.n_domains(len(topology.levels))
    generator = _Generator(seed, days, racks, topology.levels)
    fleet_gpus = topology.n_gpus
    for account, load in TRAINING_LOAD.items():
        generator.poisson_work(load, lambda t, a=account: generator.training(a, t))
        # Runs already queued at the start, so the fleet opens busy and stays contended.
        queued = 0.0
        while queued < BACKLOG * load * fleet_gpus:
            generator.training(account, float(generator.rng.uniform(0, 600)))
            queued += generator.jobs[-1].gpus
    for account, load in INFERENCE_LOAD.items():
        generator.poisson_work(load, lambda t, a=account: generator.inference(a, t))
    generator.poisson_work(EVAL_LOAD, generator.evaluation)
    generator.poisson_work(SCAVENGER_LOAD, generator.scavenger)
    failures = frontier_failures(seed, days, topology.n_nodes)
    jobs = [job for job in generator.jobs if job.submit_time < generator.horizon]
    return Workload(
        name="frontier",
        topology=topology,
        cluster=cluster,
        budget=FRONTIER_BUDGET,
        jobs=jobs,
        failures=failures,
        horizon=days * DAY,
        description=(
            f"frontier lab: {topology.n_gpus:,} GB300 GPUs, "
            f"{_training_sizes(racks)} training runs, "
            f"{len(failures):,} node failures, {days:g} days, seed {seed}"
        ),
        notes={"generator": "frontier_lab", "seed": seed, "days": days, "gpus": topology.n_gpus},
    )


def _training_sizes(racks: int) -> str:
    """ "10k-200k-GPU" on the full fleet; the true sizes on a smaller one."""
    low, high = (count * GPUS_PER_RACK for count in training_racks(racks))
    if (low, high) == (math.ceil(TRAINING_GPUS[0] / GPUS_PER_RACK) * GPUS_PER_RACK, 200_016):
        return "10k-200k-GPU"
    return f"{high:,}-GPU" if low == high else f"{low:,}-{high:,}-GPU"
