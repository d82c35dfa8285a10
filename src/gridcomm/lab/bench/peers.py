"""The libraries a user could pick instead of gridcomm, run in the same benchmark on the same data.

Each peer is optional: where it is not installed (or cannot be imported on some rank) the benchmark skips it
and says why in one line. Every peer's result is checked equal, bit for bit, to gridcomm's on the same input
before either is timed.

- GHEX (``ghex``, built from its sdist: docs/benchmarks.md, "Peers"): the halo exchange of ``bench halo``
  through its regular-grid Python API (context, domain descriptors, halo generator, pattern, communication
  object, ``exchange([pattern(field), ...]).wait()``).
- mpi4py-fft (``mpi4py_fft.pencil``: Subcomm, Pencil, Transfer): the slab redistribution of ``bench
  transpose``.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ...arrays import is_device_array, to_host
from ...comm import Communicator
from ...decomp import CartesianDecomposition

#: How to get each peer, said where it is missing.
INSTALL = {
    "ghex": "build it from its sdist against this MPI (docs/benchmarks.md, Peers; `make peers`)",
    "mpi4py_fft": "pip install mpi4py-fft with FFTW's headers present (docs/benchmarks.md, Peers; `make peers`)",
}
#: The name each peer goes by in tables and result files.
LABELS = {"ghex": "GHEX", "mpi4py_fft": "mpi4py-fft"}


def missing(comm: Communicator, module: str) -> str | None:
    """Collective: why peer ``module`` cannot run on every rank of ``comm`` (one line), or None when it can."""
    try:
        importlib.import_module(module)
        reason = None
    except ImportError as error:  # also a GHEX built against another MPI: its extension fails to load
        reason = f"not installed ({error})" if isinstance(error, ModuleNotFoundError) else f"cannot load: {error}"
    reasons = comm.mpi.allgather(reason)
    found = next((r for r in reasons if r), None)
    return None if found is None else f"{LABELS[module]} {found}; {INSTALL[module]}"


def ghex_gpu_reason(comm: Communicator) -> str | None:
    """Collective: None where GHEX can exchange GPU fields here (built with ``GHEX_USE_GPU=ON``; its MPI backend
    hands device buffers to MPI, so MPI must be CUDA-aware), else why not (with ``missing``'s reasons)."""
    reason = missing(comm, "ghex")
    if reason is None:
        import ghex

        if not ghex.__config__.get("gpu"):
            reason = "GHEX was built without GPU support; build it with GHEX_USE_GPU=ON GHEX_GPU_TYPE=NVIDIA"
        elif ghex.__config__.get("transport") == "MPI" and not comm.cuda_aware:
            reason = "GHEX's MPI backend hands device buffers to MPI, which is not CUDA-aware here"
        reasons = [r for r in comm.mpi.allgather(reason) if r]
        reason = f"GHEX on the GPU: {reasons[0]}" if reasons else None
    return reason


def same_bits(comm: Communicator, ours: Sequence[Any], theirs: Sequence[Any]) -> bool:
    """Collective: whether every array of ``ours`` (NumPy or CuPy) equals its twin of ``theirs`` bit for bit on
    every rank."""
    equal = all(
        a.shape == b.shape and np.array_equal(to_host(a).view(np.uint8), to_host(b).view(np.uint8))
        for a, b in zip(ours, theirs, strict=True)
    )
    from mpi4py import MPI

    return bool(comm.mpi.allreduce(equal, op=MPI.LAND))


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Send what C and C++ code writes to the standard error to /dev/null meanwhile."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class GhexHalo:
    """The halo exchange of ``decomposition`` (any dimensions, halo widths and periodicity; box stencil) on
    ``fields`` (NumPy arrays of its local shape, C or Fortran order; or CuPy arrays, where GHEX was built for the
    GPU: ``ghex_gpu_reason``) by GHEX; ``run()`` is one exchange. Collective to build and to run; ``close()``
    frees GHEX's communicator."""

    def __init__(self, decomposition: CartesianDecomposition, fields: Sequence[np.ndarray]) -> None:
        from ghex.context import make_context
        from ghex.structured.cartesian_sets import UnitRange
        from ghex.structured.regular import (
            DomainDescriptor,
            HaloGenerator,
            make_communication_object,
            make_field_descriptor,
            make_pattern,
        )
        from ghex.util import Architecture

        if decomposition.stencil != "box":
            raise ValueError("GHEX's regular halo generator exchanges faces, edges and corners: use stencil='box'")
        with _quiet_stderr():  # oomph warns on every rank that mpi4py's MPI has more thread support than it asks
            self._context = make_context(decomposition.comm.mpi)

        def ranges(slices: Sequence[slice]) -> Any:
            product = UnitRange(slices[0].start, slices[0].stop)
            for s in slices[1:]:
                product = product * UnitRange(s.start, s.stop)
            return product

        # GHEX's buffer infos refer to the pattern, the domain and the fields without owning them: all kept here.
        whole = ranges([slice(0, n) for n in decomposition.global_shape])
        self._domain = DomainDescriptor(self._context.rank(), ranges(decomposition.global_slices))
        self._halos = HaloGenerator(whole, decomposition.halo, decomposition.periodic)
        self._pattern = make_pattern(self._context, self._halos, [self._domain])
        self._co = make_communication_object(self._context)
        first = tuple(lo for lo, _ in decomposition.halo)  # where the owned points start in a local array
        self._fields = list(fields)
        self._descriptors = [
            make_field_descriptor(
                self._domain,
                f,
                first,
                f.shape,
                arch=Architecture.GPU if is_device_array(f) else Architecture.CPU,
            )
            for f in self._fields
        ]
        self._buffers = [self._pattern(d) for d in self._descriptors]

    def run(self) -> None:
        """One exchange of every field's halo, waited for by GHEX's ``wait()`` (it spins in C++ until done)."""
        self._co.exchange(self._buffers).wait()

    def run_polled(self) -> None:
        """The same exchange waited for as gridcomm waits: test (``is_ready()``, which progresses it), yield the
        core, test again; on ranks that share cores with others a spinning wait keeps the peer it waits for
        off the core."""
        handle = self._co.exchange(self._buffers)
        while not handle.is_ready():
            os.sched_yield()

    def close(self) -> None:
        """Drop GHEX's objects, dependants first."""
        self._buffers = self._descriptors = []
        self._co = self._pattern = self._halos = self._domain = self._context = None


class Mpi4pyFftSlabs:
    """mpi4py-fft's redistribution of a global array of ``shape`` from slabs split along ``from_axis`` to slabs
    split along ``to_axis`` (its ``Pencil.transfer``: one MPI_Alltoallw of subarray datatypes); ``run()`` moves
    ``source`` into ``destination``. Its blocks are cut as ``gridcomm.slab`` cuts them (checked here)."""

    def __init__(
        self,
        comm: Communicator,
        shape: tuple[int, ...],
        from_axis: int,
        to_axis: int,
        source: np.ndarray,
        destination: np.ndarray,
    ) -> None:
        from mpi4py_fft.pencil import Pencil, Subcomm

        split = [1] * len(shape)
        split[from_axis] = 0  # 0: this axis is split over every rank
        self._subcomm = Subcomm(comm.mpi, split, reorder=False)  # ranks keep their numbers, hence their slabs
        before = Pencil(self._subcomm, shape, axis=to_axis)  # whole along to_axis, split along from_axis
        after = before.pencil(from_axis)
        if (tuple(before.subshape), tuple(after.subshape)) != (source.shape, destination.shape):
            raise ValueError(
                f"mpi4py-fft cuts rank {comm.rank}'s slabs as {before.subshape} -> {after.subshape}, gridcomm as "
                f"{source.shape} -> {destination.shape}: the two cannot be compared on the same blocks"
            )
        self._transfer = before.transfer(after, source.dtype)
        self._source, self._destination = source, destination

    def run(self) -> None:
        """One redistribution (returns when it is complete)."""
        self._transfer.forward(self._source, self._destination)

    def close(self) -> None:
        self._transfer.destroy()
        for sub in self._subcomm:
            sub.Free()
        self._subcomm = []
