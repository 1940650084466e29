"""Refused preemptions kept across cycles while nothing they depend on has moved: the releases,
protection ends, account loads, budgets, standings and fenced nodes that could give the job
room are each checked, the rest (starts, which only take room or turn free GPUs into
preemptible ones) leaves a refusal standing."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import ClusterState
from toposched.placement.request import GangRequest
from toposched.policy.budget import BudgetTree
from toposched.policy.contract import Contract
from toposched.policy.queue_entry import QueueEntry
from toposched.policy.ranking import Ranking
from toposched.policy.usage import UsageTracker
from toposched.scheduler.budget_limits import LIMIT_SLACK, BudgetLimits
from toposched.scheduler.fence import Fence, FencedNodes
from toposched.scheduler.freed import FreedCapacity
from toposched.scheduler.ledger import LAST_ID, Ledger
from toposched.scheduler.refusal_kernels import limits_reach_more
from toposched.scheduler.refusal_room import KeptRefusal, RefusalRoom
from toposched.scheduler.refusals import Refusal

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]

RefusalKey = tuple[object, ...]
"""(pod shape, pods, account, priority), or (pod shape, pods) for a job that may take
unallocated work only (see `Preemptor.preempt_or_refuse`)."""

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
      rule, its own account's lower-priority jobs alone while the borrowing rule holds it,
      every one otherwise); or, for a refusal proven from per-domain counts
      (`Refusal.most_pods`: no domain of the gang's required level holds more than `most`
      pods), when `most` plus the room counted now, node by node, in each innermost domain
      touched since it was found stays below the gang's pods in every domain of that level:
      an untouched innermost domain holds no more than when it was found (nothing there could
      give it room), so its part of `most` bounds it still, and a touched one holds at most
      what it is counted now (see `refusal_room.RefusalRoom`); a release of unallocated work
      no eviction had claimed frees nothing a preemptor that may take work at all did not
      count already;
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

    Releases and protection ends are judged under the budget limits of the time they are
    looked at: the limits kept with the refusal then become the lesser of theirs and those,
    so that loads moving back up later are weighed against what was judged.

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
        self.keeping = Keeping(keeping)
        self._kept: dict[RefusalKey, KeptRefusal] = {}
        self._refreshed = -1.0
        """When the preemptible index was last refreshed, as far as `find` knows."""
        self._reach: dict[tuple[int, int], tuple[FloatArray, FloatArray, bool]] = {}
        """`limits_reach_more` answered by the limits now and then (held, so that their ids
        stay theirs), for the preemptible index at `_reach_stamp` (its version, and when it was
        last refreshed: a refresh counts jobs whose protection ended)."""
        self._reach_stamp = (-1, -1.0)
        self._limits = BudgetLimits(tree, usage, contract, ledger)
        self._room = RefusalRoom(state, ledger, self._limits, domain_of_leaf)
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
        held: bool = False,
    ) -> None:
        """Remember a lasting refusal found for `entry` at `now` (index refreshed at `now`);
        `held`: the borrowing rule held it to its own account's lower-priority jobs."""
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
            held=held,
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
                room = rooms[room_key] = self._room.most_room(
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
        judged = False
        if not kept.only_unallocated:
            # Held to its own account's jobs, a job takes no more as other accounts' loads move
            # (whether it is held is part of its key).
            if (
                kept.leaves is None
                and not kept.held
                and not self._loads_allow_no_more(kept, entry.account)
            ):
                return False
            judged = self._note_protection_ends(kept, entry, ranking, now)
            kept.checked_until = now
        if kept.released:
            if not self._room.releases_leave_no_room(kept, entry, self._refreshed):
                return False
            kept.released.clear()
            judged = True
        if judged and kept.limits.size:
            # Jobs and nodes were judged under today's limits: the refusal holds under limits
            # no larger than these, which later loads are compared with (an account beyond
            # either array's end has none: -inf).
            limits = self._limits.limits(entry.account)
            size = min(kept.limits.size, limits.size)
            kept.limits = np.minimum(kept.limits[:size], limits[:size])
        return True

    def _note_opened(self, kept: KeptRefusal, fence: Fence) -> None:
        """The fence let go some nodes it held when `kept` was last compared with it: room may
        have grown there as where jobs ended. The fence now is the one to compare with.

        Let go are the nodes neither in the fence's groups now nor closed otherwise. The
        reservation's block stays in the groups while it is lifted for a backfill: a victim
        search settles the fence first, so the block is fenced for the answer asked."""
        closed = self.state.closed
        now = fence.frozen()
        held_now = self._room.fenced_mask(now) if now.groups else None
        opened = []
        for group in kept.holding.groups:
            let_go = closed[group.nodes] == 0
            if held_now is not None:
                let_go &= ~held_now[group.nodes]
            opened.append(group.nodes[let_go])
        if opened:
            kept.note_released(np.concatenate(opened))
        kept.holding = now

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
    ) -> bool:
        """The running jobs whose protection ended since the last check that the contract
        lets `entry` take: room may have grown where they run, as where jobs ended, so their
        nodes are noted as released. Returns whether any such job was judged."""
        ledger = self.ledger
        protection = ledger.protection
        first = protection.bisect_right((kept.checked_until, LAST_ID))
        last = protection.bisect_right((now, LAST_ID))
        if first >= last:
            return False
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
        return True

    @staticmethod
    def _ranked(account: str, ranking: Ranking) -> bool:
        return ranking.is_ranked_leaf(account) and ranking.budgeted(account)
