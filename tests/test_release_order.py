"""The running jobs' release order as arrays follows the ledger's sorted records through
starts and stops, and counts each job's GPU slots per innermost domain as the job holds them."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from sortedcontainers import SortedList

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import Allocation, ClusterState
from toposched.cluster.statement import Statement
from toposched.scheduler.release_order import ReleaseOrder, count_held

N_NODES, N_LEAVES = 12, 4
LEAF_OF_NODE = np.arange(N_NODES, dtype=np.int64) // 3

# Jobs to allocate: of whole GPUs, with CPU and memory, of shared GPUs or of several pod
# shapes, each drawn from its seed.
JOB_KINDS = st.lists(
    st.tuples(st.sampled_from(["whole", "cpu", "shared", "sets"]), st.integers(0, 10**6)),
    min_size=1,
    max_size=40,
)


def allocation_of(seed: int) -> Allocation:
    rng = np.random.default_rng(seed)
    pods = int(rng.integers(1, 40))  # up to 4 leaves: the pool of pairs fills and is compacted
    width = int(rng.integers(0, 4))
    return Allocation(
        rng.integers(0, N_NODES, pods).astype(np.int64), np.zeros((pods, width), np.int64)
    )


# Each step: start a job (end time, allocation seed), stop the i-th running job, or read.
steps = st.lists(
    st.one_of(
        st.tuples(st.just("start"), st.integers(0, 20), st.integers(0, 1000)),
        st.tuples(st.just("stop"), st.integers(0, 1000), st.just(0)),
        st.tuples(st.just("read"), st.integers(0, 1000), st.just(0)),
    ),
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(steps)
def test_the_order_and_the_counts_follow_the_sorted_records(
    moves: list[tuple[str, int, int]],
) -> None:
    releases: SortedList = SortedList()
    order = ReleaseOrder(releases, LEAF_OF_NODE, N_LEAVES)
    held: dict[str, Allocation] = {}
    for number, (move, a, b) in enumerate(moves):
        if move == "start":
            key = (float(a), f"job-{number:03d}")
            held[key[1]] = allocation_of(b)
            releases.add(key)
            order.add(key, held[key[1]])
        elif move == "stop" and releases:
            key = releases[a % len(releases)]
            releases.remove(key)
            order.remove(key[1])
            del held[key[1]]
        else:
            slots = order.slots()
            assert order.owners(slots) == [job_id for _, job_id in releases]
            # Read a prefix of the order, as a search does, counting what it holds.
            read = slots[: a % (slots.size + 1)]
            order.count(read)
            for slot, job_id in zip(read.tolist(), order.owners(read), strict=True):
                first, count = int(order.pairs.start[slot]), int(order.pairs.count[slot])
                leaves, gpus = count_held(held[job_id], LEAF_OF_NODE, N_LEAVES)
                assert dict(
                    zip(
                        order.pairs.columns[0][first : first + count].tolist(),
                        order.pairs.columns[1][first : first + count].tolist(),
                        strict=True,
                    )
                ) == dict(zip(leaves.tolist(), gpus.tolist(), strict=True))
    assert order.owners(order.slots()) == [job_id for _, job_id in releases]


def test_many_starts_at_once_read_in_the_records_order() -> None:
    releases: SortedList = SortedList()
    order = ReleaseOrder(releases, LEAF_OF_NODE, N_LEAVES)
    keys = [(float(i % 7), f"job-{i:03d}") for i in range(200)]
    releases.update(keys)
    order.add_many(keys, [allocation_of(i) for i in range(200)])
    assert order.owners(order.slots()) == [job_id for _, job_id in releases]
    releases.remove(keys[5])
    order.remove(keys[5][1])
    releases.add((0.5, "late"))
    order.add((0.5, "late"), allocation_of(1))
    assert order.owners(order.slots()) == [job_id for _, job_id in releases]


def test_the_pairs_of_stopped_jobs_make_room_for_new_ones() -> None:
    """A pool of pairs left mostly to stopped jobs is compacted, not grown: the running jobs'
    pairs move and still read as counted."""
    releases: SortedList = SortedList()
    order = ReleaseOrder(releases, LEAF_OF_NODE, N_LEAVES)
    every_leaf = Allocation(np.arange(N_NODES, dtype=np.int64), np.zeros((N_NODES, 2), np.int64))
    for batch in range(4):
        for i in range(10):
            key = (float(i), f"job-{batch}-{i}")
            releases.add(key)
            order.add(key, every_leaf)
        order.count(order.slots())
        for key in list(releases)[:-2]:
            releases.remove(key)
            order.remove(key[1])
    assert order.pairs.columns[0].size == 64  # 10 jobs of 4 pairs at a time: never grown past that
    slots = order.slots()
    assert len(slots) == 2
    for slot in slots.tolist():
        first = int(order.pairs.start[slot])
        assert order.pairs.columns[0][first : first + 4].tolist() == [0, 1, 2, 3]
        assert order.pairs.columns[1][first : first + 4].tolist() == [6, 6, 6, 6]


@settings(max_examples=60, deadline=None)
@given(JOB_KINDS, st.data())
def test_the_parts_of_released_jobs_free_what_releasing_them_frees(
    kinds: list[tuple[str, int]], data: st.DataObject
) -> None:
    """Jobs of whole GPUs (with or without CPU and memory), of shared GPUs and of several pod
    shapes: freeing `parts` of any of them leaves every array of the state as releasing
    those jobs does."""
    topology = nvl72_cluster(
        zones=1,
        blocks_per_zone=2,
        racks_per_block=2,
        nodes_per_rack=3,
        gpus_per_node=4,
        cpu_milli=64_000,
        memory_mib=262_144,
    )
    state = ClusterState(topology)
    releases: SortedList = SortedList()
    level = len(topology.domain_levels) - 1
    order = ReleaseOrder(
        releases, topology.node_domain[level].astype(np.int64), topology.n_domains(level)
    )
    for key, allocation in _allocated(state, kinds):
        releases.add(key)
        order.add(key, allocation)
    if not releases:
        return
    slots = order.slots()
    chosen = data.draw(st.lists(st.integers(0, slots.size - 1), min_size=1, unique=True))
    picked = slots[np.array(chosen, dtype=np.int64)]
    statement = Statement(state)
    statement.release_many(order.owners(picked))
    released = state.snapshot()
    statement.discard()
    statement = Statement(state)
    statement.free_parts(order.parts(picked))
    freed = state.snapshot()
    statement.discard()
    assert released.keys() == freed.keys()
    for name in released:
        assert np.array_equal(released[name], freed[name]), name


@settings(max_examples=60, deadline=None)
@given(JOB_KINDS, st.data())
def test_every_job_counted_ahead_reads_as_the_searches_count_it(
    kinds: list[tuple[str, int]], data: st.DataObject
) -> None:
    """What `count_every_job` counts and keeps of every running job (as a restart does) is
    what a search reading them counts (`count`) and frees (`parts`): the same pairs per job
    and the same parts of any jobs picked, GPUs in order or not."""
    topology = nvl72_cluster(1, 2, 2, nodes_per_rack=3, cpu_milli=64_000, memory_mib=262_144)
    state = ClusterState(topology)
    level = len(topology.domain_levels) - 1
    leaf_of_node = topology.node_domain[level].astype(np.int64)
    ahead, read = (
        ReleaseOrder(SortedList(), leaf_of_node, topology.n_domains(level)) for _ in range(2)
    )
    for key, allocation in _allocated(state, kinds):
        for order in (ahead, read):
            order.releases.add(key)
            order.add(key, allocation)
    if not ahead.releases:
        return
    ahead.count_every_job()
    slots = ahead.slots()
    assert np.array_equal(slots, read.slots())
    assert ahead.pairs.missing(slots).size == 0
    read.count(slots)
    for slot in slots.tolist():
        pairs = []
        for order in (ahead, read):
            first, count = int(order.pairs.start[slot]), int(order.pairs.count[slot])
            leaves = order.pairs.columns[0][first : first + count].tolist()
            gpus = order.pairs.columns[1][first : first + count].tolist()
            pairs.append(sorted(zip(leaves, gpus, strict=True)))
        assert pairs[0] == pairs[1]
    chosen = data.draw(st.lists(st.integers(0, slots.size - 1), min_size=1, unique=True))
    picked = slots[np.array(chosen, dtype=np.int64)]
    for one, other in zip(ahead.parts(picked), read.parts(picked), strict=True):
        assert one.nodes.tolist() == other.nodes.tolist()
        assert one.gpus.tolist() == other.gpus.tolist()
        fields = ("gpu_milli", "cpu_milli", "memory_mib")
        assert [getattr(one, f) for f in fields] == [getattr(other, f) for f in fields]


def _allocated(
    state: ClusterState, kinds: list[tuple[str, int]]
) -> Iterator[tuple[tuple[float, str], Allocation]]:
    """Each job of `kinds` that fits, allocated in `state`: its release key and allocation."""
    for index, (kind, seed) in enumerate(kinds):
        allocation = _fitting(state, kind, np.random.default_rng(seed))
        if allocation is None:
            continue
        key = (float(seed % 5), f"job-{index:02d}")
        state.allocate(key[1], allocation)
        yield key, allocation


def _fitting(state: ClusterState, kind: str, rng: np.random.Generator) -> Allocation | None:
    """An allocation of `kind` on GPUs free in `state` (None if it finds no room)."""
    n_nodes = state.topology.n_nodes
    shared = kind == "shared"
    parts: list[Allocation] = []
    taken: set[tuple[int, int]] = set()
    for part in range(2 if kind == "sets" else 1):
        width = 1 if shared else int(rng.integers(1, 3)) + part
        nodes, gpus = [], []
        for _ in range(int(rng.integers(1, 12))):
            node = int(rng.integers(0, n_nodes))
            need = 500 if shared else 1000
            free = [
                gpu
                for gpu in range(4)
                if state.gpu_free_milli[node, gpu] >= need and (node, gpu) not in taken
            ]
            if len(free) < width:
                continue
            nodes.append(node)
            gpus.append(free[:width])
            taken.update((node, gpu) for gpu in free[:width])
        if not nodes:
            return None
        cpu = 1000 if kind in ("cpu", "sets") else 0
        memory = 1024 if kind == "cpu" else 0
        parts.append(Allocation.of(nodes, gpus, 500 if shared else 1000, cpu, memory))
    return Allocation.of_sets(parts) if kind == "sets" else parts[0]


def test_starts_and_stops_no_search_reads_do_not_pile_up() -> None:
    """Jobs start and stop by the thousand with no search reading the order: slots are taken
    again all the same, and the order read at last is the records'."""
    releases: SortedList = SortedList()
    order = ReleaseOrder(releases, LEAF_OF_NODE, N_LEAVES)
    for i in range(5000):
        key = (float(i % 13), f"job-{i:04d}")
        releases.add(key)
        order.add(key, allocation_of(i % 50))
        if i % 10:
            releases.remove(key)
            order.remove(key[1])
    assert len(releases) == 500
    assert len(order.ids) <= 2 * (500 + 1024)
    assert order.owners(order.slots()) == [job_id for _, job_id in releases]


def test_parts_list_each_jobs_gpus_whether_in_order_or_not() -> None:
    """Jobs of one shape give one part listing their pods job after job; GPUs 0, 1, ... of
    jobs placed in that order come as such rows, and one job out of order has its own read."""
    releases: SortedList = SortedList()
    order = ReleaseOrder(releases, LEAF_OF_NODE, N_LEAVES)
    jobs = {
        "a": Allocation.of([0, 1], [[0, 1], [0, 1]]),
        "b": Allocation.of([5], [[0, 1]]),
        "c": Allocation.of([7, 8], [[2, 3], [0, 1]]),
    }
    for index, (job_id, allocation) in enumerate(jobs.items()):
        releases.add((float(index), job_id))
        order.add((float(index), job_id), allocation)
    slots = order.slots()
    for chosen in (["a", "b"], ["a", "b", "c"], ["c", "a"]):
        picked = np.array([slots[list(jobs).index(job_id)] for job_id in chosen])
        (part,) = order.parts(picked)
        held = [jobs[job_id] for job_id in chosen]
        assert part.nodes.tolist() == np.concatenate([a.nodes for a in held]).tolist()
        assert part.gpus.tolist() == np.concatenate([a.gpus for a in held]).tolist()
