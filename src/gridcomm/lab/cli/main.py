"""The ``gridcomm`` command: info, demo and run; ``bench`` and the dwarfs live in their own modules."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import traceback
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from ... import __version__
from ...launch import ONE_CPU_ADVICE, find_mpiexec, launcher_rank, run_under_mpiexec, under_launcher
from ..console import console
from .apps import APPS, apps_app
from .bench import bench_app
from .common import NpOption, Sizes, Typer, ranks_or_relaunch, sizes_option
from .report import report

app = Typer(
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    help="gridcomm: halo exchanges and all-to-all transpositions for grid codes on CPUs and GPUs.",
)
app.add_typer(bench_app, name="bench")
app.add_typer(apps_app, name="app")  # what `gridcomm run APP` runs on every rank
app.command(
    "report", short_help="Run the benchmarks that fit this machine; write a report folder (markdown, HTML, plots)."
)(report)


def _print_version(asked: bool) -> None:
    if asked:
        console.print(f"gridcomm {__version__}", markup=False, highlight=False)
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", "-V", is_eager=True, callback=_print_version, help="Print the version and exit."),
    ] = False,
) -> None:
    # The group's own options (its help is the Typer's); and in every process a command starts, SIGUSR1 prints
    # every thread's Python stack to stderr (kill -USR1 PID): where a rank of a stuck run is.
    if hasattr(signal, "SIGUSR1") and sys.__stderr__ is not None:
        with contextlib.suppress(OSError, ValueError):  # a stderr with no file behind it: no dump
            faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)


@app.command()
def info() -> None:
    """What gridcomm found here: MPI library (and whether it is CUDA-aware), GPUs, transports."""
    from ... import transports
    from ...comm import Communicator
    from ...mpilib import mpi_library_version
    from ..measure.machine import _version, gpus

    comm = Communicator()
    table = Table(show_header=False, box=None)
    table.add_row("gridcomm", __version__)
    table.add_row("Python", sys.version.split()[0])
    table.add_row("NumPy / mpi4py", f"{_version('numpy')} / {_version('mpi4py')}")
    table.add_row("MPI library", mpi_library_version())
    table.add_row("MPI CUDA-aware", "yes" if comm.cuda_aware else "no (device memory is never handed to it)")
    try:
        table.add_row("mpiexec", find_mpiexec())
    except FileNotFoundError as error:
        table.add_row("mpiexec", f"[red]{error}")
    table.add_row("ranks in this run", str(comm.size))
    cpus = comm.mpi.allgather(len(os.sched_getaffinity(0)))
    alone = [r for r, n in enumerate(cpus) if n == 1]
    table.add_row(
        "CPUs per rank",
        f"{min(cpus)}-{max(cpus)}" if min(cpus) != max(cpus) else str(cpus[0]),
    )
    if alone:
        table.add_row(
            "  bound to one CPU",
            escape(
                f"ranks {alone}: library threads (NVSHMEM's proxy polls without sleeping) share that CPU, and host "
                f"waits can take a scheduler tick; {ONE_CPU_ADVICE}"
            ),
        )
    found = gpus()
    table.add_row("GPUs (NVML)", ", ".join(f"{g['index']}: {g['name']} {g['memory_GiB']} GiB" for g in found) or "none")
    cupy = _version("cupy-cuda13x") or _version("cupy")
    table.add_row("CuPy", cupy or escape("not installed (pip install 'gridcomm[gpu]')"))
    nodes = comm.nodes
    table.add_row("nodes", _nodes_text(nodes))
    several = len(set(nodes)) > 1
    for where, on_device in (("host arrays", False), ("GPU arrays", True)):
        reasons = transports.available(comm, on_device)
        usable = [n for n, why in reasons.items() if why is None]
        table.add_row(f"transports, {where}", ", ".join(usable) or "none")
        if several:
            table.add_row("  auto picks", "one transport per group of peers: on this rank's node, and the others")
        elif usable:
            table.add_row("  auto picks", escape(transports.auto_choice_reason(reasons, on_device)))
        for reach in transports.REACHES if several else ():  # auto's groups of peers, each with its transport
            by_reach = transports.reasons_for(comm, reach, on_device)
            serving = [n for n in transports.preference(on_device) if by_reach.get(n) is None]
            table.add_row(f"  peers, {reach}", ", ".join(serving) or "none")
        for name, why in reasons.items():
            if why is not None:
                table.add_row(f"  not {name}", escape(why))
    if comm.rank == 0:
        console.print(table)
    comm.close()


def _nodes_text(nodes: tuple[int, ...]) -> str:
    """The nodes of the ranks as gridcomm sees them, e.g. "2: ranks 0-1 | 2-3 (GRIDCOMM_RANKS_PER_NODE=2)"."""
    from ...agreement import rank_list
    from ...comm import RANKS_PER_NODE

    groups = [rank_list([r for r, n in enumerate(nodes) if n == node]) for node in sorted(set(nodes))]
    declared = os.environ.get(RANKS_PER_NODE)
    return f"{len(groups)}: " + " | ".join(groups) + (f" ({RANKS_PER_NODE}={declared})" if declared else "")


DEMO_SHAPE = Sizes((24, 20, 16))


@app.command()
def demo(
    nprocs: NpOption = 4,
    shape: Annotated[Sizes, sizes_option(3, "Global grid points per dimension")] = DEMO_SHAPE,
    halo: Annotated[int, typer.Option(help="Halo width on every side.")] = 2,
) -> None:
    """Exchange the halos of a 3-D periodic field over the ranks and check them against the serial reference."""
    ranks_or_relaunch(nprocs)
    from ...comm import Communicator
    from ..demo import run_demo

    comm = Communicator()
    ok = run_demo(comm, shape, halo, say=console.print if comm.rank == 0 else lambda _: None)
    comm.close()
    raise typer.Exit(0 if ok else 1)


# --help is read here, not by click: after a dwarf's name it asks for the dwarf's options, which click,
# reading every --help as run's own, would never show.
@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []})
def run(
    ctx: typer.Context,
    command: Annotated[
        list[str], typer.Argument(help=f"A dwarf ({', '.join(APPS)}) and its options, or any command (python x.py)")
    ],
    nprocs: NpOption = 4,
) -> None:
    """Run a dwarf, or any COMMAND, on --np ranks with the mpiexec that matches mpi4py.

    gridcomm run mpdata --grid O48 --np 4; gridcomm run --np 4 python step.py; gridcomm run mpdata --help
    """
    if command[0] in ("--help", "-h"):
        console.print(ctx.get_help())
        raise typer.Exit(0)
    if command[0] in APPS:
        command = [*command, "--np", str(nprocs)]  # the dwarf's own --np: what its help shows
        if under_launcher() or nprocs == 1 or "--help" in command or "-h" in command:
            raise typer.Exit(_run_app_here(command))
        command = [sys.executable, "-m", "gridcomm", "app", *command]
    try:
        raise typer.Exit(run_under_mpiexec(nprocs, command))
    except FileNotFoundError as error:
        console.print(f"[red]{error}")
        raise typer.Exit(2) from None


def _run_app_here(command: list[str]) -> int:
    """Run the dwarf in this process; its exit status (click hands back a typer.Exit's code, not raises it)."""
    code = apps_app(command, prog_name="gridcomm run", standalone_mode=False)
    return code if isinstance(code, int) else 0


def _abort_other_ranks() -> None:
    """After an uncaught error on one rank, end the whole job: the other ranks would wait for it forever."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.Get_size() > 1:
        sys.stderr.flush()
        mpi.COMM_WORLD.Abort(1)


def main() -> None:
    """Entry point of the ``gridcomm`` command."""
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    from ...errors import GridcommError

    # click's base of every error in a command line (typer >= 0.20 carries its own click: found, not imported)
    command_line_error = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
    try:
        code = app(standalone_mode=False)
    except command_line_error as error:  # every rank reads the same command line, so finds the same error
        _say_command_line_error(error)
        sys.exit(error.exit_code)
    except typer.Abort:  # end of input at a prompt
        print("gridcomm: aborted", file=sys.stderr)
        sys.exit(1)
    except (GridcommError, ValueError) as error:  # bad input: its message says what to do
        print(f"gridcomm: error: {_rank_prefix()}{error}", file=sys.stderr)
        _abort_other_ranks()
        sys.exit(1)
    except Exception:
        traceback.print_exc()
        _abort_other_ranks()
        sys.exit(1)
    sys.exit(code or 0)


def _say_command_line_error(error: Any) -> None:
    """An unknown option, a bad value: alone, as click shows it; on the ranks of a launch, which all read the
    same command line and find the same error, printed by rank 0 only, once, with its rank."""
    ranks = launcher_rank()
    if ranks is None or ranks[1] == 1:
        from typer import rich_utils

        rich_utils.rich_format_error(error)
    elif ranks[0] == 0:
        print(f"gridcomm: error: rank 0: {error.format_message()}", file=sys.stderr)


def _rank_prefix() -> str:
    """ "rank r: " in a run of several ranks (as MPI or, before MPI starts, the launcher tells it), else nothing."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        world = mpi.COMM_WORLD
        return f"rank {world.Get_rank()}: " if world.Get_size() > 1 else ""
    ranks = launcher_rank()
    return f"rank {ranks[0]}: " if ranks is not None and ranks[1] > 1 else ""


__all__ = ["app", "main", "ranks_or_relaunch"]
