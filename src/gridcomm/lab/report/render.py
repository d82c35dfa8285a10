"""The whole report of one folder: the run (what ran, what failed), the machine and versions, one section per
benchmark, the seeds' figures; written as report.md and report.html beside copies of the plots."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..bench import seeds
from .document import Block, Code, Document, Heading, Items, Paragraph, Table
from .folder import LOG, RAW, RUN_RECORD, Folder, Result, result_dir, scan_folder
from .html import to_html
from .markdown import to_markdown
from .sections import ORDER, section

VERSIONS = (("gridcomm", "gridcomm"), ("NumPy", "numpy"), ("mpi4py", "mpi4py"), ("CuPy", "cupy"), ("MPI", "mpi"))


def machine_fields(machine: dict[str, Any]) -> dict[str, str]:
    """What a result file's machine record (bench/machine.py) says, as the report shows it."""
    versions = machine.get("versions") or {}
    gpus = ", ".join(f"{g['name']} {g['memory_GiB']} GiB" for g in machine.get("gpus") or [])
    return {
        "device": str(machine["device"]),
        "GPUs on the machine": gpus or "none",
        "CPU": f"{machine.get('cpu')} ({machine.get('cpu_cores')} cores)",
        "OS": str(machine.get("os")),
        "Python": str(machine.get("python")),
        # Open MPI's version string ends in a NUL byte
        **{label: str(versions.get(key) or "—").replace("\x00", "").strip() for label, key in VERSIONS},
        "MPI CUDA-aware": "yes" if machine.get("mpi_cuda_aware") else "no",
    }


def machine_rows(results: Sequence[Result]) -> list[tuple[str, str]]:
    """(label, value) of the machine and versions the result files record; a field that differs between files
    shows each value."""
    fields = [machine_fields(r.machine) for r in results]
    rows = [(label, "; ".join(dict.fromkeys(f[label] for f in fields))) for label in fields[0]]
    dates = sorted(r.machine["date"] for r in results)
    return [*rows, ("measured", f"{dates[0]} to {dates[-1]}" if len(dates) > 1 else dates[0])]


def _run_row(i: dict[str, Any]) -> list[str]:
    return [i["key"], i["command"], i["status"], f"{i['seconds']:.1f}", f"{i['estimate_s']:.0f}", str(len(i["files"]))]


def _run_blocks(run: dict[str, Any]) -> list[Block]:
    """What ran: the suite, each command with its status and seconds, and every failure's output."""
    invocations = run["invocations"]
    failed = [i for i in invocations if i["status"] != "ok"]
    taken = sum(i["seconds"] for i in invocations)
    expected = sum(i["estimate_s"] for i in invocations)
    budget = "quick" if run["quick"] else "full"
    blocks: list[Block] = [
        Heading("Run"),
        Paragraph(
            f"The {budget} suite for {run['machine']} on {run['ranks']} rank(s), started {run['started']}, finished "
            f"{run.get('finished') or '(not finished)'}: {len(invocations) - len(failed)} of {len(invocations)} "
            f"benchmark(s) ran, {len(failed)} failed; {taken:.0f} s taken, {expected:.0f} s expected."
        ),
        Table(
            ["benchmark", "command (run in the report folder)", "status", "seconds", "expected s", "files"],
            [_run_row(i) for i in invocations],
            label_columns=3,
        ),
    ]
    for i in failed:
        blocks += [
            Heading(f"FAILED: {i['key']} ({i['status']})", 3),
            Paragraph(f"{i['command']} ended with {i['status']}; its figures are missing from this report. The end "
                      f"of its output (all of it in {LOG}):"),
            Code(i["error"] or "(no output)"),
        ]  # fmt: skip
    return blocks


def _seed_blocks() -> list[Block]:
    """Every seed figure the report uses, grouped by the problem it was measured on, and the plot-only ones."""
    groups = (
        (seeds.SPECTRAL_PROBLEM, (seeds.SPECTRAL_ORIGINAL, seeds.SPECTRAL_CUDA_AWARE, seeds.SPECTRAL_IPC,
                                  seeds.SPECTRAL_WATTS_PER_GPU, seeds.SPECTRAL_JOULES_PER_STEP)),
        (seeds.MPDATA_PROBLEM, (seeds.MPDATA_NO_EXCHANGE, seeds.MPDATA_GPU_EXCHANGE, seeds.MPDATA_HOST_EXCHANGE,
                                *seeds.MPDATA_WATTS_PER_GPU.values(), *seeds.MPDATA_JOULES_PER_STEP)),
    )  # fmt: skip
    seed_004 = [[str(n), f"{t:.15g}", f"{p:.15g}"] for n, (t, p) in sorted(seeds.SEED_004_US.items())]
    blocks: list[Block] = [Heading("Seed figures"), Paragraph(f"As the seeds print them. {seeds.SEED_000}:")]
    for problem, figures in groups:
        blocks += [Paragraph(f"{problem}:"), Items([f"{f.text()}: {f.what} ({f.where})" for f in figures])]
    blocks += [
        Paragraph("Figures seed 000 gives only as plots (no number is read off a plot):"),
        Items([f"{name}: {text}" for name, text in seeds.PLOT_ONLY.items()]),
        Table(["domain size per GPU", "traditional [µs]", "persistent kernel [µs]"], seed_004, seeds.SEED_004_SOURCE),
    ]
    return blocks


def build_report(folder: Folder) -> Document:
    """The report of ``folder`` as a document (plots referred to by file name, beside report.md)."""
    results = sorted(folder.results, key=lambda r: (r.ranks, r.gpus, r.machine["date"]))
    run = folder.run
    if run is not None:
        doc = Document(f"gridcomm report: {run['machine']}, {'quick' if run['quick'] else 'full'} suite, "
                       f"{run['started'][:10]}")  # fmt: skip
    else:
        doc = Document(f"gridcomm report: {'GPU' if any(r.gpus for r in results) else 'CPU'} results")
    doc.add(Paragraph(
        "Every figure comes from the result files of this folder (raw/), each beside its ceiling and its peers "
        "measured in the same run and, where a seed published a comparable figure, beside the seed's figure with "
        f"the difference in problem stated. Energy is per step of the GPUs used (NVML). {seeds.SEEDS_DEFINED}"
    ))  # fmt: skip
    if run is not None:
        doc.add(*_run_blocks(run))
    else:
        doc.add(Paragraph(f"No run record ({RUN_RECORD}): the figures are those of the result files found."))
    if results:
        rows = [list(row) for row in machine_rows(results)]
        doc.add(Heading("Machine and versions"), Table(["", "value"], rows, "as recorded in the result files", 2))
    for benchmark in ORDER:
        mine = [r for r in results if r.benchmark == benchmark]
        if mine:
            doc.add(*section(benchmark, mine))
    others = [r.name for r in results if r.benchmark not in ORDER] + folder.skipped
    if others:
        doc.add(Heading("Files not read"), Items(others))
    doc.add(*_seed_blocks())
    kept = [name for name in (LOG, RUN_RECORD) if (folder.path / name).exists()]
    doc.add(Heading("Files"), Items([f"{RAW}/{r.name}.json" for r in results] + kept))
    return doc


def write_report(path: Path) -> tuple[Path, Path]:
    """Read the folder ``path``, copy its plots beside the report, write report.md and report.html; their paths."""
    folder = scan_folder(path)
    doc = build_report(folder)
    source = result_dir(path)
    for r in folder.results:
        if r.png and source != path and r.benchmark in ORDER:
            shutil.copyfile(source / r.png, path / r.png)
    return write_document(doc, path, "report")


def write_document(doc: Document, folder: Path, stem: str) -> tuple[Path, Path]:
    """``doc`` as folder/<stem>.md and folder/<stem>.html (the same content); their paths."""
    md, page = folder / f"{stem}.md", folder / f"{stem}.html"
    md.write_text(to_markdown(doc))
    page.write_text(to_html(doc))
    return md, page
