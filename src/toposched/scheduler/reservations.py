"""Reservations: the earliest time and place a blocked large job fits, as running jobs end."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.changes import FEW_PODS
from toposched.cluster.state import ClusterState
from toposched.cluster.statement import Statement
from toposched.placement.policies import PlacementPolicy
from toposched.placement.request import GangRequest
from toposched.placement.search import Placement, place
from toposched.scheduler.fence import Fence, FencedNodes
from toposched.scheduler.jobs import Job, Reservation
from toposched.scheduler.ledger import Ledger
from toposched.scheduler.preemption import VictimSearch
from toposched.scheduler.releases import LeafRoom, ReleaseBounds, ReleasedPrefix
from toposched.scheduler.wording import domain_of

IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class Fit:
    """Where a blocked job fits, and `release`: when the last running job it waits for ends."""

    release: float
    nodes: IntArray
    domain: str
    released: int
    """How many running jobs, in release order, must end first."""
    last: tuple[float, str]
    """The last of them, as (expected end, job id): its place in the release order of a later
    cycle hints at the answer there, as jobs start and end before it."""


@dataclass(frozen=True)
class _Changes:
    """What counts the changes of the cluster and of the running jobs: how many jobs ran
    (`Ledger.releases`) and started (`Ledger.starts`), and the state's allocations taken and
    given back and changes of health and closures but the fence's."""

    running: int
    starts: int
    taken: int
    given_back: int
    availability: int

    @staticmethod
    def of(ledger: Ledger, state: ClusterState) -> _Changes:
        return _Changes(
            len(ledger.releases),
            ledger.starts,
            state.taken,
            state.given_back,
            state.availability_changes,
        )

    def ended_since(self, then: _Changes) -> int | None:
        """How many fewer jobs run than at `then`, if nothing but starts and ends of jobs
        changed the state since (but the fence's closures): every allocation taken was a
        job's start, every one given back a running job's end, no health or other closure
        changed. None otherwise."""
        started = self.starts - then.starts
        if self.taken - then.taken != started or self.availability != then.availability:
            return None
        if self.given_back - then.given_back != then.running + started - self.running:
            return None
        return then.running - self.running


@dataclass(frozen=True)
class _LastAnswer:
    """The last reservation search: for which job and request, at which epoch, with which
    nodes fenced, and its answer; and the changes counted then."""

    job: Job
    request: GangRequest
    epoch: int
    fenced: FencedNodes
    fit: Fit | None
    changes: _Changes


class ReservationSearch:
    """Finds reservations from the running jobs' release order (see `earliest_fit`), and
    remembers the last answer while nothing it depends on changed."""

    def __init__(
        self, state: ClusterState, policy: PlacementPolicy, ledger: Ledger, search: VictimSearch
    ) -> None:
        self.state = state
        self.policy = policy
        self.ledger = ledger
        self.victim_search = search
        self.reserved_nodes: IntArray = np.zeros(0, dtype=np.int64)
        """The nodes of the last reservation found."""
        self._last: _LastAnswer | None = None
        self.few_pods = FEW_PODS
        """Up to how many pods a search releases the jobs themselves rather than freeing
        their parts (`ReleasedPrefix`); the answers are the same either way."""
        self.verify_kept = False
        """Search again wherever the last answer is kept through releases, and raise if the
        search answers otherwise (a debugging check; see `_kept_through_releases`)."""
        self.kept_through_releases = 0
        """Answers kept through releases rather than searched again."""

    def reserve(self, job: Job, now: float, fence: Fence, epoch: int) -> Reservation | None:
        """The earliest time the job fits (see `earliest_fit`), from the last answer when
        nothing has changed since (same job, same epoch and the same nodes fenced) or when
        only jobs released before the one it waited for ended (`_kept_through_releases`)."""
        last = self._last
        fenced = fence.frozen()
        same = (
            last is not None
            and last.job is job
            and last.request is job.request
            and fence.equals(last.fenced)
        )
        if same and last is not None and last.epoch == epoch:
            fit = last.fit
        else:
            changes = _Changes.of(self.ledger, self.state)
            kept = self._kept_through_releases(last, changes) if same else None
            if kept is not None:
                self.kept_through_releases += 1
            if kept is None or self.verify_kept:
                # After a change, the job most likely waits for the same job to end as before:
                # the releases up to it (one more than those before it, whether it runs or not).
                hint = None
                if last is not None and last.job is job and last.fit:
                    hint = self.ledger.releases.bisect_left(last.fit.last) + 1
                fit = self.earliest_fit(job, hint)
                if kept is not None and not _same_fit(kept, fit):
                    raise AssertionError(f"kept reservation {kept} where a search found {fit}")
            else:
                fit = kept
            self._last = _LastAnswer(job, job.request, epoch, fenced, fit, changes)
        if fit is None:
            return None
        self.reserved_nodes = fit.nodes
        return Reservation(job.job_id, max(fit.release, now), int(fit.nodes.size), fit.domain)

    def _kept_through_releases(self, last: _LastAnswer | None, changes: _Changes) -> Fit | None:
        """The last answer, when it still holds: since it was found, nothing but starts and
        ends of jobs changed the cluster state (`_Changes.ended_since`; the same nodes are
        fenced, as the caller checks), every job that ended was released before the one it
        waited for, and every job started since that still runs is released before it too.

        Then the state after the releases up to that job is the one the last search placed the
        job on (the jobs that ended free what their release did there; a job started since
        takes what its release there gives back), so the job fits there as it did; and one
        release fewer gives the state the last search found too small, the jobs that ended
        and those started being among those released either way. The same nodes, the same
        time, the releases up to it counted again."""
        if last is None or last.fit is None:
            return None
        fewer = changes.ended_since(last.changes)
        if fewer is None:
            return None
        fit = last.fit
        releases = self.ledger.releases
        started = changes.starts - last.changes.starts
        if started:
            recent = self.ledger.recent_starts
            if started > len(recent):
                return None
            for key in list(recent)[-started:]:
                if key > fit.last and key in releases:
                    return None  # runs, and is released after the job waited for
        # Every job that ended was released before the one waited for: else it would stand
        # fewer places before it than the change in running jobs says.
        position = releases.bisect_left(fit.last)
        if (
            position != fit.released - 1 - fewer
            or position >= len(releases)
            or releases[position] != fit.last
        ):
            return None
        return dataclasses.replace(fit, released=position + 1)

    def earliest_fit(self, job: Job, hint: int | None = None) -> Fit | None:
        """Where and after which expected release the job fits, releasing running jobs in the
        order they should end: the fewest releases k after which it fits (it does not fit
        after k - 1, and more releases only free more).

        A running job is expected to end at start + expected runtime; one that declared none is
        assumed to yield when its min runtime expires (the contract then lets it be preempted).
        Placement is tried only from the fewest releases that could free enough GPUs in some
        domain of the required level (`ReleaseBounds.fewest`): fewer cannot fit. From there, on
        a statement that is always rolled back, k is found by growing steps and bisection; a
        search after k releases releases only those that can matter to it
        (`ReleaseBounds.released_for`). A `hint` (the expected k: where the job that ended
        the wait last time now stands in the release order) beyond that bound is tried right
        after the bound when whole GPUs are counted (the bound is then most often the answer
        itself), else the steps start at hint - 1: two placements when the answer did not
        move. The bounds read as many releases as the hint at once.
        """
        if not self.ledger.running:
            return None
        bounds = self.bounds(job.request, hint or 0)
        first = bounds.fewest()
        if first is None:
            return None
        prefix = ReleasedPrefix(Statement(self.state), bounds, self.few_pods)

        def place_after(released: int) -> Placement | None:
            prefix.release_for(released)
            outcome = place(self.state, job.request, self.policy, exact_reasons=False)
            return outcome if isinstance(outcome, Placement) else None

        try:
            return self._search(place_after, first, hint, bounds.counted)
        finally:
            prefix.statement.discard()

    def _search(
        self,
        place_after: Callable[[int], Placement | None],
        first: int,
        hint: int | None,
        counted: bool,
    ) -> Fit | None:
        """The fewest releases from `first` on after which `place_after` places the job:
        growing steps from the bound (or the hint), the hint's neighbour when the hint
        places it, then bisection."""
        count = len(self.ledger.releases)
        low = first - 1  # releases known not to be enough
        if hint is not None and not first < hint <= count:
            hint = None
        # Counted per rack, the bound is most often the answer: tried first, the hint
        # next. Without counts (bound 1), the hint's neighbour first.
        start = first if counted or hint is None else hint - 1
        placed = place_after(start)
        if placed is not None:
            high = start
        else:
            low = start
            step = 1
            upto = hint if hint is not None and hint > low else None
            while placed is None:
                if upto is None:
                    if low >= count:
                        return None
                    upto = min(count, low + step)
                    step *= 2
                tried, upto = upto, None
                placed = place_after(tried)
                if placed is None:
                    low = tried
            high = tried
            if tried == hint and high - low > 2:
                # The hint most often is the answer again: its neighbour below settles that,
                # where bisection from the bound would take a placement per halving.
                below = place_after(hint - 1)
                if below is None:
                    low = hint - 1
                else:
                    high, placed = hint - 1, below
        # Narrow down to the fewest releases that still fit (bisection).
        while high - low > 1:
            middle = (low + high) // 2
            outcome = place_after(middle)
            if outcome is None:
                low = middle
            else:
                high, placed = middle, outcome
        assert placed is not None
        return self._fit(placed, high)

    def bounds(self, request: GangRequest, reach: int = 0) -> ReleaseBounds:
        """The releases counted per innermost domain, in whole slices, and summed per domain
        of the gang's required level (see `ReleaseBounds`, read `reach` at a time first); for
        fractional or GPU-less pods whole GPUs tell nothing."""
        order = self.ledger.release_order
        if request.gpus_per_pod == 0 or request.is_fractional:
            return ReleaseBounds(order, None)
        state, leaf = self.state, self.victim_search.leaf_level
        required = request.required
        room = LeafRoom(
            free=state.free_gpus[leaf],
            domain_of_leaf=self.victim_search.domain_of_leaf(required),
            n_domains=state.topology.n_domains(required),
            gpus_per_pod=request.gpus_per_pod,
            granule=request.granule(leaf),
            pods=request.pods,
        )
        return ReleaseBounds(order, room, reach)

    def _fit(self, placed: Placement, released: int) -> Fit:
        nodes = self.state.distinct_nodes(placed.allocation.nodes)
        last = self.ledger.releases[released - 1]
        # Domains are contiguous node ranges, so the smallest one holding the sorted nodes is
        # the smallest holding the first and the last.
        domain = domain_of(self.state.topology, nodes[[0, -1]])
        return Fit(float(last[0]), nodes, domain, released, last)


def _same_fit(kept: Fit, found: Fit | None) -> bool:
    return (
        found is not None
        and (kept.release, kept.domain, kept.released, kept.last)
        == (found.release, found.domain, found.released, found.last)
        and np.array_equal(kept.nodes, found.nodes)
    )
