"""Preemption's vocabulary: candidate victims, victim sets (plans) and how sets compare."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, overload

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import Allocation, distinct
from toposched.placement.search import Placement
from toposched.scheduler.domain_nodes import domain_nodes
from toposched.scheduler.preemptible import PreemptibleIndex

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class Candidate:
    """A running job the contract lets this preemptor evict, with what evicting it costs."""

    job_id: str
    rule: str
    """The contract rule that allows it (e.g. unallocated-victim, better-fair-share)."""
    lost_gpu_seconds: float
    """Work lost: GPUs x seconds since its last checkpoint (since start if none)."""
    standing: float
    """Lower = evicted first among equal costs (unallocated work lowest)."""
    nodes: IntArray
    """Its pods' nodes."""
    gpus_per_pod: float
    """Whole GPUs each pod frees (0 for shared-GPU pods, which free no whole GPU)."""
    budget_account: str | None = None
    """The account whose budget bounds this eviction (allowed by the budget rule), else None."""
    gpus: float = 0.0
    """GPUs the job holds as the budget rule counts them (a shared pod counts its fraction)."""
    budget_cap: float = math.inf
    """The most GPUs one preemption may take from `budget_account` in all: what it runs beyond
    its budget. Victims of one account together stay within it."""


class ImpactPolicy(Protocol):
    """Orders victim sets: lower keys are preferred. Replace it to change what 'least' means."""

    def key(self, victims: Sequence[Candidate]) -> tuple[float, ...]: ...


class LeastLostWork:
    """GPU-seconds lost, then the number of jobs, then their standing (lowest first)."""

    @staticmethod
    def is_key_of(impact: ImpactPolicy) -> bool:
        """Whether `impact` orders by this key (this class's `key`, not overridden): a sum per
        victim, which the search then computes from arrays without `Candidate` objects."""
        return getattr(type(impact), "key", None) is LeastLostWork.key

    def key(self, victims: Sequence[Candidate]) -> tuple[float, ...]:
        return (
            sum(v.lost_gpu_seconds for v in victims),
            float(len(victims)),
            sum(v.standing for v in victims),
        )


@dataclass(frozen=True)
class PreemptionPlan:
    """Evict `victims`, then the preemptor runs on `placement` (its nodes are nominated)."""

    preemptor: str
    victims: Sequence[Candidate]
    placement: Placement
    impact: tuple[float, ...]
    exact: bool
    """True when the victim set is optimal for its domain (every subset was tried)."""

    @property
    def nodes(self) -> IntArray:
        return distinct(self.placement.allocation.nodes)


@dataclass(frozen=True)
class CandidatePool:
    """Candidates as arrays, one row per job: what the search reads. `Candidate` objects are
    made only for the victims chosen, so thousands of candidates cost no Python object each."""

    job_ids: Sequence[str]
    rules: Sequence[str]
    lost: FloatArray
    """GPU-seconds lost per candidate."""
    standing: FloatArray
    whole: IntArray
    """Whole GPUs each pod frees (a shared-GPU pod counts one)."""
    pod_starts: IntArray
    """Candidate i's pods are `pod_nodes[pod_starts[i]:pod_starts[i + 1]]`."""
    pod_nodes: IntArray
    cap_group: IntArray | None = None
    """Per candidate, the budget whose cap bounds its eviction (an index into `caps`), or -1;
    None when no candidate is bounded."""
    caps: FloatArray = field(default_factory=lambda: np.zeros(0))
    """Per budget, the most GPUs the victims bounded by it may hold together."""
    cap_accounts: Sequence[str] = ()
    """Per budget, its account."""
    held: FloatArray = field(default_factory=lambda: np.zeros(0))
    """Per candidate, the GPUs it holds as the budget rule counts them (when capped)."""
    index: PreemptibleIndex | None = None
    """The running jobs' index the pool was read from, if it was."""
    slots: IntArray | None = None
    """Per candidate, its slot in `index`."""

    def __len__(self) -> int:
        return len(self.job_ids)

    @property
    def caps_bind(self) -> bool:
        """Whether evicting every candidate would break some account's budget cap."""
        if self.cap_group is None:
            return False
        bounded = self.cap_group >= 0
        totals = np.bincount(
            self.cap_group[bounded], weights=self.held[bounded], minlength=self.caps.size
        )
        return bool((totals > self.caps).any())

    def within_caps(self, subsets: NDArray[np.int64], rows: IntArray) -> NDArray[np.bool_]:
        """For each 0/1 row of `subsets` over the candidates `rows`, whether its victims keep
        every account within its cap."""
        if self.cap_group is None:
            return np.ones(subsets.shape[0], dtype=bool)
        groups = self.cap_group[rows]
        bounded = (groups >= 0).nonzero()[0]
        if bounded.size == 0:
            return np.ones(subsets.shape[0], dtype=bool)
        # held[v, g]: GPUs candidate v counts against budget g.
        held = np.zeros((rows.size, self.caps.size))
        held[bounded, groups[bounded]] = self.held[rows[bounded]]
        within: NDArray[np.bool_] = np.all(subsets @ held <= self.caps[None, :], axis=1)
        return within

    def capped(self, rows: IntArray) -> IntArray:
        """`rows` without the victims that would break a cap: within each capped account the
        cheapest per GPU held are kept while they fit under it (the others keep their order)."""
        if self.cap_group is None or rows.size == 0:
            return rows
        groups = self.cap_group[rows]
        bounded = np.flatnonzero(groups >= 0)
        if bounded.size == 0:
            return rows
        held = self.held[rows[bounded]]
        cost = self.lost[rows[bounded]] / np.maximum(held, 1e-9)
        order = np.lexsort((cost, groups[bounded]))
        sorted_groups, sorted_held = groups[bounded][order], held[order]
        total = np.cumsum(sorted_held)
        group_first = np.searchsorted(sorted_groups, sorted_groups)
        before = total[group_first] - sorted_held[group_first]
        within = total - before <= self.caps[sorted_groups]
        keep = np.ones(rows.size, dtype=bool)
        keep[bounded[order[~within]]] = False
        kept: IntArray = rows[keep]
        return kept

    @property
    def pod_owner(self) -> IntArray:
        starts = self.pod_starts
        owner: IntArray = np.arange(len(self), dtype=np.int64).repeat(starts[1:] - starts[:-1])
        return owner

    def pods_of(self, rows: IntArray) -> tuple[IntArray, IntArray]:
        """The pods of the candidates of `rows` (indices into `pod_nodes`), and each pod's
        position in `rows`."""
        sizes = self.pod_starts[rows + 1] - self.pod_starts[rows]
        owner: IntArray = np.repeat(np.arange(rows.size), sizes)
        return domain_nodes(self.pod_starts, rows), owner

    def touching(self, rows: IntArray, nodes: IntArray) -> IntArray:
        """Those of `rows` with a pod on one of `nodes`, in the order given."""
        pods, owner = self.pods_of(rows)
        touched = np.zeros(rows.size, dtype=bool)
        touched[owner[np.isin(self.pod_nodes[pods], nodes)]] = True
        kept: IntArray = rows[touched]
        return kept

    def take(self, rows: Sequence[int] | IntArray) -> list[Candidate]:
        """The candidates of `rows`, each column read once as Python values (a handful of
        victims: numpy scalar reads would cost more than the rest of their making)."""
        picked = np.asarray(rows, dtype=np.int64)
        if picked.size == 0:
            return []
        starts = self.pod_starts[picked].tolist()
        ends = self.pod_starts[picked + 1].tolist()
        groups = [-1] * picked.size if self.cap_group is None else self.cap_group[picked].tolist()
        held, caps = self.held[picked].tolist(), self.caps.tolist()
        return [
            Candidate(
                job_id=self.job_ids[row],
                rule=self.rules[row],
                lost_gpu_seconds=lost,
                standing=standing,
                nodes=self.pod_nodes[start:end],
                gpus_per_pod=float(whole),
                budget_account=None if group < 0 else self.cap_accounts[group],
                gpus=0.0 if group < 0 else gpus,
                budget_cap=math.inf if group < 0 else caps[group],
            )
            for row, lost, standing, whole, start, end, group, gpus in zip(
                picked.tolist(),
                self.lost[picked].tolist(),
                self.standing[picked].tolist(),
                self.whole[picked].tolist(),
                starts,
                ends,
                groups,
                held,
                strict=True,
            )
        ]

    @staticmethod
    def of(candidates: Sequence[Candidate]) -> CandidatePool:
        counts = np.array([c.nodes.size for c in candidates], dtype=np.int64)
        nodes = (
            np.concatenate([c.nodes for c in candidates]).astype(np.int64)
            if candidates
            else np.zeros(0, dtype=np.int64)
        )
        accounts: dict[str, int] = {}
        caps: list[float] = []
        groups: list[int] = []
        for c in candidates:
            if c.budget_account is None:
                groups.append(-1)
                continue
            if c.budget_account not in accounts:
                accounts[c.budget_account] = len(caps)
                caps.append(c.budget_cap)
            groups.append(accounts[c.budget_account])
        return CandidatePool(
            cap_group=np.array(groups, dtype=np.int64) if accounts else None,
            caps=np.array(caps, dtype=np.float64),
            cap_accounts=list(accounts),
            held=np.array([c.gpus for c in candidates], dtype=np.float64),
            job_ids=[c.job_id for c in candidates],
            rules=[c.rule for c in candidates],
            lost=np.array([c.lost_gpu_seconds for c in candidates], dtype=np.float64),
            standing=np.array([c.standing for c in candidates], dtype=np.float64),
            whole=np.array([int(c.gpus_per_pod) for c in candidates], dtype=np.int64),
            pod_starts=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            pod_nodes=nodes,
        )


class VictimList(Sequence[Candidate]):
    """Thousands of victims as arrays; each `Candidate` is made when it is read."""

    def __init__(
        self,
        job_ids: Sequence[str] | NDArray[np.object_],
        rules: list[str],
        lost: FloatArray,
        standing: FloatArray,
        whole: IntArray,
        allocations: dict[str, Allocation],
    ) -> None:
        self.job_ids = job_ids
        self.rules = rules
        self.lost = lost
        self.standing = standing
        self.whole = whole
        self.allocations = allocations
        """Who holds what (the cluster state's): a victim's nodes are read when it is."""

    def __len__(self) -> int:
        return len(self.job_ids)

    @overload
    def __getitem__(self, row: int) -> Candidate: ...

    @overload
    def __getitem__(self, row: slice) -> list[Candidate]: ...

    def __getitem__(self, row: int | slice) -> Candidate | list[Candidate]:
        if isinstance(row, slice):
            return [self[i] for i in range(*row.indices(len(self)))]
        job_id = str(self.job_ids[row])
        allocation = self.allocations.get(job_id)
        nodes = allocation.nodes if allocation is not None else np.zeros(0, dtype=np.int64)
        return Candidate(
            job_id=job_id,
            rule=self.rules[row],
            lost_gpu_seconds=float(self.lost[row]),
            standing=float(self.standing[row]),
            nodes=nodes,
            gpus_per_pod=float(self.whole[row]),
        )
