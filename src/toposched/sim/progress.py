"""The simulator's progress bars on stderr: one per run, drawn from readings that a run in this
process, or in a worker process (`sim/workers.py`), reports."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import NamedTuple

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

__all__ = ["ProgressBoard", "ProgressReading", "ProgressSink"]


class ProgressReading(NamedTuple):
    """How far the run `label` is: `done` of `total`, in the words of `text`, a `str.format`
    template with the fields `done` and `total` (e.g. "day {done:.1f} of {total:.1f}")."""

    label: str
    text: str
    done: float
    total: float

    def status(self) -> str:
        return self.text.format(done=self.done, total=self.total)


ProgressSink = Callable[[ProgressReading], None]
"""Where a run sends its readings."""


class ProgressBoard:
    """Rich progress bars on stderr, one per run (by its readings' label), gone once the board
    closes. Used as a context manager; a run's bar appears with its first reading."""

    def __init__(self) -> None:
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.tasks: dict[str, TaskID] = {}

    def __enter__(self) -> ProgressBoard:
        self.progress.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.progress.__exit__(exc_type, exc, traceback)

    def show(self, reading: ProgressReading) -> None:
        """Move the bar of the reading's run to it (a `ProgressSink`)."""
        label = reading.label
        task = self.tasks.get(label)
        if task is None:
            task = self.tasks[label] = self.progress.add_task(label, total=reading.total, status="")
        self.progress.update(
            task, completed=reading.done, total=reading.total, status=reading.status()
        )
