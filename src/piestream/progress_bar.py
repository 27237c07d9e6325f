"""A progress bar on stderr for long CLI work (`piestream sql -f`, `piestream bench`), drawn with
rich, and only when stderr is a terminal: piped or logged output stays exactly as it was."""

from __future__ import annotations

import sys
from types import TracebackType
from typing import IO, Any


class ProgressBar:
    """`total` steps labelled `label`; `advance()` after each. Does nothing off a terminal."""

    def __init__(
        self, total: int, label: str, *, stream: IO[str] | None = None, enabled: bool | None = None
    ) -> None:
        self.stream = stream or sys.stderr
        self.enabled = (self.stream.isatty() if enabled is None else enabled) and total > 1
        self._bar: Any = None
        self._task: Any = None
        self.total = total
        self.label = label

    def __enter__(self) -> ProgressBar:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(file=self.stream),
                transient=True,  # the bar goes when the work is done; results stay
                # results printed to a terminal go above the bar; piped stdout is left alone
                redirect_stdout=sys.stdout.isatty(),
                redirect_stderr=False,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.label, total=self.total)
        return self

    def advance(self, n: int = 1) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, n)

    def describe(self, text: str) -> None:
        """What runs now (shown beside the bar)."""
        if self._bar is not None:
            self._bar.update(self._task, description=text)

    def print(self, text: str) -> None:
        """A line above the bar (or plainly, without one)."""
        if self._bar is not None:
            self._bar.console.print(text, markup=False, highlight=False)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
