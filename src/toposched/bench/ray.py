"""The Ray backend's speed on a local Ray cluster: a 16-pod gang from Bind to running, and from
Evict to its GPUs reusable, next to what Ray itself takes to reserve the same gang.

The suite starts its own cluster on this machine (4 nodes of 4 pretend GPUs in two racks, on
loopback; about half a minute) and stops it after. Each pod runs `sleep`, so the figures are
the backend's and Ray's own costs: a placement group pinned to the chosen nodes, one actor
process per node of the gang, the commands started, and on eviction the pods signalled, gone,
and the placement group removed. Next to them: Ray's own placement group for the same gang,
and that group with an actor per bundle, as a gang of Ray actors would be started.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from toposched.bench.harness import Measurement, nearest_rank
from toposched.cluster.errors import ToposchedError

NODES = {"n1": "r1", "n2": "r1", "n3": "r2", "n4": "r2"}
GPUS_PER_NODE = 4
PODS = 16
TIMEOUT_S = 300.0


def _measurement(name: str, timings: list[float], note: str = "") -> Measurement:
    ordered = sorted(timings)
    return Measurement(
        name=name,
        runs=len(ordered),
        median_s=statistics.median(ordered),
        p90_s=nearest_rank(ordered, 0.9),
        min_s=ordered[0],
        note=note,
        first_s=timings[0],
    )


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            raise ToposchedError(f"ray bench: {what} did not happen within {TIMEOUT_S:g} s")
        time.sleep(0.005)


def run_ray_benchmarks(quick: bool = False) -> list[Measurement]:
    """Bind -> running, Evict -> reusable, and Ray's own placement-group creation."""
    import ray

    from toposched.backends.ray_discovery import connect
    from toposched.backends.ray_local import LocalRayCluster

    cluster = LocalRayCluster()
    try:
        for name, rack in NODES.items():
            cluster.add_node(name, {"rack": rack}, gpus=GPUS_PER_NODE)
        connect(cluster.address)
        return _run(rounds=1 if quick else 3)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.stop()


def _run(rounds: int) -> list[Measurement]:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from toposched.backends.protocol import Launch, PodLaunch, ReportKind, RunSpec, Stop
    from toposched.backends.ray_backend import RayBackend
    from toposched.backends.ray_discovery import NODE_ID_LABEL, RayCluster

    probe = ray.remote(_ProbeActor)
    model = RayCluster(["rack"])
    model.discover()
    backend = RayBackend(model, watch_s=1.0)
    names = list(NODES)
    pods = tuple(
        PodLaunch(rank, names[rank // GPUS_PER_NODE], (rank % GPUS_PER_NODE,))
        for rank in range(PODS)
    )
    selectors = []
    for pod in pods:
        node = model.node(pod.node)
        assert node is not None
        selectors.append({NODE_ID_LABEL: node.node_id})
    bind: list[float] = []
    evict: list[float] = []
    reusable: list[float] = []
    ray_group: list[float] = []
    ray_actors: list[float] = []
    seen: set[ReportKind] = set()

    def reported(kind: ReportKind) -> Callable[[], bool]:
        def check() -> bool:
            seen.update(report.kind for report in backend.poll(time.time()))
            return kind in seen

        return check

    for number in range(rounds):
        job_id = f"bench-{number}"
        seen.clear()
        begin = time.perf_counter()
        backend.start(Launch(job_id, 1, pods, RunSpec(("sleep", "600"))))
        _until(reported(ReportKind.STARTED), "all pods running")
        bind.append(time.perf_counter() - begin)
        begin = time.perf_counter()
        backend.stop(Stop(job_id, 1, grace_s=10.0, evicted=True))
        _until(reported(ReportKind.EVICTED), "the eviction")
        evict.append(time.perf_counter() - begin)
        # The same GPUs reserved again by Ray: the capacity is reusable.
        group = placement_group(
            [{"GPU": 1.0}] * PODS, bundle_label_selector=selectors, name=f"reuse-{number}"
        )
        _until(_ready(group.ready()), "the GPUs' reuse")
        reusable.append(time.perf_counter() - begin)
        remove_placement_group(group)
        _until(_gpus_free, "the GPUs' return")
        begin = time.perf_counter()
        group = placement_group(
            [{"GPU": 1.0}] * PODS, bundle_label_selector=selectors, name=f"ray-{number}"
        )
        _until(_ready(group.ready()), "Ray's placement group")
        ray_group.append(time.perf_counter() - begin)
        actors = [
            probe.options(
                num_gpus=1,
                num_cpus=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    group, placement_group_bundle_index=index
                ),
            ).remote()
            for index in range(PODS)
        ]
        _until(_ready([actor.ping.remote() for actor in actors]), "Ray's actors")
        ray_actors.append(time.perf_counter() - begin)
        for actor in actors:
            ray.kill(actor)
        remove_placement_group(group)
        _until(_gpus_free, "the GPUs' return")
    gang = f"{PODS} pods x 1 GPU on 4 nodes"
    return [
        _measurement(
            f"Bind -> all pods running ({gang})",
            bind,
            "placement group, one actor per node, commands started",
        ),
        _measurement(f"Evict -> EVICTED reported ({gang})", evict, "pods gone, group removed"),
        _measurement(
            f"Evict -> the same GPUs reserved again in Ray ({gang})",
            reusable,
            "EVICTED, then a new placement group on them ready",
        ),
        _measurement(
            f"Ray alone: placement group ready ({PODS} bundles pinned to nodes)",
            ray_group,
            "no actors, nothing started",
        ),
        _measurement(
            f"Ray alone: placement group and an actor per bundle answering ({PODS} bundles)",
            ray_actors,
            "what Ray's own gang of actors costs",
        ),
    ]


def _ready(refs: object) -> Callable[[], bool]:
    """Whether Ray object `refs` (one or a list) are ready, asked without waiting."""
    import ray

    every = refs if isinstance(refs, list) else [refs]

    def check() -> bool:
        ready, _ = ray.wait(every, num_returns=len(every), timeout=0)
        return len(ready) == len(every)

    return check


def _gpus_free() -> bool:
    import ray

    return bool(ray.available_resources().get("GPU", 0) >= len(NODES) * GPUS_PER_NODE)


class _ProbeActor:
    """The smallest actor: Ray's own cost of a process per bundle."""

    def ping(self) -> bool:
        return True
