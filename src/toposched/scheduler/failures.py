"""Gang shapes that did not fit, remembered across cycles until capacity may have been freed."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import ClusterState, distinct
from toposched.placement.request import GangRequest
from toposched.scheduler.fence import Fence, FencedNodes, NodeGroup
from toposched.scheduler.jobs import Job
from toposched.scheduler.wording import needs

Shape = tuple[object, ...]
"""A gang's shape: everything but its pod count (see `Job.shape`)."""


@dataclass(frozen=True, eq=False)
class Failure:
    """A gang that did not fit: its pod count, why, and the nodes fenced at the time.

    Free capacity only shrinks while jobs start and the fence grows, so a gang of the same
    shape and at least as many pods cannot fit either while no capacity has been freed and the
    fence still holds every node it held then (the placement search fails monotonically).
    """

    pods: int
    reason: str
    fenced: FencedNodes
    job_id: str
    epoch: int
    """The scheduler's epoch at the time: equal epochs and fences mean equal free capacity."""
    cycle: int
    request: GangRequest | None = None
    """The gang that did not fit: what tells whether freed capacity could place it (None: any
    release undoes the failure)."""
    outlived_release: bool = False
    """Whether GPUs were freed since it was found, none where the gang could use them."""
    of_sets: bool = False
    """Whether the gang is a job's of several pod sets (`request` may then ask, per pod, the
    most any set asks: no release rule bounds what the sets could use)."""
    checked_again: bool = False
    """Whether it was dropped at a release and found to hold again at a later turn (`recheck`):
    its `reason` tells the capacity when it was found, not now."""

    def whole_gpus_per_pod(self) -> int:
        """Whole GPUs each pod of the gang takes (0 when whole GPUs tell nothing: fractional
        or GPU-less pods, or no request known)."""
        request = self.request
        if request is None or request.gpus_per_pod == 0 or request.is_fractional:
            return 0
        return request.gpus_per_pod


@dataclass(frozen=True, slots=True)
class Remembered:
    """An answer of `FailureMemo` and when it was found: the cycle, the fence's generation and
    the memo's version. `failure` is None when no known failure implied one."""

    cycle: int
    fence_generation: int
    version: int
    failure: Failure | None

    def is_current(self, cycle: int, fence: Fence, version: int) -> bool:
        """Whether it was found in this cycle, with the fence and the known failures as now."""
        return (
            self.cycle == cycle
            and self.fence_generation == fence.generation
            and self.version == version
        )


_NOT_REMEMBERED = Remembered(-1, -1, -1, None)


class ReleaseCheck:
    """Whether a release of GPUs on the nodes `freed` could undo a failure, while nothing else
    changed the cluster but starts (which only take capacity). A gang confined to one domain
    of its required level (the whole cluster when none is required) fits now only in a domain
    that gained GPUs: in any other, capacity only shrank, and the placement search fails
    monotonically and judges each such domain by its own capacity. So the failure still holds
    when each domain that gained GPUs has fewer free whole GPUs than the gang needs, or its
    open nodes hold fewer of the gang's pods than it has, each pod on one node with its whole
    GPUs free there (counted from the domain's histogram of nodes by free whole GPUs, over
    every GPU model: at least what the search could use). Capacity is read as the state is
    when asked; what was read is kept until the state changes."""

    def __init__(self, freed: NDArray[np.int64], state: ClusterState) -> None:
        self.freed = freed
        self.state = state
        self._gained: dict[int, NDArray[np.int32]] = {}
        self._read_at = state.version
        self._most_free: dict[int, int] = {}
        self._most_pods: dict[tuple[int, int], int] = {}

    @staticmethod
    def applies(failure: Failure) -> bool:
        """Whether the check can tell anything of `failure`: a whole-GPU gang of one pod set,
        its request known."""
        return failure.whole_gpus_per_pod() > 0 and not failure.of_sets

    def still_fails(self, failure: Failure, pods: int) -> bool:
        """Whether a gang of `failure`'s shape with `pods` pods (at least `failure.pods`) does
        not fit now, as `failure` said before the release."""
        request, per_pod = failure.request, failure.whole_gpus_per_pod()
        if request is None or per_pod <= 0 or failure.of_sets:
            return False
        if self.state.version != self._read_at:
            self._read_at = self.state.version
            self._most_free.clear()
            self._most_pods.clear()
        level = request.required
        return self._room_at(level) < pods * per_pod or self._pods_room_at(level, per_pod) < pods

    def _domains_at(self, level: int) -> NDArray[np.int32]:
        known = self._gained.get(level)
        if known is None:
            node_domain = self.state.topology.node_domain
            known = self._gained[level] = distinct(node_domain[level][self.freed])
        return known

    def _room_at(self, level: int) -> int:
        known = self._most_free.get(level)
        if known is None:
            free = self.state.free_gpus[level][self._domains_at(level)]
            known = self._most_free[level] = int(free.max())
        return known

    def _pods_room_at(self, level: int, gpus_per_pod: int) -> int:
        known = self._most_pods.get((level, gpus_per_pod))
        if known is None:
            # Nodes by free whole GPUs, per gained domain; each holds k // gpus_per_pod pods.
            hist = self.state.free_hist[level][self._domains_at(level)]
            nodes = hist.sum(axis=1, dtype=np.int64)
            pods = nodes @ (np.arange(nodes.shape[1], dtype=np.int64) // gpus_per_pod)
            known = self._most_pods[level, gpus_per_pod] = int(pods.max())
        return known


@dataclass(frozen=True, slots=True)
class _Disjoint:
    """Whether `fenced` (kept alive here, since it is looked up by identity) misses the opened
    nodes."""

    fenced: FencedNodes
    misses: bool


class FailureMemo:
    """Gang shapes that did not fit, kept across cycles until capacity may have been freed."""

    def __init__(self) -> None:
        self.by_shape: dict[Shape, list[Failure]] = {}
        self.version = 0
        # Per shape, the failure with the fewest pods among those the fence still implies, as
        # of (cycle, fence generation, version): most jobs ask again before anything moved.
        self._smallest: dict[Shape, Remembered] = {}
        # Whether a failure's fenced nodes miss the nodes `find_beyond` opens, by the identity
        # of those fenced nodes, and whether each group of fenced nodes does, for one marking
        # of opened nodes: a cycle asks about the same reserved nodes for every short job, and
        # each answer looks at tens of thousands of nodes.
        self._opened: NDArray[np.bool_] | None = None
        self._disjoint: dict[int, _Disjoint] = {}
        self._group_disjoint: dict[int, tuple[NodeGroup, bool]] = {}
        # `_smallest` for `find_beyond`, for the same opened nodes.
        self._smallest_beyond: dict[Shape, Remembered] = {}
        # Failures the last release may have undone, by shape (fewest pods first), and that
        # release: checked again when a job of their shape asks (`recheck`).
        self._dropped: dict[Shape, list[Failure]] = {}
        self._check: ReleaseCheck | None = None
        self.older_messages: dict[tuple[Failure, int], str] = {}
        """What `FailureReasons` wrote about failures of earlier cycles, for later cycles."""

    def clear(self) -> None:
        self.by_shape.clear()
        self._smallest.clear()
        self._opened = None
        self._disjoint.clear()
        self._group_disjoint.clear()
        self._smallest_beyond.clear()
        self._dropped = {}
        self._check = None
        self.version += 1

    def after_changes(
        self, freed: NDArray[np.int64] | None, state: ClusterState, keep: bool = True
    ) -> frozenset[Shape] | None:
        """Forget the failures that the changes since the last cycle may have undone: every
        one, unless the only changes were jobs releasing GPUs on the nodes `freed` (None:
        others too; see `FreedCapacity`) and `keep` (failures kept through releases). Returns
        the shapes whose failures the changes may have undone (empty: every failure outlived
        them), or None when every failure was forgotten."""
        if freed is None or not keep:
            self.clear()
            return None
        return self.outlive_release(freed, state)

    def outlive_release(self, freed: NDArray[np.int64], state: ClusterState) -> frozenset[Shape]:
        """GPUs on the nodes `freed` returned since the failures were found, and nothing else
        changed the cluster but starts (which only take capacity). Keep the failures that the
        release cannot undo (see `ReleaseCheck`); the rest are dropped, to be searched again,
        and so is the failure of a job of several pod sets: its gang may ask, per pod, the
        most any set asks (`JobSets.gang`), more than they need. A dropped failure of a
        whole-GPU gang is checked again when a job of its shape asks (`recheck`), against the
        capacity as it is then: jobs earlier in the queue may have taken what was freed.
        Returns the shapes of the failures dropped (empty: every failure outlived it)."""
        if freed.size == 0:
            return frozenset()
        if not self.by_shape:
            # Those dropped before were checked against earlier releases only.
            self._dropped, self._check = {}, None
            return frozenset()
        check = ReleaseCheck(freed, state)
        kept: dict[Shape, list[Failure]] = {}
        dropped: dict[Shape, list[Failure]] = {}
        undone: set[Shape] = set()
        for shape, failures in self.by_shape.items():
            survivors: list[Failure] = []
            for failure in failures:
                if check.still_fails(failure, failure.pods):
                    if not failure.outlived_release:
                        failure = dataclasses.replace(failure, outlived_release=True)
                    survivors.append(failure)
                else:
                    undone.add(shape)
                    if check.applies(failure):
                        dropped.setdefault(shape, []).append(failure)
            if survivors:
                kept[shape] = survivors
        self.clear()
        self.by_shape.update(kept)
        for failures in dropped.values():
            failures.sort(key=lambda failure: failure.pods)
        self._dropped = dropped
        self._check = check
        return frozenset(undone)

    def recheck(
        self, shape: Shape, pods: int, fence: Fence, opened: NDArray[np.bool_] | None = None
    ) -> Failure | None:
        """A failure implying that a gang of `shape` with `pods` pods does not fit now, from
        one dropped at the last release (`outlive_release`) and checked again against the
        capacity as it is now, with the fence as a search sees it now (`Fence.seen`: settled,
        or with the reserved block lifted for a backfill, `opened` then marking the reserved
        nodes); it is remembered with those fenced nodes, not those it was found under: only
        they are known to be fenced at the time of the check. Like the release rule, it needs
        every node fenced when the failure was found to be fenced still and, with `opened`,
        none of them reserved (else a domain that gained no GPUs may have regained nodes), and
        no domain that gained GPUs at the release to hold the gang now; tried for the
        failure's own pod count first (the stronger answer), then for `pods`. None when no
        dropped failure of the shape holds."""
        dropped = self._dropped.get(shape)
        if not dropped or self._check is None:
            return None
        check = self._check
        for failure in dropped:
            if failure.pods > pods:
                break
            if opened is not None and not self._misses(failure.fenced, opened):
                continue
            if not fence.holds(failure.fenced):
                continue
            for count in (failure.pods, pods):
                if check.still_fails(failure, count):
                    renewed = dataclasses.replace(
                        failure,
                        pods=count,
                        fenced=fence.seen(),
                        outlived_release=True,
                        checked_again=True,
                    )
                    self.add(shape, renewed, fence)
                    return renewed
                if count == pods:
                    break
        return None

    def _misses(self, fenced: FencedNodes, opened: NDArray[np.bool_]) -> bool:
        """Whether no node of `fenced` is marked in `opened`; answers are kept for one marking
        of opened nodes (see `find_beyond`)."""
        if self._opened is not opened:
            self._opened = opened
            self._disjoint = {}
            self._group_disjoint = {}
            self._smallest_beyond = {}
        known = self._disjoint.get(id(fenced))
        if known is None:
            known = self._disjoint[id(fenced)] = _Disjoint(
                fenced, fenced.misses(opened, self._group_disjoint)
            )
        return known.misses

    def find(self, shape: Shape, pods: int, fence: Fence, cycle: int) -> Failure | None:
        """A failure implying that a gang of `shape` with `pods` pods does not fit now."""
        cached = self._smallest.get(shape, _NOT_REMEMBERED)
        # `Remembered.is_current`, inlined: asked for most pending jobs of every cycle.
        if (
            cached.cycle != cycle
            or cached.fence_generation != fence.generation
            or cached.version != self.version
        ):
            smallest: Failure | None = None
            for failure in self.by_shape.get(shape, ()):
                if (smallest is None or failure.pods < smallest.pods) and fence.holds(
                    failure.fenced
                ):
                    smallest = failure
            cached = Remembered(cycle, fence.generation, self.version, smallest)
            self._smallest[shape] = cached
        found = cached.failure
        return found if found is not None and pods >= found.pods else None

    def find_beyond(
        self,
        shape: Shape,
        pods: int,
        fence: Fence,
        opened: NDArray[np.bool_],
        cycle: int,
    ) -> Failure | None:
        """`find` as if the fence let the nodes marked in `opened` go: a failure found with none
        of those nodes fenced (short jobs, before they try the reserved nodes). Like `find`,
        the smallest such failure of a shape is remembered until the fence moves: a cycle can
        ask for thousands of backfill candidates, and each comparison of fences may cover tens
        of thousands of nodes."""
        if self._opened is not opened:
            self._misses(FencedNodes(), opened)  # a new marking: answers kept start afresh
        cached = self._smallest_beyond.get(shape, _NOT_REMEMBERED)
        if not cached.is_current(cycle, fence, self.version):
            smallest: Failure | None = None
            for failure in self.by_shape.get(shape, ()):
                if smallest is None or failure.pods < smallest.pods:
                    fenced = failure.fenced
                    if self._misses(fenced, opened) and fence.holds(fenced):
                        smallest = failure
            cached = Remembered(cycle, fence.generation, self.version, smallest)
            self._smallest_beyond[shape] = cached
        found = cached.failure
        return found if found is not None and pods >= found.pods else None

    def add(self, shape: Shape, failure: Failure, fence: Fence) -> None:
        """Remember a failure, unless one already known implies it; drop those it implies.
        `failure` was found under `fence` as it is now: when the search saw all of it, its
        fenced nodes are compared with older ones through the fence's record, not as sets."""
        known = self.by_shape.setdefault(shape, [])
        fenced = failure.fenced
        whole = fenced is fence.frozen()

        def implied_by(old: Failure) -> bool:  # old.fenced <= fenced
            return fence.holds(old.fenced) if whole else old.fenced <= fenced

        def implies(old: Failure) -> bool:  # fenced <= old.fenced
            return fence.within(old.fenced) if whole else fenced <= old.fenced

        if any(old.pods <= failure.pods and implied_by(old) for old in known):
            return
        known[:] = [old for old in known if not (failure.pods <= old.pods and implies(old))]
        known.append(failure)
        self.version += 1


#: Messages about failures of earlier cycles kept from one cycle to the next (see
#: `FailureReasons`); more are forgotten at once.
OLDER_MESSAGES_KEPT = 4096


class FailureReasons:
    """Why jobs are known not to fit, from earlier failures of their shape, in words; each
    message is written once per cycle (many pending jobs share a size), and once for all
    cycles when the failure is from an earlier one (`older`, shared by the cycles: such a
    message reads nothing that changes with the cycle)."""

    def __init__(self, cycle: int, older: dict[tuple[Failure, int], str] | None = None) -> None:
        self.cycle = cycle
        # Keyed by the failure itself, not its id(): a failure dropped during the cycle may be
        # freed and its id() reused by a new one.
        self._messages: dict[tuple[Failure, int], str] = {}
        if older is None:
            older = {}
        elif len(older) > OLDER_MESSAGES_KEPT:
            older.clear()
        self._older = older

    def known(self, failure: Failure, pods: int) -> str | None:
        """The message already written for `failure` and a gang of `pods` pods, if any."""
        messages = self._messages if failure.cycle == self.cycle else self._older
        return messages.get((failure, pods))

    def reason(self, job: Job, failure: Failure, fence: Fence, epoch: int) -> str:
        """Why `job` is known not to fit, from `failure`, at the scheduler's `epoch`."""
        messages = self._messages
        if failure.cycle != self.cycle:
            if (
                failure.job_id == job.job_id
                and failure.epoch == epoch
                and fence.equals(failure.fenced)
            ):
                # The same job on the same free capacity: the search would say the same again.
                return failure.reason
            messages = self._older
        key = (failure, job.request.pods)
        message = messages.get(key)
        if message is None and failure.checked_again:
            # The count in its reason is the one it was found with: the freed GPUs went since.
            message = (
                f"{needs(job)}; a job of the same pod shape did not fit ({failure.reason}), and "
                "no domain that gained GPUs since has room for it now"
            )
            messages[key] = message
        if message is None:
            since = "does not fit now" if failure.cycle == self.cycle else "did not fit"
            message = (
                f"{needs(job)}; a job of the same pod shape with {failure.pods} "
                f"pod{'s' if failure.pods != 1 else ''} "
                f"{since} ({failure.reason})"
            )
            if failure.outlived_release or failure.cycle != self.cycle:
                # True whether GPUs were freed since or not: a cycle that skips the job keeps
                # the words as they were (`toposched.scheduler.incremental`).
                message += " and no domain it could use gained enough GPUs since"
            messages[key] = message
        return message
