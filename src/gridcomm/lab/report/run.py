"""Running a suite: each benchmark as its own ``gridcomm bench`` process writing into the report's raw/ folder,
its output appended to the report's log, a failure (or a hang past its time limit) recorded and the rest run on.
The run record (runs.json) is rewritten after each benchmark, so an interrupted run still has one."""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from ...launch import stop_process_group
from ..console import progress
from .folder import LOG, RAW, RUN_RECORD
from .suite import Invocation

ERROR_LINES = 40  # lines of a failed benchmark's output shown in the report
POLL_S = 0.25
STOP_GRACE_S = 10.0  # seconds a stopped benchmark's mpiexec gets to end its ranks before SIGKILL
INTERRUPTED = "interrupted"


def time_limit(invocation: Invocation) -> float:
    """Seconds a benchmark may take before it counts as hung: well beyond its estimate."""
    return max(120.0, 4 * invocation.estimate_s)


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _files(raw: Path) -> set[str]:
    return {p.name for p in raw.iterdir() if p.suffix in (".json", ".png")}


def run_one(invocation: Invocation, out: Path, log: IO[str], advance: Callable[[float], None]) -> dict[str, Any]:
    """Run one benchmark in ``out`` (its files land in out/raw), its output appended to ``log``; its record.
    ``advance(seconds)`` is called while it runs."""
    raw = out / RAW
    before = _files(raw)
    log.write(f"\n=== {invocation.shown()}  [{_now()}]\n")
    log.flush()
    offset = os.path.getsize(log.name)  # where this benchmark's output starts [bytes]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    proc = subprocess.Popen(invocation.command(RAW), cwd=out, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)  # fmt: skip
    status = None
    try:
        while proc.poll() is None:
            elapsed = time.perf_counter() - start
            if elapsed > time_limit(invocation):
                stop_process_group(proc, STOP_GRACE_S)
                status = f"timed out after {elapsed:.0f} s"
                break
            advance(elapsed)
            time.sleep(POLL_S)
    except KeyboardInterrupt:  # the user's Ctrl-C: stop this benchmark, keep what ran (run_suite stops too)
        stop_process_group(proc, STOP_GRACE_S)
        status = INTERRUPTED
    seconds = time.perf_counter() - start
    code = proc.returncode
    status = status or ("ok" if code == 0 else f"failed (exit {code})")
    log.write(f"=== {status} in {seconds:.1f} s\n")
    log.flush()
    error = ""
    if status != "ok":
        with open(log.name, "rb") as text:
            text.seek(offset)
            error = "\n".join(text.read().decode(errors="replace").splitlines()[-ERROR_LINES:])
    return {
        "key": invocation.key,
        "command": invocation.shown(),
        "status": status,
        "returncode": code,
        "seconds": seconds,
        "estimate_s": invocation.estimate_s,
        "files": sorted(_files(raw) - before),
        "error": error,
    }


def run_suite(
    invocations: Sequence[Invocation], out: Path, settings: dict[str, Any], show: bool = True
) -> dict[str, Any]:
    """Run every invocation in turn into the report folder ``out`` with a progress bar (on ``show``), keeping
    going after a failure; returns the run record (also written to out/runs.json): ``settings`` (the suite's
    machine class, budget, ranks, facts) plus started, finished and one record per invocation."""
    (out / RAW).mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {**settings, "started": _now(), "finished": None, "invocations": []}
    total = sum(i.estimate_s for i in invocations)
    done = 0.0
    with open(out / LOG, "a", encoding="utf-8") as log, progress(show) as bar:

        def described(k: int) -> str:
            return f"[{k}/{len(invocations)}] {invocations[k - 1].key} (~{invocations[k - 1].estimate_s:.0f} s)"

        # total: seconds of estimate; named after the first benchmark at once (a line "report" said nothing)
        task = bar.add_task(described(1) if invocations else "report", total=total, counted=False)
        for k, invocation in enumerate(invocations, 1):
            bar.update(task, description=described(k))

            def advance(elapsed: float, before: float = done, share: float = invocation.estimate_s) -> None:
                bar.update(task, completed=before + min(elapsed, 0.95 * share))

            record["invocations"].append(run_one(invocation, out, log, advance))
            done += invocation.estimate_s
            bar.update(task, completed=done)
            _write(out, record)
            if record["invocations"][-1]["status"] == INTERRUPTED:
                break
    record["finished"] = _now()
    _write(out, record)
    return record


def _write(out: Path, record: dict[str, Any]) -> None:
    (out / RUN_RECORD).write_text(json.dumps(record, indent=1) + "\n")
