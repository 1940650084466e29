"""Free capacity between cycles, as the scheduler's cycles read it: the epoch that moves
whenever free capacity may have changed, the nodes jobs released since the last cycle, and
what those releases may undo of the last cycle's failures and refusals."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import ClusterState
from toposched.scheduler.failures import FailureMemo
from toposched.scheduler.freed import FreedCapacity
from toposched.scheduler.incremental import Incremental
from toposched.scheduler.interruptions import Interruptions
from toposched.scheduler.jobs import Job
from toposched.scheduler.ledger import Ledger
from toposched.scheduler.preemptor import Preemptor
from toposched.scheduler.settings import SchedulerSettings
from toposched.scheduler.spares import SparePool

IntArray = NDArray[np.int64]


class BetweenCycles:
    """What a cycle may remember of free capacity between cycles. `epoch` moves whenever free
    capacity may have changed (a job started, or the cluster changed between cycles, seen by
    its version); equal epochs and fences mean equal free capacity. Failures to place stay
    true until capacity they could use may have been freed (`freed` tells where jobs released
    GPUs between cycles); a reservation until anything changed.

    `tallied`: the queue is Fair Tree's, counted by key, whose order a cycle can check; only
    then may a cycle after releases skip the settled jobs.
    """

    def __init__(
        self,
        state: ClusterState,
        settings: SchedulerSettings,
        ledger: Ledger,
        failures: FailureMemo,
        incremental: Incremental,
        preemptor: Preemptor,
        interruptions: Interruptions,
        spares: SparePool | None,
        jobs: dict[str, Job],
        tallied: bool,
    ) -> None:
        self.state = state
        self.settings = settings
        self.ledger = ledger
        self.failures = failures
        self.incremental = incremental
        self.preemptor = preemptor
        self.interruptions = interruptions
        self.spares = spares
        self.jobs = jobs
        self.tallied = tallied
        self.freed = FreedCapacity(state)
        self._epoch = 0
        self._settled_version = -1

    def epoch(self) -> int:
        """Moves whenever free capacity may have changed: equal epochs and fences mean equal
        free capacity."""
        return self._epoch

    def started(self, jobs: int = 1) -> None:
        """`jobs` jobs took GPUs: free capacity changed."""
        self._epoch += jobs

    @contextmanager
    def stopping(self, job: Job) -> Iterator[None]:
        """Around a running job's stop: its nodes are released when the stop is done. When it
        was the last victim of a preemptor, the nodes kept for the preemptor are released too:
        it starts at its turn, and what they hold beyond its pods opens to the jobs after it."""
        nodes = self.state.allocations[job.job_id].nodes
        free_to_take = job.unallocated and not job.evicting
        preemptor = self.ledger.preemptor_of.get(job.job_id)
        self.freed.before_release()
        yield
        self.freed.released(nodes, free_to_take)
        if preemptor is not None:
            nomination = self.jobs[preemptor].nomination
            if nomination is not None and not nomination.victims:
                self.freed.released(nomination.nodes)

    def before_cycle(self) -> None:
        """When something outside the cycle changed the cluster (a job ended, a node came
        back), or the last cycle's nominees let go of nodes fenced for the jobs before them,
        capacity may have been freed: earlier failures prove nothing any more but those of
        gangs that no domain gaining GPUs can hold, and after completions the settled jobs of
        the other shapes may still be skipped."""
        if self.state.version == self._settled_version and not self.freed.any:
            return
        self._epoch += 1
        keep = self.settings.keep_failures_through_releases
        undone = self.failures.after_changes(self.freed.since_settled(), self.state, keep)
        self.incremental.released(undone if self.skips_after_completions() else None)
        self.preemptor.kept.after_changes(self.freed)

    def after_cycle(self, opened: list[IntArray]) -> None:
        """A cycle ended: the state as it is now is the reference. The nodes nominees let go
        of in it (`Turn.opened`) were fenced for the jobs walked before them: the next cycle
        takes them for released, as a completion's, to find the failures and refusals of those
        jobs they may undo."""
        self._settled_version = self.state.version
        self.freed.settle()
        if opened:
            self.freed.released(np.concatenate(opened))
            self.incremental.completed()

    def skips_after_completions(self) -> bool:
        """Whether a cycle after jobs that ended (on their own, or evicted) may skip the jobs
        the last one settled, as far as the scheduler's parts go: none that reads free
        capacity or the running jobs outside a job's own turn is in use (an admission rule,
        waits for checkpoints, spares, nodes kept for interrupted gangs). Nominees take their
        turn in such a cycle (`Incremental.walk`)."""
        parts = (self.settings.admission, self.preemptor.checkpoints, self.spares)
        return (
            self.incremental.completions
            and all(part is None for part in parts)
            and not self.interruptions.kept_ids
            and self.tallied
        )
