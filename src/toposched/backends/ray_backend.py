"""A backend that runs each gang on a Ray cluster, every pod on the node toposched chose.

A launch becomes one detached placement group named `toposched:<job>:<attempt>` (in the
driver's Ray namespace) with a bundle per node of the gang, each bundle held to its node by a
label selector on the node's `ray.io/node-id` and sized to the GPUs of the gang's pods there,
and in each bundle one detached actor (`toposched.backends.ray_pod.PodsActor`, named
`toposched:<job>:<attempt>:<bundle>`) that runs those pods. Once every actor is in place, each
starts its pods' commands with the environment the local backend gives (`toposched.payload`
reads it), the rendezvous address being rank 0's node.

Calls to the actors are never waited on: each poll takes whichever answers arrived
(`ray.wait` with no timeout). A pod whose actor dies (its node was lost) has failed; a gang
fails as a whole, its other pods stopped with `gang_grace_s`. A stop asks every actor to send
SIGTERM and to kill its pods once the grace period is over; the final report (`EVICTED`,
`STOPPED`, `FAILED`, `FINISHED`) comes once every pod is gone and the placement group is
removed, so the GPUs are free in Ray when the service hears of it.

Being detached, the placement groups and actors outlive the service. A backend made after a
restart finds them by name and adopts them (`running()`); the actors hold each pod's exit
status, checkpoint lines and the stop under way. A gang that ended while the service was down
is reported at the first poll.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from toposched import payload
from toposched.backends.local import pod_environment
from toposched.backends.pod_files import PodExit
from toposched.backends.protocol import (
    Launch,
    NodeChange,
    PodLaunch,
    Report,
    ReportKind,
    RunningJob,
    RunSpec,
    Stop,
)
from toposched.backends.ray_discovery import NODE_ID_LABEL, RayCluster
from toposched.backends.ray_pod import (
    HostPlace,
    HostStatus,
    PodsActor,
    PodSpec,
    checkpoint_note,
)
from toposched.backends.stopping import Stopping, final_report
from toposched.cluster.errors import InputError
from toposched.cluster.state import MILLI_PER_GPU
from toposched.cluster.topology import Topology

__all__ = [
    "DEFAULT_GANG_GRACE",
    "DEFAULT_PLACE_TIMEOUT",
    "GROUP_PREFIX",
    "RayBackend",
    "actor_name",
    "group_name",
    "parse_group_name",
]

log = logging.getLogger(__name__)

GROUP_PREFIX = "toposched"
DEFAULT_GANG_GRACE = 10.0
"""Seconds the other pods of a failed gang get between SIGTERM and the hard stop."""
DEFAULT_PLACE_TIMEOUT = 300.0
"""Seconds a gang may wait for its placement group before it fails."""
WATCH_S = 5.0
"""How long one status call may wait on an actor for news."""
_ACTOR_THREADS = 4
"""Calls an actor serves at once: a status call may wait while a stop arrives."""


def group_name(job_id: str, attempt: int) -> str:
    """The name of an attempt's placement group (the job id percent-encoded)."""
    return f"{GROUP_PREFIX}:{quote(job_id, safe='')}:{attempt}"


def actor_name(job_id: str, attempt: int, bundle: int) -> str:
    """The name of the actor in bundle `bundle` of an attempt's placement group."""
    return f"{group_name(job_id, attempt)}:{bundle}"


def parse_group_name(name: str) -> tuple[str, int] | None:
    """(job id, attempt) of a placement group named by `group_name`, else None."""
    parts = name.split(":")
    if len(parts) != 3 or parts[0] != GROUP_PREFIX or not parts[2].isdigit():
        return None
    return unquote(parts[1]), int(parts[2])


class _Phase(Enum):
    PLACING = "placing"
    """Waiting for the placement group and the actors."""
    LAUNCHING = "launching"
    """Every actor in place; their commands are being started."""
    RUNNING = "running"


class _Call(Enum):
    PLACE = "place"
    LAUNCH = "launch"
    WATCH = "watch"


@dataclass
class _Host:
    """The gang's pods on one node: one bundle of the placement group, one actor."""

    index: int
    """The bundle's index, and the last part of the actor's name."""
    actor: Any
    """The actor's handle; None when it is gone (found missing after a restart)."""
    node_id: str
    ranks: tuple[int, ...] | None
    """None until a host adopted after a restart answers."""
    place: HostPlace | None = None
    launched: bool = False
    lost: str | None = None
    """Why every pod of the host is gone with its actor."""
    logs: dict[int, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        ranks = "?" if self.ranks is None else ",".join(map(str, self.ranks))
        return f"pods {ranks}" if self.ranks is None or len(self.ranks) > 1 else f"pod {ranks}"


@dataclass
class _Gang:
    """One attempt of a job on Ray."""

    job_id: str
    attempt: int
    group: Any
    """The placement group."""
    hosts: list[_Host]
    launch: Launch | None
    """None for a gang adopted after a restart (it runs already)."""
    phase: _Phase
    created: float
    stopping: Stopping | None = None
    checkpoint: str | None = None
    """The latest checkpoint note not yet reported."""
    ended: dict[int, PodExit] = field(default_factory=dict)
    done: bool = False

    def host_over(self, host: _Host) -> bool:
        if host.lost is not None:
            return True
        return host.ranks is not None and all(rank in self.ended for rank in host.ranks)

    def over(self) -> bool:
        """Whether every pod is gone."""
        return all(self.host_over(host) for host in self.hosts)

    def failure(self) -> str | None:
        """What failed the gang first (the lowest rank that failed), if anything did."""
        failed = sorted(r for r, e in self.ended.items() if e.returncode != 0)
        if failed:
            return self.ended[failed[0]].describe(failed[0])
        lost = [host for host in self.hosts if host.lost is not None]
        return f"{lost[0].label}: {lost[0].lost}" if lost else None


@dataclass
class _Waiting:
    """Outstanding actor calls: which gang, pod and call each reference answers."""

    calls: dict[Any, tuple[_Gang, _Host, _Call]] = field(default_factory=dict)


def _bundle(pods: Sequence[PodLaunch]) -> dict[str, float]:
    """The resources the bundle of a node's pods reserves: their GPUs (a share for a fractional
    pod), or one CPU when they have none (Ray needs a bundle to reserve something)."""
    milli = sum(
        pod.gpu_milli if pod.gpu_milli < MILLI_PER_GPU else len(pod.gpus) * MILLI_PER_GPU
        for pod in pods
        if pod.gpus
    )
    return {"GPU": milli / MILLI_PER_GPU} if milli else {"CPU": 1.0}


def _by_node(pods: Sequence[PodLaunch]) -> list[list[PodLaunch]]:
    """The pods grouped by node, nodes in the order of their lowest rank."""
    groups: dict[str, list[PodLaunch]] = {}
    for pod in sorted(pods, key=lambda p: p.rank):
        groups.setdefault(pod.node, []).append(pod)
    return list(groups.values())


def _run_problem(run: RunSpec | None) -> str | None:
    if run is None:
        return "nothing to run: the job has no run command (the Ray backend needs one)"
    if not run.command:
        return "nothing to run: run.command is empty"
    return None


class RayBackend:
    """Runs gangs on the Ray cluster `cluster` describes (the driver connected to it, see
    `toposched.backends.ray_discovery.connect`, and `cluster.discover()` called).

    `gang_grace_s`: seconds between SIGTERM and the hard stop for the other pods of a failed
    gang. `place_timeout_s`: how long a gang may wait for its placement group. `clock`:
    monotonic seconds.
    """

    def __init__(
        self,
        cluster: RayCluster,
        gang_grace_s: float = DEFAULT_GANG_GRACE,
        place_timeout_s: float = DEFAULT_PLACE_TIMEOUT,
        watch_s: float = WATCH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        import ray

        if not gang_grace_s >= 0:
            raise InputError("gang_grace_s", gang_grace_s, "must be a number of seconds >= 0")
        if not place_timeout_s > 0:
            raise InputError("place_timeout_s", place_timeout_s, "must be a number of seconds > 0")
        if not ray.is_initialized():
            raise InputError("ray", "not connected", "connect to the Ray cluster first")
        self.cluster = cluster
        self.gang_grace_s = gang_grace_s
        self.place_timeout_s = place_timeout_s
        self.watch_s = watch_s
        self.namespace = str(ray.get_runtime_context().namespace)
        self._clock = clock
        self._gangs: dict[str, _Gang] = {}
        self._waiting = _Waiting()
        self._reports: list[Report] = []
        self._actor_class = ray.remote(PodsActor)
        self._recover()

    # The protocol.

    def start(self, launch: Launch) -> None:
        """Reserve the pods' places and create their actors; a launch that cannot be carried
        out (no command, a node Ray does not have) becomes a `FAILED` report.

        The attempt that runs already is not launched again; another attempt of a running job
        is refused with an InputError.
        """
        current = self._gangs.get(launch.job_id)
        if current is not None and current.attempt == launch.attempt:
            return
        if current is not None:
            raise InputError(
                "job_id", launch.job_id, f"is already running (attempt {current.attempt})"
            )
        problem = _run_problem(launch.run)
        node_ids: list[str] = []
        for pods in _by_node(launch.pods):
            node = self.cluster.node(pods[0].node)
            if problem is None and (node is None or not node.alive):
                problem = f"pod {pods[0].rank}: node {pods[0].node!r} is not a live Ray node"
            node_ids.append("" if node is None else node.node_id)
        if problem is None:
            try:
                self._create(launch, node_ids)
                return
            except Exception as error:  # Ray's errors have no common base for bad requests.
                problem = f"Ray refused the placement: {error}"
        self._reports.append(Report(launch.job_id, launch.attempt, ReportKind.FAILED, 0.0, problem))

    def stop(self, stop: Stop) -> None:
        """Ask every pod to stop: SIGTERM now, the hard stop after `grace_s`. A stop of an
        attempt that is not running changes nothing."""
        if not stop.grace_s >= 0:
            raise InputError("grace_s", stop.grace_s, "must be a number of seconds >= 0")
        gang = self._gangs.get(stop.job_id)
        if gang is None or gang.attempt != stop.attempt:
            return
        kind = ReportKind.EVICTED if stop.evicted else ReportKind.STOPPED
        if gang.stopping is None:
            self._begin_stop(gang, kind, stop.grace_s, "")
        elif gang.stopping.kind is not ReportKind.FAILED:
            self._signal(gang, gang.stopping.kind, stop.grace_s)

    def poll(self, now: float) -> Sequence[Report]:
        reports = [Report(r.job_id, r.attempt, r.kind, now, r.detail) for r in self._reports]
        self._reports.clear()
        self._take_answers()
        for gang in list(self._gangs.values()):
            reports.extend(self._advance(gang, now))
        return reports

    def running(self) -> Sequence[RunningJob]:
        return [RunningJob(g.job_id, g.attempt) for g in self._gangs.values()]

    def log_path(self, job_id: str, rank: int) -> str | None:
        """The pod's output, when its node shares this machine's file system."""
        gang = self._gangs.get(job_id)
        if gang is None:
            return None
        logs = [host.logs[rank] for host in gang.hosts if rank in host.logs]
        return logs[0] if logs and os.path.isfile(logs[0]) else None

    def close(self) -> None:
        """Stop watching; the gangs keep running on Ray and a later backend adopts them."""

    # Beyond the protocol.

    def node_changes(self) -> Sequence[NodeChange]:
        """Nodes of the cluster model that died or came back since the last call."""
        return self.cluster.changes()

    def grown_model(self) -> Topology | None:
        """The cluster model with the labelled nodes that joined since the last call."""
        return self.cluster.grown()

    def stop_orphans(
        self, known: Collection[tuple[str, int]], grace_s: float = 0.0
    ) -> list[RunningJob]:
        """Cancel every gang Ray runs whose (job id, attempt) is not in `known` (e.g. what the
        service's store says runs, after a restart); the gangs it stopped."""
        orphans = [g for g in self._gangs.values() if (g.job_id, g.attempt) not in known]
        for gang in orphans:
            self.stop(Stop(gang.job_id, gang.attempt, grace_s, evicted=False))
        return [RunningJob(g.job_id, g.attempt) for g in orphans]

    # Starting.

    def _create(self, launch: Launch, node_ids: list[str]) -> None:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        by_node = _by_node(launch.pods)
        group = placement_group(
            [_bundle(pods) for pods in by_node],
            strategy="PACK",
            name=group_name(launch.job_id, launch.attempt),
            lifetime="detached",
            bundle_label_selector=[{NODE_ID_LABEL: node_id} for node_id in node_ids],
        )
        gang = _Gang(
            launch.job_id, launch.attempt, group, [], launch, _Phase.PLACING, self._clock()
        )
        self._gangs[launch.job_id] = gang
        for index, (pods, node_id) in enumerate(zip(by_node, node_ids, strict=True)):
            bundle = _bundle(pods)
            ranks = tuple(pod.rank for pod in pods)
            actor = self._actor_class.options(
                name=actor_name(launch.job_id, launch.attempt, index),
                namespace=self.namespace,
                lifetime="detached",
                num_cpus=bundle.get("CPU", 0.0),
                num_gpus=bundle.get("GPU", 0.0),
                max_concurrency=_ACTOR_THREADS,
                max_restarts=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    group, placement_group_bundle_index=index
                ),
            ).remote(launch.job_id, launch.attempt, ranks)
            host = _Host(index, actor, node_id, ranks)
            gang.hosts.append(host)
            self._call(gang, host, _Call.PLACE)

    def _call(self, gang: _Gang, host: _Host, call: _Call) -> None:
        if call is _Call.PLACE:
            ref = host.actor.place.remote()
        elif call is _Call.WATCH:
            ref = host.actor.watch.remote(self.watch_s)
        else:
            assert gang.launch is not None and gang.launch.run is not None
            run = gang.launch.run
            specs = [
                PodSpec(
                    pod.rank, run.command, self._environment(gang, gang.launch, pod), run.workdir
                )
                for pod in gang.launch.pods
                if host.ranks is not None and pod.rank in host.ranks
            ]
            ref = host.actor.launch.remote(specs)
        self._waiting.calls[ref] = (gang, host, call)

    def _environment(self, gang: _Gang, launch: Launch, pod: PodLaunch) -> dict[str, str]:
        """The job's `run.env`, then what the local backend sets, the gang meeting at rank 0's
        node, and every pod's node address."""
        address: dict[int, HostPlace] = {}
        for host in gang.hosts:
            assert host.place is not None and host.ranks is not None
            address.update((rank, host.place) for rank in host.ranks)
        first = address[min(address)]
        assert launch.run is not None
        env = dict(launch.run.env)
        env.update(pod_environment(launch, pod, Path(os.devnull), first.port))
        env["MASTER_ADDR"] = first.address
        env[payload.PEER_ADDRESSES] = ",".join(address[rank].address for rank in sorted(address))
        return env

    # Watching.

    def _take_answers(self) -> None:
        """Handle every actor call that answered since the last poll, without waiting."""
        import ray

        refs = list(self._waiting.calls)
        if not refs:
            return
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=True)
        for ref in ready:
            gang, host, call = self._waiting.calls.pop(ref)
            if gang.done:
                continue
            try:
                answer = ray.get(ref)
            except ray.exceptions.RayError as error:
                self._host_lost(gang, host, error)
                continue
            if call is _Call.PLACE:
                self._placed(gang, host, answer)
            elif call is _Call.LAUNCH:
                host.launched = True
                self._call(gang, host, _Call.WATCH)
            else:
                self._watched(gang, host, answer)

    def _host_lost(self, gang: _Gang, host: _Host, error: Exception) -> None:
        text = str(error).strip()
        why = text.splitlines()[0] if text else type(error).__name__
        host.lost = f"its Ray actor died ({why})"
        for rank in host.ranks or ():
            gang.ended.setdefault(rank, PodExit(-9, host.lost))

    def _placed(self, gang: _Gang, host: _Host, place: HostPlace) -> None:
        host.place = place
        if place.node_id != host.node_id:
            host.lost = f"landed on Ray node {place.node_id}, not {host.node_id}"
            return
        if gang.phase is _Phase.PLACING and all(h.place is not None for h in gang.hosts):
            gang.phase = _Phase.LAUNCHING
            for each in gang.hosts:
                self._call(gang, each, _Call.LAUNCH)

    def _watched(self, gang: _Gang, host: _Host, status: HostStatus) -> None:
        host.ranks = status.ranks
        if status.checkpoints:
            gang.checkpoint = checkpoint_note(status.checkpoints[-1])
        if gang.stopping is None and status.stop_kind is not None:
            # Adopted after a restart: the stop was asked of an earlier backend.
            gang.stopping = Stopping(ReportKind(status.stop_kind), 0.0)
        if gang.stopping is not None and status.killed:
            gang.stopping.killed = True
        for pod in status.pods:
            host.logs[pod.rank] = pod.log
            if pod.returncode is not None:
                gang.ended.setdefault(pod.rank, PodExit(pod.returncode, pod.detail))
        if not status.launched:
            host.lost = "was never started (the service stopped while starting it)"
        elif not gang.host_over(host):
            self._call(gang, host, _Call.WATCH)

    def _advance(self, gang: _Gang, now: float) -> list[Report]:
        """The gang's reports at this poll, and its stop or end once due."""
        reports: list[Report] = []
        if gang.phase is _Phase.LAUNCHING and all(h.launched for h in gang.hosts):
            gang.phase = _Phase.RUNNING
            reports.append(Report(gang.job_id, gang.attempt, ReportKind.STARTED, now))
        if gang.checkpoint is not None:
            reports.append(
                Report(gang.job_id, gang.attempt, ReportKind.CHECKPOINTED, now, gang.checkpoint)
            )
            gang.checkpoint = None
        if gang.stopping is None:
            failure = gang.failure()
            if failure is not None:
                self._begin_stop(gang, ReportKind.FAILED, self.gang_grace_s, failure)
        if gang.phase is _Phase.PLACING and gang.stopping is None:
            if self._clock() - gang.created > self.place_timeout_s:
                detail = (
                    f"Ray did not place the pods within {self.place_timeout_s:g} s "
                    "(are their nodes busy with work toposched does not know of?)"
                )
                self._begin_stop(gang, ReportKind.FAILED, 0.0, detail)
        placing = gang.phase is _Phase.PLACING and gang.stopping is not None
        if placing or gang.over():
            reports.append(self._finish(gang, now))
        return reports

    def _begin_stop(self, gang: _Gang, kind: ReportKind, grace_s: float, detail: str) -> None:
        gang.stopping = Stopping(kind, grace_s, detail)
        if gang.phase is not _Phase.PLACING:
            self._signal(gang, kind, grace_s)

    def _signal(self, gang: _Gang, kind: ReportKind, grace_s: float) -> None:
        for host in gang.hosts:
            if not gang.host_over(host):
                host.actor.stop.remote(kind.value, grace_s)

    def _finish(self, gang: _Gang, now: float) -> Report:
        """Remove the gang from Ray (its GPUs free again), then its final report."""
        self._teardown(gang)
        started = gang.phase is not _Phase.PLACING
        return final_report(gang.stopping, gang.job_id, gang.attempt, now, started)

    def _teardown(self, gang: _Gang) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        gang.done = True
        del self._gangs[gang.job_id]
        for host in gang.hosts:
            if host.actor is None:
                continue
            try:
                ray.kill(host.actor, no_restart=True)
            except (ValueError, ray.exceptions.RayError):
                pass
        try:
            remove_placement_group(gang.group)
        except (ValueError, ray.exceptions.RayError) as error:
            log.warning("placement group of %s was not removed: %s", gang.job_id, error)

    # Recovery.

    def _recover(self) -> None:
        """Adopt every gang an earlier backend left on Ray (found by its placement group)."""
        import ray
        from ray.util.placement_group import get_placement_group, placement_group_table

        for info in placement_group_table().values():
            parsed = parse_group_name(str(info.get("name", "")))
            if parsed is None or info.get("state") == "REMOVED":
                continue
            job_id, attempt = parsed
            group = get_placement_group(info["name"])
            hosts: list[_Host] = []
            placed = info.get("bundles_to_node_id", {})
            for index in range(len(info.get("bundles", {}))):
                try:
                    actor = ray.get_actor(actor_name(job_id, attempt, index), self.namespace)
                except ValueError:
                    actor = None
                host = _Host(index, actor, str(placed.get(index, "")), None, launched=True)
                if actor is None:
                    host.lost = "its Ray actor is gone"
                hosts.append(host)
            gang = _Gang(job_id, attempt, group, hosts, None, _Phase.RUNNING, self._clock())
            self._gangs[job_id] = gang
            if info.get("state") != "CREATED":
                gang.phase = _Phase.PLACING
                detail = "was still being placed when the service stopped"
                gang.stopping = Stopping(ReportKind.FAILED, 0.0, detail)
                continue
            for host in hosts:
                if host.lost is None:
                    self._call(gang, host, _Call.WATCH)
