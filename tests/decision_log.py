"""Decision logs of short simulations: every Bind, Reserve and Evict the scheduler emits, one
line each, so that two versions of the scheduler can be compared decision by decision.

Regenerate the recorded logs (only when a change of decisions is intended) with
`python tests/decision_log.py`.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from toposched.cluster.state import Allocation, ClusterState
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import CycleResult, Scheduler
from toposched.scheduler.decisions import Bind, Decision, Evict, Reserve
from toposched.sim.baselines import BASELINES
from toposched.sim.engine import simulate
from toposched.workloads.ai2 import ai2_like
from toposched.workloads.frontier import frontier_lab
from toposched.workloads.model import Workload

DATA = Path(__file__).parent / "data" / "decisions"


@dataclass(frozen=True)
class Run:
    """One short simulation whose decisions are recorded, under toposched or a baseline."""

    name: str
    workload: Callable[[], Workload]
    baseline: str | None = None
    """A name of `BASELINES`; None for toposched's own scheduler."""


RUNS = (
    Run("ai2-seed1", lambda: ai2_like(seed=1, days=0.5, gpus=256)),
    Run("ai2-seed2-team", lambda: ai2_like(seed=2, days=0.5, gpus=256, training_sizes="team")),
    Run("ai2-seed3", lambda: ai2_like(seed=3, days=0.5, gpus=512)),
    Run("frontier-seed1", lambda: frontier_lab(seed=1, days=3.0, racks_per_block=2)),
    Run("frontier-seed3", lambda: frontier_lab(seed=3, days=3.0, racks_per_block=3)),
    Run("slurm-ai2-seed1", lambda: ai2_like(seed=1, days=0.5, gpus=256), "slurm_like"),
    Run(
        "slurm-preempt-ai2-seed1",
        lambda: ai2_like(seed=1, days=0.5, gpus=256),
        "slurm_like_preempt",
    ),
    Run("kube-ai2-seed1", lambda: ai2_like(seed=1, days=0.5, gpus=256), "kube_like"),
    Run("fifo-ai2-seed1", lambda: ai2_like(seed=1, days=0.5, gpus=256), "fifo_first_fit"),
)


def allocation_digest(allocation: Allocation) -> str:
    """Pods, and a short hash of every pod's node and GPUs and the per-pod resources."""
    digest = hashlib.sha1(allocation.nodes.astype("<i8").tobytes())
    digest.update(allocation.gpus.astype("<i8").tobytes())
    digest.update(
        f"{allocation.gpus.shape}/{allocation.gpu_milli}/{allocation.cpu_milli}/"
        f"{allocation.memory_mib}".encode()
    )
    return f"pods={allocation.pods} at={digest.hexdigest()[:16]}"


def line(now: float, decision: Decision) -> str:
    """One decision in words: the cycle's time, its kind, its job and what it decided."""
    if isinstance(decision, Bind):
        return (
            f"{now!r} bind {decision.job_id} {allocation_digest(decision.allocation)} "
            f"unallocated={decision.unallocated} backfilled={decision.backfilled}"
        )
    if isinstance(decision, Reserve):
        return (
            f"{now!r} reserve {decision.job_id} start={decision.start_time!r} "
            f"domain={decision.domain}"
        )
    assert isinstance(decision, Evict)
    return (
        f"{now!r} evict {decision.job_id} for={decision.preemptor or '-'} rule={decision.rule} "
        f"grace={decision.grace_s!r} lost={decision.lost_gpu_seconds!r}"
    )


def record(run: Run) -> list[str]:
    """The decision log of `run`."""
    lines: list[str] = []
    factory = BASELINES[run.baseline] if run.baseline is not None else Scheduler

    def build(state: ClusterState, tree: BudgetTree) -> Scheduler:
        scheduler = factory(state, tree)
        cycle = scheduler.cycle

        def recorded(now: float) -> CycleResult:
            result = cycle(now)
            lines.extend(line(now, decision) for decision in result.decisions)
            return result

        scheduler.cycle = recorded  # type: ignore[method-assign]
        return scheduler

    simulate(run.workload(), build)
    return lines


def path_of(run: Run) -> Path:
    return DATA / f"{run.name}.log"


def main() -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    for run in RUNS:
        lines = record(run)
        path_of(run).write_text("\n".join(lines) + "\n")
        print(f"{run.name}: {len(lines)} decisions", file=sys.stderr)


if __name__ == "__main__":
    main()
