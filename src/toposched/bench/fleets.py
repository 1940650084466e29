"""The churned fleet every `toposched bench` figure is reported on, saved as a fixture so that
every run (and every machine) uses the same one.

`bench/data/churned-fleet-seed0.npz` holds the running jobs of `churned_fleet(seed=0)`: about
50,000 jobs of 1-8 nodes left after filling the 1M-GPU fleet to 85% with toposched's own
placements and ending jobs at random down to 70%. Loading it takes seconds; building it again,
half a minute. Regenerate it with `python -m toposched.bench.fleets` after a change to
placement that should show in the figures.
"""

from __future__ import annotations

from pathlib import Path

from toposched.workloads.fleet import ChurnedFleet, churned_fleet

__all__ = ["CHURNED_FIXTURE", "churned"]

CHURNED_FIXTURE = Path(__file__).parent / "data" / "churned-fleet-seed0.npz"


def churned() -> ChurnedFleet:
    """The saved churned fleet, or, where the fixture is missing, the same one built anew."""
    if CHURNED_FIXTURE.exists():
        return ChurnedFleet.load(CHURNED_FIXTURE)
    return churned_fleet(seed=0)


if __name__ == "__main__":
    fleet = churned_fleet(seed=0)
    fleet.save(CHURNED_FIXTURE)
    print(f"{CHURNED_FIXTURE}: {len(fleet.jobs):,} jobs, {fleet.occupancy:.2%} busy")
