"""Reading a result folder: the benchmark JSON files (in raw/, or in the folder itself) and the run record."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import ArgumentError

RAW = "raw"  # where a report folder keeps the benchmarks' JSON and PNG files
RUN_RECORD = "runs.json"  # what gridcomm report ran: commands, status, seconds, the files each one wrote
LOG = "log.txt"  # every benchmark's console output

_NAME = re.compile(r"^(?P<benchmark>.+?)-(cpu|gpu)-\d+r")


@dataclass(frozen=True)
class Result:
    """One benchmark JSON file: ``{"benchmark", "machine", "config", "results"}`` (bench/results.py)."""

    name: str  # the file name without .json
    benchmark: str
    data: dict[str, Any]
    png: str | None  # the plot's file name beside it, if there is one

    @property
    def machine(self) -> dict[str, Any]:
        return self.data["machine"]

    @property
    def config(self) -> dict[str, Any]:
        return self.data.get("config") or {}

    @property
    def rows(self) -> list[dict[str, Any]]:
        return self.data["results"]

    @property
    def gpus(self) -> int:
        """GPUs the run used (0: a CPU run)."""
        return int(self.machine.get("gpus_used") or 0)

    @property
    def ranks(self) -> int:
        return int(self.machine.get("ranks") or 1)

    @property
    def where(self) -> str:
        """For headings: e.g. "2 ranks, 2 x NVIDIA H200" or "4 ranks, CPU: ..."."""
        device = f"{self.gpus} x {self.machine['device']}" if self.gpus else self.machine["device"]
        return f"{self.ranks} rank{'s' if self.ranks > 1 else ''}, {device}"


@dataclass
class Folder:
    path: Path
    results: list[Result]
    run: dict[str, Any] | None  # the run record of gridcomm report; None for a plain folder of result files
    skipped: list[str] = field(default_factory=list)  # "file: why" for JSON files not read as results


def _benchmark(stem: str, data: dict[str, Any]) -> str:
    """The benchmark's name: stored in the file, or (older files) the file name's first part."""
    if data.get("benchmark"):
        return str(data["benchmark"])
    match = _NAME.match(stem)
    return match.group("benchmark") if match else stem


def read_result(path: Path) -> Result | str:
    """The result in ``path``, or why it is not one."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        return f"not readable as JSON ({error})"
    if not isinstance(data, dict) or not isinstance(data.get("results"), list) or "machine" not in data:
        return "not a benchmark result (no machine and results)"
    png = path.with_suffix(".png")
    return Result(path.stem, _benchmark(path.stem, data), data, png.name if png.exists() else None)


def result_dir(path: Path) -> Path:
    """Where a folder's result files lie: its raw/ when it has one (a report), else the folder itself."""
    return path / RAW if (path / RAW).is_dir() else path


def scan_folder(path: Path) -> Folder:
    """Every benchmark result in the folder ``path``. Where a run record exists, only the files its benchmarks
    wrote are read, so that every figure comes from that run."""
    path = Path(path)
    where = result_dir(path)
    run = json.loads((path / RUN_RECORD).read_text()) if (path / RUN_RECORD).is_file() else None
    listed = None if run is None else {f for inv in run["invocations"] for f in inv["files"]}
    results, skipped = [], []
    for file in sorted(where.glob("*.json")):
        if listed is not None and file.name not in listed:
            skipped.append(f"{file.name}: not written by this report's run")
            continue
        result = read_result(file)
        if isinstance(result, str):
            skipped.append(f"{file.name}: {result}")
        else:
            results.append(result)
    return Folder(path, results, run, skipped)


def load_folder(path: Path, what: str = "folder") -> Folder:
    """scan_folder, for a folder the user named (``what`` names it in errors): ArgumentError when it is missing
    or holds no benchmark result."""
    path = Path(path)
    if not path.is_dir():
        raise ArgumentError(
            f"{what} {str(path)!r} is not a folder: give a folder written by 'gridcomm report' (or one holding "
            "'gridcomm bench' JSON files)"
        )
    folder = scan_folder(path)
    if not folder.results:
        found = f"; skipped: {'; '.join(folder.skipped)}" if folder.skipped else ""
        raise ArgumentError(
            f"{what} {str(path)!r} holds no benchmark result ({RAW}/*.json or *.json with machine and results)"
            f"{found}. Run 'gridcomm report' (or 'gridcomm bench ...') to write one"
        )
    return folder
