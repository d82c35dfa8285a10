"""Which ``gridcomm bench`` invocations a report runs, per machine class (CPU only, 1 GPU, several GPUs) and budget
(``--quick``: under 2 minutes on 2 GPUs; full: under 10): one table, SUITE, read by ``select``.

Expected seconds (``Entry.seconds``, quick and full) are wall time per invocation, process start-up included, on
2 x H200 (CPU entries: 2 cores of an AMD EPYC VM, 4 ranks, the CPU suite's default). Where they come from:

- GPU, full defaults: the committed results of one session of benchmarks/gpu_session.sh on 2 x H200, which ran
  the stages one after the other, so each file's time stamp bounds the stage before it: p2p at most 15 s, halo
  on 2 GPUs 20 s and on 1 GPU 13 s, alltoall 16 s, stencil2d on 2 GPUs 28 s and on 1 GPU 30 s; TCo639 (O640,
  3 fields x 137 levels, 20 steps) at most 21 s on 1 GPU, of which about 12 s is set-up (a 3-step run took 16 s).
- GPU, quick: the same scaled by the cases and samples kept (each timing is 3 warm-up calls plus ``samples``
  batches of at least 20 ms; stencil2d's 0.1 s warm-up plus batches of 50 ms), plus about 5 s of start-up.
- MPDATA on the GPU: the mesh and the set-up are host work, timed on the CPU here: the median-dual mesh of O320
  1.2 s, O1024 22 s (once per run); the set-up per transport (partition, tables, initial field at 32 levels)
  1.2 s at O320 and about 13 s at O1024 (5.2 s at O640, scaled by the nodes); the timed part about 3 s per
  transport (5 checked steps, 5 batches of 50 ms, an energy region of 1 s, the kernels once).
- CPU: measured with ``gridcomm report --cpu`` (4 ranks) on 2 cores shared with other work, twice at a load of
  4 to 6 (the estimates are the means): quick halo 4.0 and 8.0 s, mpdata 4.3 and 7.3 s, spectral 5.0 and 7.8 s
  (the estimates were 3 s each, and a new user saw the quick suite take 53 s where 9 s were announced); full
  32.4 and 41.1, 16.4 and 20.3, 23.9 and 34.1 s. At a load of 13-18 the same took up to three times as long
  (quick 36 s, full 135 s; 2 ranks no faster): ``estimate_text`` says so where the machine is that busy.
  ``bench transpose`` (2026-11-26, 2 ranks, the same VM idle): quick 1.1 s, full 4.4 s; the estimates allow
  for the load above.

- Measured since, on 1 H200: the quick suite 74 s (halo 5.3 s, stencil2d with energy about 25 s, mpdata about
  20 s, spectral about 28 s: set-up and first calls, not the steps); the full suite 273 s (halo 16.3, stencil2d
  57.8, mpdata O1024 133.6, TCo639 65.3 s). The several-GPU figures are these scaled, not measured.
- On 1 H100 (2026-11-24), after the cuFFT plans were made on 8 threads and nvshmem4py stopped pulling in torch
  (5-10 s per process that checks for NVSHMEM): the quick suite 71 s (halo 11.3 s with the first process's
  font cache, stencil2d 27.5, mpdata 25.0, spectral 6.8 s; 92 s and spectral 33.5 s just before).

Sums: quick about 91 s on 2 GPUs, 63 s on 1 GPU, 21 s on 2 cores; full about 512 s on 2 GPUs, 281 s on
1 GPU, 94 s on 2 cores; where MPI is CUDA-aware, mpdata and spectral time it too (about 7 s more quick, 30 s full).
The report lists each invocation's expected and measured seconds.

- bench spectral's peer, ducc0 on the node's CPUs, once per grid (2026-11-24, 1 H200 machine, 16 cores): 4.5 s
  at TCo639 (added to the full entries), 0.1 s for the quick suite's grids.
- bench spectral's energy region on the GPU: at least 1 s of steps of its own per case (added: 1 s per case).

Peers: halo, p2p, alltoall, mpdata and spectral time every transport in one run, spectral ducc0 as well; bench
stencil2d times one, so the full suite runs it again over nccl and staged. The quick suite times the stencil's
traditional and graph modes (and the persistent kernel where NVSHMEM is usable: it replaces the overlapped mode
of the 74 s run below, so the time stays); the full suite every mode there is.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

CPU, ONE_GPU, GPUS = "CPU only", "1 GPU", "several GPUs"


@dataclass(frozen=True)
class Entry:
    """One ``gridcomm bench`` invocation of the suite. ``quick`` and ``full`` are its options (None: not run in
    that budget), in which ``{mpi}`` becomes ",mpi" where MPI is CUDA-aware (so that CUDA-aware MPI is measured
    beside the others) and "" elsewhere, and ``{shmem}`` ",persistent" where NVSHMEM is usable."""

    key: str  # names the invocation in the report and the log
    bench: str  # the gridcomm bench sub-command
    machines: tuple[str, ...]  # machine classes it runs on
    ranks: int | None  # ranks to start; None: the report's --np
    quick: tuple[str, ...] | None
    full: tuple[str, ...] | None
    seconds: tuple[float, float]  # expected wall time (quick, full) [s], see the module's docstring


_GPU_SIZES = ("--sizes", "64,512", "--fields", "4", "--samples", "3")  # halo: 2 cases instead of 18
# the ends and the seed's cross-over size; the seed's two modes (host-driven, and graph or persistent kernel)
_STENCIL_QUICK = ("--sizes", "64,1024,8192", "--samples", "3", "--modes", "traditional,graph{shmem}")
_TRANSFER_QUICK = ("--largest", str(32 << 20), "--samples", "3")  # 8 B to 32 MiB: latency and bandwidth
_MPDATA_QUICK = ("--gpu", "--grids", "O320", "--levels", "32")
_MPDATA_FULL = ("--gpu", "--grids", "O1024", "--levels", "32")  # the seed's 1024 test case
_SPECTRAL_QUICK = ("--gpu", "--grids", "O320", "--levels", "10", "--fields", "3", "--steps", "20")
_TCO639 = ("--gpu", "--grids", "O640", "--levels", "137", "--fields", "3", "--steps", "20")  # the seed's Figure 4
_ALL_GPU = (ONE_GPU, GPUS)

SUITE: tuple[Entry, ...] = (
    Entry("halo", "halo", (CPU,), None, ("--quick",), (), (6, 37)),
    Entry("transpose", "transpose", (CPU,), None, ("--quick",), (), (3, 10)),
    Entry("mpdata", "mpdata", (CPU,), None, ("--grids", "O24,O48", "--levels", "1,16", "--steps", "10"),
          ("--grids", "O24,O48,O96", "--levels", "1,16", "--steps", "20"), (6, 18)),
    Entry("spectral", "spectral", (CPU,), None, ("--grids", "O32,O80", "--steps", "3", "--transports", "cma,mpi"),
          ("--grids", "O80,O160,O320", "--steps", "5", "--transports", "cma,mpi"), (6.5, 29)),
    Entry("halo", "halo", _ALL_GPU, None, ("--gpu", *_GPU_SIZES), ("--gpu",), (8, 20)),
    Entry("p2p", "p2p", (GPUS,), 2, _TRANSFER_QUICK, (), (10, 15)),
    Entry("alltoall", "alltoall", (GPUS,), None, _TRANSFER_QUICK, (), (10, 18)),
    Entry("stencil2d", "stencil2d", _ALL_GPU, None, ("--gpu", *_STENCIL_QUICK), ("--gpu",), (25, 55)),
    # the other transports of stencil2d: full suite only (each run meters every case's energy for a second)
    Entry("stencil2d-nccl", "stencil2d", (GPUS,), None, None, ("--gpu", "--transport", "nccl"), (0, 55)),
    Entry("stencil2d-staged", "stencil2d", (GPUS,), None, None, ("--gpu", "--transport", "staged"), (0, 50)),
    Entry("mpdata", "mpdata", (ONE_GPU,), 1, (*_MPDATA_QUICK, "--transports", "none,ipc,nccl,staged{mpi},host"),
          (*_MPDATA_FULL, "--transports", "none,ipc,nccl,staged{mpi},host"), (22, 135)),
    Entry("mpdata", "mpdata", (GPUS,), None, (*_MPDATA_QUICK, "--transports", "ipc,nccl,staged{mpi},host"),
          (*_MPDATA_FULL, "--transports", "ipc,nccl,staged{mpi},host"), (20, 125)),
    # 1 GPU beside N: the speed-up (the seed's Figure 18) and the no-exchange step; full suite only (time).
    Entry("mpdata-1gpu", "mpdata", (GPUS,), 1, None, (*_MPDATA_FULL, "--transports", "none,ipc"), (0, 65)),
    Entry("spectral", "spectral", (ONE_GPU,), 1, _SPECTRAL_QUICK, _TCO639, (8, 71)),
    Entry("spectral", "spectral", (GPUS,), None, (*_SPECTRAL_QUICK, "--transports", "staged,nccl,ipc{mpi}"),
          (*_TCO639, "--transports", "staged,nccl,ipc{mpi}"), (18, 109)),
)  # fmt: skip


@dataclass(frozen=True)
class Invocation:
    """One benchmark command of a report: ``gridcomm`` + ``args`` (``--out`` is added by ``command``)."""

    key: str
    args: tuple[str, ...]
    estimate_s: float

    def command(self, out: str) -> list[str]:
        """The argument list that runs it with this Python, writing into ``out``."""
        return [sys.executable, "-m", "gridcomm", *self.args, "--out", out]

    def shown(self, out: str = "raw") -> str:
        """The command as a user would type it (no machine paths)."""
        return " ".join(("gridcomm", *self.args, "--out", out))


def machine_class(gpu: bool, nprocs: int) -> str:
    """CPU, ONE_GPU or GPUS."""
    if not gpu:
        return CPU
    return ONE_GPU if nprocs == 1 else GPUS


def select(machine: str, quick: bool, nprocs: int, cuda_aware_mpi: bool, nvshmem: bool = False) -> list[Invocation]:
    """The invocations of the suite for ``machine`` (a class) and budget, on ``nprocs`` ranks (GPUs); ``nvshmem``:
    whether gridcomm[nvshmem] is usable (the quick suite then times the persistent stencil kernel too)."""
    out = []
    for entry in SUITE:
        options = entry.quick if quick else entry.full
        if machine not in entry.machines or options is None:
            continue
        ranks = nprocs if entry.ranks is None else entry.ranks
        filled = tuple(
            o.replace("{mpi}", ",mpi" if cuda_aware_mpi else "").replace("{shmem}", ",persistent" if nvshmem else "")
            for o in options
        )
        out.append(Invocation(entry.key, ("bench", entry.bench, "--np", str(ranks), *filled), entry.seconds[not quick]))
    return out


def estimate(invocations: Sequence[Invocation]) -> float:
    """Expected wall time of them all [s]."""
    return sum(i.estimate_s for i in invocations)


#: Runnable processes per core (the load average over the cores) beyond which the report says it will take longer
#: than its estimates: those of the CPU suite were measured at a load of 4 to 6 on 2 cores.
BUSY_LOAD_PER_CORE = 3.0


def estimate_text(invocations: Sequence[Invocation], load: float | None = None, cores: int | None = None) -> str:
    """The estimate as the report says it, "about N s", and, where the machine is busier than the one the
    estimates were measured on (``load``: the 1-minute load average, over ``cores``; both read here when None),
    that it will take longer."""
    load = os.getloadavg()[0] if load is None else load
    cores = (os.cpu_count() or 1) if cores is None else cores
    text = f"about {estimate(invocations):.0f} s"
    if load > BUSY_LOAD_PER_CORE * cores:
        text += f", longer here: other work keeps the cores busy (load {load:.1f} on {cores} cores)"
    return text
