"""What every ``gridcomm`` sub-command shares: the console, the --np option, relaunching, progress bars."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Annotated, Any

import typer
from rich.console import Console

from ..launch import relaunch_self, under_launcher

console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)

NpOption = Annotated[int, typer.Option("--np", help="Ranks to start when not already under mpiexec.")]


def ranks_or_relaunch(nprocs: int) -> None:
    """Outside a launcher, start this same command on ``nprocs`` ranks and exit with its status."""
    if nprocs > 1 and not under_launcher():
        raise typer.Exit(relaunch_self(nprocs))


def int_list(text: str, what: str) -> list[int]:
    """``"8,16,32"`` as [8, 16, 32]; a clear error for anything else."""
    try:
        values = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise typer.BadParameter(f"{what}: {text!r} is not a comma-separated list of integers") from None
    if not values:
        raise typer.BadParameter(f"{what}: give at least one value")
    return values


def name_list(text: str, what: str) -> list[str]:
    """``"O24, O48"`` as ["O24", "O48"]; a clear error when nothing is given."""
    values = [s.strip() for s in text.split(",") if s.strip()]
    if not values:
        raise typer.BadParameter(f"{what}: give at least one value")
    return values


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


def progress(show: bool) -> Any:
    """A rich progress bar on the printing rank, nothing elsewhere."""
    if not show:
        return _NoProgress()
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
