"""A progress bar with rate and ETA (rich) on stderr; plain lines when not a terminal."""

from __future__ import annotations

import sys
import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class RateColumn(ProgressColumn):
    """Points per second over rich's speed-estimate window."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        if speed is None:
            return Text("– pts/s", style="progress.data.speed")
        return Text(f"{speed:,.1f} pts/s" if speed < 100 else f"{speed:,.0f} pts/s",
                    style="progress.data.speed")


class ProgressReporter:
    """``with ProgressReporter("sweep · des", total) as bar: bar.advance(n)``.

    On a terminal: a rich bar (description, bar, done/total, rate, elapsed,
    ETA). Otherwise (CI, a log file): one line per 10 % with rate and ETA.
    ``enabled=False`` is silent.
    """

    def __init__(self, description: str, total: int, enabled: bool = True):
        self.description = description
        self.total = total
        self.enabled = enabled
        self.console = Console(stderr=True)
        self.live = enabled and self.console.is_terminal
        self.done = 0
        self._progress: Progress | None = None
        self._task: Any = None
        self._started = time.perf_counter()
        self._next_line = 0.1

    def __enter__(self) -> ProgressReporter:
        self._started = time.perf_counter()
        if self.live:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                RateColumn(), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                console=self.console, transient=False)
            self._progress.start()
            self._task = self._progress.add_task(self.description, total=self.total)
        return self

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self._progress is not None:
            self._progress.advance(self._task, n)
            return
        if not self.enabled or not self.total:
            return
        fraction = self.done / self.total
        if fraction + 1e-12 >= self._next_line or self.done == self.total:
            elapsed = time.perf_counter() - self._started
            rate = self.done / elapsed if elapsed > 0 else float("nan")
            eta = (self.total - self.done) / rate if rate and rate > 0 else float("nan")
            print(f"  {self.description}: {self.done}/{self.total} ({fraction:.0%}), "
                  f"{rate:,.1f} pts/s, ETA {eta:,.0f} s", file=sys.stderr, flush=True)
            while self._next_line <= fraction:
                self._next_line += 0.1

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
