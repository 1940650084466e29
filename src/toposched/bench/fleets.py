"""The churned fleets `toposched bench` reports its figures on, saved as fixtures so that every
run (and every machine) uses the same ones.

`bench/data/churned-fleet-seed0.npz` holds the running jobs of `churned_fleet(seed=0)`: about
50,000 jobs of 1-8 nodes left after filling the 1M-GPU fleet to 85% with toposched's own
placements and ending jobs at random down to 70%. `churned-fleet-fifo-seed0.npz` is the same
arrivals and endings placed by the FIFO baseline's first fit on a flat node list, which drops
the jobs' one-rack constraint: the layout a topology-blind scheduler leaves. Loading either
takes seconds; building them again, minutes. Regenerate them with
`python -m toposched.bench.fleets` after a change to placement that should show in the figures.
"""

from __future__ import annotations

from pathlib import Path

from toposched.cluster.state import ClusterState
from toposched.placement.request import GangRequest
from toposched.placement.search import PlacementResult
from toposched.sim.baselines import FirstFit, flat_place
from toposched.workloads.fleet import ChurnedFleet, churned_fleet

__all__ = ["CHURNED_FIFO_FIXTURE", "CHURNED_FIXTURE", "churned", "churned_fifo", "first_fit"]

CHURNED_FIXTURE = Path(__file__).parent / "data" / "churned-fleet-seed0.npz"
CHURNED_FIFO_FIXTURE = Path(__file__).parent / "data" / "churned-fleet-fifo-seed0.npz"


def first_fit(state: ClusterState, request: GangRequest) -> PlacementResult:
    """The FIFO baseline's placement: lowest node index first, topology constraints dropped."""
    return flat_place(state, request, FirstFit())


def churned() -> ChurnedFleet:
    """The saved churned fleet, or, where the fixture is missing, the same one built anew."""
    if CHURNED_FIXTURE.exists():
        return ChurnedFleet.load(CHURNED_FIXTURE)
    return churned_fleet(seed=0)


def churned_fifo() -> ChurnedFleet:
    """The saved fleet churned by the FIFO baseline's first fit, or the same one built anew."""
    if CHURNED_FIFO_FIXTURE.exists():
        return ChurnedFleet.load(CHURNED_FIFO_FIXTURE)
    return churned_fleet(seed=0, placer=first_fit)


if __name__ == "__main__":
    for path, placer in ((CHURNED_FIXTURE, None), (CHURNED_FIFO_FIXTURE, first_fit)):
        fleet = churned_fleet(seed=0, placer=placer)
        fleet.save(path)
        print(f"{path}: {len(fleet.jobs):,} jobs, {fleet.occupancy:.2%} busy")
