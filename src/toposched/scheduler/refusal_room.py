"""A kept refusal's record, and the room counted for it: where released nodes, nodes let go
by the fence or jobs the preemptor may newly take could give its gang room (see
`KeptRefusals`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.allocation import Allocation
from toposched.cluster.state import ClusterState, distinct
from toposched.placement.request import GangRequest
from toposched.policy.queue_entry import QueueEntry
from toposched.scheduler.budget_limits import BudgetLimits
from toposched.scheduler.fence import FencedNodes
from toposched.scheduler.ledger import Ledger
from toposched.scheduler.refusal_kernels import add_touched, most_grown, most_pods
from toposched.scheduler.refusals import Refusal

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

TakeableMade = tuple[int, str, int, bool]
"""A `BudgetLimits.takeable` answer: the limits' generation, the account, the priority and
whether it marks the account's own jobs only."""

#: Releases listed for a kept refusal before they are merged into one set of nodes.
RELEASES_LISTED = 32
#: Up to this many domains, their free GPUs are summed one by one, else over every node.
DOMAINS_SUMMED = 16
#: Released nodes' domains are counted node by node up to this many nodes, else assumed to
#: have room.
NODES_COUNTED = 4096
#: Fences whose nodes are kept marked (see `RefusalRoom.fenced_mask`).
FENCES_MARKED = 16
#: An empty mask or count per node: none given (see `most_pods`).
NO_MARKS: BoolArray = np.zeros(0, dtype=bool)
NO_GPUS: NDArray[np.int32] = np.zeros(0, dtype=np.int32)
#: No innermost domain touched yet (see `KeptRefusal.touched`).
NO_DOMAINS: IntArray = np.zeros(0, dtype=np.int64)
#: Up to this many jobs newly takeable since a kept refusal's domains were counted, only the
#: domains holding them are counted again (see `RefusalRoom._newly_takeable`).
TAKEABLE_LISTED = 256


class SlotMarks(NamedTuple):
    """Marks per slot of the preemptible index, packed eight to a byte (a kept refusal holds
    them for as long as it is kept), and which remembered answer they were read from."""

    bits: NDArray[np.uint8]
    size: int
    made: TakeableMade

    @staticmethod
    def of(marks: BoolArray, made: TakeableMade) -> SlotMarks:
        return SlotMarks(np.packbits(marks), marks.size, made)

    def marks(self) -> BoolArray:
        unpacked: BoolArray = np.unpackbits(self.bits, count=self.size).view(np.bool_)
        return unpacked


@dataclass(slots=True)
class KeptRefusal:
    """A refused preemption and what it read when it was found."""

    refusal: Refusal
    inputs: tuple[object, ...]
    """The epoch, preemptible index, budget tree, usage and (fair-share rule) ranking then:
    while all are equal nothing changed (`Keeping.EXACT`)."""
    fenced: FencedNodes
    """The nodes fenced when it was found."""
    holding: FencedNodes
    """The fenced nodes it is compared with: those of `fenced` the fence let go since were
    looked at as released."""
    until: float
    """When the first protection after `found` ends."""
    request: GangRequest
    only_unallocated: bool
    found: float
    tree_version: int
    ranked: bool
    """Whether the preemptor's account was a budgeted leaf of the ranking then."""
    limits: FloatArray
    """Under the budget rule, per victim account code: the most GPUs one of its jobs could
    hold and still be taken (what it ran beyond its budget then; -inf for all while the
    preemptor's account ran its whole budget)."""
    leaves: tuple[str, ...] | None
    """Under the fair-share rule, the accounts' order then."""
    checked_until: float
    """Protection ends up to this time are known to let no job the refusal may take go."""
    held: bool
    """Whether the borrowing rule held the preemptor to its own account's lower-priority jobs
    (`Preemptor.held_to_own_account`): they alone are what it may take."""
    released: list[IntArray] = field(default_factory=list)
    """Nodes the fence let go since it was last checked: room may have grown there."""
    touched: IntArray = field(default_factory=lambda: NO_DOMAINS)
    """For a refusal with a proven bound (`Refusal.most_pods`): the innermost domains holding
    nodes judged as released since it was found, sorted."""
    touched_pods: IntArray = field(default_factory=lambda: NO_DOMAINS)
    """Per domain of `touched`, the pods it could take in whole slices when last counted: a
    bound of its room while no node of it is judged as released again and the contract lets
    the preemptor take no job it could not take then (see
    `RefusalRoom._touched_leave_no_room`)."""
    counted_with: SlotMarks | None = None
    """Under the budget rule, the slots the preemptor could take (`BudgetLimits.takeable`)
    when `touched_pods` were counted; None when they were counted without."""

    def note_released(self, nodes: IntArray) -> None:
        released = self.released
        released.append(nodes)
        if len(released) > RELEASES_LISTED:
            # A refusal no job asked for in a while: its nodes as one set.
            released[:] = [distinct(np.concatenate(released))]


class RefusalRoom:
    """Counts the room a kept refusal's gang could find: where nodes were released since it
    was found, with the jobs the preemptor may take gone (see `KeptRefusals`)."""

    def __init__(
        self,
        state: ClusterState,
        ledger: Ledger,
        limits: BudgetLimits,
        domain_of_leaf: Callable[[int], IntArray],
    ) -> None:
        self.state = state
        self.ledger = ledger
        self._limits = limits
        self._domain_of_leaf = domain_of_leaf
        topology = state.topology
        self._leaf_level = len(topology.domain_levels) - 1
        self._leaf_starts = topology.domain_starts[self._leaf_level].astype(np.int64)
        self._leaf_of_node = topology.node_domain[self._leaf_level]
        self._fenced_masks: dict[int, tuple[FencedNodes, BoolArray]] = {}

    def releases_leave_no_room(
        self, kept: KeptRefusal, entry: QueueEntry, refreshed: float
    ) -> bool:
        """Whether every domain of the gang's required level holding nodes of
        `kept.released` has, counted node by node, room for fewer of its pods than it needs
        with the jobs it may take gone (see `_pods_it_may_fit`). `refreshed`: when the
        preemptible index was last refreshed."""
        request = kept.request
        if request.gpus_per_pod == 0 or request.is_fractional:
            return False
        released = kept.released
        nodes = released[0] if len(released) == 1 else np.concatenate(released)
        if kept.refusal.most_pods is not None and self._touched_leave_no_room(
            nodes, kept, entry, refreshed
        ):
            return True
        return self._pods_it_may_fit(nodes, kept, entry, refreshed) < request.pods

    def _touched_leave_no_room(
        self, nodes: IntArray, kept: KeptRefusal, entry: QueueEntry, refreshed: float
    ) -> bool:
        """Whether, for a refusal with a proven bound (`Refusal.most_pods`), no domain of the
        gang's required level (the whole cluster without one) could hold its pods now: in each,
        `most` plus the pods each innermost domain of it touched since the refusal was found
        (`kept.touched`, to which those of `nodes` are added) could take now, counted node by
        node as `_pods_it_may_fit` counts and in whole slices, falls short of them.

        `most` bounds every such domain's room then as a sum over its innermost domains of
        each one's room in whole slices (the placement engine puts whole slices in each). One
        untouched since, where no job ended, no fenced node was let go and no protection of a
        job it may take ended (the changes that send nodes here), and with the same jobs
        allowed (else the refusal is not asked), can only have lost room: starts take free
        GPUs or turn them into GPUs of a job it may take, evictions decided put jobs out of
        reach. Its part of `most` still bounds it, and a touched one's count now bounds it.
        By the same argument a touched one's count at an earlier look bounds it while none of
        its nodes was judged as released since and the preemptor may take no job there it
        could not take then: only the domains of nodes released since and of jobs it may
        take now but not then are counted again (`KeptRefusal.touched_pods`)."""
        request = kept.request
        node_held, takeable, shared, fenced = self._node_room_inputs(kept, entry, refreshed)
        counts = kept.touched_pods
        made = (self._limits.takeable_generation, entry.account, entry.priority, kept.held)
        then = kept.counted_with
        if takeable.size and kept.touched.size:
            # Jobs the preemptor may take now but not when the counts were made (a limit
            # grew) may have grown room where nothing was released: counted again.
            newly = self._newly_takeable(takeable, then, made)
            if newly is None:
                counts = np.full(kept.touched.size, -1, dtype=np.int64)
            elif newly.size:
                nodes = np.concatenate((nodes, newly))
        kept.touched, kept.touched_pods = add_touched(
            kept.touched, counts, nodes, self._leaf_of_node
        )
        if not takeable.size:
            kept.counted_with = None
        elif then is None or then.made != made:
            kept.counted_with = SlotMarks.of(takeable, made)
        grown = most_grown(
            kept.touched,
            kept.touched_pods,
            self._leaf_starts,
            self._domain_of_leaf(request.required),
            self.state.topology.n_domains(request.required),
            request.granule(self._leaf_level),
            self.state.free_whole_gpus,
            self.state.topology.gpu_count,
            node_held,
            self.ledger.preemptible.gpu_owner,
            takeable,
            shared,
            fenced,
            request.gpus_per_pod,
        )
        most = kept.refusal.most_pods
        assert most is not None
        return most + grown < request.pods

    def _newly_takeable(
        self, takeable: BoolArray, then: SlotMarks | None, made: TakeableMade
    ) -> IntArray | None:
        """The nodes of the jobs `takeable` (the answer `made`) marks and `then` did not
        (None: too many to list, or nothing known then)."""
        if then is None:
            return None
        if then.made == made:
            return NO_DOMAINS  # read from the same answer
        # Both end with an entry for no slot (False): the slots they share are compared, and
        # the slots added since are new.
        shared = min(takeable.size, then.size) - 1
        newly = np.flatnonzero(takeable[:shared] & ~then.marks()[:shared])
        added = np.flatnonzero(takeable[shared:-1]) + shared
        slots = np.concatenate((newly, added)) if added.size else newly
        if slots.size > TAKEABLE_LISTED:
            return None
        if not slots.size:
            return NO_DOMAINS
        allocations = self.ledger.preemptible.allocations
        return np.concatenate([_nodes_of(allocations[slot]) for slot in slots.tolist()])

    def most_room(self, nodes: IntArray, level: int, only_unallocated: bool) -> int:
        """The most whole GPUs free or held by unprotected jobs (unallocated work only, if
        `only_unallocated`) in one domain of `level` holding some of `nodes`. Free GPUs are
        counted on fenced nodes too: the fence may let them go later without a refusal knowing.
        Jobs whose protection ended since the index was last refreshed are not counted: those
        a preemptor may take are found by `_note_protection_ends`."""
        topology = self.state.topology
        domains = distinct(topology.node_domain[level][nodes])
        index = self.ledger.preemptible
        freeable = index.leaf_unallocated_freeable if only_unallocated else index.leaf_freeable
        held = np.bincount(
            self._domain_of_leaf(level), weights=freeable, minlength=topology.n_domains(level)
        )[domains]
        free = self.state.free_whole_gpus
        if domains.size <= DOMAINS_SUMMED:
            ranges = [topology.domain_range(level, domain) for domain in domains.tolist()]
            free_in = np.array([int(free[first:last].sum()) for first, last in ranges])
        else:
            starts = topology.domain_starts[level]
            free_in = np.add.reduceat(free.astype(np.int64), starts[:-1])[domains]
        return int((free_in + held).max())

    def _pods_it_may_fit(
        self, nodes: IntArray, kept: KeptRefusal, entry: QueueEntry, refreshed: float
    ) -> int:
        """The most pods of the gang one domain of its required level holding some of `nodes`
        could take, node by node, with its free whole GPUs and those of the unprotected jobs
        `entry` may take gone, but on nodes fenced since the refusal was last compared with
        the fence (`kept.holding`: when the fence lets them go, they are looked at as
        released): an upper bound of what the placement engine could place there with any
        allowed victims gone, since it counts no other limit (health, models, CPU, memory,
        topology below the required level). `request.pods` when the domains are too large to
        count (`NODES_COUNTED`).

        The jobs it may take: unallocated ones only (`kept.only_unallocated`); under the
        budget rule for a budgeted account, those `BudgetLimits.takeable` marks; else every
        unprotected job's. A node holding shared GPUs counts every GPU: evicting their pods may
        free them whole.

        A gang on one node (a single pod, or `on_one_node`) is counted on `nodes` alone:
        room grew nowhere else, and no other node's room can add to it."""
        request = kept.request
        index = self.ledger.preemptible
        topology = self.state.topology
        node_held, takeable, shared, fenced = self._node_room_inputs(kept, entry, refreshed)
        level = request.required
        return int(
            most_pods(
                nodes,
                topology.domain_starts[level],
                topology.node_domain[level],
                request.pods == 1 or request.on_one_node,
                self.state.free_whole_gpus,
                topology.gpu_count,
                node_held,
                index.gpu_owner,
                takeable,
                shared,
                fenced,
                request.gpus_per_pod,
                NODES_COUNTED,
                request.pods,
            )
        )

    def _node_room_inputs(
        self, kept: KeptRefusal, entry: QueueEntry, refreshed: float
    ) -> tuple[NDArray[np.int32], BoolArray, BoolArray, BoolArray]:
        """What `node_pods` counts a node's room for `kept` from (see `_pods_it_may_fit`): the
        GPUs per node of the jobs it may take, or else which slots of the index it may take
        and the nodes holding shared GPUs; and the nodes fenced as `kept.holding` says."""
        index = self.ledger.preemptible
        takeable = NO_MARKS
        shared = NO_MARKS
        if kept.only_unallocated:
            node_held = index.node_unallocated_freeable
        elif not kept.ranked or kept.leaves is not None:
            node_held = index.node_freeable
        else:
            node_held = NO_GPUS
            takeable = self._limits.takeable(entry, refreshed, kept.held)
            if index.shared_on_node:
                shared = np.zeros(self.state.topology.n_nodes, dtype=bool)
                shared[np.fromiter(index.shared_on_node, dtype=np.int64)] = True
        fenced = self.fenced_mask(kept.holding) if kept.holding.groups else NO_MARKS
        return node_held, takeable, shared, fenced

    def fenced_mask(self, fenced: FencedNodes) -> BoolArray:
        """`fenced` marked over every node; remembered for the last few (refusals kept under
        one fence share its nodes, one object)."""
        known = self._fenced_masks.get(id(fenced))
        if known is not None and known[0] is fenced:
            return known[1]
        if len(self._fenced_masks) >= FENCES_MARKED:
            self._fenced_masks.clear()
        mask = np.zeros(self.state.topology.n_nodes, dtype=bool)
        mask[np.concatenate([group.nodes for group in fenced.groups])] = True
        self._fenced_masks[id(fenced)] = (fenced, mask)
        return mask


def _nodes_of(allocation: Allocation | None) -> IntArray:
    assert allocation is not None  # a takeable slot holds a running job
    return allocation.nodes
