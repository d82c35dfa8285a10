"""What every ``gridcomm`` sub-command shares: the console, the command classes, the --np and --shape options,
relaunching, progress on the terminal or as lines, where results went."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperCommand, TyperGroup

from ..launch import relaunch_self, under_launcher

#: rich pads every line of a table to the table's width with spaces (and ends them with style codes, if any).
_PADDING = re.compile(r" +((?:\x1b\[[0-9;]*m)*)$", re.MULTILINE)


class _Stdout:
    """The console's file: sys.stdout as it is at each write (so that a test's capture sees the output), the
    padding rich puts at the end of each line left out where stdout is not a terminal (a pipe, a file, a log):
    ``gridcomm info | cat`` gave 160 characters a line."""

    def write(self, text: str) -> int:
        out = sys.stdout
        if not out.isatty():
            text = _PADDING.sub(r"\1", text)
        return out.write(text)

    def flush(self) -> None:
        sys.stdout.flush()

    def isatty(self) -> bool:
        return sys.stdout.isatty()

    def fileno(self) -> int:
        return sys.stdout.fileno()

    @property
    def encoding(self) -> str:
        return getattr(sys.stdout, "encoding", None) or "utf-8"


def _console_width() -> int | None:
    """None (the terminal's width, or ``COLUMNS`` where set, as rich reads them) on a terminal or where COLUMNS is
    set; else 160 columns, so that wide tables written to a pipe or a log are not squeezed into rich's 80."""
    return None if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit() else 160


console = Console(file=_Stdout(), soft_wrap=True, width=_console_width())  # type: ignore[arg-type]

#: -h as well as --help, on every command (click hands a context's help options to its sub-commands).
CONTEXT_SETTINGS = {"help_option_names": ["--help", "-h"]}


def _unwrapped(text: str) -> str:
    """Help text with each paragraph on one line: rich prints a docstring's line breaks where they stand, which
    broke sentences in the middle at every terminal width but the docstring's own."""
    paragraphs = text.strip().split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split()) for p in paragraphs)


class _HelpLayout:
    """Help as users read it: paragraphs rewrapped to the terminal (see ``_unwrapped``), the commands' list
    showing each command's first paragraph, and no type column (``<bool>``) beside flags and --help."""

    params: list[Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = _unwrapped(self.help) if self.help else self.help
        if self.help and not self.short_help:
            self.short_help = self.help.split("\n\n")[0]
        for param in self.params:
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            option.metavar = ""
        return option


class Command(_HelpLayout, TyperCommand):
    """A ``gridcomm`` command (see ``_HelpLayout``)."""


class Group(_HelpLayout, TyperGroup):
    """A ``gridcomm`` group of commands (see ``_HelpLayout``)."""


class Typer(typer.Typer):
    """typer.Typer whose groups and commands lay out their help as ``_HelpLayout`` says and take -h."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("context_settings", CONTEXT_SETTINGS)
        super().__init__(cls=Group, add_completion=False, **kwargs)

    def command(self, *args: Any, **kwargs: Any) -> Any:
        return super().command(*args, cls=kwargs.pop("cls", Command), **kwargs)


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


class Sizes(tuple[int, ...]):
    """Points per dimension, written (and shown as a default) in the command line's one form: ``24,20,16``."""

    def __str__(self) -> str:
        return ",".join(map(str, self))


def sizes_option(count: int, help: str) -> Any:
    """A ``--shape``-like option: ``count`` positive sizes, comma-separated (the one form every command takes)."""
    example = ",".join(("64", "48", "32")[:count])

    def parse(text: str | tuple[int, ...]) -> Sizes:
        if isinstance(text, tuple):  # the default
            return Sizes(text)
        values = int_list(text, "sizes")
        if len(values) != count or min(values) < 1:
            raise typer.BadParameter(f"{text!r}: give {count} sizes of at least 1, comma-separated, e.g. {example}")
        return Sizes(values)

    return typer.Option(parser=parse, metavar=",".join("XYZ"[:count]), help=f"{help} (e.g. {example})")


def check_options(checks: dict[str, Callable[[], Any]]) -> None:
    """Run each option's check (``{"--mode": lambda: check_mode(mode)}``) before any rank talks to another: what
    they find is the command line's, alike on every rank, so it is a usage error, printed once (cli.main)."""
    from ..errors import GridcommError

    for option, check in checks.items():
        try:
            check()
        except (GridcommError, ValueError) as error:
            raise typer.BadParameter(str(error), param_hint=f"'{option}'") from None


def percentages(values: Sequence[float]) -> list[int]:
    """``values`` as whole percentages of their sum that add up to 100 (largest remainders rounded up), so that a
    table of shares adds up as its reader expects; all 0 when the sum is 0."""
    total = sum(values)
    if total <= 0:
        return [0] * len(values)
    exact = [100 * v / total for v in values]
    whole = [int(x) for x in exact]
    by_remainder = sorted(range(len(values)), key=lambda i: whole[i] - exact[i])
    for i in by_remainder[: 100 - sum(whole)]:
        whole[i] += 1
    return whole


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


OutOption = Annotated[
    Path, typer.Option(help="Folder for the JSON results and the PNG plot (made if missing).", show_default="here")
]
