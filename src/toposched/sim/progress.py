"""The simulator's progress bar on stderr."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

__all__ = ["ProgressBar"]


class ProgressBar:
    """A rich progress bar on stderr: `done(now)` of `total`, shown with `text`."""

    def __init__(self, text: str, total: float, done: Callable[[float], float]) -> None:
        self.done = done
        self.progress = Progress(
            TextColumn("simulating"),
            BarColumn(),
            TextColumn(text),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.task = self.progress.add_task("simulate", total=total)

    def __enter__(self) -> Callable[[float], None]:
        self.progress.__enter__()
        return self.advance

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.progress.__exit__(exc_type, exc, traceback)

    def advance(self, now: float) -> None:
        self.progress.update(self.task, completed=self.done(now))
