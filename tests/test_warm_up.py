"""The compiled loops loaded before a service's first decision: that decision loads none.

Run in a fresh process, since this one may hold every loop already from other tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# A fleet of another size than the warm-up's (3 zones of 3 blocks of 45 racks), two racks of
# every three held by protected gangs, the rest by unallocated work; a gang of all but two
# racks of a zone is reserved for (a fence of more than 2,048 nodes), and a one-rack job
# evicts unallocated work. Prints the loops each part loaded.
SCENARIO = """
import numpy as np
from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import Allocation, ClusterState
from toposched.jobs.spec import JobSpec
from toposched.policy.budget import BudgetTree
from toposched.scheduler.adoptions import Adoptions
from toposched.scheduler.core import Scheduler
from toposched.scheduler.warm_up import load_compiled_loops, loops_loaded

def spec(name, account, pods, required, min_runtime):
    topology = {"required": required}
    if pods > 18:
        topology.update(preferred="block", slices=[{"level": "rack", "pods": 18}])
    return JobSpec.from_dict({"name": name, "account": account, "pods": pods,
        "resources_per_pod": {"gpus": 4}, "topology": topology, "min_runtime": min_runtime,
        "expected_runtime": "6h", "resumable": True})

before = loops_loaded()
load_compiled_loops()
warmed = loops_loaded()
tree = BudgetTree.from_dict({"accounts": {"x": {"share": 60}, "y": {"share": 40}}})
scheduler = Scheduler(ClusterState(nvl72_cluster(3, 3, 45)), tree)
specs, allocations, starts = [], [], []
gpus = np.arange(4)
for rack in range(0, 405 - 2, 3):
    nodes = np.arange(rack * 18, (rack + 2) * 18)
    specs.append(spec(f"held-{rack}", "y", 36, "zone", "2h"))
    allocations.append(Allocation.of(nodes, np.tile(gpus, (36, 1))))
    starts.append(-1800.0)
    for offset, size in ((0, 2), (2, 6), (8, 10)):
        nodes = np.arange((rack + 2) * 18 + offset, (rack + 2) * 18 + offset + size)
        specs.append(spec(f"spare-{rack}-{offset}", "y", size, "rack", "0s"))
        allocations.append(Allocation.of(nodes, np.tile(gpus, (size, 1))))
        starts.append(-7200.0)
scheduler.adopt_many(Adoptions(specs, allocations, starts), now=0.0)
scheduler.submit(spec("large", "x", (135 - 2) * 18, "zone", "2h"), 1.0)
scheduler.submit(spec("rack", "x", 18, "rack", "2h"), 1.0)
result = scheduler.cycle(1.0)
assert result.reservation is not None and result.reservation.job_id == "large", result
print(warmed - before, loops_loaded() - warmed)
"""


def test_a_decision_after_the_warm_up_loads_no_compiled_loop() -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [sys.executable, "-c", SCENARIO], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    warmed, during = map(int, done.stdout.split())
    assert warmed > 20  # the warm-up loaded the loops
    assert during == 0
