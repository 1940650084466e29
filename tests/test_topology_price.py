"""The simulator's price of placements spread beyond what a job's topology constraints ask."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from toposched.cli.main import main
from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation
from toposched.cluster.units import HOUR
from toposched.jobs.spec import JobSpec
from toposched.sim.baselines import fifo_first_fit
from toposched.sim.engine import simulate
from toposched.sim.topology_price import Pricing, TopologyPrice
from toposched.workloads.model import NodeFailure, Workload, WorkloadJob, build_cluster

# Two units (the innermost level, `su`) of two 8-GPU nodes each, in one group.
TWO_UNITS = {"builder": "superpod", "spine_groups": 1, "units_per_group": 2, "nodes_per_unit": 2}
TEAMS = {"accounts": {"a": {"share": 100}}}


def spec(pods: int, gpus: int = 8, **topology: Any) -> JobSpec:
    return JobSpec.from_dict(
        {
            "name": "j",
            "account": "a",
            "pods": pods,
            "resources_per_pod": {"gpus": gpus},
            "topology": topology,
        }
    )


def on_nodes(*nodes: int, gpus: int = 8) -> Allocation:
    return Allocation.of(list(nodes), [list(range(gpus)) for _ in nodes])


@pytest.fixture(scope="module")
def pricing() -> Pricing:
    return Pricing(TopologyPrice(), build_cluster(TWO_UNITS))


def test_default_slowdown_goes_by_level_from_the_innermost(pricing: Pricing) -> None:
    assert pricing.slowdown == {"su": 0.05, "group": 0.10}


@pytest.mark.parametrize(
    ("topology", "nodes", "extra", "factor"),
    [
        ({}, (0, 2), {}, 1.0),  # no constraints: spread costs nothing
        ({"required": "su"}, (0, 1), {"su": 0}, 1.0),
        ({"required": "su"}, (1, 2), {"su": 1}, 1.05),
        ({"preferred": "su"}, (2, 3), {"su": 0}, 1.0),
        ({"preferred": "su"}, (0, 3), {"su": 1}, 1.05),
        ({"required": "group", "preferred": "su"}, (1, 2), {"group": 0, "su": 1}, 1.05),
    ],
)
def test_two_pod_gangs(
    pricing: Pricing,
    topology: dict[str, Any],
    nodes: tuple[int, ...],
    extra: dict[str, int],
    factor: float,
) -> None:
    job, allocation = spec(2, **topology), on_nodes(*nodes)
    assert pricing.extra_domains(job, allocation) == extra
    assert pricing.factor(job, allocation) == pytest.approx(factor)


def test_slices_count_each_group_that_straddles(pricing: Pricing) -> None:
    sliced = spec(4, gpus=4, slices=[{"level": "su", "pods": 2}])
    # Ranks 0-1 in unit 0, ranks 2-3 in unit 1: every slice whole.
    assert pricing.extra_domains(sliced, on_nodes(0, 1, 2, 3, gpus=4)) == {"su": 0}
    # Ranks 0-1 on nodes 0 and 2, ranks 2-3 on nodes 1 and 3: both slices cross units.
    assert pricing.extra_domains(sliced, on_nodes(0, 2, 1, 3, gpus=4)) == {"su": 2}
    assert pricing.factor(sliced, on_nodes(0, 2, 1, 3, gpus=4)) == pytest.approx(1.10)


def test_preferred_asks_only_for_the_fewest_domains_the_gpus_need(pricing: Pricing) -> None:
    # 32 GPUs cannot fit one 16-GPU unit: two units is the fewest, and costs nothing.
    assert pricing.extra_domains(spec(4, preferred="su"), on_nodes(0, 1, 2, 3)) == {"su": 0}


def test_cap_and_named_levels() -> None:
    topology = build_cluster(TWO_UNITS)
    steep = Pricing(TopologyPrice({"su": 3.0}, cap=2.0), topology)
    assert steep.factor(spec(2, required="su"), on_nodes(1, 2)) == 2.0
    with pytest.raises(InputError, match="unknown level"):
        Pricing(TopologyPrice({"rack": 0.1}), topology)
    with pytest.raises(InputError, match=">= 1"):
        TopologyPrice(cap=0.5)


def _workload(**gang_fields: Any) -> Workload:
    """A long one-node job, then a two-node gang preferring one unit: first fit (lowest node
    index first) puts the gang on nodes 1 and 2, across units; toposched on unit 1."""

    def job(name: str, submit: float, pods: int, **fields: Any) -> WorkloadJob:
        checkpoint = fields.pop("checkpoint_interval", None)
        document = {"name": name, "account": "a", "pods": pods, "resources_per_pod": {"gpus": 8}}
        runtime = HOUR * (10 if pods == 1 else 1)
        spec = JobSpec.from_dict({**document, **fields})
        return WorkloadJob(spec, submit, runtime, checkpoint_interval=checkpoint)

    return Workload(
        name="two-units",
        topology=build_cluster(TWO_UNITS),
        cluster=TWO_UNITS,
        budget=TEAMS,
        jobs=[
            job("long", 0.0, 1),
            job("gang", 60.0, 2, topology={"preferred": "su"}, **gang_fields),
        ],
    )


def test_a_scheduler_that_spreads_the_gang_pays_for_it() -> None:
    price = TopologyPrice()
    spread = simulate(_workload(), fifo_first_fit, topology_price=price)
    gang = spread.records["gang"]
    assert gang.end_time == pytest.approx(60.0 + 1.05 * HOUR)
    assert gang.topology_gpu_seconds == pytest.approx(16 * 1.05 * HOUR * (1 - 1 / 1.05))
    packed = simulate(_workload(), topology_price=price)
    assert packed.records["gang"].end_time == pytest.approx(60.0 + HOUR)
    assert packed.records["gang"].topology_gpu_seconds == 0.0
    free = simulate(_workload(), fifo_first_fit)
    assert free.records["gang"].end_time == pytest.approx(60.0 + HOUR)


def test_an_interrupted_run_keeps_its_checkpoints_at_the_slowed_pace() -> None:
    workload = _workload(resumable=True, checkpoint_interval=600.0)
    workload.failures = [NodeFailure(2060.0, (2,), repair_after=None)]
    run = simulate(workload, fifo_first_fit, topology_price=TopologyPrice())
    gang = run.records["gang"]
    # 2,000 s ran at 1 / 1.05: three checkpoints (1,800 s of the run) saved 1,800 / 1.05 s of
    # work. The gang restarts at once on nodes 1 and 3, across units again.
    remaining = HOUR - 1800.0 / 1.05
    assert gang.interruptions == 1
    assert gang.end_time == pytest.approx(2060.0 + 1.05 * remaining)


def test_the_cli_checks_the_option_before_running(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", "--topology-price", "rack=-1"])
    assert exit_info.value.code == 2
    assert "'rack=-1': expected 'default' or comma-separated" in capsys.readouterr().err


def test_allocations_in_rank_order_are_read_as_given(pricing: Pricing) -> None:
    allocation = on_nodes(3, 2)
    assert np.array_equal(allocation.nodes, [3, 2])
    assert pricing.extra_domains(spec(2, required="su"), allocation) == {"su": 0}
