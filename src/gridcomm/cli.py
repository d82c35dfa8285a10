"""The ``gridcomm`` command: info, demo, run and bench."""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import __version__
from .launch import find_mpiexec, relaunch_self, run_under_mpiexec, under_launcher

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    help="gridcomm: halo exchanges and all-to-all transpositions for grid codes on CPUs and GPUs.",
)
bench_app = typer.Typer(
    no_args_is_help=True, help="Benchmarks: each figure beside its floor, measured in the same run."
)
app.add_typer(bench_app, name="bench")
console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)

NpOption = Annotated[int, typer.Option("--np", help="Ranks to start when not already under mpiexec.")]


def _ranks_or_relaunch(nprocs: int) -> None:
    """Outside a launcher, start this same command on ``nprocs`` ranks and exit with its status."""
    if nprocs > 1 and not under_launcher():
        raise typer.Exit(relaunch_self(nprocs))


@app.command()
def info() -> None:
    """What gridcomm found here: MPI library (and whether it is CUDA-aware), GPUs, transports."""
    from . import transports
    from .bench.machine import _version, gpus
    from .comm import Communicator, mpi_library_version

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
    found = gpus()
    table.add_row("GPUs (NVML)", ", ".join(f"{g['index']}: {g['name']} {g['memory_GiB']} GiB" for g in found) or "none")
    cupy = _version("cupy-cuda13x") or _version("cupy")
    table.add_row("CuPy", cupy or escape("not installed (pip install 'gridcomm[gpu]')"))
    for where, on_device in (("host arrays", False), ("GPU arrays", True)):
        reasons = transports.available(comm, on_device)
        table.add_row(f"transports, {where}", ", ".join(n for n, why in reasons.items() if why is None) or "none")
    if comm.rank == 0:
        console.print(table)
    comm.close()


@app.command()
def demo(
    nprocs: NpOption = 4,
    shape: Annotated[tuple[int, int, int], typer.Option(help="Global grid points per dimension.")] = (24, 20, 16),
    halo: Annotated[int, typer.Option(help="Halo width on every side.")] = 2,
) -> None:
    """Exchange the halos of a 3-D periodic field over the ranks and check them against the serial reference."""
    _ranks_or_relaunch(nprocs)
    from .comm import Communicator
    from .demo import run_demo

    comm = Communicator()
    ok = run_demo(comm, shape, halo, say=console.print if comm.rank == 0 else lambda _: None)
    comm.close()
    raise typer.Exit(0 if ok else 1)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(
    command: Annotated[list[str], typer.Argument(help="The command to run on every rank, e.g. python step.py")],
    nprocs: NpOption = 4,
) -> None:
    """Run COMMAND on --np ranks with the mpiexec that matches mpi4py (e.g. gridcomm run --np 4 python x.py)."""
    try:
        raise typer.Exit(run_under_mpiexec(nprocs, command))
    except FileNotFoundError as error:
        console.print(f"[red]{error}")
        raise typer.Exit(2) from None


@bench_app.command("halo")
def bench_halo(
    nprocs: NpOption = 2,
    sizes: Annotated[str, typer.Option(help="Horizontal points per rank side, comma-separated.")] = "8,16,32,64,128",
    fields: Annotated[str, typer.Option(help="Field counts, comma-separated.")] = "1,4,16",
    levels: Annotated[int, typer.Option(help="Vertical levels (the contiguous dimension).")] = 60,
    halo: Annotated[int, typer.Option(help="Halo width in both horizontal dimensions.")] = 3,
    samples: Annotated[int, typer.Option(help="Timed samples per figure (median reported).")] = 7,
    quick: Annotated[bool, typer.Option(help="Two sizes, one field count, 3 samples: a smoke run.")] = False,
    out: Annotated[Path, typer.Option(help="Folder for the JSON results and PNG plot.")] = Path("benchmarks/results"),
) -> None:
    """Time per halo exchange against message size and field count, beside bare MPI (the floor)."""
    _ranks_or_relaunch(nprocs)
    from .bench.halo import cases, run_case
    from .bench.machine import machine_info
    from .bench.results import plot_halo, write_results
    from .comm import Communicator

    size_list = [8, 32] if quick else [int(s) for s in sizes.split(",")]
    field_list = [2] if quick else [int(f) for f in fields.split(",")]
    samples = 3 if quick else samples
    comm = Communicator()
    todo = cases(size_list, field_list, levels, halo)
    rows = []
    with _progress(comm.rank == 0) as progress:
        task = progress.add_task("halo exchange cases", total=len(todo))
        for case in todo:
            rows.append(run_case(comm, case, samples))
            progress.advance(task)
    if comm.rank == 0:
        machine = machine_info(comm.size)
        config = {
            "sizes": size_list,
            "fields": field_list,
            "levels": levels,
            "halo": halo,
            "samples": samples,
            "problem": "3-D float64 fields, horizontal 2-D process grid, periodic horizontally, box stencil",
        }
        path = write_results(out, "halo", machine, config, rows)
        png = plot_halo({"machine": machine, "results": rows}, path.with_suffix(".png"))
        console.print(_halo_table(rows))
        console.print(f"results: {path}\nplot:    {png}")
    comm.close()


def _halo_table(rows: list[dict]) -> Table:
    names = list(rows[0]["variants"])
    table = Table(title="time per halo exchange [µs] (median; slowest rank)")
    for column in ["n×n", "fields", "KiB/peer", *names, "floor", "floor fresh", "best/floor", "best/fresh"]:
        table.add_column(column, justify="right")
    for r in rows:
        best = r["best"]
        cells = [
            f"[bold]{r['variants'][n]['median_s'] * 1e6:.1f}[/]"
            if n == best
            else f"{r['variants'][n]['median_s'] * 1e6:.1f}"
            for n in names
        ]
        table.add_row(
            f"{r['n']}²",
            str(r["fields"]),
            f"{r['bytes_per_peer_mean'] / 1024:.0f}",
            *cells,
            f"{r['floor']['median_s'] * 1e6:.1f}",
            f"{r['floor_fresh']['median_s'] * 1e6:.1f}",
            f"{r['best_over_floor']:.2f}x",
            f"{r['best_over_floor_fresh']:.2f}x",
        )
    return table


class _NoProgress:
    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def add_task(self, *args, **kwargs) -> int:
        return 0

    def advance(self, *args) -> None:
        pass


def _progress(show: bool):
    """A rich progress bar on the printing rank, nothing elsewhere."""
    if not show:
        return _NoProgress()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


def _abort_other_ranks() -> None:
    """After an uncaught error on one rank, end the whole job: the other ranks would wait for it forever."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.Get_size() > 1:
        sys.stderr.flush()
        mpi.COMM_WORLD.Abort(1)


def main() -> None:
    """Entry point of the ``gridcomm`` command."""
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        app()
    except Exception:
        traceback.print_exc()
        _abort_other_ranks()
        sys.exit(1)
