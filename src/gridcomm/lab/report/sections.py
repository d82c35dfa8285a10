"""One report section per benchmark: what it measures, its tables (figure, ceiling, peers, seed, energy), the
problem beside the seed's, its plots; and the tables that need several result files of one run (stencil2d per
transport, the MPDATA speed-up)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import groupby

from ..bench import seeds
from . import comm_tables, dwarf_tables
from .document import Block, Heading, Image, Paragraph
from .figures import Cell, Column, FigureTable, cell, ratio
from .folder import Result

Tables = Callable[[Result], list[FigureTable]]

#: The benchmarks a report reads, in the order of its sections: (benchmark, on GPUs) -> its tables.
TABLES: dict[tuple[str, bool], Tables] = {
    ("halo", False): comm_tables.halo_cpu,
    ("halo", True): comm_tables.halo_gpu,
    ("transpose", False): comm_tables.transpose,
    ("p2p", True): comm_tables.transfer,
    ("alltoall", True): comm_tables.transfer,
    ("stencil2d", False): dwarf_tables.stencil2d,
    ("stencil2d", True): dwarf_tables.stencil2d,
    ("mpdata", False): dwarf_tables.mpdata_cpu,
    ("mpdata", True): dwarf_tables.mpdata_gpu,
    ("spectral", False): dwarf_tables.spectral,
    ("spectral", True): dwarf_tables.spectral,
}
ORDER = list(dict.fromkeys(b for b, _ in TABLES))

INTRO = {
    "halo": "Time per halo exchange of 3-D float64 fields (levels contiguous, a 2-D process grid, periodic, box "
    "stencil) against message size and field count, every transport beside its floors measured in the same run. "
    "None of the seed figures this report carries is for a halo exchange alone.",
    "transpose": "The slab redistribution between the passes of a distributed 3-D FFT (an N³ array split along "
    "axis 0 becomes split along axis 1) by gridcomm's Transposer, beside what a user would write or pick instead: "
    "a NumPy pack + MPI_Alltoallv, and mpi4py-fft's Pencil.transfer where it is installed.",
    "p2p": "Latency and bandwidth between 2 GPUs through gridcomm's Transposer, per transport, beside NCCL's own "
    "send/recv and the peer-copy ceiling of the same bytes. The seeds publish no such figure; their all-to-all "
    "figures are whole spectral-transform steps (see spectral).",
    "alltoall": "All-to-all of equal blocks between the GPUs of every rank, per transport, beside NCCL and the "
    "peer-copy ceiling of the same bytes. The seeds' all-to-all figures are whole spectral-transform steps (see "
    "spectral).",
    "stencil2d": "The 2-D Jacobi dwarf (the NVSHMEM study of seed 004): time per step per block size and mode, "
    "beside the same update with no exchange, and beside the seed's table for the same domain size per GPU.",
    "mpdata": "The MPDATA dwarf (diagonal flow, FCT) on the octahedral grid: time per step, its halo exchanges, "
    "energy per step and, on GPUs, each transport beside no exchange, the HBM copy and the seed's Figures 17-19.",
    "spectral": "The spherical-harmonics transform dwarf: time per step (one inverse and one direct transform) and "
    "its split, the Legendre products beside an FP64 matrix product of their shape, the FFTs beside the HBM copy, "
    "energy per step, each transposition transport beside the others and the seed's Figure 4.",
}


UNREADABLE = (KeyError, TypeError, ValueError)  # a file without the fields the tables read (another version)


def tables_of(result: Result) -> list[FigureTable] | None:
    """The result's tables, or None for a benchmark the report does not read (soak, tuning runs). Raises one of
    UNREADABLE for a file that lacks what its benchmark's tables read."""
    make = TABLES.get((result.benchmark, result.gpus > 0))
    return None if make is None else make(result)


def unreadable(result: Result, error: Exception) -> str:
    return f"{result.name} could not be read ({type(error).__name__}: {error}): a file of another gridcomm version?"


def _blocks(tables: Sequence[FigureTable]) -> list[Block]:
    """Each table followed by its notes (a note the tables share, once)."""
    out: list[Block] = []
    said: set[str] = set()
    for t in tables:
        out.append(t.block())
        out += [Paragraph(note) for note in t.notes if note not in said]
        said.update(t.notes)
    return out


def _stencil2d_peers(results: Sequence[Result]) -> list[FigureTable]:
    """Runs of one rank count over several transports, side by side for the (n, mode) cases they share."""
    out = []
    by_ranks = sorted(results, key=lambda r: (r.ranks, r.gpus))
    for (ranks, gpus), group in groupby(by_ranks, key=lambda r: (r.ranks, r.gpus)):
        runs = {res.rows[0]["transport"]: res for res in group if res.rows}
        if len(runs) < 2:
            continue
        table = FigureTable(
            f"2-D Jacobi step per transport, {next(iter(runs.values())).where}: the peers measured in this run",
            ["n", "mode"],
            [*(Column(name, "µs") for name in runs), Column("ceiling: no exchange", "µs"), dwarf_tables.JOULES],
        )
        cases = dict.fromkeys((r["n"], r["mode"]) for res in runs.values() for r in res.rows)
        for n, mode in cases:
            # one figure per transport: each transport's own table above carries its energy per step
            cells = {dwarf_tables.JOULES.name: Cell(text="in each transport's table")}
            for name, res in runs.items():
                row = next((r for r in res.rows if (r["n"], r["mode"]) == (n, mode)), None)
                cells[name] = cell(row and row["time_per_step_s"], 1e6, why="— (not run)")
                if row:
                    cells.setdefault("ceiling: no exchange", cell(row["no_exchange_s"], 1e6))
            table.add((n, mode), cells)
        table.notes.append(f"{ranks} rank(s), {gpus} GPU(s); graph mode needs a transport a CUDA graph can capture.")
        out.append(table)
    return out


def _mpdata_speedup(results: Sequence[Result]) -> list[FigureTable]:
    """Each MPDATA row on several GPUs over the same case's no-exchange step on 1 GPU of the same run."""
    gpu = [res for res in results if res.gpus]
    single = {(r["grid"], r["levels"]): r for res in gpu if res.gpus == 1 for r in res.rows if r["transport"] == "none"}
    many = [(res, r) for res in gpu if res.gpus > 1 for r in res.rows if (r["grid"], r["levels"]) in single]
    if not many:
        return []
    table = FigureTable(
        "MPDATA speed-up over 1 GPU with no exchange (the seed's Figure 18)",
        ["grid", "levels", "GPUs", "transport"],
        [Column("1 GPU, no exchange", "ms"), Column("step", "ms"), Column("speed-up", "x"),
         Column("parallel efficiency", "%")],
    )  # fmt: skip
    for res, r in many:
        base = single[(r["grid"], r["levels"])]["time_per_step_s"]
        table.add(
            (r["grid"], r["levels"], res.gpus, r["transport"]),
            {
                "1 GPU, no exchange": cell(base, 1e3),
                "step": cell(r["time_per_step_s"], 1e3),
                "speed-up": ratio(base, r["time_per_step_s"]),
                "parallel efficiency": Cell(100 * base / r["time_per_step_s"] / res.gpus),
            },
        )
    table.notes.append(f"Seed 000, Figure 18: {seeds.PLOT_ONLY['000 Figure 18']}.")
    return [table]


#: Tables built from all of a benchmark's result files together.
ACROSS: dict[str, Callable[[Sequence[Result]], list[FigureTable]]] = {
    "stencil2d": _stencil2d_peers,
    "mpdata": _mpdata_speedup,
}


def section(benchmark: str, results: Sequence[Result]) -> list[Block]:
    """The section of one benchmark: its introduction, each result file's tables and plot, the tables across
    files."""
    blocks: list[Block] = [Heading(benchmark), Paragraph(INTRO[benchmark])]
    for res in results:
        problem = res.config.get("problem")
        blocks.append(Heading(f"{benchmark}: {res.where} ({res.name})", 3))
        blocks.append(Paragraph(f"Measured {res.machine['date']}." + (f" Problem: {problem}." if problem else "")))
        try:
            blocks += _blocks(tables_of(res) or [])
        except UNREADABLE as error:
            blocks.append(Paragraph(unreadable(res, error)))
        if res.png:
            blocks.append(Image(res.png, f"{benchmark}, {res.where}"))
    if benchmark in ACROSS:
        try:
            blocks += _blocks(ACROSS[benchmark](results))
        except UNREADABLE as error:
            blocks.append(Paragraph(f"The tables across the {benchmark} files could not be made ({error!r})."))
    return blocks
