"""The discrete-event simulator: a clock and a simulated backend around an unmodified scheduler."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from toposched.cluster.errors import InputError
from toposched.cluster.state import ClusterState
from toposched.cluster.units import DAY, HOUR
from toposched.policy.budget import BudgetTree
from toposched.scheduler.collection import TurnCollector
from toposched.sim.backend import SimulatedBackend
from toposched.sim.events import EventKind, EventQueue, Handler
from toposched.sim.meter import Meter
from toposched.sim.progress import ProgressBoard, ProgressReading, ProgressSink
from toposched.sim.protocol import SchedulerFactory, SchedulerLike, toposched_scheduler
from toposched.sim.records import SimulationResult
from toposched.sim.topology_price import Pricing, TopologyPrice
from toposched.workloads.model import Workload

__all__ = [
    "DEFAULT_SAMPLE_INTERVAL",
    "SchedulerFactory",
    "SchedulerLike",
    "Simulation",
    "simulate",
    "toposched_scheduler",
]

DEFAULT_SAMPLE_INTERVAL = HOUR
# A run reports its progress (when asked to) every this many batches of events.
_PROGRESS_EVERY = 100


class Simulation:
    """Replays a workload through a scheduler, jumping from event to event.

    The simulator owns the clock and plays the backend: it submits jobs when they arrive,
    starts bound jobs at once, ends them after their actual runtime, lets evicted jobs go after
    their grace period, takes nodes down and brings them back. After each instant's events it
    runs one scheduler cycle. Nothing here reads a wall clock except to measure the scheduler,
    so a run is a pure function of the workload.
    """

    def __init__(
        self,
        workload: Workload,
        scheduler_factory: SchedulerFactory = toposched_scheduler,
        *,
        horizon: float | None = None,
        sample_interval: float = DEFAULT_SAMPLE_INTERVAL,
        progress: bool | ProgressSink = False,
        scheduler_name: str | None = None,
        cycle_interval: float = 0.0,
        topology_price: TopologyPrice | None = None,
    ) -> None:
        if not math.isfinite(sample_interval) or sample_interval <= 0:
            raise InputError("sample_interval", sample_interval, "must be a number of seconds > 0")
        if not math.isfinite(cycle_interval) or cycle_interval < 0:
            raise InputError("cycle_interval", cycle_interval, "must be a number of seconds >= 0")
        self.workload = workload
        self.cycle_interval = cycle_interval
        """Minimum simulated seconds between cycles; 0 runs one after every instant with
        events, as an event-driven scheduler does. Events between cycles still apply at once."""
        self.topology_price = topology_price
        """Runs of jobs with topology constraints slow down when spread beyond them; None: free."""
        self.scheduler_factory = scheduler_factory
        self.horizon = horizon if horizon is not None else workload.horizon
        self.sample_interval = sample_interval
        self.progress = progress
        """True: a progress bar on stderr; a sink: the run's readings sent there instead (a
        worker process sends them to the process drawing the bars); False: none."""
        self.scheduler_name = scheduler_name

    def run(self) -> SimulationResult:
        return _Run(self).execute()


def simulate(
    workload: Workload,
    scheduler_factory: SchedulerFactory = toposched_scheduler,
    **options: Any,
) -> SimulationResult:
    """Run `workload` through the scheduler `scheduler_factory` builds; see `Simulation`."""
    return Simulation(workload, scheduler_factory, **options).run()


class _Run:
    """One simulation run: the clock, its events, and the scheduler's cycles."""

    def __init__(self, simulation: Simulation) -> None:
        workload = simulation.workload
        self.simulation = simulation
        self.workload = workload
        self.horizon = simulation.horizon
        state = ClusterState(workload.topology)
        tree = BudgetTree.from_dict(workload.budget)
        self.scheduler = simulation.scheduler_factory(state, tree)
        self.name = simulation.scheduler_name or type(self.scheduler).__name__.lower()
        price = simulation.topology_price
        pricing = Pricing(price, workload.topology) if price is not None else None
        self.events = EventQueue()
        self.backend = SimulatedBackend(workload, self.scheduler, tree, self.events, pricing)
        self.meter = Meter(state, self.backend)
        self.cycle_seconds: list[float] = []
        self.scheduler_cpu_seconds = 0.0
        self.last_cycle = -math.inf
        self.cycle_pending = False

    # --- the loop ------------------------------------------------------------------------------
    def execute(self) -> SimulationResult:
        start = 0.0  # workload times are >= 0: the clock starts at 0
        self.meter.now = start
        wall_start = time.perf_counter()
        interrupted = False
        # Collected between instants as the service's loop collects between turns
        # (`scheduler/collection.py`): no pass over the lasting state inside a cycle.
        collector = TurnCollector()
        collector.start()
        try:
            # Inside the stop's reach: a run of many jobs is stopped, with what it simulated
            # (nothing yet), while it queues them too.
            self.events.push_many(
                EventKind.SUBMISSION,
                ((job.submit_time, index) for index, job in enumerate(self.workload.jobs)),
            )
            self.events.push_many(
                EventKind.FAILURE,
                ((failure.time, index) for index, failure in enumerate(self.workload.failures)),
            )
            self.events.push(start, EventKind.SAMPLE, None)
            self.meter.measure()
            collector.freeze()  # the fleet, the workload and its queued events
            wall_start = time.perf_counter()
            self._loop(self._handlers(), collector)
        except KeyboardInterrupt:
            interrupted = True
        except SystemError as error:
            # A stop that came while compiled code ran reaches here wrapped by numba.
            if not stopped_inside(error):
                raise
            interrupted = True
        finally:
            # The run's objects back in the collector's sight: the process may go on.
            collector.stop(thaw=True)
        wall = time.perf_counter() - wall_start
        horizon = self.horizon
        end = horizon if horizon is not None and not interrupted else self.meter.now
        self.meter.integrate(end)
        self.backend.close(end)
        result = self._result(start, end, wall, interrupted)
        if interrupted:
            raise SimulationInterrupted(result)
        return result

    def _handlers(self) -> list[Handler | None]:
        """Each event kind's handler, indexed by kind, but samples': it returns whether a cycle
        is due."""
        backend = self.backend
        handlers: dict[EventKind, Handler] = {
            EventKind.COMPLETION: backend.on_completion,
            EventKind.GRACE_END: backend.on_grace_end,
            EventKind.REPAIR: backend.on_repair,
            EventKind.FAILURE: backend.on_failure,
            EventKind.CANCEL: backend.on_cancel,
            EventKind.SUBMISSION: backend.on_submission,
            EventKind.PROTECTION_END: backend.on_protection_end,
            EventKind.CHECKPOINT: backend.on_checkpoint,
            EventKind.CYCLE: self._postponed_cycle,
        }
        return [handlers.get(kind) for kind in EventKind]

    def _loop(self, handlers: list[Handler | None], collector: TurnCollector) -> None:
        events, meter, backend = self.events, self.meter, self.backend
        counts = backend.counts
        between_turns = collector.between_turns
        horizon = self.horizon
        handle_at = events.handle_at
        # The rates read last hold until the state, the backend's world or its binds change:
        # an instant of checkpoints alone leaves them as they were.
        state = self.meter.state
        measured: tuple[int, int, int] | None = None
        with self._progress() as advance:
            while events:
                now = events.next_time()
                if horizon is not None and now >= horizon:
                    break
                if horizon is None and not events.live:
                    break  # only samples are left: the run is over
                meter.integrate(now)
                changed, sample = handle_at(now, handlers)
                if changed:
                    self._maybe_cycle(now)
                counts["batches"] += 1
                seen = (state.version, backend.scheduler_events, counts["binds"])
                if seen != measured:
                    meter.measure()
                    measured = seen
                if sample:
                    meter.sample(now)
                    following = now + self.simulation.sample_interval
                    if events.live or (horizon is not None and following < horizon):
                        events.push(following, EventKind.SAMPLE, None)
                if advance is not None and counts["batches"] % _PROGRESS_EVERY == 0:
                    advance(now)
                # Between instants the next one's events are already queued: a busy loop's pass.
                between_turns(False)

    def _progress(self) -> _Progress:
        horizon = self.horizon
        if horizon is not None:
            return _Progress(
                self.simulation.progress,
                self.simulation.scheduler_name,
                "day {done:.1f} of {total:.1f}",
                horizon / DAY,
                lambda now: min(now, horizon) / DAY,
            )
        # Without a horizon the run ends when the last job does, whenever that is: count jobs.
        return _Progress(
            self.simulation.progress,
            self.simulation.scheduler_name,
            "{done:,.0f} of {total:,.0f} jobs finished",
            max(len(self.workload.jobs), 1),
            lambda now: self.backend.finished_jobs(),
        )

    def _result(self, start: float, end: float, wall: float, interrupted: bool) -> SimulationResult:
        backend, meter = self.backend, self.meter
        return SimulationResult(
            workload=self.workload.name,
            scheduler=self.name,
            capacity_gpus=meter.capacity,
            start=start,
            end=end,
            team_shares=backend.team_shares,
            records=backend.records,
            samples=meter.samples,
            integrals=meter.integrals,
            ledger=backend.ledger,
            cycle_seconds=self.cycle_seconds,
            wall_seconds=wall,
            scheduler_events=backend.scheduler_events,
            counts=backend.counts,
            notes=dict(self.workload.notes),
            scheduler_cpu_seconds=self.scheduler_cpu_seconds,
            interrupted=interrupted,
            policy=self.scheduler.settings.changes_as_json(),
        )

    # --- the scheduler's cycle -----------------------------------------------------------------
    def _maybe_cycle(self, now: float) -> None:
        interval = self.simulation.cycle_interval
        if interval <= 0 or now >= self.last_cycle + interval:
            self.last_cycle = now
            self._cycle(now)
        elif not self.cycle_pending:
            self.cycle_pending = True
            self.events.push(self.last_cycle + interval, EventKind.CYCLE, None)

    def _postponed_cycle(self, payload: None, now: float) -> bool:
        self.cycle_pending = False
        return True

    def _cycle(self, now: float) -> None:
        began, cpu_began = time.perf_counter(), time.process_time()
        result = self.scheduler.cycle(now)
        self.cycle_seconds.append(time.perf_counter() - began)
        self.scheduler_cpu_seconds += time.process_time() - cpu_began
        self.backend.apply(result, now)


class _Progress:
    """A run's progress reports while it lasts: `done(now)` of `total` in the words of `text`
    (see `ProgressReading`), to a bar of its own on stderr, to a sink, or nowhere. Entered, it
    gives the run the function to call with the simulated time (None: nothing reported)."""

    def __init__(
        self,
        wanted: bool | ProgressSink,
        name: str | None,
        text: str,
        total: float,
        done: Callable[[float], float],
    ) -> None:
        self.wanted = wanted
        self.name = name
        self.text = text
        self.total = total
        self.done = done
        self.board: ProgressBoard | None = None

    def __enter__(self) -> Callable[[float], None] | None:
        wanted = self.wanted
        if wanted is False:
            return None
        sink: ProgressSink
        if wanted is True:
            self.board = ProgressBoard().__enter__()
            sink = self.board.show
        else:
            sink = wanted
        label = "simulating" if self.name is None else f"simulating {self.name}"
        text, total, done = self.text, self.total, self.done

        def advance(now: float) -> None:
            sink(ProgressReading(label, text, done(now), total))

        advance(0.0)
        return advance

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.board is not None:
            self.board.__exit__(exc_type, exc, traceback)


def stopped_inside(error: BaseException) -> bool:
    """Whether `error` was raised because a stop (KeyboardInterrupt) interrupted what it
    wraps: numba turns an exception raised by a signal handler while compiled code runs into a
    `SystemError` whose cause is that exception."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


class SimulationInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C (or SIGTERM turned into it) before its end, with the record of
    what it simulated until then (`result.interrupted` is set)."""

    def __init__(self, result: SimulationResult) -> None:
        super().__init__(f"simulation interrupted at {result.end / DAY:.2f} simulated days")
        self.result = result

    def __reduce__(self) -> tuple[type[SimulationInterrupted], tuple[SimulationResult]]:
        # Rebuilt from its result when it travels between processes (see `sim/workers.py`).
        return type(self), (self.result,)
