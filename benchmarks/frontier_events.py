"""The simulator's work outside the scheduler's cycles on a frontier-lab run, by event kind.

Runs the frontier workload (`toposched simulate --workload frontier`, one cycle per 10 minutes)
for a few simulated days and times every event handler of the simulated backend (submissions,
completions, grace-period ends, checkpoints, node failures and repairs, ...), the backend
starting a cycle's bound jobs (`apply`) and the meter reading the rates after an instant. Prints,
per kind, the events handled, their total and mean time; then the run's process CPU, the
scheduler's CPU inside its cycles, and the difference: what the simulator and the scheduler's
event calls cost outside the cycles (the timers' own cost included, about 0.2 us a call).

The last line is a digest of every job's record, the counts, the integrals and the timeline:
two trees' digests are equal when their runs decided alike.

    PYTHONPATH=src .venv/bin/python benchmarks/frontier_events.py --days 3
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from toposched.sim.backend import SimulatedBackend
from toposched.sim.engine import Simulation
from toposched.sim.meter import Meter
from toposched.sim.records import SimulationResult
from toposched.workloads.catalog import workload_by_name

TIMED = (
    (SimulatedBackend, "on_submission", "submission"),
    (SimulatedBackend, "on_completion", "completion"),
    (SimulatedBackend, "on_grace_end", "grace end"),
    (SimulatedBackend, "on_checkpoint", "checkpoint"),
    (SimulatedBackend, "on_failure", "node failure"),
    (SimulatedBackend, "on_repair", "repair"),
    (SimulatedBackend, "on_cancel", "cancellation"),
    (SimulatedBackend, "on_protection_end", "protection end"),
    (SimulatedBackend, "apply", "a cycle's decisions carried out"),
    (Meter, "measure", "rates read"),
)

spent: dict[str, float] = defaultdict(float)
calls: dict[str, int] = defaultdict(int)


def timed(method: Callable[..., Any], label: str) -> Callable[..., Any]:
    def wrapper(*args: Any) -> Any:
        began = time.perf_counter()
        try:
            return method(*args)
        finally:
            spent[label] += time.perf_counter() - began
            calls[label] += 1

    return wrapper


def digest(result: SimulationResult) -> str:
    """Every job's record (but the job itself), the counts, integrals and samples."""
    hashed = hashlib.sha256()
    for name, record in result.records.items():
        fields = {
            field.name: getattr(record, field.name)
            for field in dataclasses.fields(record)
            if field.name not in ("job", "name")
        }
        hashed.update(repr((name, sorted(fields.items()))).encode())
    hashed.update(repr(sorted(result.counts.items())).encode())
    hashed.update(repr(dataclasses.asdict(result.integrals)).encode())
    hashed.update(repr([dataclasses.astuple(sample) for sample in result.samples]).encode())
    hashed.update(repr(result.scheduler_events).encode())
    return hashed.hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    workload = workload_by_name(
        "frontier", seed=args.seed, days=args.days, gpus=None, traces_dir=None
    )
    for owner, name, label in TIMED:
        setattr(owner, name, timed(getattr(owner, name), label))
    cpu_began = time.process_time()
    result = Simulation(workload, cycle_interval=600.0).run()
    cpu = time.process_time() - cpu_began
    print(f"{'':32} {'events':>9} {'total s':>8} {'mean us':>8}")
    for _, _, label in TIMED:
        if calls[label]:
            mean = spent[label] / calls[label] * 1e6
            print(f"{label:32} {calls[label]:9,} {spent[label]:8.3f} {mean:8.1f}")
    scheduler = result.scheduler_cpu_seconds
    print(
        f"process CPU {cpu:.2f} s, scheduler CPU in cycles {scheduler:.2f} s, "
        f"outside the cycles {cpu - scheduler:.2f} s (loop wall {result.wall_seconds:.2f} s)"
    )
    print(f"digest {digest(result)}")


if __name__ == "__main__":
    main()
