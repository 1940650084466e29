"""`preferred` placements on medium clusters against an exact solver.

The brute-force oracle (`tests/test_placement_oracle.py`) reaches clusters of about 12 nodes.
Here clusters of a few hundred nodes (zones > blocks > racks, random free GPUs on every node)
and gangs of tens to hundreds of pods preferring blocks or racks, some with a required level,
rack, block or node slices, are checked against a mixed-integer programme solved by HiGHS: the
lexicographically least (domains used at the preferred level L, at L+1, ..., at the innermost
level) over every placement, found in stages, each stage fixing the optimum of the one before.

What must agree is what docs/placement.md's fewest-domains table promises for the way the
search went: every level when the amount plan is within its limits (its limits lifted here);
with the count plans alone, L and L+1 (no slice layer between the required level and L) or L
(one there); past every limit, L (no slice layer between) or only a valid placement. Where the
table says best effort, the count at each such level i must be within the stated bound: at most
M(e, i) times the least inside the chosen required domain, e the deepest level above i the
table makes exact (or the level just inside the required one) and M(e, i) the most level-i
domains with room under one level-e domain the placement uses.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum

import highspy
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray
from placement_helpers import assert_valid_placement, pod_capacity
from test_placement_oracle import RandomCase, brute_force, random_cases

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.loaders import topology_from_dict
from toposched.cluster.state import Allocation, ClusterState
from toposched.placement import fewest, fewest_counts
from toposched.placement.fewest import FewestDomains
from toposched.placement.policies import BestFit, PlacementPolicy, Spread
from toposched.placement.request import GangRequest, simple_request
from toposched.placement.search import Placement, Unschedulable, place

IntArray = NDArray[np.int64]

ZONE, BLOCK, RACK = 1, 2, 3
ROW, DEEP_RACK = 3, 4  # on the four-level clusters, rows lie between blocks and racks
SEEDS = range(60)
DEEP_SEEDS = range(40)


# --- medium clusters and gangs ------------------------------------------------------------------


@dataclass(frozen=True)
class MediumCase:
    """A cluster state with random free GPUs and one gang preferring blocks or racks."""

    seed: int
    state: ClusterState
    request: GangRequest

    def __repr__(self) -> str:
        r = self.request
        return (
            f"MediumCase(seed={self.seed}, nodes={self.state.topology.n_nodes}, pods={r.pods}, "
            f"gpus={r.gpus_per_pod}, required={r.required}, preferred={r.preferred}, "
            f"slices={r.slices}, node_slice={r.node_slice})"
        )


def medium_state(rng: np.random.Generator) -> ClusterState:
    """2 zones of 2-4 blocks of 3-7 racks of 4-9 nodes (96-504 nodes) of 4 or 8 GPUs, each
    rack busy to its own degree and each node taking a binomial draw of it."""
    gpus = int(rng.choice([4, 8]))
    topology = nvl72_cluster(
        zones=2,
        blocks_per_zone=int(rng.integers(2, 5)),
        racks_per_block=int(rng.integers(3, 8)),
        nodes_per_rack=int(rng.integers(4, 10)),
        gpus_per_node=gpus,
    )
    return made_busy(ClusterState(topology), rng)


def deep_state(rng: np.random.Generator) -> ClusterState:
    """Four levels: 2 zones of 2-3 blocks of 2-3 rows of 2-4 racks of 3-6 nodes (48-432 nodes)
    of 4 or 8 GPUs, busy as `medium_state`'s."""
    gpus = int(rng.choice([4, 8]))
    shape = [2, int(rng.integers(2, 4)), int(rng.integers(2, 4)), int(rng.integers(2, 5))]
    nodes_per_rack = int(rng.integers(3, 7))
    nodes = [
        {
            "name": f"n{z}-{b}-{w}-{r}-{n}",
            "zone": f"z{z}",
            "block": f"b{z}-{b}",
            "row": f"w{z}-{b}-{w}",
            "rack": f"r{z}-{b}-{w}-{r}",
            "gpus": gpus,
            "gpu_model": "A",
        }
        for z, b, w, r in itertools.product(*(range(size) for size in shape))
        for n in range(nodes_per_rack)
    ]
    cluster = {"levels": ["zone", "block", "row", "rack"], "nodes": nodes}
    return made_busy(ClusterState(topology_from_dict(cluster)), rng)


def made_busy(state: ClusterState, rng: np.random.Generator) -> ClusterState:
    """Each innermost domain busy to its own degree, each node taking a binomial draw of it."""
    topology = state.topology
    gpus = int(topology.gpu_count[0])
    leaf = len(topology.domain_levels) - 1
    racks = topology.node_domain[leaf]
    busy = rng.beta(0.7, 0.7, size=topology.n_domains(leaf))
    used = rng.binomial(gpus, busy[racks])
    for count in range(1, gpus + 1):
        nodes = np.flatnonzero(used == count)
        if nodes.size:
            taken = np.tile(np.arange(count), (nodes.size, 1))
            state.allocate(f"busy-{count}", Allocation.of(nodes, taken))
    return state


def medium_case(seed: int) -> MediumCase:
    """A state and a gang: 1, 2 or 4 GPUs per pod; preferred zone (rarely), block or rack;
    sometimes a required level above it, rack slices, block slices (a slice layer between the
    required level and racks) or node slices; most often larger than one preferred domain's
    room, within what its required domain holds."""
    rng = np.random.default_rng(seed)
    state = medium_state(rng)
    topology = state.topology
    gpus_per_node = int(topology.gpu_count[0])
    gpus = int(rng.choice([g for g in (1, 2, 4) if g <= gpus_per_node]))
    preferred = int(rng.choice([ZONE, BLOCK, BLOCK, RACK, RACK]))
    required = 0 if preferred == ZONE else int(rng.choice(range(preferred)))
    node_slice = 2 if gpus * 2 <= gpus_per_node and rng.random() < 0.15 else 1
    slices: list[tuple[int, int]] = []
    unit = node_slice
    shape = rng.random()
    if preferred == RACK and required < BLOCK and shape < 0.35:
        unit *= int(rng.choice([2, 3, 4, 6]))
        slices.append((BLOCK, unit))
    elif shape < 0.6:
        unit *= int(rng.choice([2, 3, 4]))
        slices.append((RACK, unit))
    return sized_case(
        f"medium-{seed}", seed, rng, state, gpus, required, preferred, slices, unit, node_slice
    )


def sized_case(
    name: str,
    seed: int,
    rng: np.random.Generator,
    state: ClusterState,
    gpus: int,
    required: int,
    preferred: int,
    slices: list[tuple[int, int]],
    unit: int,
    node_slice: int = 1,
) -> MediumCase:
    """The gang of a case, sized from the state's room: 0.5-3.5 times the largest preferred
    domain's, at most 0.85 of the largest required domain's, in whole slices."""
    topology = state.topology
    probe = simple_request(1, gpus, node_slice=node_slice)
    room = np.array([pod_capacity(state, probe, n) for n in range(topology.n_nodes)])

    def largest(level: int) -> int:
        return int(np.bincount(topology.node_domain[level], weights=room).max())

    share = rng.uniform(0.5, 3.5) * largest(preferred)
    pods = int(min(share, 0.85 * largest(required))) // unit * unit
    request = simple_request(
        max(pods, unit),
        gpus,
        name=name,
        required=required,
        preferred=preferred,
        slices=slices,
        node_slice=node_slice,
    )
    return MediumCase(seed, state, request)


def deep_case(seed: int) -> MediumCase:
    """A state of `deep_state` and a gang: 1, 2 or 4 GPUs per pod; preferred zone, block or
    row; a required level above it, or none; sometimes rack slices, or block slices between the
    required level and preferred rows; larger than one preferred domain's room most often."""
    rng = np.random.default_rng(1_000 + seed)
    state = deep_state(rng)
    topology = state.topology
    gpus_per_node = int(topology.gpu_count[0])
    gpus = int(rng.choice([g for g in (1, 2, 4) if g <= gpus_per_node]))
    preferred = int(rng.choice([ZONE, BLOCK, BLOCK, ROW, ROW]))
    required = 0 if preferred == ZONE else int(rng.choice(range(preferred)))
    slices: list[tuple[int, int]] = []
    unit = 1
    shape = rng.random()
    if preferred == ROW and required < BLOCK and shape < 0.4:
        unit = int(rng.choice([2, 3, 4, 6]))
        slices.append((BLOCK, unit))
    elif shape < 0.6:
        unit = int(rng.choice([2, 3, 4]))
        slices.append((DEEP_RACK, unit))
    return sized_case(f"deep-{seed}", seed, rng, state, gpus, required, preferred, slices, unit)


# --- the exact solver ---------------------------------------------------------------------------


def least_profile(
    state: ClusterState, request: GangRequest, within: int | None = None
) -> tuple[int, ...] | None:
    """The lexicographically least (domains used at L, L+1, ..., innermost) over every
    placement of `request` (inside required domain `within`, if given), or None when none
    exists: a MILP per level, in order, each fixing the least count of the levels before it.

    Variables: per node, its pods in units of the node slice (integer); per domain at L and
    inside it, whether it is used (binary); per required domain, whether it holds the gang
    (binary); per domain of a slice level, its slices (integer). Slices hold for some pod order
    exactly when every domain of each slice level holds a multiple of its slice (the oracle's
    argument: depth-first order puts each domain's pods together, and sizes nest).
    """
    assert request.preferred is not None
    topology = state.topology
    unit = request.node_slice
    room = np.array(
        [pod_capacity(state, request, n) // unit for n in range(topology.n_nodes)], dtype=np.int64
    )
    if within is not None:
        room[topology.node_domain[request.required] != within] = 0
    nodes = np.flatnonzero(room)
    if int(room.sum()) * unit < request.pods:
        return None
    model = _Model()
    pods = model.integers(room[nodes])
    model.row(pods, np.full(nodes.size, unit), request.pods, request.pods)
    need = request.pods // unit

    def used_by(level: int) -> dict[int, int]:
        """Per domain of `level` holding room, a binary that must be 1 for it to hold pods."""
        domain_of = topology.node_domain[level][nodes]
        columns: dict[int, int] = {}
        for domain in np.unique(domain_of).tolist():
            members = pods[domain_of == domain]
            limit = min(int(room[nodes[domain_of == domain]].sum()), need)
            column = int(model.integers(np.array([1]))[0])
            model.row(
                np.append(members, column), np.append(np.ones(members.size), -limit), -np.inf, 0
            )
            columns[domain] = column
        return columns

    if request.required:
        chosen = used_by(request.required)
        model.row(np.array(list(chosen.values())), np.ones(len(chosen)), 1, 1)
    for level, size in request.slices:
        domain_of = topology.node_domain[level][nodes]
        for domain in np.unique(domain_of).tolist():
            members = pods[domain_of == domain]
            slices = model.integers(np.array([need]))[0]
            model.row(
                np.append(members, slices), np.append(np.ones(members.size), -(size // unit)), 0, 0
            )
    inner = range(request.preferred, len(topology.domain_levels))
    used = {level: used_by(level) for level in inner}
    profile: list[int] = []
    for columns in used.values():
        indicators = np.array(list(columns.values()), dtype=np.int64)
        least = model.minimise(indicators)
        if least is None:
            return None
        profile.append(least)
        model.row(indicators, np.ones(indicators.size), -np.inf, least)
    return tuple(profile)


class _Model:
    """A HiGHS MILP built column by column, then row by row; minimised stage after stage."""

    def __init__(self) -> None:
        self.highs = highspy.Highs()  # type: ignore[no-untyped-call]
        self.highs.setOptionValue("output_flag", False)
        self.highs.setOptionValue("mip_rel_gap", 0.0)
        self.highs.setOptionValue("threads", 1)
        self.columns = 0

    def integers(self, upper: IntArray) -> IntArray:
        """New integer columns in [0, upper], numbered from the last."""
        count = int(upper.size)
        first = self.columns
        self.highs.addVars(count, np.zeros(count), upper.astype(np.float64))
        index = np.arange(first, first + count, dtype=np.int32)
        self.highs.changeColsIntegrality(
            count, index, np.full(count, highspy.HighsVarType.kInteger)
        )
        self.columns += count
        return index.astype(np.int64)

    def row(
        self, columns: IntArray, values: NDArray[np.float64] | IntArray, lo: float, hi: float
    ) -> None:
        self.highs.addRow(
            float(lo),
            float(hi),
            int(columns.size),
            columns.astype(np.int32),
            np.asarray(values, dtype=np.float64),
        )

    def minimise(self, columns: IntArray) -> int | None:
        """The least sum of `columns` (0/1 indicators), or None when nothing is feasible."""
        costs = np.zeros(self.columns)
        costs[columns] = 1.0
        self.highs.changeColsCost(self.columns, np.arange(self.columns, dtype=np.int32), costs)
        self.highs.run()
        status = self.highs.getModelStatus()
        if status == highspy.HighsModelStatus.kInfeasible:
            return None
        assert status == highspy.HighsModelStatus.kOptimal, self.highs.modelStatusToString(status)
        return int(round(self.highs.getInfo().objective_function_value))


# --- what the table promises ----------------------------------------------------------------------


class Regime(Enum):
    """How far the search's exact plans reach, forced (or, for DEFAULT, as the limits fall)."""

    DEFAULT = "default limits"
    AMOUNT = "amount plan, limits lifted"
    COUNTS = "count plans alone"  # the amount plan's limit at 0
    GREEDY = "past every limit"


@contextmanager
def regime_in_force(regime: Regime, calls: list[bool]) -> Iterator[None]:
    """Limits set for `regime`; every answer of the least plans' cost check (the amount plan, or
    inside one L-domain the count plan one level further in) goes to `calls`."""
    check = FewestDomains.affordable

    def recorded(self: FewestDomains, level: int, domains: IntArray) -> bool:
        answer = regime is not Regime.GREEDY and check(self, level, domains)
        calls.append(answer)
        return answer

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FewestDomains, "affordable", recorded)
        if regime is Regime.AMOUNT:
            patch.setattr(fewest, "MAX_CELLS", 10**12)
            patch.setattr(fewest, "MAX_TABLES", 10**6)
        if regime is Regime.COUNTS:
            patch.setattr(fewest, "MAX_CELLS", 0)
        if regime is Regime.GREEDY:
            for limit in ("MAX_COUNT_CELLS", "MAX_RUN_CELLS", "MAX_EVERY_COUNT_CELLS"):
                patch.setattr(fewest_counts, limit, 0)
        yield


def guaranteed_levels(
    regime: Regime, calls: list[bool], least: tuple[int, ...], sliced_between: bool
) -> int:
    """How many leading levels (L, L+1, ...) docs/placement.md's table makes exact for a
    placement made under `regime` (`calls`: the least plans' cost check's answers).

    Every level when every plan asked for was within its limits: the amount plan, or, with one
    L-domain holding the gang, the count plan one level inside it. Else the count plans' rows.
    With several required domains, levels beyond L+1 are checked inside the chosen one (the
    table's first row), by the caller.
    """
    if regime is not Regime.GREEDY and all(calls):
        return len(least)
    if least[0] == 1:
        return min(2, len(least))  # one L-domain holds the gang: the fewest L+1 domains in it
    if regime is Regime.GREEDY:
        return 0 if sliced_between else 1
    return 1 if sliced_between else 2


def profile_of(state: ClusterState, placement: Placement, preferred: int) -> tuple[int, ...]:
    levels = range(preferred, len(state.topology.domain_levels))
    return tuple(placement.domains_used(state, level) for level in levels)


# --- the bound where the table says best effort ---------------------------------------------------


@dataclass(frozen=True)
class BestEffort:
    """Levels the table leaves to best effort for one placement, and `exact`, the deepest level
    above them whose count the table makes at most the least placement's count there: L + j - 1
    when the first j levels from L are exact, else (a slice layer between the required level
    and L, past every limit) the level just inside the required one, the greedy cover's."""

    exact: int
    levels: range

    def over_every_required_domain(self, request: GangRequest, profile: tuple[int, ...]) -> bool:
        """Whether the count at `exact` is the least over every required domain (the table's
        first row, e = L+1; or e = L with no slice layer between the required level and L), so
        that the bound holds against the least over all of them too."""
        preferred = request.preferred
        assert preferred is not None
        if self.exact == preferred + 1:
            return profile[0] == 1
        return self.exact == preferred and not sliced_between(request)

    def bounded_from(self, preferred: int) -> str:
        """Where the bound starts: "L+1", "L", or "above L" (a slice layer between)."""
        offset = self.exact - preferred
        return "above L" if offset < 0 else "L" if offset == 0 else "L+1"


def best_effort(
    regime: Regime, calls: list[bool], request: GangRequest, profile: tuple[int, ...]
) -> BestEffort | None:
    """The best-effort levels of a placement with `profile` made under `regime` (None: none).

    `profile[0] == 1` exactly when the least is 1 (the search takes one L-domain when one holds
    the gang), so the placement's own profile stands in for the least in `guaranteed_levels`."""
    preferred = request.preferred
    assert preferred is not None
    exact = guaranteed_levels(regime, calls, profile, sliced_between(request))
    if exact >= len(profile):
        return None
    above = preferred + exact - 1 if exact else request.required + 1
    return BestEffort(above, range(preferred + exact, preferred + len(profile)))


def sliced_between(request: GangRequest) -> bool:
    assert request.preferred is not None
    return request.granule(request.required + 1) != request.granule(request.preferred)


def bound_factor(state: ClusterState, placement: Placement, outer: int, inner: int) -> int:
    """M: the most domains at `inner` with room for one of the gang's pods (one node slice)
    under one domain at `outer` that `placement` uses."""
    topology, request = state.topology, placement.request
    room = [
        n for n in range(topology.n_nodes) if pod_capacity(state, request, n) >= request.node_slice
    ]
    used = set(topology.node_domain[outer][placement.allocation.nodes].tolist())
    under: dict[int, set[int]] = {}
    for node in room:
        under.setdefault(int(topology.node_domain[outer][node]), set()).add(
            int(topology.node_domain[inner][node])
        )
    return max(len(under.get(domain, ())) for domain in used)


def assert_within_the_bound(
    state: ClusterState,
    placement: Placement,
    effort: BestEffort,
    least: tuple[int, ...],
    where: str,
) -> None:
    """docs/placement.md's bound: at each best-effort level i, the count is at most M times the
    least (`least`, inside the chosen required domain), M = `bound_factor(effort.exact, i)`."""
    preferred = placement.request.preferred
    assert preferred is not None
    profile = profile_of(state, placement, preferred)
    for level in effort.levels:
        factor = bound_factor(state, placement, effort.exact, level)
        k = level - preferred
        assert profile[k] <= factor * least[k], (
            f"{where}: level {level}: {profile[k]} domains, past {factor} x the least "
            f"{least[k]} (profile {profile}, least {least}, exact at level {effort.exact})"
        )


POLICIES: tuple[PlacementPolicy, ...] = (BestFit(), Spread())


@pytest.mark.parametrize("seed", SEEDS)
def test_preferred_matches_the_exact_solver(seed: int) -> None:
    """Under every regime and policy: a valid placement exactly when one exists, and the least
    count of domains at every level the table makes exact."""
    assert_as_the_table_promises(medium_case(seed))


@pytest.mark.parametrize("seed", DEEP_SEEDS)
def test_deeper_levels_match_the_exact_solver(seed: int) -> None:
    """The same on four levels (zone > block > row > rack), where L+2 and L+3 lie inside the
    preferred level, and slice layers lie between the required level and L."""
    assert_as_the_table_promises(deep_case(seed))


def assert_as_the_table_promises(case: MediumCase) -> None:
    """Exact where the table says so; within the stated bound where it says best effort."""
    state, request = case.state, case.request
    assert request.preferred is not None
    least = least_profile(state, request)
    between = sliced_between(request)
    inside: dict[int, tuple[int, ...]] = {}  # the least inside each required domain chosen

    def least_inside(result: Placement) -> tuple[int, ...]:
        chosen = int(state.topology.node_domain[request.required][result.allocation.nodes[0]])
        if chosen not in inside:
            found = least_profile(state, request, within=chosen if request.required else None)
            assert found is not None
            inside[chosen] = found
        return inside[chosen]

    for regime, policy in [(r, p) for r in Regime for p in POLICIES]:
        calls: list[bool] = []
        with regime_in_force(regime, calls):
            result = place(state, request, policy)
        if least is None:
            assert isinstance(result, Unschedulable), f"{case}: placed, the solver finds none"
            continue
        assert isinstance(result, Placement), f"{case}: {result}"
        assert_valid_placement(state, request, result)
        profile = profile_of(state, result, request.preferred)
        exact = guaranteed_levels(regime, calls, least, between)
        expected = least
        if exact > 2 and least[0] == 1 and request.required:
            # One L-domain holds the gang: the fewest L+1 domains over every required domain,
            # further in the least inside the required domain the search chose.
            expected = least[:2] + least_inside(result)[2:]
        where = f"{case}, {regime.value}, {policy.name}"
        assert profile[:exact] == expected[:exact], f"{where}: {profile} against {expected}"
        effort = best_effort(regime, calls, request, profile)
        if effort is not None:
            assert_within_the_bound(state, result, effort, least_inside(result), where)
            if effort.over_every_required_domain(request, profile):
                assert_within_the_bound(state, result, effort, least, f"{where}, every domain")


def best_effort_kinds(case: MediumCase) -> Counter[str]:
    """Placements of `case` (every regime and policy) the table leaves to best effort, by the
    level the bound starts from: "L+1", "L" or "above L" (a slice layer between)."""
    state, request = case.state, case.request
    assert request.preferred is not None
    kinds: Counter[str] = Counter()
    for regime, policy in [(r, p) for r in Regime for p in POLICIES]:
        calls: list[bool] = []
        with regime_in_force(regime, calls):
            result = place(state, request, policy)
        if not isinstance(result, Placement):
            continue
        profile = profile_of(state, result, request.preferred)
        effort = best_effort(regime, calls, request, profile)
        if effort is not None:
            kinds[effort.bounded_from(request.preferred)] += 1
    return kinds


def test_the_cases_reach_every_best_effort_row() -> None:
    """The gangs above are checked against the bound wherever the table says best effort: they
    reach it from L+1 (levels two and three inside L), from L, and from above L (a slice layer
    between the required level and L), on three levels and on four."""
    medium = sum((best_effort_kinds(medium_case(seed)) for seed in SEEDS), Counter[str]())
    deep = sum((best_effort_kinds(deep_case(seed)) for seed in DEEP_SEEDS), Counter[str]())
    print(f"best effort: three levels {dict(medium)}, four levels {dict(deep)}")
    assert medium["L"] >= 20 and medium["L+1"] >= 10 and medium["above L"] >= 2, medium
    assert deep["L+1"] >= 20 and deep["L"] >= 20 and deep["above L"] >= 4, deep


# --- levels deeper than L+1 -----------------------------------------------------------------------


def one_block_racks(blocks: dict[str, tuple[str, list[int]]]) -> ClusterState:
    """A state of one-node racks: `blocks[name] = (zone, GPUs of each rack)`, all free."""
    nodes = [
        {"name": f"{block}{i}", "zone": zone, "block": block, "rack": f"{block}{i}", "gpus": gpus}
        for block, (zone, racks) in blocks.items()
        for i, gpus in enumerate(racks)
    ]
    cluster = {"levels": ["zone", "block", "rack"], "nodes": nodes}
    for node in nodes:
        node["gpu_model"] = "A"
    return ClusterState(topology_from_dict(cluster))


def zone_profiles(state: ClusterState, request: GangRequest) -> dict[Regime, tuple[int, ...]]:
    answers = {}
    for regime in (Regime.DEFAULT, Regime.COUNTS):
        with regime_in_force(regime, []):
            result = place(state, request)
        assert isinstance(result, Placement)
        answers[regime] = profile_of(state, result, ZONE)
    return answers


def test_one_zone_holding_the_gang_uses_the_fewest_racks_too() -> None:
    """5 one-GPU pods preferring zones, one zone: block a has racks of 2 + 2 GPUs, b one rack
    of 4, c one of 1. Two blocks are the least; b + c (or b + a) use 2 racks, the descent's
    a (the first of the two largest) + c uses 3. The amount plan inside the zone takes 2, and
    so does the count plan over blocks and racks in its stead."""
    state = one_block_racks({"a": ("z", [2, 2]), "b": ("z", [4]), "c": ("z", [1])})
    request = simple_request(5, 1, preferred=ZONE)
    assert least_profile(state, request) == (1, 2, 2)
    assert zone_profiles(state, request) == {Regime.DEFAULT: (1, 2, 2), Regime.COUNTS: (1, 2, 2)}
    with regime_in_force(Regime.GREEDY, []):
        result = place(state, request)
    assert isinstance(result, Placement) and profile_of(state, result, ZONE) == (1, 2, 3)


def test_levels_deeper_than_one_inside_l_by_counts_beyond_the_amount_plan() -> None:
    """The same blocks, each in a zone of its own: two zones and two blocks are the least, and
    2 racks (b + c). Beyond the amount plan the plan over three levels of counts finds them
    too; past every limit the racks stay as the greedy cover of zones leaves them (a + c: 3)."""
    state = one_block_racks({"a": ("a", [2, 2]), "b": ("b", [4]), "c": ("c", [1])})
    request = simple_request(5, 1, preferred=ZONE)
    assert least_profile(state, request) == (2, 2, 2)
    assert zone_profiles(state, request) == {Regime.DEFAULT: (2, 2, 2), Regime.COUNTS: (2, 2, 2)}
    with regime_in_force(Regime.GREEDY, []):
        result = place(state, request)
    assert isinstance(result, Placement) and profile_of(state, result, ZONE) == (2, 2, 3)


# --- the solver itself, against brute force ------------------------------------------------------


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.one_of(
        random_cases(large_jobs=True, with_preferred=True),
        random_cases(large_jobs=True, with_preferred=True, spanning=True, sliced_above=True),
    )
)
def test_the_solver_agrees_with_brute_force_on_small_clusters(case: RandomCase) -> None:
    """The MILP's least profile is the oracle's, on the oracle's random clusters (any resources,
    health, GPU models and slices)."""
    state, request, labels = case.build()
    assert least_profile(state, request) == brute_force(state, request, labels, True).profile
