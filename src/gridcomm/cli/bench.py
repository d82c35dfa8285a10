"""``gridcomm bench ...``: each figure beside its floor and its peers, measured in the same run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from .common import NpOption, console, int_list, progress, ranks_or_relaunch, table

bench_app = typer.Typer(
    no_args_is_help=True, help="Benchmarks: each figure beside its floor, measured in the same run."
)

OutOption = Annotated[Path, typer.Option(help="Folder for the JSON results and PNG plot.")]
SamplesOption = Annotated[int, typer.Option(help="Timed samples per figure (median reported).")]


@bench_app.command("halo")
def bench_halo(
    nprocs: NpOption = 2,
    sizes: Annotated[str, typer.Option(help="Horizontal points per rank side, comma-separated.")] = "8,16,32,64,128",
    fields: Annotated[str, typer.Option(help="Field counts, comma-separated.")] = "1,4,16",
    levels: Annotated[int, typer.Option(help="Vertical levels (the contiguous dimension).")] = 60,
    halo: Annotated[int, typer.Option(help="Halo width in both horizontal dimensions.")] = 3,
    samples: SamplesOption = 7,
    quick: Annotated[bool, typer.Option(help="Two sizes, one field count, 3 samples: a smoke run.")] = False,
    out: OutOption = Path("benchmarks/results"),
) -> None:
    """Time per halo exchange against message size and field count, beside bare MPI (the floor)."""
    ranks_or_relaunch(nprocs)
    from ..bench.halo import cases, run_case
    from ..bench.machine import machine_info
    from ..bench.results import plot_halo, write_results
    from ..comm import Communicator

    size_list = [8, 32] if quick else int_list(sizes, "--sizes")
    field_list = [2] if quick else int_list(fields, "--fields")
    samples = 3 if quick else samples
    comm = Communicator()
    todo = cases(size_list, field_list, levels, halo)
    rows = []
    with progress(comm.rank == 0) as bar:
        task = bar.add_task("halo exchange cases", total=len(todo))
        for case in todo:
            rows.append(run_case(comm, case, samples))
            bar.advance(task)
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


def _halo_table(rows: list[dict[str, Any]]) -> Any:
    names = list(rows[0]["variants"])
    body = []
    for r in rows:
        times = {n: f"{r['variants'][n]['median_s'] * 1e6:.1f}" for n in names}
        cells = [f"[bold]{t}[/]" if n == r["best"] else t for n, t in times.items()]
        body.append(
            [
                f"{r['n']}²",
                str(r["fields"]),
                f"{r['bytes_per_peer_mean'] / 1024:.0f}",
                *cells,
                f"{r['floor']['median_s'] * 1e6:.1f}",
                f"{r['floor_fresh']['median_s'] * 1e6:.1f}",
                f"{r['best_over_floor']:.2f}x",
                f"{r['best_over_floor_fresh']:.2f}x",
            ]
        )
    columns = ["n×n", "fields", "KiB/peer", *names, "floor", "floor fresh", "best/floor", "best/fresh"]
    return table("time per halo exchange [µs] (median; slowest rank)", columns, body)


@bench_app.command("mpdata")
def bench_mpdata(
    nprocs: NpOption = 4,
    grids: Annotated[str, typer.Option(help="Octahedral grids, comma-separated (O24,O48,...).")] = "O24,O48,O96",
    levels: Annotated[str, typer.Option(help="Vertical level counts, comma-separated.")] = "1,16",
    steps: Annotated[int, typer.Option(help="Timed steps per case (median reported).")] = 20,
    out: OutOption = Path("benchmarks/results"),
) -> None:
    """Time per MPDATA step (diagonal flow, FCT) and the share spent in its two halo exchanges."""
    ranks_or_relaunch(nprocs)
    from ..apps.mpdata import benchmark_mpdata
    from ..bench.machine import machine_info
    from ..bench.results import write_results
    from ..comm import Communicator

    comm = Communicator()
    grid_list = [g.strip() for g in grids.split(",") if g.strip()]
    todo = [(g, n) for g in grid_list for n in int_list(levels, "--levels")]
    rows = []
    with progress(comm.rank == 0) as bar:
        task = bar.add_task("MPDATA cases", total=len(todo))
        for grid, nlev in todo:
            rows.append(benchmark_mpdata(comm, grid, levels=nlev, steps=steps))
            bar.advance(task)
    if comm.rank == 0:
        config = {"grids": grid_list, "levels": sorted({n for _, n in todo}), "steps": steps, "alpha": "pi/4"}
        path = write_results(out, "mpdata", machine_info(comm.size), config, rows)
        body = [
            [
                r["grid"],
                f"{r['nodes']}",
                str(r["levels"]),
                f"{r['median_s'] * 1e3:.2f}",
                f"{r['min_s'] * 1e3:.2f}",
                f"{r['exchange_median_s'] * 1e3:.2f}",
                f"{100 * r['exchange_fraction']:.0f} %",
                f"{r['node_updates_per_s'] / 1e6:.2f}",
                f"{min(r['halo_per_rank'])}-{max(r['halo_per_rank'])}",
            ]
            for r in rows
        ]
        columns = ["grid", "nodes", "levels", "step [ms]", "min [ms]", "exchanges [ms]", "share", "Mupd/s", "halo"]
        console.print(table(f"MPDATA step on {comm.size} rank(s) (median, slowest rank)", columns, body))
        console.print(f"results: {path}")
    comm.close()
