"""The dwarfs as commands, run on every rank by ``gridcomm run APP --np N ...``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from ..console import console, step_progress, table
from .common import NpOption, Typer, check_options, percentages, ranks_or_relaunch

apps_app = Typer(
    no_args_is_help=True,
    help="The dwarfs on the ranks of this launch; `gridcomm run APP --np N ...` starts the ranks for you.",
)


@apps_app.callback()
def _group() -> None:
    """Keeps the dwarfs sub-commands (Typer would fold a group of one command into that command)."""


#: What ``gridcomm run`` accepts in place of a command.
APPS = ("mpdata", "spectral", "stencil2d")


@apps_app.command("mpdata")
def mpdata(
    nprocs: NpOption = 4,
    grid: Annotated[str, typer.Option(help="Octahedral grid, e.g. O48 (4N(N+9) nodes).")] = "O48",
    levels: Annotated[int, typer.Option(help="Vertical levels (the horizontal scheme runs on each).")] = 1,
    alpha: Annotated[float, typer.Option(help="Rotation axis tilt (rad): 0 zonal, 0.785 diagonal, 1.571 polar.")] = 0.0,
    revolutions: Annotated[float, typer.Option(help="Revolutions of 12 days to advect the bell.")] = 1.0,
    courant: Annotated[float, typer.Option(help="Largest Courant number the time step may reach (<= 1).")] = 0.5,
    dt: Annotated[float | None, typer.Option(help="Time step (s) instead of --courant (checked against CFL).")] = None,
    steps: Annotated[int | None, typer.Option(help="Run only this many steps.")] = None,
    fct: Annotated[bool, typer.Option(help="Non-oscillatory (flux-corrected) option.")] = True,
    plot: Annotated[Path | None, typer.Option(help="PNG of the tracer before, after, and after minus exact.")] = None,
    gpu: Annotated[bool, typer.Option("--gpu/--cpu", help="Fields on the GPUs (one per rank) or the host.")] = False,
    transport: Annotated[
        str, typer.Option(help="Halo transport: auto, a name from `gridcomm info`, or host (whole fields via host).")
    ] = "auto",
    graphs: Annotated[bool, typer.Option(help="With --gpu: replay each step as a CUDA graph (ipc or nccl).")] = False,
) -> None:
    """Williamson case 1 (cosine bell in solid-body rotation) with MPDATA on the octahedral grid."""
    from ...grids.octahedral import parse_grid_name
    from ...transports import requested

    check_options(
        {
            "--grid": lambda: parse_grid_name(grid),
            "--transport": lambda: transport in ("host", "none") or requested(transport),
        }
    )
    ranks_or_relaunch(nprocs)
    from ...comm import Communicator
    from ..apps.mpdata import plot_tracer, run_mpdata

    xp: Any = "numpy"
    if gpu:
        import cupy as xp
    comm = Communicator()
    say = comm.rank == 0
    if say:
        console.print(
            f"MPDATA on {grid}, {levels} level(s), alpha = {alpha:g} rad, {revolutions:g} revolution(s), "
            f"{comm.size} rank(s) (equal-regions parts, 2 halo layers, 2 exchanges per step)"
        )
    with step_progress(say, "time steps") as advance:
        r = run_mpdata(
            comm,
            grid,
            levels=levels,
            alpha=alpha,
            revolutions=revolutions,
            courant=None if dt is not None else courant,
            dt=dt,
            steps=steps,
            fct=fct,
            progress=advance,
            return_fields=plot is not None,
            xp=xp,
            transport=transport,
            graphs=graphs,
        )
    if say:
        rows = [
            ["nodes / edges", f"{r['nodes']} / {r['edges']}"],
            ["steps x dt", f"{r['steps']} x {r['dt']:.1f} s = {r['simulated_s'] / 86400:.2f} days"],
            ["largest Courant number", f"{r['courant']:.3f}"],
            ["l1 / l2 / linf error", f"{r['l1']:.4f} / {r['l2']:.4f} / {r['linf']:.4f}"],
            ["min / max (initial)", f"{r['min']:.4g} / {r['max']:.4g} ({r['min0']:.4g} / {r['max0']:.4g})"],
            ["mass change (relative)", f"{r['mass_rel_change']:.2e}"],
            ["time per step (slowest rank)", f"{r['time_per_step_s'] * 1e3:.2f} ms"],
            [
                "halo exchanges",
                f"{r['exchanges_per_step']} per step, "
                + (
                    "overlapping the kernels (bench mpdata --gpu measures their cost)"
                    if r["exchange_fraction"] is None
                    else f"{100 * r['exchange_fraction']:.0f} % of the time"
                ),
            ],
        ]
        console.print(table("result", ["", ""], rows))
        if plot is not None:
            title = f"{r['grid']}, alpha = {alpha:g}, {r['simulated_s'] / 86400:.2f} days, {comm.size} rank(s)"
            console.print(f"plot: {plot_tracer(grid, r['initial'], r['final'], plot, exact=r['exact'], title=title)}")
        ok = abs(r["mass_rel_change"]) < 1e-12 and math.isfinite(r["l2"])
        console.print("OK" if ok else "[red]mass not conserved or the solution is not finite")
    comm.close()


@apps_app.command("stencil2d")
def stencil2d(
    nprocs: NpOption = 4,
    n: Annotated[int, typer.Option(help="Points per side of each rank's block (global grid: n px x n py).")] = 512,
    steps: Annotated[int, typer.Option(help="Jacobi steps to run.")] = 100,
    mode: Annotated[
        str,
        typer.Option(
            help="traditional (exchange, then compute), overlapped, or on the GPU graph (CUDA graphs), nvshmem "
            "(halos put by the kernels) or persistent (one kernel for all steps); nvshmem and persistent need the "
            "nvshmem extra and halo 1."
        ),
    ] = "traditional",
    dtype: Annotated[str, typer.Option(help="float64 or float32.")] = "float64",
    gpu: Annotated[
        bool | None,
        typer.Option("--gpu/--cpu", help="Run on the GPU (CuPy) or the CPU (NumPy).", show_default="GPU if found"),
    ] = None,
    transport: Annotated[str, typer.Option(help="Halo transport: auto, or one of `gridcomm info`'s.")] = "auto",
    halo: Annotated[int, typer.Option(help="Ghost width exchanged each step (the stencil needs 1).")] = 1,
    check: Annotated[bool, typer.Option("--check/--no-check", help="Compare bit for bit with a serial run.")] = True,
) -> None:
    """The 2-D Jacobi dwarf (five-point stencil, fixed outer boundary) of the NVSHMEM stencil study."""
    from ...device import gpu_count
    from ...transports import requested
    from ..apps.stencil2d.config import check_dtype, check_mode

    on_gpu = gpu_count() > 0 if gpu is None else gpu
    check_options(
        {
            "--mode": lambda: check_mode(mode, on_gpu),
            "--dtype": lambda: check_dtype(dtype),
            "--transport": lambda: requested(transport),
        }
    )
    ranks_or_relaunch(nprocs)
    from ...comm import Communicator
    from ..apps.stencil2d import run_stencil2d

    comm = Communicator()
    say = comm.rank == 0
    with step_progress(say, "Jacobi steps") as advance:
        r = run_stencil2d(
            comm, n, steps, mode, "cupy" if on_gpu else "numpy", dtype=dtype, transport=transport, halo=halo,
            check=check, progress=advance,
        )  # fmt: skip
    if say:
        gx, gy = r["global_shape"]
        px, py = r["proc_grid"]
        console.print(
            f"2-D Jacobi, {gx} x {gy} points on {r['ranks']} rank(s) ({px} x {py}, {n} x {n} each, halo {r['halo']}), "
            f"{r['steps']} steps, mode {r['mode']}, {r['device'].upper()} {r['dtype']}, transport {r['transport']}"
        )
        rate = r["point_updates_per_s"]
        rows = [
            ["time per step (slowest rank)", f"{r['time_per_step_s'] * 1e6:.1f} µs"],
            ["point updates per second", f"{rate / 1e6:.1f} M" if rate else "-"],
            ["bytes sent per step (busiest rank)", f"{r['bytes_per_step']}"],
        ]
        if r["checked"]:
            rows.append(["max |result - serial run|", f"{r['max_abs_diff']:.3e}"])
        console.print(table("result", ["", ""], rows))
        if r["checked"]:
            console.print("OK" if r["bitwise_equal"] else "[red]MISMATCH: the result differs from the serial run")
    comm.close()
    if r["checked"] and not r["bitwise_equal"]:
        raise typer.Exit(1)


@apps_app.command("spectral")
def spectral(
    nprocs: NpOption = 4,
    grid: Annotated[str, typer.Option(help="Octahedral grid, e.g. O160 (4N(N+9) points, 2N latitude rows).")] = "O160",
    truncation: Annotated[int | None, typer.Option(help="Truncation T <= N - 1.", show_default="N - 1")] = None,
    levels: Annotated[int, typer.Option(help="Vertical levels of each 3-D field.")] = 10,
    fields: Annotated[int, typer.Option(help="3-D fields (a surface field is added).")] = 3,
    steps: Annotated[int, typer.Option(help="Steps, each one inverse and one direct transform.")] = 20,
    transport: Annotated[str, typer.Option(help="Transposition transport: auto, or a name.")] = "auto",
    gpu: Annotated[
        bool, typer.Option("--gpu/--cpu", help="Fields on the GPUs (CuPy, one GPU per rank) or on the host (NumPy).")
    ] = False,
    pipeline: Annotated[
        str,
        typer.Option(
            help="Stages of wavenumbers (8), or stages x groups of latitude rows (8x2), each (stage, group) "
            "transposed apart; with --gpu its transposition overlaps the Legendre products and FFTs of the others "
            "(docs/spectral.md). auto: 8x2 with --gpu where a CUDA graph replays the transport, else 1."
        ),
    ] = "auto",
) -> None:
    """The spectral-transform dwarf: spherical harmonics <-> octahedral grid, distributed by wavenumber and
    latitude band with a transposition in between; prints the round-trip error and the slowest rank's time split."""
    from types import SimpleNamespace

    from ...grids.octahedral import parse_grid_name
    from ...transports import requested
    from ..apps.spectral.dwarf import pipeline_shape
    from ..apps.spectral.transform import check_truncation

    def truncation_fits() -> None:  # the grid's N is all it takes: no grid is built here
        n = parse_grid_name(grid)
        check_truncation(truncation, SimpleNamespace(N=n, name=f"O{n}"))

    check_options(
        {
            "--grid": lambda: parse_grid_name(grid),
            "--truncation": truncation_fits,
            "--transport": lambda: requested(transport),
            "--pipeline": lambda: pipeline_shape(pipeline, gpu),
        }
    )
    ranks_or_relaunch(nprocs)
    from ...comm import Communicator
    from ..apps.spectral.dwarf import run_spectral

    comm = Communicator()
    if gpu:
        from ...gpu import use_local_gpu

        use_local_gpu(comm)
    say = comm.rank == 0
    with step_progress(say, "transform steps") as advance:
        r = run_spectral(
            comm, grid, truncation=truncation, levels=levels, fields=fields, steps=steps, transport=transport,
            gpu=gpu, pipeline=pipeline, progress=advance,
        )  # fmt: skip
    if say:
        console.print(
            f"spherical-harmonic transform on {r['grid']} ({r['points']} points), T = {r['truncation']}, "
            f"{r['fields']} field(s) x {r['levels']} level(s) + 1 surface field, {r['ranks']} rank(s), "
            f"{'GPU' if r['gpu'] else 'CPU'}, transport {r['transport']}"
            + (f", pipelined: {pipeline_words(r['pipeline_shape'])}" if r["pipeline"] > 1 else "")
        )
        split = r["slowest_rank_split_s"]
        rows = [["round-trip error (max |a - direct(inverse(a))| / max |a|)", f"{r['round_trip_error']:.2e}"]]
        rows.append([f"time per step (slowest rank: {r['slowest_rank']})", f"{r['time_per_step_s'] * 1e3:.2f} ms"])
        sequential = r.get("sequential_step_s")
        if sequential is not None:  # pipelined: the split is of steps with the phases one after another
            rows.append(["  the phases one after another (split below)", f"{sequential * 1e3:.2f} ms"])
        for (phase, seconds), share in zip(split.items(), percentages(list(split.values())), strict=True):
            rows.append([f"  {phase}", f"{seconds * 1e3:.2f} ms ({share} %)"])
        step = "the phase-by-phase step" if sequential is not None else "its step"
        console.print(table(f"result (the split is rank {r['slowest_rank']}'s: it adds up to {step})", ["", ""], rows))
        ok = r["round_trip_error"] < 1e-10
        console.print("OK" if ok else "[red]the round trip does not return the coefficients")
    comm.close()


def pipeline_words(shape: tuple[int, int] | list[int]) -> str:
    """(stages, groups) in words: "8 stages x 2 groups of rows"."""
    stages, groups = shape
    return f"{stages} stage{'s' * (stages != 1)} x {groups} group{'s' * (groups != 1)} of rows"
