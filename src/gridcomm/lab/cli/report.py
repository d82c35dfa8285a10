"""``gridcomm report``: the benchmark suite that fits this machine, written as one self-contained folder; and
``gridcomm report --compare A B``: two such folders side by side."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Annotated

import typer

from ..console import console

CompareOption = Annotated[
    tuple[Path, Path] | None,
    typer.Option(
        "--compare",
        metavar="A B",
        help="Compare two result folders (before and after a change, two machines): compare.md/.html in --out.",
    ),
]


def report(
    quick: Annotated[bool, typer.Option("--quick", help="The short suite: under 2 minutes on 2 GPUs.")] = False,
    nprocs: Annotated[
        int | None, typer.Option("--np", help="Ranks, one per GPU (default: the GPUs found; 4 on the CPU).")
    ] = None,
    gpu: Annotated[
        bool | None, typer.Option("--gpu/--cpu", help="GPU or CPU suite (default: GPU if one is found).")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Folder to write into (default: report-<UTC time> here).")] = None,
    compare: CompareOption = None,
) -> None:
    """Run the benchmarks that fit this machine (CPU only, 1 GPU, several GPUs) and write report.md,
    report.html, the plots, the raw JSON, the log and the run record into one folder. Every figure stands
    beside its ceiling, its peers measured in the same run and the published figures of the studies the dwarfs
    come from (ESCAPE D3.4, NVIDIA's NVSHMEM case study: the seeds). Exits 1 when a
    benchmark failed (the report shows its output)."""
    from ...errors import ArgumentError

    if compare is not None:
        from ..report.compare import write_compare

        if quick or nprocs is not None or gpu is not None:
            raise typer.BadParameter(
                "--compare reads two folders and runs nothing: give it only --out", param_hint="--compare"
            )
        try:
            md, page = write_compare(compare[0], compare[1], out or _default_out())
        except ArgumentError as error:
            raise typer.BadParameter(str(error), param_hint="--compare") from None
        console.print(f"comparison: {md}\n            {page}")
        return
    _run_report(quick, nprocs, gpu, out)


def _default_out() -> Path:
    return Path(f"report-{_dt.datetime.now(_dt.UTC).strftime('%Y%m%dT%H%M%SZ')}")


def _run_report(quick: bool, nprocs: int | None, gpu: bool | None, out: Path | None) -> None:
    from ... import shmem
    from ..report import suite
    from ..report.folder import RAW
    from ..report.probe import Facts, cuda_aware_mpi, gpus_found
    from ..report.render import write_report
    from ..report.run import INTERRUPTED, run_suite

    found = gpus_found()
    gpu = found > 0 if gpu is None else gpu
    if gpu and found == 0:
        raise typer.BadParameter(
            "no GPU found (NVML and CuPy see none): run the CPU suite with --cpu", param_hint="--gpu"
        )
    nprocs = (found if gpu else 4) if nprocs is None else nprocs
    if nprocs < 1:
        raise typer.BadParameter(f"--np {nprocs}: give at least 1 rank", param_hint="--np")
    if gpu and nprocs > found:
        raise typer.BadParameter(
            f"--np {nprocs} but {found} GPU(s) found: the GPU suite runs one rank per GPU; give --np {found} or less",
            param_hint="--np",
        )
    facts = Facts(found, cuda_aware_mpi() if gpu else False)
    machine = suite.machine_class(gpu, nprocs)
    invocations = suite.select(machine, quick, nprocs, facts.cuda_aware_mpi, shmem.unavailable_reason() is None)
    folder = out or _default_out()
    if (folder / RAW).is_dir() and any((folder / RAW).iterdir()):
        raise typer.BadParameter(f"{folder} already holds a report's results: give a new folder", param_hint="--out")
    folder.mkdir(parents=True, exist_ok=True)
    budget = "quick" if quick else "full"
    console.print(
        f"{budget} suite for {machine} on {nprocs} rank(s): {len(invocations)} benchmarks, "
        f"{suite.estimate_text(invocations)}; writing into {folder}"
    )
    settings = {"quick": quick, "machine": machine, "ranks": nprocs, "gpus_found": found,
                "cuda_aware_mpi": facts.cuda_aware_mpi}  # fmt: skip
    record = run_suite(invocations, folder, settings)
    md, page = write_report(folder)
    failed = [i for i in record["invocations"] if i["status"] != "ok"]
    for i in failed:
        console.print(f"[bold red]{i['key']}: {i['status']}[/] ({i['command']}); see the report")
    taken = sum(i["seconds"] for i in record["invocations"])
    console.print(f"the benchmarks took {taken:.0f} s ({suite.estimate(invocations):.0f} s expected)")
    console.print(f"report: {md}\n        {page}")
    if failed:  # the report is complete all the same: it shows each failure and its output
        raise typer.Exit(130 if any(i["status"] == INTERRUPTED for i in failed) else 1)
