"""The churned fleet the benchmarks report on: the saved fixture is the fleet it says it is."""

from __future__ import annotations

import numpy as np
import pytest

from toposched.bench.checks import check_gpu_accounts
from toposched.bench.fleets import CHURNED_FIFO_FIXTURE, CHURNED_FIXTURE, churned, churned_fifo
from toposched.cluster.errors import InputError
from toposched.workloads.fleet import RACK_LEVEL, churned_fleet

needs_fixture = pytest.mark.skipif(
    not CHURNED_FIXTURE.is_file(), reason=f"no churned-fleet fixture at {CHURNED_FIXTURE}"
)


@needs_fixture
def test_the_saved_churned_fleet() -> None:
    fleet = churned()
    state = fleet.state
    assert fleet.occupancy == pytest.approx(0.70, abs=1e-4)
    # Filled to 85% by 61,418 placements; 10,985 jobs ended at random.
    assert (fleet.placed, fleet.ended, len(fleet.jobs)) == (61_418, 10_985, 50_433)
    assert set(state.allocations) == set(fleet.jobs)
    check_gpu_accounts(state)
    racks = state.topology.node_domain[RACK_LEVEL]
    sizes = np.array([nodes.size for nodes in fleet.jobs.values()])
    assert sizes.min() == 1 and sizes.max() == 8
    assert all(np.unique(racks[nodes]).size == 1 for nodes in fleet.jobs.values())
    free = state.gpu_free_milli.sum(axis=1).reshape(-1, 18)  # per node, a row per rack
    # Racks left whole and free, and racks with a hole: the 200,016-GPU gang needs 2,778 whole.
    assert int((free == 4 * 1000).all(axis=1).sum()) == 2_102
    assert int((free > 0).any(axis=1).sum()) == 9_424


def test_a_churned_fleet_needs_occupancy_below_its_fill() -> None:
    with pytest.raises(InputError, match="occupancy"):
        churned_fleet(fill=0.7, occupancy=0.8)


# The same arrivals and endings as the toposched-churned fleet, placed by first fit.
FIFO_COUNTS = (61_418, 10_985, 50_433)
FIFO_STRADDLING = 6_908

needs_fifo_fixture = pytest.mark.skipif(
    not CHURNED_FIFO_FIXTURE.is_file(), reason=f"no FIFO-churned fixture at {CHURNED_FIFO_FIXTURE}"
)


@needs_fifo_fixture
def test_the_saved_fleet_churned_by_fifo() -> None:
    fleet = churned_fifo()
    state = fleet.state
    assert fleet.occupancy == pytest.approx(0.70, abs=1e-4)
    assert (fleet.placed, fleet.ended, len(fleet.jobs)) == FIFO_COUNTS
    assert set(state.allocations) == set(fleet.jobs)
    check_gpu_accounts(state)
    racks = state.topology.node_domain[RACK_LEVEL]
    # First fit ignores the one-rack constraint: some jobs straddle racks.
    spans = [np.unique(racks[nodes]).size for nodes in fleet.jobs.values()]
    assert max(spans) == 2
    assert sum(span > 1 for span in spans) == FIFO_STRADDLING
    free = state.gpu_free_milli.sum(axis=1).reshape(-1, 18)  # per node, a row per rack
    assert int((free == 4 * 1000).all(axis=1).sum()) == 2_087
    assert int((free > 0).any(axis=1).sum()) == 10_018
