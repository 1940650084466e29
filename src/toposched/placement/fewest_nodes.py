"""`preferred: node`: the fewest nodes, then the fewest innermost domains (racks), then the
fewest of their parents (blocks), planned from per-rack counts of nodes by capacity.

A rack is described by how many of its nodes hold each count of pods (`NodeCounts`), read off
the state's histograms when GPUs alone bound the pods, otherwise counted from exact node
capacities. The fewest nodes is the least k whose k largest capacities reach the gang. Which k
nodes: every choice of k nodes whose capacities reach the gang uses the fewest nodes, and a
rack giving m of them gives its m largest, so the racks are planned by counts alone:

- *one capacity* (no node holds more than the k-th largest, v, and none holds less than v but
  enough to stand in for one of v): the k nodes are nodes of capacity v, the fewest racks are
  those with the most such nodes, and among placements on that many racks the fewest parents
  come from the knapsack over (parents used, racks used) -> most nodes
  (`fewest_counts.knapsack_over_runs`);
- *several capacities*: the knapsack over (racks used, nodes used) -> most pods, on the racks
  that rank among the first by their m largest nodes for some m (no other rack can be needed),
  finds the fewest racks; their parents are those of the racks it picks, or one parent where
  one holds as few nodes on as few racks (`node_planner.NodePlanner`).

Each knapsack runs within `MAX_NODE_PLAN_CELLS`; beyond it the greedy choice stands (every node
above v, then nodes of capacity v from the racks already used, then from the racks with the
most of them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import ClusterState
from toposched.placement.capacity import CapacityView
from toposched.placement.count_kernels import NOT_REACHED, SMAWK_RUNS, fewest_node_counts
from toposched.placement.fewest_counts import backtrack_runs, knapsack_over_runs
from toposched.placement.request import GangRequest

__all__ = ["NodeCounts", "fewest_node_counts", "plan_nodes"]

IntArray = NDArray[np.int64]

UNREACHABLE = NOT_REACHED
# `rank(capacities, need, candidates)`: the policy's favourite of `candidates` (indices into
# `capacities`, each holding `need`).
RankDomains = Callable[[IntArray, int, IntArray], int]
# Work a knapsack of the node plan may cost (table cells times runs, and cells kept in memory)
# before the greedy choice stands: about 5 ns a cell, 20 ms at the limit.
MAX_NODE_PLAN_CELLS = 4_000_000


@dataclass(frozen=True)
class NodeCounts:
    """Nodes of innermost domains `first`, `first + 1`, ... by capacity: `counts[i, j]` nodes of
    domain `first + i` hold `values[j]` pods each (`values` increasing, all positive)."""

    first: int
    values: IntArray
    counts: IntArray


@dataclass(frozen=True)
class NodePlan:
    """The fewest nodes of one required domain: innermost domains (increasing), the nodes each
    gives (its largest), the pods those nodes hold beyond the gang, and the profile (nodes,
    innermost domains, their parents) the plan reaches."""

    leaves: IntArray
    taken: IntArray
    excess: int
    profile: tuple[int, int, int]
    fit: int = 0
    """For a gang on one node: the capacity of the node to take (the smallest that holds it)."""


def node_counts(
    state: ClusterState, view: CapacityView, request: GangRequest, lo: int, hi: int
) -> NodeCounts:
    """`NodeCounts` of innermost domains lo..hi-1: from the histograms when GPUs alone bound the
    pods (aggregates are exact then), else from exact node capacities (one compiled pass)."""
    topology = state.topology
    leaf = len(topology.domain_levels) - 1
    if (
        request.gpus_per_pod
        and not request.is_fractional
        and not request.cpu_milli
        and not request.memory_mib
    ):
        hist = state.free_hist[leaf][lo:hi]
        if request.allowed_models is not None:
            hist = hist[:, request.allowed_models, :]
        by_free = hist[:, 0, :] if hist.shape[1] == 1 else hist.sum(axis=1, dtype=np.int64)
        pods = view.pods_per_free
        values, first_free = np.unique(pods, return_index=True)
        # Nodes by free GPUs, summed over the free counts that hold the same pods (a handful of
        # columns; most hold distinct counts when a pod asks for one GPU).
        ends = np.append(first_free[1:], pods.size)
        positive = values > 0
        if bool((ends - first_free)[positive].max(initial=1) == 1):
            # Every free count holds its own count of pods (one GPU per pod): one gather.
            counts = by_free[:, first_free[positive]].astype(np.int64)
            return NodeCounts(lo, values[positive], counts)
        counts = np.empty((hi - lo, int(positive.sum())), dtype=np.int64)
        for column, (start, end) in enumerate(
            zip(first_free[positive].tolist(), ends[positive].tolist(), strict=True)
        ):
            counts[:, column] = by_free[:, start:end].sum(axis=1, dtype=np.int64)
        return NodeCounts(lo, values[positive], counts)
    starts = topology.domain_starts[leaf]
    first, last = int(starts[lo]), int(starts[hi])
    capacity = view.node_capacity_in(first, last)
    leaf_of = topology.node_domain[leaf][first:last].astype(np.int64) - lo
    usable = capacity > 0
    values = np.unique(capacity[usable])
    index = np.searchsorted(values, capacity[usable])
    flat = np.bincount(leaf_of[usable] * values.size + index, minlength=(hi - lo) * values.size)
    return NodeCounts(lo, values, flat.reshape(hi - lo, values.size).astype(np.int64))


def plan_nodes(
    counts: NodeCounts,
    parent_of: IntArray | None,
    need: int,
    rank: RankDomains,
    most_parents: int | None = None,
) -> NodePlan | None:
    """The fewest nodes holding `need` pods among these innermost domains, then the fewest
    domains, then the fewest parents (`parent_of[i]`, domain i's parent; None when all share
    one); None when they cannot hold the gang. When one node holds the gang: the smallest that
    does, in the domain `rank` picks among those having one (`rank(capacities, need,
    candidates)`, the policy's favourite). `most_parents` skips the search for fewer parents
    than the greedy choice's unless it may reach that many (a plan compared with one that does)."""
    values, table = counts.values, counts.counts
    totals = table.sum(axis=0)
    k = int(fewest_node_counts(values, totals[None, :], need)[0])
    if k == UNREACHABLE:
        return None
    if k == 1:
        fit = int(np.flatnonzero((values >= need) & (totals > 0))[0])
        holding = np.flatnonzero(table[:, fit])
        chosen = rank(table @ values, need, holding)
        leaf = np.array([counts.first + chosen], dtype=np.int64)
        one = np.ones(1, dtype=np.int64)
        return NodePlan(leaf, one, int(values[fit]) - need, (1, 1, 1), int(values[fit]))
    by_largest = np.cumsum((totals * values)[::-1])
    at = values.size - 1 - int(np.argmax(by_largest >= need))  # the k-th largest's value index
    value = int(values[at])
    above = int(totals[at + 1 :].sum())
    # Pods the k largest nodes hold beyond the gang: a node of capacity u < v stands in for one
    # of v only when v - u is within it.
    slack = int((totals[at + 1 :] * values[at + 1 :]).sum()) + (k - above) * value - need
    stand_ins = (values < value) & (values >= value - slack) & (totals > 0)
    if not above and not stand_ins.any():
        return _one_capacity(
            table[:, at], k, value * k - need, parent_of, counts.first, most_parents
        )
    return _several_capacities(counts, at, k, slack, need, parent_of)


def _one_capacity(
    of_value: IntArray,
    k: int,
    excess: int,
    parent_of: IntArray | None,
    first: int,
    most_parents: int | None,
) -> NodePlan:
    """k nodes of one capacity: the fewest domains are those with the most such nodes; among
    placements on that many, the fewest parents by the knapsack over (parents, domains)."""
    chosen = _most_first(of_value, k)
    racks = chosen.size
    if parent_of is not None:
        better = _fewest_parents(of_value, parent_of, k, racks, chosen, most_parents)
        if better is not None:
            chosen = better
    chosen = np.sort(chosen)
    taken = of_value[chosen].copy()
    _trim_nodes(taken, int(taken.sum()) - k)
    parents = 1 if parent_of is None else int(np.unique(parent_of[chosen]).size)
    return NodePlan(first + chosen, taken, excess, (k, racks, parents))


def _most_first(of_value: IntArray, k: int) -> IntArray:
    """Positions of the fewest domains whose nodes reach k, those with the most first (ties:
    lower index), without sorting all of them: nodes per domain are counted by value."""
    by_count = np.bincount(of_value)
    nodes_from = np.cumsum((by_count * np.arange(by_count.size))[::-1])[::-1]  # in domains >= c
    least = int(np.flatnonzero(nodes_from >= k)[-1])  # the last domain's count of nodes
    above = np.flatnonzero(of_value > least)
    wanted = k - int(of_value[above].sum())
    at_least = np.flatnonzero(of_value == least)[: -(-wanted // least)]
    chosen = np.concatenate([above[np.argsort(-of_value[above], kind="stable")], at_least])
    return chosen


def _fewest_parents(
    of_value: IntArray,
    parent_of: IntArray,
    k: int,
    racks: int,
    greedy: IntArray,
    most_parents: int | None,
) -> IntArray | None:
    """Domains (positions) of a placement of k nodes on `racks` domains under fewer parents than
    the greedy choice's, the least such; None when none is fewer, `most_parents` is below the
    fewest possible, or the knapsack passes its limit. Domains are counted per parent by their
    nodes (small numbers), so no sort of all of them."""
    greedy_parents = int(np.unique(parent_of[greedy]).size)
    if greedy_parents == 1:
        return None
    # Domains of one parent are contiguous: per parent, its domains by nodes, most first.
    parents, starts = np.unique(parent_of, return_index=True)
    ends = np.append(starts[1:], parent_of.size)
    position = np.searchsorted(parents, parent_of)
    width = int(of_value.max()) + 1
    by_nodes = np.bincount(position * width + of_value, minlength=parents.size * width)
    by_most = by_nodes.reshape(parents.size, width)[:, :0:-1]  # nodes width-1 .. 1
    most = np.arange(width - 1, 0, -1, dtype=np.int64)
    before = np.cumsum(by_most, axis=1) - by_most
    taken = np.clip(racks - before, 0, by_most)  # the `racks` best domains of each parent
    best = (taken * most).sum(axis=1)
    # No fewer parents than the fewest whose best `racks` domains reach k: try that count first.
    bound = int(np.searchsorted(np.cumsum(np.sort(best)[::-1]), k)) + 1
    if most_parents is not None and bound > most_parents:
        return None  # no fewer than `most_parents` anyway: the greedy choice will do
    chosen: list[tuple[int, int]] | None = None
    if bound == 1:
        # One parent holds k nodes on `racks` domains: the one with the least such room (ties:
        # lower index), no knapsack needed.
        holding = np.flatnonzero(best >= k)
        one = int(holding[np.argmin(best[holding])])
        chosen = [(one, int(taken[one].sum()))]
    else:
        for limit in sorted({bound, greedy_parents - 1}):
            if limit < greedy_parents:
                chosen = _parents_knapsack(taken, most, best, k, racks, limit)
                if chosen is not None:
                    break
    if chosen is None:
        return None
    picked = [
        int(starts[p]) + np.argsort(-of_value[starts[p] : ends[p]], kind="stable")[:m]
        for p, m in chosen
    ]
    return np.concatenate(picked).astype(np.int64)


def _parents_knapsack(
    taken: IntArray, most: IntArray, best: IntArray, k: int, racks: int, limit: int
) -> list[tuple[int, int]] | None:
    """`_fewest_parents`'s knapsack over (parents, domains) -> most nodes, on at most `limit`
    parents (`taken[p, i]` of parent p's best domains hold `most[i]` nodes): (parent, domains
    it gives) of a least choice, or None when none reaches k or past the limit. Parents that
    cannot reach k with the `limit - 1` best others take no part."""
    top = np.sort(best)[::-1]
    others = np.where(best >= top[limit - 1], top[:limit].sum() - best, top[: limit - 1].sum())
    part = np.flatnonzero(best + others >= k)
    kernels: list[IntArray] = []
    for p in part.tolist():
        kernel = np.zeros(int(taken[p].sum()) + 1, dtype=np.int64)
        kernel[1:] = np.cumsum(np.repeat(most, taken[p]))
        kernels.append(kernel)
    runs = int(np.minimum((taken[part] > 0).sum(axis=1), SMAWK_RUNS).sum())
    cells = (limit + 1) * (racks + 1)
    if not kernels or cells * max(runs, len(kernels) + 1) > MAX_NODE_PLAN_CELLS:
        return None
    tables = knapsack_over_runs(kernels, limit, racks)
    reach = tables[-1][:, racks]
    if reach[limit] < k:
        return None
    counts = backtrack_runs(tables, kernels, int(np.argmax(reach >= k)), racks)
    return [(p, m) for p, m in zip(part.tolist(), counts, strict=True) if m]


def _several_capacities(
    counts: NodeCounts, at: int, k: int, slack: int, need: int, parent_of: IntArray | None
) -> NodePlan:
    """k nodes of several capacities: the greedy choice, replaced by the knapsack over (domains,
    nodes) -> most pods where that finds fewer domains within its limit."""
    values, table = counts.values, counts.counts
    above = table[:, at + 1 :].sum(axis=1)
    of_value = table[:, at]
    # Greedy: every node above the k-th largest value; then nodes of that value from the
    # domains already used, then from those with the most of them.
    wanted = k - int(above.sum())
    from_used = np.where(above > 0, of_value, 0)
    taken = above.copy()
    if wanted:
        first_pass = np.minimum(
            from_used, np.maximum(wanted - (np.cumsum(from_used) - from_used), 0)
        )
        taken += first_pass
        wanted -= int(first_pass.sum())
    if wanted:
        rest = np.where(above > 0, 0, of_value)
        order = np.argsort(-rest, kind="stable")
        ranked = rest[order]
        share = np.minimum(ranked, np.maximum(wanted - (np.cumsum(ranked) - ranked), 0))
        taken[order] += share
    chosen = np.flatnonzero(taken)
    plan = _fewest_domains(values, table, k, need, chosen.size)
    if plan is not None:
        chosen, taken_nodes = plan
        excess = int(_largest_sums(values, table[chosen], taken_nodes).sum()) - need
    else:
        taken_nodes = taken[chosen]
        excess = slack
    parents = 1 if parent_of is None else int(np.unique(parent_of[chosen]).size)
    return NodePlan(counts.first + chosen, taken_nodes, excess, (k, int(chosen.size), parents))


def _largest_sums(values: IntArray, table: IntArray, taken: IntArray) -> IntArray:
    """Pods the `taken[i]` largest nodes of domain i hold (rows of `table`, nodes by value)."""
    by_largest = table[:, ::-1]
    before = np.cumsum(by_largest, axis=1) - by_largest
    used = np.clip(taken[:, None] - before, 0, by_largest)
    sums: IntArray = (used * values[::-1]).sum(axis=1)
    return sums


def _running_sums(values: IntArray, table: IntArray, most: int) -> IntArray:
    """`sums[i, m]`: pods of domain i's m largest nodes, m = 0..most."""
    m = np.arange(most + 1, dtype=np.int64)
    by_largest = table[:, ::-1]
    before = np.cumsum(by_largest, axis=1) - by_largest
    used = np.clip(m[None, :, None] - before[:, None, :], 0, by_largest[:, None, :])
    sums: IntArray = (used * values[::-1]).sum(axis=2)
    return sums


def _fewest_domains(
    values: IntArray, table: IntArray, k: int, need: int, greedy: int
) -> tuple[IntArray, IntArray] | None:
    """Domains (positions, increasing) and nodes each gives of a placement on k nodes using
    fewer domains than `greedy`, the fewest; None when none does or past the limit. The
    knapsack runs first for as many domains as a lower bound allows (their pods with at most k
    nodes each and their nodes must reach the gang): when that many do, no fewer can."""
    nodes = table.sum(axis=1)
    if greedy < 2:
        return None
    most = int(min(k, int(nodes.max())))
    if table.shape[0] * (most + 1) * values.size > MAX_NODE_PLAN_CELLS:
        return None
    whole = _largest_sums(values, table, np.minimum(nodes, most))
    bound = max(_cover(whole, need), _cover(nodes, k))
    for limit in sorted({bound, greedy - 1}):
        if limit >= greedy:
            return None  # no placement on fewer domains than the greedy choice's
        found = _domains_knapsack(values, table, nodes, most, k, need, limit)
        if found is not None:
            return found
    return None


def _cover(capacity: IntArray, need: int) -> int:
    """The fewest of these capacities that reach `need` (their count plus one if none do)."""
    reach = np.cumsum(np.sort(capacity)[::-1])
    return int(np.searchsorted(reach, need)) + 1


def _domains_knapsack(
    values: IntArray, table: IntArray, nodes: IntArray, most: int, k: int, need: int, limit: int
) -> tuple[IntArray, IntArray] | None:
    """`_fewest_domains`'s knapsack over (domains, nodes) -> most pods on at most `limit`
    domains: the domains of a least choice and the nodes each gives, or None when none
    reaches the gang or past the limit."""
    # A domain is needed only if it ranks among the first `limit` by its m largest nodes for
    # some m: otherwise `limit` others hold as much with m nodes, and one of them is free.
    # (A loop over counts of nodes per domain, each pass over all domains.)
    keep = np.zeros(table.shape[0], dtype=np.bool_)
    for m in range(1, most + 1):
        column = np.where(nodes >= m, _largest_sums(values, table, np.full_like(nodes, m)), -1)
        top = (
            np.argpartition(-column, limit - 1)[:limit]
            if limit < column.size
            else np.arange(column.size)
        )
        keep[top[column[top] > 0]] = True
    candidates = np.flatnonzero(keep)
    widths = np.minimum(nodes[candidates], k)
    runs = int(np.minimum((table[candidates] > 0).sum(axis=1), SMAWK_RUNS).sum())
    cells = (limit + 1) * (k + 1)
    if candidates.size == 0 or cells * max(runs, candidates.size + 1) > MAX_NODE_PLAN_CELLS:
        return None
    sums = _running_sums(values, table[candidates], int(widths.max()))
    kernels = [sums[i, : w + 1].copy() for i, w in enumerate(widths.tolist())]
    tables = knapsack_over_runs(kernels, limit, k)
    reach = tables[-1][:, k]
    if reach[limit] < need:
        return None
    taken = backtrack_runs(tables, kernels, int(np.argmax(reach >= need)), k)
    used = np.array(taken, dtype=np.int64)
    return candidates[used > 0], used[used > 0]


def _trim_nodes(taken: IntArray, excess: int) -> None:
    """Take `excess` nodes off the last domains, leaving each at least one."""
    for i in range(taken.size - 1, -1, -1):
        if excess <= 0:
            return
        cut = min(excess, int(taken[i]) - 1)
        taken[i] -= cut
        excess -= cut


def pick_nodes(capacity: IntArray, leaf_of: IntArray, plan: NodePlan) -> tuple[IntArray, IntArray]:
    """Positions (into `capacity`, increasing) of the nodes a plan takes and the pods each holds:
    in each of its domains the largest nodes (ties: lower index), the plan's excess taken off
    the smallest of them. `leaf_of[i]` is node i's innermost domain, nodes in index order."""
    if plan.fit:
        first = int(np.flatnonzero(capacity == plan.fit)[0])
        return np.array([first], dtype=np.int64), np.array([plan.fit - plan.excess])
    position = np.searchsorted(plan.leaves, leaf_of)
    position = np.minimum(position, plan.leaves.size - 1)
    inside = (plan.leaves[position] == leaf_of) & (capacity > 0)
    nodes = np.flatnonzero(inside)
    domain = position[nodes]
    order = np.lexsort((nodes, -capacity[nodes], domain))
    ranked_domain = domain[order]
    starts = np.searchsorted(ranked_domain, np.arange(plan.leaves.size))
    rank = np.arange(order.size) - starts[ranked_domain]
    picked = np.sort(nodes[order[rank < plan.taken[ranked_domain]]])
    pods = capacity[picked].copy()
    if plan.excess:
        pods[int(np.argmin(pods))] -= plan.excess
    return picked, pods
