"""What the lab prints on the terminal: the console (no padded lines where stdout is no terminal), progress (a
rich bar on a terminal, lines elsewhere), tables, and where results were written. Below the report and the
command line, which both print."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

#: rich pads every line of a table to the table's width with spaces (and ends them with style codes, if any).
_PADDING = re.compile(r" +((?:\x1b\[[0-9;]*m)*)$", re.MULTILINE)


class _Stdout:
    """The console's file: sys.stdout as it is at each write (so that a test's capture sees the output), the
    padding rich puts at the end of each line left out where stdout is not a terminal (a pipe, a file, a log):
    ``gridcomm info | cat`` gave 160 characters a line. While a rich bar is live it replaces sys.stdout with a
    proxy that prints through this console: writing to that proxy would go round for ever (a terminal's bar, or
    Open MPI's ranks, whose stdout is a pseudo-terminal, hung at the first line printed), so the file behind it
    is written instead."""

    def write(self, text: str) -> int:
        out = _unproxied(sys.stdout)
        if not out.isatty():
            text = _PADDING.sub(r"\1", text)
        return out.write(text)

    def flush(self) -> None:
        _unproxied(sys.stdout).flush()

    def isatty(self) -> bool:
        return _unproxied(sys.stdout).isatty()

    def fileno(self) -> int:
        return _unproxied(sys.stdout).fileno()

    @property
    def encoding(self) -> str:
        return getattr(sys.stdout, "encoding", None) or "utf-8"


def _unproxied(out: Any) -> Any:
    """The file behind rich's stdout proxy (rich.file_proxy.FileProxy, set while a live bar runs), else ``out``."""
    return getattr(out, "rich_proxied_file", out)


def _console_width() -> int | None:
    """None (the terminal's width, or ``COLUMNS`` where set, as rich reads them) on a terminal that knows its
    width or where COLUMNS is set; else 160 columns, so that wide tables written to a pipe, a log or a
    pseudo-terminal of no size (Open MPI's ranks write to one) are not squeezed into rich's 80."""
    if os.environ.get("COLUMNS", "").isdigit():
        return None
    try:
        return None if sys.stdout.isatty() and os.get_terminal_size(sys.stdout.fileno()).columns > 0 else 160
    except (OSError, ValueError):  # no descriptor (a test's capture) or no terminal behind it
        return 160


console = Console(file=_Stdout(), soft_wrap=True, width=_console_width())  # type: ignore[arg-type]


class _NoProgress:
    def __enter__(self) -> _NoProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def add_task(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def advance(self, *args: Any) -> None:
        pass

    def update(self, *args: Any, **kwargs: Any) -> None:
        pass


class _LineProgress:
    """Progress where stdout is no terminal (a pipe, a log, a batch job), which rich's bar leaves blank until the
    end: a line when a task starts or its description changes, one every ``period_s`` seconds while it runs,
    and one when it is complete. Same methods as rich's Progress (those the commands use)."""

    def __init__(self, period_s: float = 10.0) -> None:
        self.period_s = period_s
        self._tasks: list[dict[str, Any]] = []

    def __enter__(self) -> _LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def add_task(self, description: str, total: float | None = None, counted: bool = True, **_: Any) -> int:
        """``counted=False``: ``total`` is no count of things (the report's is seconds of estimate): not shown."""
        now = time.perf_counter()
        task = {"description": description, "total": total, "completed": 0, "start": now, "said": now}
        self._tasks.append({**task, "counted": counted})
        self._say(self._tasks[-1])
        return len(self._tasks) - 1

    def advance(self, task: int, advance: float = 1) -> None:
        self.update(task, completed=self._tasks[task]["completed"] + advance)

    def update(
        self, task: int, *, completed: float | None = None, total: float | None = None, description: str | None = None
    ) -> None:
        t = self._tasks[task]
        was_complete = t["total"] is not None and t["completed"] >= t["total"]
        renamed = description is not None and description != t["description"]
        for key, value in (("completed", completed), ("total", total), ("description", description)):
            if value is not None:
                t[key] = value
        complete = t["total"] is not None and t["completed"] >= t["total"]
        if renamed or (complete and not was_complete) or time.perf_counter() - t["said"] >= self.period_s:
            self._say(t)

    def _say(self, t: dict[str, Any]) -> None:
        t["said"] = time.perf_counter()
        done = f" {t['completed']:.0f}/{t['total']:.0f}" if t["total"] and t["counted"] else ""
        console.print(f"{t['description']}:{done} ({t['said'] - t['start']:.0f} s)", markup=False, highlight=False)


def progress(show: bool) -> Any:
    """Progress on the printing rank (``show``), nothing elsewhere: a rich bar on a terminal, else lines."""
    if not show:
        return _NoProgress()
    if not console.is_terminal:
        return _LineProgress()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn, TimeRemainingColumn

    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> Any:
    """A rich table with right-aligned columns (no header row where every column name is empty)."""
    from rich.table import Table

    t = Table(title=title, show_header=any(columns))
    for column in columns:
        t.add_column(column, justify="right")
    for row in rows:
        t.add_row(*row)
    return t


@contextlib.contextmanager
def step_progress(show: bool, label: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on the printing rank; yields the ``progress(done, total)`` callback the dwarfs call."""
    with progress(show) as bar:
        task = bar.add_task(label, total=None)

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield advance


def shown_path(path: Path) -> str:
    """``path`` as the user can find it: relative to the current directory when inside it, else absolute."""
    full = Path(path).resolve()
    try:
        return str(full.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(full)


def say_written(results: Path, plot: Path | None = None) -> None:
    """Where a benchmark's files went (the printing rank calls it)."""
    console.print(f"results: {shown_path(results)}" + (f"\nplot:    {shown_path(plot)}" if plot is not None else ""))
