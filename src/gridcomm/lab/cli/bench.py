"""``gridcomm bench ...``: each figure beside its floor and its peers, measured in the same run."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from ..console import console, progress, say_written, table
from .common import (
    NpOption,
    OutOption,
    Sizes,
    Typer,
    check_options,
    int_list,
    name_list,
    ranks_or_relaunch,
    sizes_option,
)

bench_app = Typer(no_args_is_help=True, help="Benchmarks: each figure beside its floor, measured in the same run.")

#: Where results go unless --out says: the current directory (not a folder of the checkout, which a user running
#: a benchmark elsewhere did not ask for).
HERE = Path(".")
SamplesOption = Annotated[int, typer.Option(help="Timed samples per figure (median reported).")]
GpuOption = Annotated[bool, typer.Option("--gpu/--cpu", help="Fields on the GPUs (one per rank) or on the host.")]
PeersOption = Annotated[
    bool,
    typer.Option(
        "--peers/--no-peers",
        help="Also time the libraries a user could pick instead, where installed (docs/benchmarks.md, Peers).",
    ),
]


@contextlib.contextmanager
def bench_ranks(nprocs: int, gpu: bool) -> Iterator[Any]:
    """The ranks of a benchmark: ``nprocs`` of them started here unless under a launcher, one Communicator over
    them (closed at the end), each rank on a GPU of its own with ``gpu``."""
    ranks_or_relaunch(nprocs)
    from ...comm import Communicator

    comm = Communicator()
    if gpu:
        from ...gpu import use_local_gpu

        use_local_gpu(comm)
    yield comm
    comm.close()  # not after an error: the other ranks may not get here, and closing is collective


def run_each(comm: Any, what: str, items: Sequence[Any], run: Callable[[Any], Any]) -> list[Any]:
    """``run(item)`` for every item (collective), a progress bar on rank 0 saying ``what``; the results in order."""
    rows = []
    with progress(comm.rank == 0) as bar:
        task = bar.add_task(what, total=len(items))
        for item in items:
            rows.append(run(item))
            bar.advance(task)
    return rows


def save(
    out: Path,
    kind: str,
    machine: dict[str, Any],
    config: dict[str, Any],
    rows: list[dict[str, Any]],
    plot: Callable[[dict[str, Any], Path], Path] | None = None,
    payload: dict[str, Any] | None = None,
) -> tuple[Path, Path | None]:
    """Write a benchmark's JSON into ``out`` and, with ``plot``, its PNG beside it (``plot`` reads the machine,
    the results and what ``payload`` adds); their paths, for ``say_written``."""
    from ..bench.results import write_results

    path = write_results(out, kind, machine, config, rows)
    if plot is None:
        return path, None
    return path, plot({"machine": machine, "results": rows, **(payload or {})}, path.with_suffix(".png"))


@bench_app.command("halo")
def bench_halo(
    nprocs: NpOption = 2,
    gpu: GpuOption = False,
    sizes: Annotated[str | None, typer.Option(help="Horizontal points per rank side, comma-separated.")] = None,
    fields: Annotated[str, typer.Option(help="Field counts, comma-separated.")] = "1,4,16",
    levels: Annotated[int, typer.Option(help="Vertical levels (the contiguous dimension).")] = 60,
    halo: Annotated[int, typer.Option(help="Halo width in both horizontal dimensions.")] = 3,
    samples: SamplesOption = 7,
    quick: Annotated[bool, typer.Option(help="Two sizes, one field count, 3 samples: a smoke run.")] = False,
    mixed: Annotated[
        bool,
        typer.Option(
            "--mixed",
            help="A C-grid's u, v (cell faces, halo 1) and p (cell centres, halo --halo) in one exchange against "
            "three separate exchanges (--fields is not used).",
        ),
    ] = False,
    out: OutOption = HERE,
    peers: PeersOption = True,
) -> None:
    """Time per halo exchange against message size and field count, beside its floors measured in the same
    run: bare MPI and GHEX (where installed) on the host; NCCL's own send/recv, the peer-copy and HBM ceilings on
    the GPU. With --mixed: one exchange of fields of different halos and staggering against one exchange per
    field."""
    default_sizes = "16,32,64,128,256,512,1024" if gpu else "8,16,32,64,128"
    size_list = [8, 32] if quick else int_list(sizes or default_sizes, "--sizes")
    field_list = [2] if quick else int_list(fields, "--fields")
    samples = 3 if quick else samples
    with bench_ranks(nprocs, gpu) as comm:
        if mixed:
            _bench_halo_mixed(comm, gpu, size_list, levels, halo, samples, out)
        else:
            _bench_halo(comm, gpu, size_list, field_list, levels, halo, samples, peers, out)


def say_refused(refused: dict[str, str]) -> None:
    """One line per transport a benchmark left out because it refused to bind, with why."""
    for name, why in refused.items():
        console.print(f"[yellow]{name} not timed[/yellow]: {why}")


def say_peers(comm: Any, reasons: dict[str, str | None]) -> None:
    """Rank 0 says, one line each, which peers are skipped and why."""
    if comm.rank == 0:
        for reason in reasons.values():
            if reason is not None:
                console.print(f"skipped: {reason}")


def _bench_halo(
    comm: Any,
    gpu: bool,
    size_list: list[int],
    field_list: list[int],
    levels: int,
    halo: int,
    samples: int,
    peers: bool,
    out: Path,
) -> None:
    from ..bench.halo import cases, gpu_variants, peer_reasons, run_case, run_gpu_case
    from ..bench.results import plot_halo, plot_halo_gpu
    from ..measure.machine import machine_info

    if gpu:
        from ..bench.ceilings import hbm_copy_gbps

        variants, hbm = gpu_variants(comm), hbm_copy_gbps(comm)
        refused: dict[str, str] = {}  # transport -> why it could not bind
        reasons = peer_reasons(comm, on_device=True) if peers else {}
        say_peers(comm, reasons)

        def run(case: Any) -> dict[str, Any]:
            return run_gpu_case(comm, case, samples, variants, hbm, refused, reasons)
    else:
        reasons = peer_reasons(comm) if peers else {}
        say_peers(comm, reasons)

        def run(case: Any) -> dict[str, Any]:
            return run_case(comm, case, samples, reasons)

    rows = run_each(comm, "halo exchange cases", cases(size_list, field_list, levels, halo), run)
    if comm.rank == 0:
        machine = machine_info(comm.size, gpus_used=comm.size if gpu else 0)
        config = {
            "sizes": size_list,
            "fields": field_list,
            "levels": levels,
            "halo": halo,
            "samples": samples,
            "problem": "3-D float64 fields, horizontal 2-D process grid, periodic horizontally, box stencil",
            "peers": reasons,
            "refused": refused if gpu else {},
        }
        path, png = save(out, "halo", machine, config, rows, plot_halo_gpu if gpu else plot_halo)
        console.print(_halo_gpu_table(rows) if gpu else _halo_table(rows))
        say_refused(config["refused"])
        say_written(path, png)


def _halo_table(rows: list[dict[str, Any]]) -> Any:
    names, peers = list(rows[0]["variants"]), list(rows[0]["peers"])
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
                *(f"{r['peers'][p]['median_s'] * 1e6:.1f}" for p in peers),
                f"{r['floor']['median_s'] * 1e6:.1f}",
                f"{r['floor_fresh']['median_s'] * 1e6:.1f}",
                f"{r['best_over_floor']:.2f}x",
                f"{r['best_over_floor_fresh']:.2f}x",
                *([f"{min(r['peers_over_best'].values()):.2f}x"] if peers else []),
            ]
        )
    columns = ["n×n", "fields", "KiB/peer", *names, *peers, "floor", "floor fresh", "best/floor", "best/fresh",
               *(["peer/best"] if peers else [])]  # fmt: skip
    title = "time per halo exchange (µs) (median; slowest rank)"
    if peers:
        title += "; peer/best: the fastest peer's time over gridcomm's best (above 1: gridcomm is faster)"
    return table(title, columns, body)


def _bench_halo_mixed(
    comm: Any, gpu: bool, size_list: list[int], levels: int, halo: int, samples: int, out: Path
) -> None:
    from ..bench.halo import gpu_variants, host_variants
    from ..bench.mixed import MixedCase, run_mixed_case
    from ..measure.machine import machine_info

    if gpu:
        import cupy

        from ..bench.ceilings import time_gpu

        transports: dict[str, Any] = gpu_variants(comm)
        xp, timer = cupy, (lambda run, n: time_gpu(comm, run, n))
    else:
        import numpy

        transports, xp, timer = host_variants(comm), numpy, None
    rows = run_each(
        comm,
        "mixed halo cases",
        size_list,
        lambda n: run_mixed_case(comm, MixedCase(n, levels, halo), samples, transports, xp, timer),
    )
    if comm.rank == 0:
        machine = machine_info(comm.size, gpus_used=comm.size if gpu else 0)
        config = {
            "sizes": size_list,
            "levels": levels,
            "halo": halo,
            "samples": samples,
            "problem": "3-D float64 u (x faces), v (y faces), halo 1, and p (cell centres), halo --halo; a channel "
            "periodic in x with walls in y, horizontal 2-D process grid, box stencil",
        }
        path, png = save(out, "halo-mixed", machine, config, rows)
        console.print(_halo_mixed_table(rows))
        say_written(path, png)


def _halo_mixed_table(rows: list[dict[str, Any]]) -> Any:
    from ..bench.mixed import WAYS

    names = list(rows[0]["times"])
    body = []
    for r in rows:
        for name in names:
            times = [f"{r['times'][name][way]['median_s'] * 1e6:.1f}" for way in WAYS]
            body.append(
                [
                    f"{r['n']}²",
                    f"{r['bytes_per_rank'] / 1024:.0f} / {r['same_bytes_per_rank'] / 1024:.0f}",
                    f"{r['messages_per_rank']['one']} / {r['messages_per_rank']['three']}",
                    name,
                    *times,
                    f"{r['three_over_one'][name]:.2f}x",
                    f"{r['overlapped_over_one'][name]:.2f}x",
                    f"{r['one_over_same_bytes'][name]:.2f}x",
                ]
            )
    columns = ["n×n", "KiB/rank (one / same)", "messages", "transport", *WAYS, "three/one", "overlapped/one",
               "one/same bytes"]  # fmt: skip
    title = (
        "u, v, p: one exchange against three, and against one field of one halo moving the same bytes (µs) "
        "(median; slowest rank)"
    )
    return table(title, columns, body)


def _halo_gpu_table(rows: list[dict[str, Any]]) -> Any:
    names = list(rows[0]["times"])
    body = []
    for r in rows:
        times = {n: f"{r['times'][n]['median_s'] * 1e6:.1f}" if n in r["times"] else "-" for n in names}
        cells = [f"[bold]{t}[/]" if n == r["best"] else t for n, t in times.items()]
        ratio = r["best_over_nccl"]
        body.append(
            [
                f"{r['n']}²",
                str(r["fields"]),
                f"{r['bytes_per_peer_mean'] / 1024:.0f}",
                *cells,
                "-" if ratio is None else f"{ratio:.2f}x",
                f"{r['pack_GBps']:.0f} / {r['unpack_GBps']:.0f}",
                f"{r['hbm_copy_GBps']:.0f}",
            ]
        )
    columns = ["n×n", "fields", "KiB/peer", *names, "best/nccl", "pack/unpack GB/s", "HBM GB/s"]
    return table("time per halo exchange on the GPU (µs) (median; slowest rank)", columns, body)


TransferTransports = Annotated[
    str | None,
    typer.Option(
        help="Transports to time, comma-separated names or labels (e.g. ipc,ipc/two-way,ipc/one_way_bytes=65536), "
        "or NODE+NETWORK for a transport per group of peers on several nodes (e.g. ipc/blocks=66+nccl); default: "
        "every one usable here and its variants (and their mixes). NCCL's own calls and the ceilings are always "
        "timed."
    ),
]


@bench_app.command("p2p")
def bench_p2p(
    nprocs: NpOption = 2,
    smallest: Annotated[int, typer.Option(help="Smallest message (bytes).")] = 8,
    largest: Annotated[int, typer.Option(help="Largest message (bytes).")] = 256 << 20,
    samples: SamplesOption = 7,
    out: OutOption = HERE,
    transports: TransferTransports = None,
) -> None:
    """Latency and bandwidth of each GPU transport between 2 GPUs, beside NCCL and the peer-copy ceiling."""
    _bench_transfer("p2p", nprocs, smallest, largest, samples, out, transports, exact_ranks=2)


@bench_app.command("alltoall")
def bench_alltoall(
    nprocs: NpOption = 2,
    smallest: Annotated[int, typer.Option(help="Smallest block per peer (bytes).")] = 8,
    largest: Annotated[int, typer.Option(help="Largest block per peer (bytes).")] = 256 << 20,
    samples: SamplesOption = 7,
    out: OutOption = HERE,
    transports: TransferTransports = None,
) -> None:
    """All-to-all of equal blocks between the GPUs of every rank, per transport, beside NCCL and the ceiling."""
    _bench_transfer("alltoall", nprocs, smallest, largest, samples, out, transports, exact_ranks=None)


def _bench_transfer(
    kind: str,
    nprocs: int,
    smallest: int,
    largest: int,
    samples: int,
    out: Path,
    transports: str | None,
    exact_ranks: int | None,
) -> None:
    from ...launch import launcher_rank, under_launcher

    def check(ranks: int | None) -> None:
        if exact_ranks is not None and ranks is not None and ranks != exact_ranks:
            raise typer.BadParameter(
                f"bench {kind} runs on exactly {exact_ranks} ranks, not {ranks}", param_hint="'--np'"
            )

    job = launcher_rank() if under_launcher() else (0, nprocs)
    check(job and job[1])  # before any rank starts where the launcher tells the count: said once, by rank 0
    with bench_ranks(nprocs, gpu=True) as comm:
        check(comm.size)
        _bench_transfer_on(comm, kind, smallest, largest, samples, out, transports)


def _bench_transfer_on(
    comm: Any, kind: str, smallest: int, largest: int, samples: int, out: Path, transports: str | None
) -> None:
    from ...transports import by_label
    from ..bench.results import bytes_text, plot_transfer
    from ..bench.transfer import STAGED_LEGS, run_transfer, sizes_between
    from ..measure.machine import machine_info

    sizes = sizes_between(smallest, largest)
    with progress(comm.rank == 0) as bar:
        task = bar.add_task(f"{kind}: message sizes", total=len(sizes))
        # those named, else every usable transport's variants and, on several nodes, their mixes (run_transfer's)
        chosen = {label: by_label(label) for label in name_list(transports, "--transports")} if transports else None
        rows, shared = run_transfer(comm, sizes, chosen, samples, lambda done: bar.update(task, completed=done))
    if comm.rank == 0:
        machine = machine_info(comm.size, gpus_used=comm.size)
        config = {"sizes": sizes, "samples": samples, "ranks": comm.size, **shared}
        path, png = save(out, kind, machine, config, rows, plot_transfer, {"benchmark": kind, "config": config})
        names = [n for n in rows[0]["times"] if n not in STAGED_LEGS]  # staged's legs: one column of their own
        staged = "staged_ceiling_GBps" in rows[0]
        body = [
            [bytes_text(r["bytes_per_peer"])]
            + [
                "-"  # refused at a later size (shared["refused"])
                if n not in r["times"]
                else f"{r['times'][n]['median_s'] * 1e6:.1f} µs"
                if r["bytes_per_peer"] < 1 << 20
                else f"{r['GBps'][n]:.0f}"
                for n in names
            ]
            + [f"{r['ceiling_GBps']:.0f}"]
            + [f"{r['best_vs_nccl_best']:.2f} ({r['best']})" if r["best"] else "-"]
            + (
                [
                    f"{r['staged_ceiling_GBps']:.1f} ({r['staged_ceiling_leg']}): {r['staged_share_of_ceiling']:.2f}"
                    f"; both at once: {r['staged_share_of_both_ways']:.2f}"
                ]
                if staged
                else []
            )
            for r in rows
        ]
        nominal = shared["nvlink_nominal_GBps"]
        title = (
            f"{kind} on {comm.size} GPUs: time per exchange below 1 MiB, busbw GB/s from 1 MiB (bytes each rank "
            f"sends to the others per s, as nccl-tests); NVLink nominal "
            f"{f'{nominal:.0f} GB/s out of each GPU' if nominal else 'unknown'}"
        )
        staged_column = (
            ["staged's ceiling GB/s (slower copy alone): share; share of both copies at once"] if staged else []
        )
        console.print(table(title, ["per peer", *names, "ceiling", "best ÷ NCCL's best", *staged_column], body))
        if shared["torch_missing"]:
            console.print(f"no torch.distributed peer: {shared['torch_missing']}")
        if shared["mpi4jax_missing"]:
            console.print(f"no mpi4jax peer: {shared['mpi4jax_missing']}")
        say_refused(shared["refused"])
        say_written(path, png)


@bench_app.command("transpose")
def bench_transpose(
    nprocs: NpOption = 2,
    sizes: Annotated[str, typer.Option(help="Points N per side of the global N x N x N array, comma-separated.")] = (
        "32,64,128,256"
    ),
    dtype: Annotated[str, typer.Option(help="Element type: float64 or complex128.")] = "float64",
    samples: SamplesOption = 7,
    quick: Annotated[bool, typer.Option(help="Two sizes, 3 samples: a smoke run.")] = False,
    also: Annotated[
        str,
        typer.Option(help="Transport labels timed beside gridcomm's variants, comma-separated: shm/direct_bytes=0."),
    ] = "",
    peers: PeersOption = True,
    out: OutOption = HERE,
) -> None:
    """Time the slab redistribution of a distributed 3-D FFT (an N³ array split along axis 0 becomes split along
    axis 1) by gridcomm's Transposer.slabs, beside a hand-written pack + MPI_Alltoallv and mpi4py-fft's
    Pencil.transfer (where installed), all on the host, checked equal and measured in the same run."""
    if dtype not in ("float64", "complex128"):
        raise typer.BadParameter(f"{dtype!r}: use float64 or complex128", param_hint="'--dtype'")
    size_list = [16, 32] if quick else int_list(sizes, "--sizes")
    samples = 3 if quick else samples
    extra = _host_transports(also, "--also") if also else {}
    with bench_ranks(nprocs, gpu=False) as comm:
        _bench_transpose(comm, size_list, dtype, samples, peers, out, extra)


def _host_transports(text: str, what: str) -> dict[str, Any]:
    """Transport labels (``"shm/direct_bytes=0"``, ``"cma"``) as the configured transports, by label."""
    from ...errors import TransportError
    from ...transports import by_label, kind

    chosen = {}
    for label in name_list(text, what):
        try:
            transport = by_label(label)
            chosen[label] = kind(transport)() if isinstance(transport, str) else transport
        except TransportError as error:
            raise typer.BadParameter(f"{label!r}: {error}", param_hint=f"'{what}'") from None
        if isinstance(transport, dict):
            raise typer.BadParameter(f"{label!r}: one transport, not a mix of two", param_hint=f"'{what}'")
    return chosen


def _bench_transpose(
    comm: Any, size_list: list[int], dtype: str, samples: int, peers: bool, out: Path, extra: dict[str, Any]
) -> None:
    from ..bench.results import bytes_text
    from ..bench.transpose import peer_reasons, run_transpose_case
    from ..measure.machine import machine_info

    reasons = peer_reasons(comm) if peers else {}
    say_peers(comm, reasons)
    rows = run_each(
        comm, "transposition sizes", size_list, lambda n: run_transpose_case(comm, n, dtype, samples, reasons, extra)
    )
    if comm.rank == 0:
        machine = machine_info(comm.size, gpus_used=0)
        config = {
            "sizes": size_list,
            "dtype": dtype,
            "samples": samples,
            "problem": "N x N x N array, slabs along axis 0 -> slabs along axis 1 (gridcomm.slab's blocks)",
            "peers": reasons,
        }
        path, _ = save(out, "transpose", machine, config, rows)
        names, peer_names = list(rows[0]["variants"]), list(rows[0]["peers"])
        body = [
            [
                str(r["n"]),
                bytes_text(r["bytes_per_rank_max"]),
                *(
                    f"[bold]{r['variants'][v]['median_s'] * 1e6:.1f}[/]"
                    if v == r["best"]
                    else f"{r['variants'][v]['median_s'] * 1e6:.1f}"
                    for v in names
                ),
                *(f"{r['peers'][p]['median_s'] * 1e6:.1f} {r['peers_over_best'][p]:.2f}x" for p in peer_names),
                f"{r['one_copy']['median_s'] * 1e6:.1f} (best {r['best_over_one_copy']:.2f}x)",
            ]
            for r in rows
        ]
        columns = [
            "N",
            "per rank",
            *(f"gridcomm {v}" for v in names),
            *(f"{p}, /best" for p in peer_names),
            "ceiling: one copy",
        ]
        title = f"slab redistribution of an N³ {dtype} array on {comm.size} rank(s) (µs, median; slowest rank)"
        console.print(table(title, columns, body))
        say_written(path, None)


@bench_app.command("stencil2d")
def bench_stencil2d(
    nprocs: NpOption = 2,
    gpu: Annotated[bool | None, typer.Option("--gpu/--cpu", help="GPU (CuPy) or CPU; default: GPU if found.")] = None,
    sizes: Annotated[
        str, typer.Option(help="Points per rank side, comma-separated.")
    ] = "64,128,256,512,1024,2048,4096,8192",
    transport: Annotated[str, typer.Option(help="Halo transport: auto, or one of `gridcomm info`'s.")] = "auto",
    modes: Annotated[
        str | None,
        typer.Option(
            help="Modes, comma-separated (default: every mode this machine runs; nvshmem and persistent "
            "where the nvshmem extra is installed)."
        ),
    ] = None,
    samples: SamplesOption = 7,
    out: OutOption = HERE,
) -> None:
    """Time per 2-D Jacobi step for every block size and mode, beside the same step with no exchange and the
    traditional and persistent-kernel figures of NVIDIA's NVSHMEM stencil case study; JSON and a PNG plot."""
    from ...device import gpu_count
    from ..apps.stencil2d.config import CPU_MODES

    on_gpu = gpu_count() > 0 if gpu is None else gpu
    size_list = int_list(sizes, "--sizes")
    mode_list = name_list(modes, "--modes") if modes else None
    if mode_list is None and not on_gpu:
        mode_list = list(CPU_MODES)
    with bench_ranks(nprocs, on_gpu) as comm:
        _bench_stencil2d(comm, on_gpu, size_list, mode_list, transport, samples, out)


def _bench_stencil2d(
    comm: Any, on_gpu: bool, size_list: list[int], mode_list: list[str] | None, transport: str, samples: int, out: Path
) -> None:
    from ..bench.stencil2d import benchmark_config, benchmark_stencil2d, plot_stencil2d
    from ..measure.machine import machine_info

    with progress(comm.rank == 0) as bar:
        task = bar.add_task("stencil2d cases", total=None)
        rows = benchmark_stencil2d(
            comm, size_list, mode_list, xp="cupy" if on_gpu else "numpy", transport=transport, samples=samples,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )  # fmt: skip
    if comm.rank == 0:
        machine = machine_info(comm.size, gpus_used=comm.size if on_gpu else 0)
        config = benchmark_config(size_list, sorted({r["mode"] for r in rows}), "float64", transport, samples)
        path, png = save(out, "stencil2d", machine, config, rows, plot_stencil2d, {"config": config})
        body = [
            [
                str(r["n"]),
                r["mode"] if r["transport"] in (transport, "none") else f"{r['mode']} ({r['transport']})",
                f"{r['time_per_step_s'] * 1e6:.1f}",
                f"{r['no_exchange_s'] * 1e6:.1f}",
                f"{r['over_no_exchange']:.2f}x",
                "-" if r["seed_traditional_us"] is None else f"{r['seed_traditional_us']:.1f}",
                "-" if r["seed_persistent_us"] is None else f"{r['seed_persistent_us']:.1f}",
                "-" if r["joules_per_step"] is None else f"{r['joules_per_step'] * 1e3:.3f}",
            ]
            for r in rows
        ]
        columns = ["n", "mode", "step (µs)", "no exchange (µs)", "ratio", "NVSHMEM study trad. (µs)", "persistent (µs)",
                   "mJ/step"]  # fmt: skip
        console.print(table(f"2-D Jacobi step on {comm.size} rank(s), transport {transport}", columns, body))
        say_written(path, png)


@bench_app.command("mpdata")
def bench_mpdata(
    nprocs: NpOption = 4,
    grids: Annotated[
        str | None,
        typer.Option(help="Octahedral grids, comma-separated (default O24,O48,O96; --gpu: O640,O1024,O1280)."),
    ] = None,
    levels: Annotated[
        str | None, typer.Option(help="Vertical level counts, comma-separated (default 1,16; --gpu: 32).")
    ] = None,
    steps: Annotated[int, typer.Option(help="CPU: timed steps per case (median reported).")] = 20,
    gpu: GpuOption = False,
    transports: Annotated[
        str,
        typer.Option(help="With --gpu: none (one rank), host (ESCAPE D3.4's baseline), auto or gridcomm transports."),
    ] = ",".join(("none", "ipc", "nccl", "staged", "host")),
    compare: Annotated[
        list[Path] | None, typer.Option("--with", help="With --gpu: earlier result files drawn beside this run.")
    ] = None,
    out: OutOption = HERE,
) -> None:
    """Time per MPDATA step (diagonal flow, FCT). CPU: the share spent in its two halo exchanges. GPU: per
    transport, graphs where the transport allows, energy per step, the step over the no-exchange step, and
    each kernel's bandwidth beside the HBM copy bandwidth measured in the same run."""
    grid_list = name_list(grids or ("O640,O1024,O1280" if gpu else "O24,O48,O96"), "--grids")
    level_list = int_list(levels or ("32" if gpu else "1,16"), "--levels")
    transport_list = name_list(transports, "--transports")
    with bench_ranks(nprocs, gpu) as comm:
        if gpu:
            _bench_mpdata_gpu(comm, grid_list, level_list, transport_list, compare or [], out)
        else:
            _bench_mpdata_cpu(comm, grid_list, level_list, steps, out)


def _bench_mpdata_cpu(comm: Any, grid_list: list[str], level_list: list[int], steps: int, out: Path) -> None:
    from ..apps.mpdata import benchmark_mpdata
    from ..measure.machine import machine_info

    todo = [(g, n) for g in grid_list for n in level_list]
    rows = run_each(
        comm, "MPDATA cases", todo, lambda case: benchmark_mpdata(comm, case[0], levels=case[1], steps=steps)
    )
    if comm.rank == 0:
        config = {"grids": grid_list, "levels": sorted(level_list), "steps": steps, "alpha": "pi/4"}
        path, _ = save(out, "mpdata", machine_info(comm.size), config, rows)
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
        columns = ["grid", "nodes", "levels", "step (ms)", "min (ms)", "exchanges (ms)", "share", "Mupd/s", "halo"]
        console.print(table(f"MPDATA step on {comm.size} rank(s) (median, slowest rank)", columns, body))
        say_written(path)


def _bench_mpdata_gpu(
    comm: Any, grid_list: list[str], level_list: list[int], transport_list: list[str], compare: list[Path], out: Path
) -> None:
    import json

    from ...gpu import gpus_in_use
    from ...grids.mesh import MedianDualMesh
    from ..bench.ceilings import hbm_copy_gbps
    from ..bench.mpdata import benchmark_case, mark_overheads
    from ..bench.mpdata_plot import plot_mpdata
    from ..bench.seeds import SEED_MPDATA
    from ..measure.machine import machine_info

    gpus = gpus_in_use(comm)
    if comm.size > 1 and "none" in transport_list:
        transport_list = [t for t in transport_list if t != "none"]  # halos must move on several ranks
    hbm = hbm_copy_gbps(comm)
    rows = []
    with progress(comm.rank == 0) as bar:
        task = bar.add_task("MPDATA cases (GPU)", total=len(grid_list) * len(level_list) * len(transport_list))
        for grid in grid_list:
            bar.update(task, description=f"MPDATA: building the {grid} mesh")
            mesh = MedianDualMesh(grid)
            for nlev in level_list:
                for k, transport in enumerate(transport_list):
                    bar.update(task, description=f"MPDATA {grid}, {nlev} levels, {transport}")
                    row = benchmark_case(comm, mesh, transport, levels=nlev, hbm=hbm, gpus=gpus, kernels=k == 0)
                    rows.append(row)
                    bar.advance(task)
            del mesh
    mark_overheads(rows)
    if comm.rank != 0:
        return
    machine = machine_info(comm.size, gpus_used=gpus)
    config = {"grids": grid_list, "levels": level_list, "transports": transport_list, "alpha": "pi/4", "fct": True,
              "seed": SEED_MPDATA}  # fmt: skip
    path, _ = save(out, "mpdata", machine, config, rows)
    payloads = [{"machine": machine, "config": config, "results": rows}]
    payloads += [json.loads(Path(p).read_text()) for p in compare]
    png = plot_mpdata(payloads, path.with_suffix(".png"))

    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x * 1e3:.2f}"

    body = [
        [
            r["grid"],
            str(r["levels"]),
            r["transport"]
            if r["transport_used"] in (r["transport"], "none")
            else f"{r['transport']} ({r['transport_used']})",
            "yes" if r["graphs"] else "no",
            ms(r["time_per_step_s"]),
            "-" if r["over_no_exchange"] is None else f"{r['over_no_exchange']:.3f}x",
            "-" if r["step_share_of_hbm"] is None else f"{100 * r['step_share_of_hbm']:.0f} %",
            "-" if r["joules_per_step"] is None else f"{r['joules_per_step']:.2f}",
            "-" if r["watts"] is None else f"{r['watts']:.0f}",
            "yes" if r["checksums_agree"] else "[bold red]NO[/]",
        ]
        for r in rows
    ]
    columns = ["grid", "levels", "transport", "graph", "step (ms)", "over no exch.", "step / HBM", "J/step", "W",
               "same result"]  # fmt: skip
    console.print(table(f"MPDATA step on {comm.size} rank(s), {gpus} GPU(s); HBM copy {hbm:.0f} GB/s", columns, body))
    kernels = [(r["grid"], r["levels"], k) for r in rows for k in r["kernels"]]
    body = [
        [g, str(n), k["kernel"], f"{k['time_s'] * 1e3:.3f}", f"{100 * k['share_of_step']:.0f} %", f"{k['GBps']:.0f}",
         f"{100 * k['share_of_hbm']:.0f} %"]
        for g, n, k in kernels
    ]  # fmt: skip
    columns = ["grid", "levels", "kernel", "time (ms)", "of step", "GB/s (fewest bytes)", "of HBM copy"]
    console.print(table("MPDATA kernels, each timed alone", columns, body))
    seed = SEED_MPDATA
    console.print(
        f"ESCAPE D3.4 (one V100, its 1024 case, level count not stated): {seed['no_exchange_s'] * 1e3:.1f} ms without "
        f"exchange, {seed['exchange_s'] * 1e3:.1f} ms with its GPU exchange, {seed['host_staged_s'] * 1e3:.1f} ms "
        f"host-staged; {seed['joules_per_step'][0]:g}-{seed['joules_per_step'][1]:g} J per step on 1-8 GPUs"
    )
    say_written(path, png)
    if not all(r["checksums_agree"] for r in rows):
        raise typer.Exit(1)


@bench_app.command("spectral")
def bench_spectral(
    nprocs: NpOption = 2,
    grids: Annotated[str, typer.Option(help="Octahedral grids, comma-separated (T = N - 1 on each).")] = "O80,O160",
    levels: Annotated[int, typer.Option(help="Vertical levels of each 3-D field.")] = 10,
    fields: Annotated[int, typer.Option(help="3-D fields (a surface field is added).")] = 3,
    steps: Annotated[int, typer.Option(help="Timed steps (each one inverse and one direct transform).")] = 5,
    transports: Annotated[
        str,
        typer.Option(
            help="Transposition transports, comma-separated (auto, names or labels: e.g. staged,nccl,ipc,"
            "ipc/copy-engine, ipc/blocks=64)."
        ),
    ] = "auto",
    pipeline: Annotated[
        str,
        typer.Option(
            help="Pipelines, comma-separated: stages of wavenumbers (8) or stages x groups of rows (8x2), each "
            "(stage, group) transposed apart beside the Legendre products and FFTs of the others (with --gpu and "
            "graphs; 1: everything at once; auto: 8x2 where a CUDA graph replays the transport, else 1)."
        ),
    ] = "auto",
    gpu: GpuOption = False,
    graphs: Annotated[
        bool, typer.Option("--graphs/--no-graphs", help="With --gpu: replay each phase as a CUDA graph.")
    ] = True,
    fft_streams: Annotated[
        int | None, typer.Option(help="With --gpu: CUDA streams the row FFTs are spread over (default 4).")
    ] = None,
    peer: Annotated[
        bool,
        typer.Option(
            "--peer/--no-peer", help="Time the same step by ducc0 on the node's CPUs, once per grid (needs ducc0)."
        ),
    ] = True,
    out: OutOption = HERE,
) -> None:
    """Time per step of the spectral-transform dwarf and its split (Legendre, FFT, transposition), the
    Legendre rate beside a batched FP64 matrix product of the same shape and, with --gpu, the FFT phase's
    bandwidth beside the HBM copy bandwidth; beside the step, the same step by ducc0 on the CPUs of the node.
    All measured in the same run."""
    grid_list = name_list(grids, "--grids")
    transport_list = name_list(transports, "--transports")
    options = {"levels": levels, "fields": fields, "steps": steps, "gpu": gpu, "fft_streams": fft_streams}
    from ..apps.spectral.dwarf import pipeline_shape

    pipelines = name_list(pipeline, "--pipeline")
    check_options({"--pipeline": lambda: [pipeline_shape(p, gpu) for p in pipelines]})
    with bench_ranks(nprocs, gpu) as comm:
        _bench_spectral(comm, grid_list, transport_list, pipelines if comm.size > 1 else ["1"], options, graphs,
                        peer, out)  # fmt: skip


def _bench_spectral(
    comm: Any,
    grid_list: list[str],
    transport_list: list[str],
    pipelines: list[str],
    options: dict[str, Any],
    graphs: bool,
    peer: bool,
    out: Path,
) -> None:
    from ...grids.octahedral import OctahedralGrid
    from ..bench.spectral import benchmark_spectral, ducc0_peer, plot_spectral, spectral_case
    from ..measure.machine import machine_info

    gpu, levels, fields = options["gpu"], options["levels"], options["fields"]
    if comm.size == 1 and len(transport_list) > 1:  # one rank transposes nothing: every transport is the same run
        console.print(
            f"one rank has no transposition: one case per grid, not one per transport of {','.join(transport_list)}"
        )
        transport_list = transport_list[:1]
    cases = [(t, k) for t in transport_list for k in pipelines]
    rows = []
    with progress(comm.rank == 0) as bar:
        task = bar.add_task("spectral cases", total=len(grid_list) * len(cases))
        for grid in grid_list:
            octahedral = OctahedralGrid(grid)
            bar.update(task, description=f"spectral {grid}: the ducc0 peer" if peer else f"spectral {grid}")
            peer_timing = ducc0_peer(comm, octahedral, octahedral.N - 1, fields * levels + 1) if peer else None
            for transport, shape in cases:  # ESCAPE D3.4's Figure 4: one step, each transport
                bar.update(task, description=f"spectral {grid}, transport {transport}, pipeline {shape}")
                rows.append(
                    benchmark_spectral(
                        comm, grid, **options, transport=transport, graphs=gpu and graphs, pipeline=shape,
                        peer=peer_timing,
                    )
                )  # fmt: skip
                bar.advance(task)
    if comm.rank == 0:
        machine = machine_info(comm.size, gpus_used=comm.size if gpu else 0)
        config = {
            "grids": grid_list,
            "levels": levels,
            "fields": fields,
            "steps": options["steps"],
            "transports": transport_list,
            "pipeline": pipelines,
            "gpu": gpu,
            "graphs": gpu and graphs,
            "fft_streams": options["fft_streams"],
            "peer": peer,
        }
        path, png = save(out, "spectral", machine, config, rows, plot_spectral)
        body = [
            [
                f"{r['grid']} T{r['truncation']}",
                spectral_case(r),
                str(r["batch"]),
                f"{r['time_per_step_s'] * 1e3:.1f}",
                *(f"{r['split_s'][p] * 1e3:.1f}" for p in ("legendre", "fft", "transposition")),
                f"{100 * r['transposition_fraction']:.0f} % ({100 * r['exposed_fraction']:.0f} %)",
                "-"
                if r["legendre_GFLOPs_per_rank"] is None
                else f"{r['legendre_GFLOPs_per_rank']:.1f} / {r['matmul_GFLOPs_per_rank']:.1f} "
                f"({100 * r['legendre_share_of_matmul']:.0f} %)",
                "-"
                if r["legendre_products_share_of_matmul"] is None
                else f"{r['legendre_products_s'] * 1e3:.1f} ({100 * r['legendre_products_share_of_matmul']:.0f} %)",
                "-" if r["fft_GBps_per_rank"] is None else f"{r['fft_GBps_per_rank']:.1f}",
                "-" if r["hbm_GBps"] is None else f"{r['hbm_GBps']:.0f} ({100 * r['fft_share_of_hbm']:.1f} %)",
                "-" if r["joules_per_step"] is None else f"{r['joules_per_step']:.2f}",
                f"{r['round_trip_error']:.1e}",
                "-" if r["ducc0_step_s"] is None else f"{r['ducc0_step_s'] * 1e3:.1f} ({r['ducc0_over_step']:.1f}x)",
            ]
            for r in rows
        ]
        columns = ["grid", "transport", "batch", "step (ms)", "legendre", "fft", "transp.",
                   "transp. share (beyond compute)",
                   "Legendre GFLOP/s / FP64 GEMM (share)", "its products (ms; GEMM share)",
                   "FFT GB/s", "HBM GB/s (FFT share)", "J/step",
                   "round trip", "ducc0 step (ms; / ours)"]  # fmt: skip
        where = "GPU" if gpu else "CPU"
        title = f"spectral transform on {comm.size} rank(s), {where} (slowest rank per phase; rates per rank)"
        console.print(table(title, columns, body))
        if rows and rows[0]["ducc0_step_s"] is not None:
            console.print(
                f"ducc0 {rows[0]['ducc0_version']}: the same step on this node's CPUs, "
                f"{rows[0]['ducc0_threads_per_rank']} thread(s) on each of {comm.size} rank(s)"
            )
        elif peer:
            console.print("ducc0 is not installed: no peer timed (pip install ducc0, or the test extra)")
        say_written(path, png)


@bench_app.command("scaling")
def bench_scaling(
    results: Annotated[Path, typer.Option(help="Folder of result files the model is built from.")] = Path(
        "benchmarks/results"
    ),
    network_gbps: Annotated[float, typer.Option(help="Network between nodes, GB/s per GPU and direction.")] = 50.0,
    network_latency_us: Annotated[float, typer.Option(help="Latency of one exchange between nodes, µs.")] = 10.0,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node, joined by NVLink.")] = 8,
    device: Annotated[
        str | None,
        typer.Option(help="The GPU the model is of, part of its name (e.g. H100); default: newest with every input."),
    ] = None,
    out: OutOption = HERE,
) -> None:
    """Predict time per step on 1 to 1,024 GPUs from measured results (it measures nothing): the model of
    docs/scaling.md, its predictions beside every multi-GPU point measured; JSON and a PNG plot."""
    from ..bench import scaling
    from ..measure.machine import machine_info

    try:
        inputs = scaling.load_inputs(
            results,
            device=device,
            network_GBps=network_gbps,
            network_latency_s=network_latency_us * 1e-6,
            gpus_per_node=gpus_per_node,
        )
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    halo = scaling.halo_coefficient()
    predictions = scaling.predict(inputs, halo_per_sqrt=halo)
    comparisons = scaling.compare(inputs, halo)
    m = inputs.machine
    missing = [name for name, found in (("MPDATA", inputs.mpdata_1gpu_s), ("stencil2d", inputs.stencil_1gpu_s),
               ("spectral", inputs.spectral_1gpu)) if not found]  # fmt: skip
    console.print(
        f"the model of {inputs.device or 'an unnamed GPU'}"
        + (f" (no one-GPU run of {', '.join(missing)} on it: left out)" if missing else "")
    )
    console.print(
        table(
            "model inputs",
            ["figure", "value", "from"],
            [
                *(
                    row
                    for link in m.nvlink
                    for row in (
                        [f"NVLink out of each of {link.gpus} GPUs", f"{link.GBps:.0f} GB/s", link.source],
                        [f"one exchange over NVLink, {link.gpus} GPUs", f"{link.latency_s * 1e6:.1f} µs", link.source],
                    )
                ),
                ["network, per GPU and direction", f"{m.network_GBps:.0f} GB/s", "stated (--network-gbps)"],
                ["one exchange over the network", f"{m.network_latency_s * 1e6:.1f} µs", "stated"],
                ["GPUs per node", str(m.gpus_per_node), "stated"],
                ["least time of a kernel", f"{scaling.KERNEL_FLOOR_S * 1e6:.1f} µs", "stated (docs/scaling.md)"],
                ["MPDATA halo nodes (2 layers) / sqrt(owned)", f"{halo:.2f}", "O96 in 16 equal regions"],
            ],
        )
    )
    counts = scaling.GPU_COUNTS
    body = [
        [dwarf, case, *(_duration(curve[p]) for p in counts)]
        for dwarf, cases in predictions.items()
        for case, curve in cases.items()
    ]
    console.print(
        table("predicted time per step (all-to-all: per exchange)", ["dwarf", "case", *map(str, counts)], body)
    )
    body = [
        [c["dwarf"], c["case"], str(c["gpus"]), _duration(c["measured_s"]),
         _duration(c["predicted_s"]), f"{c['ratio']:.2f}"]
        for c in comparisons
    ]  # fmt: skip
    columns = ["dwarf", "case", "GPUs", "measured", "predicted", "predicted / measured"]
    console.print(table("the model beside every multi-GPU point measured", columns, body))
    console.print(
        table("the scaling issue's targets, as predicted", ["target", "predicted"], scaling.targets(predictions))
    )
    rows = [
        {"dwarf": dwarf, "case": case, "gpus": p, "predicted_s": t}
        for dwarf, cases in predictions.items()
        for case, curve in cases.items()
        for p, t in curve.items()
    ]
    config = scaling.model_config(inputs, comparisons, halo)
    path, _ = save(out, "scaling-model", machine_info(1, gpus_used=0), config, rows)
    measured = scaling.measured_curves(results, inputs.device)
    png = scaling.plot_scaling(predictions, comparisons, path.with_suffix(".png"), measured)
    say_written(path, png)


def _duration(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} µs"


SOAK_SHAPE = Sizes((64, 64, 32))


@bench_app.command("soak")
def bench_soak(
    nprocs: NpOption = 4,
    steps: Annotated[int, typer.Option(help="Exchanges in all.")] = 100_000,
    check_every: Annotated[int, typer.Option(help="Steps per bitwise check and per recorded block.")] = 1000,
    shape: Annotated[Sizes, sizes_option(3, "Global points per dimension")] = SOAK_SHAPE,
    halo: Annotated[int, typer.Option(help="Halo width on every side.")] = 2,
    transport: Annotated[str, typer.Option(help="Halo transport: auto, or one of `gridcomm info`'s.")] = "auto",
    gpu: GpuOption = False,
    out: OutOption = HERE,
) -> None:
    """Exchange a 3-D field again and again, changing its interior every step: every --check-every steps each
    rank's whole local array must equal the serial reference bit for bit; time per exchange and memory are
    recorded per block. Prints the first block against the last; exits 1 if any check failed."""
    from ..bench.soak import SoakConfig

    try:
        config = SoakConfig(tuple(shape), halo, transport, steps, check_every, gpu)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    with bench_ranks(nprocs, gpu) as comm:
        passed = _bench_soak(comm, config, out)
    if not passed:
        raise typer.Exit(1)


def _bench_soak(comm: Any, config: Any, out: Path) -> bool:
    """Whether every check passed."""
    import time

    from ...gpu import gpus_in_use
    from ..bench.soak import plot_soak, run_soak, soak_rows, summarise, write_soak
    from ..measure.machine import machine_info

    gpu, steps = config.gpu, config.steps
    gpus = gpus_in_use(comm) if gpu else 0
    start = time.perf_counter()
    with progress(comm.rank == 0) as bar:
        task = bar.add_task(f"soak: {steps} exchanges on {comm.size} rank(s)", total=steps)
        used, records = run_soak(comm, config, lambda done: bar.update(task, completed=done))
    summary = summarise(records, time.perf_counter() - start)
    if comm.rank == 0:
        machine = machine_info(comm.size, gpus_used=gpus)
        settings = {**config.as_dict(), "transport_used": used}
        path = write_soak(out, machine, settings, records, summary)
        png = plot_soak({"machine": machine, "config": settings, "results": records}, path.with_suffix(".png"))
        n_first, n_last = summary["first_block"]["exchanges"], summary["last_block"]["exchanges"]
        columns = ["", f"first {n_first} steps", f"last {n_last} steps", "change"]
        where = f", {gpus} GPU(s)" if gpu else ""
        console.print(table(f"soak on {comm.size} rank(s){where}, transport {used}", columns, soak_rows(summary)))
        passed = "all passed" if summary["all_checks_passed"] else "[bold red]SOME FAILED[/]"
        console.print(
            f"bitwise checks: {summary['checks_passed']} of {summary['checks']} {passed}; median trend "
            f"{summary['median_trend_us_per_100k_steps']:+.2f} µs per 100,000 steps; "
            f"{summary['exchanges']} exchanges in {summary['runtime_s']:.1f} s"
        )
        say_written(path, png)
    return summary["all_checks_passed"]
