"""What every ``gridcomm`` sub-command shares: the command classes (help wrapped to the terminal), the --np,
--shape and --out options, relaunching. What they print goes through ``lab.console``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from ...launch import relaunch_self, under_launcher

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
    from ...errors import GridcommError

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


OutOption = Annotated[
    Path, typer.Option(help="Folder for the JSON results and the PNG plot (made if missing).", show_default="here")
]
