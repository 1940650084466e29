"""Refused preemptions kept across cycles while nothing they depend on has moved: the releases,
protection ends, account loads, budgets, standings and fenced nodes that could give the job
room are each checked, the rest (starts, which only take room or turn free GPUs into
preemptible ones) leaves a refusal standing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.allocation import Allocation
from toposched.cluster.state import ClusterState
from toposched.placement.request import GangRequest
from toposched.policy.budget import BudgetTree
from toposched.policy.contract import Contract
from toposched.policy.fairshare import QueueEntry
from toposched.policy.ranking import Ranking
from toposched.policy.usage import UsageTracker
from toposched.scheduler.budget_limits import LIMIT_SLACK, BudgetLimits
from toposched.scheduler.fence import Fence, FencedNodes
from toposched.scheduler.freed import FreedCapacity
from toposched.scheduler.ledger import LAST_ID, Ledger
from toposched.scheduler.refusal_kernels import (
    add_touched,
    limits_reach_more,
    most_grown,
    most_pods,
)
from toposched.scheduler.refusals import Refusal

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

TakeableMade = tuple[int, str, int]
"""A `BudgetLimits.takeable` answer: the limits' generation, the account and the priority."""
RefusalKey = tuple[object, ...]
"""(pod shape, pods, account, priority), or (pod shape, pods) for a job that may take
unallocated work only (see `Preemptor.preempt_or_refuse`)."""

#: Releases listed for a kept refusal before they are merged into one set of nodes.
RELEASES_LISTED = 32
#: Up to this many domains, their free GPUs are summed one by one, else over every node.
DOMAINS_SUMMED = 16
#: Released nodes' domains are counted node by node up to this many nodes, else assumed to
#: have room.
NODES_COUNTED = 4096
#: Fences whose nodes are kept marked (see `KeptRefusals._fenced_mask`).
FENCES_MARKED = 16
#: An empty mask or count per node: none given (see `most_pods`).
NO_MARKS: BoolArray = np.zeros(0, dtype=bool)
NO_GPUS: NDArray[np.int32] = np.zeros(0, dtype=np.int32)
#: No innermost domain touched yet (see `KeptRefusal.touched`).
NO_DOMAINS: IntArray = np.zeros(0, dtype=np.int64)
#: Up to this many jobs newly takeable since a kept refusal's domains were counted, only the
#: domains holding them are counted again (see `KeptRefusals._newly_takeable`).
TAKEABLE_LISTED = 256
#: More kept refusals than this (distinct kinds of pending jobs) are forgotten at once.
KEPT_MOST = 10_000


class Keeping(StrEnum):
    """How long a refused preemption is kept."""

    EXACT = "exact"
    """While nothing it read changed at all: no start, release, eviction, checkpoint, usage or
    budget change, no protection end, the same nodes fenced."""
    THROUGH_CHANGES = "through-changes"
    """Also through changes that cannot give the job room (see `KeptRefusals`)."""
    VERIFY = "verify"
    """`THROUGH_CHANGES`, and every refusal kept through a change is searched again: a
    search that finds victims raises (a debugging check)."""


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
    released: list[IntArray] = field(default_factory=list)
    """Nodes the fence let go since it was last checked: room may have grown there."""
    touched: IntArray = field(default_factory=lambda: NO_DOMAINS)
    """For a refusal with a proven bound (`Refusal.most_pods`): the innermost domains holding
    nodes judged as released since it was found, sorted."""
    touched_pods: IntArray = field(default_factory=lambda: NO_DOMAINS)
    """Per domain of `touched`, the pods it could take in whole slices when last counted: a
    bound of its room while no node of it is judged as released again and the contract lets
    the preemptor take no job it could not take then (see `_touched_leave_no_room`)."""
    counted_with: SlotMarks | None = None
    """Under the budget rule, the slots the preemptor could take (`BudgetLimits.takeable`)
    when `touched_pods` were counted; None when they were counted without."""

    def note_released(self, nodes: IntArray) -> None:
        released = self.released
        released.append(nodes)
        if len(released) > RELEASES_LISTED:
            # A refusal no job asked for in a while: its nodes as one set.
            released[:] = [np.unique(np.concatenate(released))]


class KeptRefusals:
    """Refused preemptions by `RefusalKey`, kept across cycles (see `Keeping`).

    A refusal that does not depend on the order of domains by lost work (`lasting`) says that
    no set of jobs the contract lets the preemptor take, within the budget caps, gives the
    gang room. That stays true while the room such sets could make only shrinks, per node:
    the room is the free GPUs and those of the jobs it may take. Starts only take free GPUs
    (a preemptible job turns them into GPUs it may take: no more room), and evictions decided
    only take jobs out of reach. Room may grow only by

    - a release (a job ended): kept when every domain of the gang's required level that
      holds released nodes has, free and held by every unprotected job, fewer whole GPUs than
      the gang needs there (as failures kept through releases are judged), or, when a job
      asks, counted node by node, room for fewer of its pods than it needs with the
      unprotected jobs it may take gone (those the contract lets it take now under the budget
      rule, every one otherwise); or, for a refusal proven from per-domain counts
      (`Refusal.most_pods`: no domain of the gang's required level holds more than `most`
      pods), when `most` plus the room counted now, node by node, in each innermost domain
      touched since it was found stays below the gang's pods in every domain of that level:
      an untouched innermost domain holds no more than when it was found (nothing there could
      give it room), so its part of `most` bounds it still, and a touched one holds at most
      what it is counted now (see `_touched_leave_no_room`); a release of unallocated work no
      eviction had claimed frees nothing a preemptor that may take work at all did not count
      already;
    - a protection ending: the nodes of the jobs whose protection ended since that the
      contract lets the preemptor take (looked at once each) are judged as released;
    - the contract allowing more, with the same jobs: under the budget rule, when the
      preemptor's account fell below its budget, or another account's limit grew and now
      reaches one of its unprotected jobs; under the fair-share rule, any change of the
      accounts' order; a change of the budget tree or of a running job's priority; the
      preemptor's account becoming a budgeted leaf;
    - nodes let go: the fence no longer holding nodes it held then (judged as released
      nodes), or any other change of the cluster state (health, spares, jobs started
      outside a cycle).

    A contract that replaces the built-in rules keeps refusals only while nothing changed.
    """

    def __init__(
        self,
        state: ClusterState,
        tree: BudgetTree,
        usage: UsageTracker,
        contract: Contract,
        ledger: Ledger,
        domain_of_leaf: Callable[[int], IntArray],
        keeping: Keeping = Keeping.THROUGH_CHANGES,
    ) -> None:
        self.state = state
        self.tree = tree
        self.usage = usage
        self.contract = contract
        self.ledger = ledger
        self._domain_of_leaf = domain_of_leaf
        topology = state.topology
        self._leaf_level = len(topology.domain_levels) - 1
        self._leaf_starts = topology.domain_starts[self._leaf_level].astype(np.int64)
        self._leaf_of_node = topology.node_domain[self._leaf_level]
        self.keeping = Keeping(keeping)
        self._kept: dict[RefusalKey, KeptRefusal] = {}
        self._refreshed = -1.0
        """When the preemptible index was last refreshed, as far as `find` knows."""
        self._fenced_masks: dict[int, tuple[FencedNodes, BoolArray]] = {}
        self._reach: dict[tuple[int, int], tuple[FloatArray, FloatArray, bool]] = {}
        """`limits_reach_more` answered by the limits now and then (held, so that their ids
        stay theirs), for the preemptible index at `_reach_stamp` (its version, and when it was
        last refreshed: a refresh counts jobs whose protection ended)."""
        self._reach_stamp = (-1, -1.0)
        self._limits = BudgetLimits(tree, usage, contract, ledger)
        self.answered_through_changes = 0
        """Refusals answered although something changed since they were found."""

    # --- remembering ---------------------------------------------------------------------------
    def keep(
        self,
        key: RefusalKey,
        refusal: Refusal,
        inputs: tuple[object, ...],
        fenced: FencedNodes,
        request: GangRequest,
        entry: QueueEntry,
        ranking: Ranking,
        only_unallocated: bool,
        now: float,
    ) -> None:
        """Remember a lasting refusal found for `entry` at `now` (index refreshed at `now`)."""
        if len(self._kept) >= KEPT_MOST:
            self._kept.clear()
        budget_rule = self.contract.cross_account == "budget"
        self._kept[key] = KeptRefusal(
            refusal=refusal,
            inputs=inputs,
            fenced=fenced,
            holding=fenced,
            until=self.ledger.next_protection_end(now),
            request=request,
            only_unallocated=only_unallocated,
            found=now,
            tree_version=self.tree.version,
            ranked=self._ranked(entry.account, ranking),
            limits=self._limits.limits(entry.account) if budget_rule else np.zeros(0),
            leaves=None if budget_rule else ranking.leaves,
            checked_until=now,
        )

    def forget_all(self) -> None:
        """Something every refusal may depend on changed (a running job's priority)."""
        self._kept.clear()

    def after_changes(self, freed: FreedCapacity) -> None:
        """Between cycles the cluster changed: jobs released GPUs (`freed` tells where), or
        something else changed it, and every refusal is forgotten."""
        released = freed.since_settled()
        if released is None or self.keeping is Keeping.EXACT:
            self._kept.clear()
            return
        # Unallocated work no eviction had claimed was room already for every preemptor that
        # may take work at all (ranked): its release frees nothing new.
        beyond = freed.beyond_free_to_take()
        rooms: dict[tuple[bool, bool, int], int] = {}
        dropped = []
        for key, kept in self._kept.items():
            nodes = beyond if kept.ranked else released
            if nodes is None or not nodes.size:
                continue
            request = kept.request
            if request.gpus_per_pod == 0 or request.is_fractional:
                dropped.append(key)
                continue
            if kept.refusal.most_pods is not None:
                # Judged by the innermost domains it touches, each one: a bound of a whole
                # domain's room would leave room grown there unknown to later judgements.
                kept.note_released(nodes)
                continue
            # The most room in one domain of its required level holding released nodes,
            # looked up once per such level for all refusals.
            room_key = (kept.ranked, kept.only_unallocated, request.required)
            room = rooms.get(room_key)
            if room is None:
                room = rooms[room_key] = self._most_room(
                    nodes, request.required, kept.only_unallocated
                )
            if room >= request.pods * request.gpus_per_pod:
                # A domain could hold it now: looked at again when a job asks, after the
                # starts before it in the queue (a nominee takes its victims' GPUs back).
                kept.note_released(nodes)
        for key in dropped:
            del self._kept[key]

    # --- answering -----------------------------------------------------------------------------
    def find(
        self,
        key: RefusalKey,
        inputs: tuple[object, ...],
        entry: QueueEntry,
        ranking: Ranking,
        fence: Fence,
        now: float,
        through_changes: bool,
    ) -> tuple[Refusal, bool] | None:
        """The refusal kept for `key` if it still stands for `entry` at `now` (the preemptible
        index refreshed at `now`), and whether something changed since it was found;
        `through_changes`: whether the contract lets a refusal stand through changes."""
        kept = self._kept.get(key)
        if kept is None:
            return None
        if kept.inputs == inputs and now < kept.until and fence.equals(kept.fenced):
            return kept.refusal, False
        if not through_changes or self.keeping is Keeping.EXACT:
            return None
        self._refreshed = now
        if not self._stands(kept, entry, ranking, fence, now):
            del self._kept[key]
            return None
        self.answered_through_changes += 1
        return kept.refusal, True

    def _stands(
        self, kept: KeptRefusal, entry: QueueEntry, ranking: Ranking, fence: Fence, now: float
    ) -> bool:
        """Whether nothing since `kept` was found can have given the job room."""
        if kept.tree_version != self.tree.version:
            return False
        if not fence.holds(kept.holding):
            self._note_opened(kept, fence)
        if not kept.ranked and self._ranked(entry.account, ranking):
            return False
        if kept.leaves is not None and kept.leaves != ranking.leaves:
            return False
        # Unallocated work only: no protection or load enters what it may take.
        if not kept.only_unallocated:
            if kept.leaves is None and not self._loads_allow_no_more(kept, entry.account):
                return False
            self._note_protection_ends(kept, entry, ranking, now)
            kept.checked_until = now
        if kept.released:
            if not self._releases_leave_no_room(kept, entry):
                return False
            kept.released.clear()
        return True

    def _note_opened(self, kept: KeptRefusal, fence: Fence) -> None:
        """The fence let go some nodes it held when `kept` was last compared with it: room may
        have grown there as where jobs ended. The fence now is the one to compare with.

        Let go are the nodes neither in the fence's groups now nor closed otherwise. The
        reservation's block stays in the groups while it is lifted for a backfill: a victim
        search settles the fence first, so the block is fenced for the answer asked."""
        closed = self.state.closed
        now = fence.frozen()
        held_now = self._fenced_mask(now) if now.groups else None
        opened = []
        for group in kept.holding.groups:
            let_go = closed[group.nodes] == 0
            if held_now is not None:
                let_go &= ~held_now[group.nodes]
            opened.append(group.nodes[let_go])
        if opened:
            kept.note_released(np.concatenate(opened))
        kept.holding = now

    def _releases_leave_no_room(self, kept: KeptRefusal, entry: QueueEntry) -> bool:
        """Whether every domain of the gang's required level holding nodes of
        `kept.released` has, counted node by node, room for fewer of its pods than it needs
        with the jobs it may take gone (see `_pods_it_may_fit`)."""
        request = kept.request
        if request.gpus_per_pod == 0 or request.is_fractional:
            return False
        released = kept.released
        nodes = released[0] if len(released) == 1 else np.concatenate(released)
        if kept.refusal.most_pods is not None and self._touched_leave_no_room(nodes, kept, entry):
            return True
        return self._pods_it_may_fit(nodes, kept, entry) < request.pods

    def _touched_leave_no_room(self, nodes: IntArray, kept: KeptRefusal, entry: QueueEntry) -> bool:
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
        node_held, takeable, shared, fenced = self._node_room_inputs(kept, entry)
        counts = kept.touched_pods
        made = (self._limits.takeable_generation, entry.account, entry.priority)
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

    def _most_room(self, nodes: IntArray, level: int, only_unallocated: bool) -> int:
        """The most whole GPUs free or held by unprotected jobs (unallocated work only, if
        `only_unallocated`) in one domain of `level` holding some of `nodes`. Free GPUs are
        counted on fenced nodes too: the fence may let them go later without a refusal knowing.
        Jobs whose protection ended since the index was last refreshed are not counted: those
        a preemptor may take are found by `_note_protection_ends`."""
        topology = self.state.topology
        domains = np.unique(topology.node_domain[level][nodes])
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

    def _pods_it_may_fit(self, nodes: IntArray, kept: KeptRefusal, entry: QueueEntry) -> int:
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
        node_held, takeable, shared, fenced = self._node_room_inputs(kept, entry)
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
        self, kept: KeptRefusal, entry: QueueEntry
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
            takeable = self._limits.takeable(entry, self._refreshed)
            if index.shared_on_node:
                shared = np.zeros(self.state.topology.n_nodes, dtype=bool)
                shared[np.fromiter(index.shared_on_node, dtype=np.int64)] = True
        fenced = self._fenced_mask(kept.holding) if kept.holding.groups else NO_MARKS
        return node_held, takeable, shared, fenced

    def _fenced_mask(self, fenced: FencedNodes) -> BoolArray:
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

    def _loads_allow_no_more(self, kept: KeptRefusal, account: str) -> bool:
        """Under the budget rule, whether the loads let the preemptor take no job it could
        not take then: no other account's limit grew past an unprotected job of it (the
        preemptor's account falling below its budget lifts every limit from -inf)."""
        index = self.ledger.preemptible
        limits = self._limits.limits(account)
        # Refusals kept under the same loads share their limits (one array), as refusals asked
        # under the same loads share today's: answered once while the index stays the same.
        stamp = (index.version, self._refreshed)
        if self._reach_stamp != stamp:
            self._reach_stamp = stamp
            self._reach.clear()
        key = (id(limits), id(kept.limits))
        known = self._reach.get(key)
        if known is not None and known[0] is limits and known[1] is kept.limits:
            return not known[2]
        size = len(index.allocations)
        # Widened by LIMIT_SLACK both ways: the contract's own slack is no concern here.
        reach = limits_reach_more(
            limits,
            kept.limits,
            index.counted[:size],
            index.unallocated[:size],
            index.account[:size],
            index.gpus[:size],
            LIMIT_SLACK,
        )
        self._reach[key] = (limits, kept.limits, reach)
        return not reach

    def _note_protection_ends(
        self, kept: KeptRefusal, entry: QueueEntry, ranking: Ranking, now: float
    ) -> None:
        """The running jobs whose protection ended since the last check that the contract
        lets `entry` take: room may have grown where they run, as where jobs ended, so their
        nodes are noted as released."""
        ledger = self.ledger
        protection = ledger.protection
        first = protection.bisect_right((kept.checked_until, LAST_ID))
        last = protection.bisect_right((now, LAST_ID))
        if first >= last:
            return
        index = ledger.preemptible
        taken = []
        for _, job_id in protection.islice(first, last):
            slot = index.slot_of[job_id]
            if index.evicting[slot]:
                continue
            verdict = self.contract.may_preempt(entry, ledger.views[job_id], now, ranking, ledger)
            if verdict.allowed:
                allocation = index.allocations[slot]
                assert allocation is not None
                taken.append(allocation.nodes)
        if taken:
            kept.note_released(np.concatenate(taken))

    @staticmethod
    def _ranked(account: str, ranking: Ranking) -> bool:
        return ranking.is_ranked_leaf(account) and ranking.budgeted(account)


def _nodes_of(allocation: Allocation | None) -> IntArray:
    assert allocation is not None  # a takeable slot holds a running job
    return allocation.nodes
