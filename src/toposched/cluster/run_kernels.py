"""Compiled loops over the many pods of a gang or the many nodes of a fence: changes of the
aggregates summed per run of nodes sharing an innermost domain before they reach any level (a
gang of whole racks touches far fewer domains than nodes, so each node costs a few reads and
adds, and each run one update per level), an allocation checked in one pass without sorting,
and rows of an aggregate added in one call. For closures of many nodes: what they add to the
aggregates per run and per domain of every level, brought up to date from the runs whose nodes
changed; closure bits set or cleared, and a fence's marks set or cleared, in one pass each.

The state's arrays come in the order of `kernels.StateArrays`."""

from __future__ import annotations

import numpy as np
from numba import njit

from toposched.cluster.kernels import CPU, IDLE, MEMORY, MILLI, WHOLE, StateArrays

_FULL = 1000  # `MILLI_PER_GPU`: a wholly free GPU


@njit(cache=True, nogil=True)
def _flush(
    run_node: int,
    whole: np.int64,
    milli: np.int64,
    idle: np.int64,
    cpu: np.int64,
    memory: np.int64,
    cells: np.ndarray,
    moved: bool,
    node_rows: np.ndarray,
    hist: np.ndarray,
    totals: np.ndarray,
) -> None:
    """Add one run's summed changes of the totals and, if `moved`, of the histogram cells to
    its domain at every level (`run_node`: one of its nodes); the cells are cleared."""
    for level in range(node_rows.shape[1]):
        row = node_rows[run_node, level]
        totals[row, WHOLE] += whole
        totals[row, MILLI] += milli
        totals[row, IDLE] += idle
        totals[row, CPU] += cpu
        totals[row, MEMORY] += memory
        if moved:
            for model in range(cells.shape[0]):
                for cell in range(cells.shape[1]):
                    hist[row, model, cell] += cells[model, cell]
    if moved:
        cells[:, :] = 0


@njit(cache=True, nogil=True)
def apply_pods_by_runs(
    nodes: np.ndarray,
    gpus: np.ndarray,
    gpu_milli: int,
    cpu_milli: int,
    memory_mib: int,
    sign: int,
    arrays: StateArrays,
    changed_at: np.ndarray,
    change: int,
    held_whole: bool,
) -> None:
    """Take (sign=-1) or give back (+1) the resources of pods on `nodes` (their GPUs: a row
    each of `gpus`), pod by pod: the same changes as `kernels.apply_pods_of_many`, each open node's
    change of values summed over its run of pods in one innermost domain before it moves the
    domains (sums kept in scalars, which the compiler holds in registers). Each node's
    `changed_at` becomes `change`.

    With `held_whole`, pods of whole GPUs move each of their GPUs between wholly free and
    wholly held (as a validated take and its release do), so a node's free whole GPUs move by
    the pod's GPUs without counting its GPUs again."""
    free_whole_gpus, gpu_free_milli, free_cpu_milli, free_memory_mib = arrays[:4]
    gpu_count, cpu_capacity, memory_capacity = arrays[4:7]
    closed, node_rows, gpu_model, hist, totals = arrays[7:]
    width = gpu_free_milli.shape[1]
    per_pod = gpus.shape[1]
    leaf = node_rows.shape[1] - 1
    gpu_change = sign * gpu_milli
    cpu_change = sign * cpu_milli
    memory_change = sign * memory_mib
    # Every listed GPU moves by `gpu_change`, so a node's free milli-GPU by this per pod.
    milli_change = np.int64(per_pod) * gpu_change
    whole_gpus = held_whole and gpu_milli == _FULL and per_pod > 0
    whole_change = np.int64(sign * per_pod)
    cells = np.zeros((hist.shape[1], hist.shape[2]), dtype=np.int64)
    moved = False
    run_node = -1
    run_row = -1
    whole_sum = milli_sum = idle_sum = cpu_sum = memory_sum = np.int64(0)
    for pod in range(nodes.size):
        node = nodes[pod]
        changed_at[node] = change
        old_whole = np.int64(free_whole_gpus[node])
        old_cpu = free_cpu_milli[node]
        old_memory = free_memory_mib[node]
        for column in range(per_pod):
            gpu_free_milli[node, gpus[pod, column]] += gpu_change
        if whole_gpus:
            whole = old_whole + whole_change
        else:
            whole = np.int64(0)
            for gpu in range(width):
                whole += gpu_free_milli[node, gpu] == _FULL
        free_whole_gpus[node] = whole
        cpu = old_cpu + cpu_change
        memory = old_memory + memory_change
        free_cpu_milli[node] = cpu
        free_memory_mib[node] = memory
        if closed[node] != 0:
            continue
        row = node_rows[node, leaf]
        if row != run_row:
            if run_node >= 0:
                _flush(
                    run_node,
                    whole_sum,
                    milli_sum,
                    idle_sum,
                    cpu_sum,
                    memory_sum,
                    cells,
                    moved,
                    node_rows,
                    hist,
                    totals,
                )
                whole_sum = milli_sum = idle_sum = cpu_sum = memory_sum = np.int64(0)
                moved = False
            run_node = node
            run_row = row
        count = gpu_count[node]
        rest_before = old_cpu == cpu_capacity[node] and old_memory == memory_capacity[node]
        rest_after = cpu == cpu_capacity[node] and memory == memory_capacity[node]
        idle_sum += np.int64(rest_after and whole == count) - np.int64(
            rest_before and old_whole == count
        )
        whole_sum += whole - old_whole
        milli_sum += milli_change
        cpu_sum += cpu_change
        memory_sum += memory_change
        if whole != old_whole:
            model = gpu_model[node]
            cells[model, old_whole] -= 1
            cells[model, whole] += 1
            moved = True
    if run_node >= 0:
        _flush(
            run_node,
            whole_sum,
            milli_sum,
            idle_sum,
            cpu_sum,
            memory_sum,
            cells,
            moved,
            node_rows,
            hist,
            totals,
        )


@njit(cache=True, nogil=True)
def node_run_sums(
    nodes: np.ndarray, arrays: StateArrays, from_rows: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What open `nodes` (distinct, sorted) add to the aggregates, summed per run of them in
    one innermost domain: where each run begins (positions in `nodes`), its sums of the totals
    (one row per run, the columns of `kernels.node_values`), and its histogram cells (one row
    per run: GPU models x free whole GPUs, flattened).

    With `from_rows` (the nodes count in the aggregates now, which sum the node arrays: no
    change of nodes alone is under way), a run holding as many nodes as its domain counts
    holds every node counted there, and adds what the domain's row holds, read there instead
    of from its nodes: a fence's block covers whole racks."""
    node_rows = arrays[8]
    leaf = node_rows.shape[1] - 1
    runs = 0
    run_row = -1
    for i in range(nodes.size):
        row = node_rows[nodes[i], leaf]
        if row != run_row:
            runs += 1
            run_row = row
    first = np.empty(runs + 1, dtype=np.int64)
    run = -1
    run_row = -1
    for i in range(nodes.size):
        row = node_rows[nodes[i], leaf]
        if row != run_row:
            run += 1
            first[run] = i
            run_row = row
    first[runs] = nodes.size
    sums, cells = _sum_runs(nodes, first, arrays, from_rows)
    return first[:runs], sums, cells


@njit(cache=True, nogil=True)
def _run_end(nodes: np.ndarray, at: int, leaf_of: np.ndarray, leaf_starts: np.ndarray) -> int:
    """Where the run of sorted distinct `nodes` in one innermost domain beginning at `at`
    ends: at once where it begins with the domain's first node and its last node stands
    where the domain's last would (then it holds every node between), else node by node."""
    node = nodes[at]
    leaf = leaf_of[node]
    start, end = leaf_starts[leaf], leaf_starts[leaf + 1]
    last: int = at + end - start - 1
    if node == start and last < nodes.size and nodes[last] == end - 1:
        return last + 1
    after = at + 1
    while after < nodes.size and leaf_of[nodes[after]] == leaf:
        after += 1
    return after


@njit(cache=True, nogil=True)
def domain_run_sums(
    nodes: np.ndarray,
    leaf_of: np.ndarray,
    leaf_starts: np.ndarray,
    arrays: StateArrays,
    from_rows: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`node_run_sums`, with runs found from the innermost domains (`leaf_of`: each node's;
    `leaf_starts`: where each domain's nodes begin, and one more entry): a run covering its
    domain is passed over without reading its nodes, so a block of whole racks costs a few
    steps per rack where reading each node costs one per node."""
    runs = 0
    at = 0
    while at < nodes.size:
        at = _run_end(nodes, at, leaf_of, leaf_starts)
        runs += 1
    first = np.empty(runs + 1, dtype=np.int64)
    at = 0
    for run in range(runs):
        first[run] = at
        at = _run_end(nodes, at, leaf_of, leaf_starts)
    first[runs] = nodes.size
    sums, cells = _sum_runs(nodes, first, arrays, from_rows)
    return first[:runs], sums, cells


@njit(cache=True, nogil=True)
def _sum_runs(
    nodes: np.ndarray, first: np.ndarray, arrays: StateArrays, from_rows: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The sums and histogram cells of each run of `nodes` (runs begin at `first`, one more
    entry marks the end), as `node_run_sums` gives them."""
    node_rows, hist, totals = arrays[8], arrays[10], arrays[11]
    leaf = node_rows.shape[1] - 1
    n_models, hist_width = hist.shape[1], hist.shape[2]
    runs = first.size - 1
    sums = np.zeros((runs, 5), dtype=np.int64)
    cells = np.zeros((runs, n_models * hist_width), dtype=np.int64)
    for run in range(runs):
        start, end = first[run], first[run + 1]
        row = node_rows[nodes[start], leaf]
        if from_rows:
            open_nodes = np.int64(0)  # the domain's open nodes: its histogram's count
            for model in range(n_models):
                for cell in range(hist_width):
                    open_nodes += hist[row, model, cell]
            if open_nodes == end - start:
                for column in range(5):
                    sums[run, column] = totals[row, column]
                for model in range(n_models):
                    for cell in range(hist_width):
                        cells[run, model * hist_width + cell] = hist[row, model, cell]
                continue
        _run_values(nodes, start, end, arrays, sums[run], cells[run])
    return sums, cells


@njit(cache=True, nogil=True)
def fits_in_place(
    nodes: np.ndarray,
    gpus: np.ndarray,
    gpu_milli: int,
    cpu_milli: int,
    memory_mib: int,
    gpu_count: np.ndarray,
    closed: np.ndarray,
    gpu_free_milli: np.ndarray,
    free_cpu_milli: np.ndarray,
    free_memory_mib: np.ndarray,
) -> bool:
    """Whether pods on `nodes` using `gpus` (one row per pod) name valid open nodes and GPUs
    and fit what is free now, in one pass over the pods without sorting: each pod's
    requests are taken from the free arrays as it goes (pods sharing a GPU or a node find
    what the earlier ones left), a free amount below zero means they do not fit, and every
    change is undone before returning. The caller checks the scalars (requests positive)."""
    pods, per_pod = gpus.shape
    n_nodes = gpu_count.size
    fits = True
    pod = 0
    taken = 0  # GPU requests of pod `pod` taken
    while pod < pods:
        node = nodes[pod]
        if node < 0 or node >= n_nodes or closed[node] != 0:
            fits = False
            break
        count = gpu_count[node]
        for column in range(per_pod):
            gpu = gpus[pod, column]
            if gpu < 0 or gpu >= count:
                fits = False
                break
            gpu_free_milli[node, gpu] -= gpu_milli
            taken += 1
            if gpu_free_milli[node, gpu] < 0:
                fits = False
                break
        if not fits:
            break
        free_cpu_milli[node] -= cpu_milli
        free_memory_mib[node] -= memory_mib
        pod += 1
        taken = 0
        if free_cpu_milli[node] < 0 or free_memory_mib[node] < 0:
            fits = False
            break
    # Undo: the GPUs taken of an unfinished pod, then every finished pod.
    if pod < pods:
        node = nodes[pod]
        for column in range(taken):
            gpu_free_milli[node, gpus[pod, column]] += gpu_milli
    for done in range(pod):
        node = nodes[done]
        for column in range(per_pod):
            gpu_free_milli[node, gpus[done, column]] += gpu_milli
        free_cpu_milli[node] += cpu_milli
        free_memory_mib[node] += memory_mib
    return fits


@njit(cache=True, nogil=True)
def add_to_rows(array: np.ndarray, rows: np.ndarray, change: np.ndarray, sign: int) -> None:
    """`array[rows] += sign * change` for a 2-D array and distinct `rows` (one row of `change`
    each), in one call where numpy's gather, add and scatter cost three."""
    for i in range(rows.size):
        row = rows[i]
        for column in range(array.shape[1]):
            array[row, column] += sign * change[i, column]


@njit(cache=True, nogil=True)
def open_nodes(nodes: np.ndarray, closed: np.ndarray) -> np.ndarray:
    """The open ones of `nodes` (`closed` 0), in order, as a new array: one pass to count,
    one to copy, where numpy gathers, compares and compresses in three."""
    count = 0
    for i in range(nodes.size):
        count += closed[nodes[i]] == 0
    kept = np.empty(count, dtype=np.int64)
    at = 0
    for i in range(nodes.size):
        node = nodes[i]
        if closed[node] == 0:
            kept[at] = node
            at += 1
    return kept


@njit(cache=True, nogil=True)
def _run_values(
    nodes: np.ndarray,
    start: int,
    end: int,
    arrays: StateArrays,
    sums: np.ndarray,
    cells: np.ndarray,
) -> None:
    """What `nodes[start:end]` add to the aggregates, read from the nodes, into `sums` (the
    columns of `kernels.node_values`) and `cells` (GPU models x free whole GPUs, flattened),
    which it clears first. Sums kept in scalars, which the compiler holds in registers."""
    free_whole_gpus, gpu_free_milli, free_cpu_milli, free_memory_mib = arrays[:4]
    gpu_count, cpu_capacity, memory_capacity = arrays[4:7]
    gpu_model, hist = arrays[9], arrays[10]
    width = gpu_free_milli.shape[1]
    hist_width = hist.shape[2]
    cells[:] = 0
    whole_sum = milli_sum = idle_sum = cpu_sum = memory_sum = np.int64(0)
    for i in range(start, end):
        node = nodes[i]
        whole = np.int64(free_whole_gpus[node])
        cpu = free_cpu_milli[node]
        memory = free_memory_mib[node]
        for gpu in range(width):
            milli_sum += gpu_free_milli[node, gpu]
        idle = whole == gpu_count[node] and cpu == cpu_capacity[node]
        idle_sum += np.int64(idle and memory == memory_capacity[node])
        whole_sum += whole
        cpu_sum += cpu
        memory_sum += memory
        cells[gpu_model[node] * hist_width + whole] += 1
    sums[WHOLE] = whole_sum
    sums[MILLI] = milli_sum
    sums[IDLE] = idle_sum
    sums[CPU] = cpu_sum
    sums[MEMORY] = memory_sum


@njit(cache=True, nogil=True)
def refresh_runs(
    known: np.ndarray,
    nodes: np.ndarray,
    changed_at: np.ndarray,
    stamp: int,
    first: np.ndarray,
    run_rows: np.ndarray,
    run_sums: np.ndarray,
    run_cells: np.ndarray,
    sums: np.ndarray,
    cells: np.ndarray,
    arrays: StateArrays,
) -> int:
    """Bring up to date what `known` nodes add to the aggregates, if `nodes` are `known` in
    the same order; returns how many runs it read again, or -1 (nothing changed) where the
    nodes differ.

    `known` add per run of them in one innermost domain (runs begin at `first`, one more
    entry marks the end) `run_sums` and `run_cells` (one row per run, as `node_run_sums`
    gives), and per domain of every level `sums` and `cells` (one row per domain, the levels'
    rows stacked; `run_rows[run, level]`: the row of the run's domain at that level), as of
    change `stamp`. A run holding a node changed after `stamp` (`changed_at`) is read again
    from its nodes, and the difference moves its domains' rows: the cost is one pass over the
    nodes plus the runs that changed, where reading every node costs several times more."""
    if known.size != nodes.size:
        return -1
    runs = first.size - 1
    stale = np.zeros(runs, dtype=np.bool_)
    for run in range(runs):
        for i in range(first[run], first[run + 1]):
            node = nodes[i]
            if known[i] != node:
                return -1
            if changed_at[node] > stamp:
                stale[run] = True
    new_sums = np.empty(run_sums.shape[1], dtype=np.int64)
    new_cells = np.empty(run_cells.shape[1], dtype=np.int64)
    refreshed = 0
    for run in range(runs):
        if not stale[run]:
            continue
        refreshed += 1
        _run_values(nodes, first[run], first[run + 1], arrays, new_sums, new_cells)
        for level in range(run_rows.shape[1]):
            row = run_rows[run, level]
            for column in range(new_sums.size):
                sums[row, column] += new_sums[column] - run_sums[run, column]
            for cell in range(new_cells.size):
                cells[row, cell] += new_cells[cell] - run_cells[run, cell]
        run_sums[run, :] = new_sums
        run_cells[run, :] = new_cells
    return refreshed


@njit(cache=True, nogil=True)
def close_nodes(nodes: np.ndarray, closed: np.ndarray, bit: int) -> tuple[np.ndarray, np.ndarray]:
    """Set `bit` in `closed` for `nodes` (distinct); returns those that lacked it, and of
    those the ones that were open (`closed` 0), in order: one pass to count and one to copy
    and set, where numpy gathers, compares, compresses and scatters several times. (Arrays
    sized by a count: fresh memory for every node would cost more than the passes.)"""
    n_newly = n_leaving = 0
    for i in range(nodes.size):
        was = closed[nodes[i]]
        if not was & bit:
            n_newly += 1
            n_leaving += was == 0
    newly = np.empty(n_newly, dtype=np.int64)
    leaving = np.empty(n_leaving, dtype=np.int64)
    n_newly = n_leaving = 0
    for i in range(nodes.size):
        node = nodes[i]
        was = closed[node]
        if was & bit:
            continue
        newly[n_newly] = node
        n_newly += 1
        if was == 0:
            leaving[n_leaving] = node
            n_leaving += 1
        closed[node] = was | bit
    return newly, leaving


@njit(cache=True, nogil=True)
def reopen_nodes(nodes: np.ndarray, closed: np.ndarray, bit: int) -> np.ndarray:
    """Clear `bit` in `closed` for `nodes` (distinct); returns those open now that were not
    (closed for `bit` alone), in order (counted first, as in `close_nodes`)."""
    count = 0
    for i in range(nodes.size):
        count += closed[nodes[i]] == bit
    opening = np.empty(count, dtype=np.int64)
    count = 0
    for i in range(nodes.size):
        node = nodes[i]
        was = closed[node]
        if was & bit:
            closed[node] = was & ~bit
            if was == bit:
                opening[count] = node
                count += 1
    return opening


@njit(cache=True, nogil=True)
def mark_open_nodes(
    nodes: np.ndarray, marked: np.ndarray, marked_at: np.ndarray, closed: np.ndarray, mark: int
) -> tuple[np.ndarray, bool]:
    """The open (`closed` 0) ones of `nodes` not `marked` yet, each once, in order; they are
    marked now, their `marked_at` set to `mark`. Also whether any of them had a `marked_at`
    other than 0 before (marked once, unmarked since). Counted first, as in `close_nodes`,
    then picked in one pass where numpy gathers and compresses several times."""
    count = 0
    for i in range(nodes.size):
        node = nodes[i]
        count += not marked[node] and closed[node] == 0
    picked = np.empty(count, dtype=np.int64)
    count = 0
    again = False
    for i in range(nodes.size):
        node = nodes[i]
        if marked[node] or closed[node] != 0:
            continue
        marked[node] = True
        again |= marked_at[node] != 0
        marked_at[node] = mark
        picked[count] = node
        count += 1
    return picked[:count], again


@njit(cache=True, nogil=True)
def runs_per_domain(
    representative: np.ndarray, node_rows: np.ndarray, run_sums: np.ndarray, run_cells: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-run sums (`node_run_sums`: runs of sorted nodes, each in one innermost domain, of
    which `representative` holds one node each) summed per domain of every level: the
    domains' rows of the stacked aggregates (`node_rows`), their sums and histogram cells, and
    per run and level the position among those of the run's domain. Runs of sorted nodes
    meet each domain in one stretch, so a domain is one row. Run by run, all levels at once
    (a node's rows are side by side)."""
    runs = representative.size
    levels = node_rows.shape[1]
    last = np.full(levels, -1, dtype=np.int64)
    counts = np.zeros(levels + 1, dtype=np.int64)
    for run in range(runs):
        node = representative[run]
        for level in range(levels):
            row = node_rows[node, level]
            if row != last[level]:
                counts[level + 1] += 1
                last[level] = row
    at = np.cumsum(counts)[:levels] - 1  # each level's positions follow the level before's
    count = counts.sum()
    rows = np.empty(count, dtype=np.int64)
    sums = np.zeros((count, run_sums.shape[1]), dtype=np.int64)
    cells = np.zeros((count, run_cells.shape[1]), dtype=np.int32)
    run_rows = np.empty((runs, levels), dtype=np.int64)
    last[:] = -1
    for run in range(runs):
        node = representative[run]
        for level in range(levels):
            row = node_rows[node, level]
            if row != last[level]:
                at[level] += 1
                rows[at[level]] = row
                last[level] = row
            here = at[level]
            run_rows[run, level] = here
            for column in range(run_sums.shape[1]):
                sums[here, column] += run_sums[run, column]
            for cell in range(run_cells.shape[1]):
                cells[here, cell] += run_cells[run, cell]
    return rows, sums, cells, run_rows


@njit(cache=True, nogil=True)
def increasing(nodes: np.ndarray) -> bool:
    """Whether `nodes` are strictly increasing (sorted and distinct): one pass that counts the
    pairs out of order without branching (so the compiler vectorises it), where numpy
    compares every pair into a new array first."""
    out_of_order = 0
    for i in range(1, nodes.size):
        out_of_order += nodes[i] <= nodes[i - 1]
    return out_of_order == 0


@njit(cache=True, nogil=True)
def unmark(nodes: np.ndarray, marked: np.ndarray, marked_at: np.ndarray, clear_at: bool) -> None:
    """`marked[nodes] = False`, and with `clear_at` `marked_at[nodes] = 0`, in one pass."""
    for i in range(nodes.size):
        node = nodes[i]
        marked[node] = False
        if clear_at:
            marked_at[node] = 0
