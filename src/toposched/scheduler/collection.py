"""Garbage collection between the scheduler's turns: collections run between them (the service's
loop between its turns, when it would wait; the simulator between the instants whose events it
applies), and what survives them is frozen out of later ones.

Python's collector runs whenever enough objects were allocated, in whichever thread allocates
the next one: in the middle of a turn, of a commit or of an HTTP request, holding the
interpreter's lock while it scans. The scheduler's lasting state (a million GPUs' fleet, its
jobs' records, specs, requests and runs: about 20 objects per job) would make each of those
passes long, and on a busy machine a pass that loses its core holds every thread up for as
long. So while the scheduler runs, automatic collection is off and its driver collects the two
young generations itself between turns: when nothing is queued (the service's loop would wait)
and at least `IDLE_COLLECTION_AFTER` objects were allocated, or at `BUSY_COLLECTION_AFTER`
whatever is queued. Each pass then scans a few thousand objects (0.1-0.5 ms), and what survives
it, the lasting state, is frozen (`gc.freeze`): no later pass scans it again. Frozen objects are
still freed by reference counting, as nearly all are; only cyclic garbage among them would stay,
and the scheduler makes next to none (its passes find little to free). A driver that ends while
its process goes on (a simulation run) thaws what was frozen when it stops.
"""

from __future__ import annotations

import gc

__all__ = ["BUSY_COLLECTION_AFTER", "IDLE_COLLECTION_AFTER", "TurnCollector"]

IDLE_COLLECTION_AFTER = 2_000
"""Objects allocated (net of those freed) since the last pass after which the loop collects
when nothing is queued: at 1,000 submissions a second, about one pass in 50 ms."""
BUSY_COLLECTION_AFTER = 20_000
"""Objects allocated since the last pass after which the loop collects even with commands
queued (Python's own collector would have run its youngest generation 28 times)."""


class TurnCollector:
    """Automatic collection off from `start` to `stop` (unless whoever runs the scheduler had
    switched it off, by `gc.disable` or a threshold of 0: then nothing is collected), the
    young generations collected and frozen by `between_turns`."""

    def __init__(
        self, idle_after: int = IDLE_COLLECTION_AFTER, busy_after: int = BUSY_COLLECTION_AFTER
    ) -> None:
        self.idle_after = idle_after
        self.busy_after = busy_after
        self.active = False
        """Whether this collector switched automatic collection off (and collects itself)."""
        self.passes = 0

    def start(self) -> None:
        # A threshold of 0 switches automatic collection off as `gc.disable` does.
        self.active = gc.isenabled() and gc.get_threshold()[0] > 0
        if self.active:
            gc.disable()

    def stop(self, thaw: bool = False) -> None:
        """Automatic collection back on; `thaw`: everything frozen back in the collector's
        sight, so that cyclic garbage among it is collected again (whatever froze it)."""
        if self.active:
            self.active = False
            gc.enable()
            if thaw:
                gc.unfreeze()

    def freeze(self) -> None:
        """Everything alive now is lasting state (e.g. after a recovery, or a run's fleet and
        workload built): frozen unscanned."""
        if self.active:
            gc.freeze()

    def between_turns(self, idle: bool) -> None:
        """A pass over the young generations if enough objects were allocated since the last
        one (fewer when the driver would otherwise wait), then what survived it frozen."""
        if not self.active:
            return
        young = gc.get_count()[0]
        if young >= self.busy_after or (idle and young >= self.idle_after):
            gc.collect(1)
            gc.freeze()
            self.passes += 1
