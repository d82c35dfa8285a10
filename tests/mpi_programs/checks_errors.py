"""Bad input, checked collectively: the right exception on every rank, with a message that names the problem.

Run on 1, 2 and 4 ranks; checks that need peers are skipped on 1.
"""

from __future__ import annotations

import numpy as np
from harness import TRANSPORT_CHOICES, assert_raises_everywhere, ranks

from gridcomm import (
    CartesianDecomposition,
    DecompositionError,
    FieldError,
    HaloExchanger,
    PatternError,
    TransportError,
)


class FakeDeviceArray:
    """Claims to live in GPU memory; never dereferenced (the transport check comes first)."""

    def __init__(self, shape, typestr="<f8"):
        self.shape = tuple(shape)
        self.dtype = np.dtype(typestr)
        self._typestr = typestr

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self._typestr, "data": (0, False), "version": 3}


def check_halo_wider_than_subdomain(comm):
    size = comm.Get_size()
    # 2 points per rank, periodic (so exchanged even on one rank), halo 3.
    assert_raises_everywhere(
        comm, lambda: CartesianDecomposition(comm, (2 * size,), halo=3, periodic=True),
        DecompositionError, "halo width 3", "dimension 0", "wider", "2 points",
    )  # fmt: skip
    assert_raises_everywhere(
        comm, lambda: CartesianDecomposition(comm, (3, 2 * size), halo=((0, 0), (0, 3)), periodic=True,
                                             proc_grid=(1, size)),
        DecompositionError, "halo width 3", "dimension 1", "wider",
    )  # fmt: skip


@ranks(minimum=2)
def check_global_shape_smaller_than_proc_grid(comm):
    size = comm.Get_size()
    assert_raises_everywhere(
        comm, lambda: CartesianDecomposition(comm, (size - 1, 8), proc_grid=(size, 1)),
        DecompositionError, "smaller than proc_grid", "dimension 0",
    )  # fmt: skip
    assert_raises_everywhere(
        comm, lambda: CartesianDecomposition(comm, (1, size - 1)),
        DecompositionError, f"{size - 1} points", f"fewer than the {size} ranks",
    )  # fmt: skip


def check_proc_grid_product_not_rank_count(comm):
    size = comm.Get_size()
    assert_raises_everywhere(
        comm, lambda: CartesianDecomposition(comm, (16, 16), proc_grid=(size + 1, 1)),
        DecompositionError, f"proc_grid=({size + 1}, 1)", f"has {size + 1} ranks", f"communicator has {size}",
    )  # fmt: skip
    assert_raises_everywhere(
        comm, lambda: CartesianDecomposition(comm, (16, 16), proc_grid=(size,)),
        DecompositionError, "proc_grid", "2 non-negative entries",
    )  # fmt: skip


def _local(comm, shape=(13, 7), **kwargs):
    return CartesianDecomposition(comm, shape, halo=1, periodic=True, **kwargs)


def check_field_of_wrong_shape(comm):
    d = _local(comm)
    wrong = np.zeros((d.local_shape[0] + 1, d.local_shape[1]))
    for transport in TRANSPORT_CHOICES.values():
        assert_raises_everywhere(
            comm,
            lambda t=transport: HaloExchanger(d, [d.zeros(), wrong], t),
            FieldError,
            "field 1",
            "shape",
            str(tuple(wrong.shape)),
            str(d.local_shape),
        )
    assert_raises_everywhere(comm, lambda: d.interior(wrong), FieldError, "shape", str(d.local_shape))
    assert_raises_everywhere(comm, lambda: d.gather(wrong), FieldError, "shape", str(d.local_shape))
    d.comm.close()


def check_non_contiguous_field(comm):
    d = _local(comm)
    big = np.zeros((d.local_shape[0] * 2, d.local_shape[1]))
    every_other_row = big[::2]
    inner = np.zeros((d.local_shape[0] + 2, d.local_shape[1] + 2))[1:-1, 1:-1]
    for view in (every_other_row, inner):
        assert view.shape == d.local_shape
        for transport in TRANSPORT_CHOICES.values():
            assert_raises_everywhere(
                comm, lambda v=view, t=transport: HaloExchanger(d, v, t), FieldError, "field 0", "not contiguous"
            )
    d.comm.close()


def check_unsupported_dtypes(comm):
    d = _local(comm)
    dtypes = [
        np.dtype(object),
        np.dtype([("a", "f8"), ("b", "i4")]),
        np.dtype("U3"),
        np.dtype("S4"),
        np.dtype(">f8" if np.little_endian else "<f8"),
        np.dtype("datetime64[s]"),
        np.dtype(np.longdouble),
    ]
    for dt in dtypes:
        field = np.zeros(d.local_shape, dtype=dt)
        for transport in TRANSPORT_CHOICES.values():
            assert_raises_everywhere(
                comm,
                lambda f=field, t=transport: HaloExchanger(d, [d.zeros(), f], t),
                FieldError,
                "field 1",
                "dtype",
                "cannot exchange",
            )
        assert_raises_everywhere(comm, lambda t=dt: d.zeros(t), FieldError, "dtype")
    d.comm.close()


@ranks(minimum=2)
def check_dtypes_differ_between_ranks(comm):
    d = _local(comm)
    dtype = np.float64 if comm.Get_rank() == 0 else np.float32
    for transport in TRANSPORT_CHOICES.values():
        assert_raises_everywhere(
            comm,
            lambda t=transport: HaloExchanger(d, [d.zeros(np.int8), d.zeros(dtype)], t),
            PatternError,
            "field 1",
            "different dtypes",
            ("float32", "f4"),
            ("float64", "f8"),
        )
    d.comm.close()


@ranks(minimum=2)
def check_orders_differ_between_ranks(comm):
    d = _local(comm)
    order = "C" if comm.Get_rank() == 0 else "F"
    for transport in TRANSPORT_CHOICES.values():
        assert_raises_everywhere(
            comm,
            lambda t=transport: HaloExchanger(d, d.zeros(order=order), t),
            PatternError,
            "field 0",
            "C-ordered",
            "Fortran",
        )
    d.comm.close()


@ranks(minimum=2)
def check_field_counts_differ_between_ranks(comm):
    d = _local(comm)
    n = 2 if comm.Get_rank() == 0 else 1
    for transport in TRANSPORT_CHOICES.values():
        assert_raises_everywhere(
            comm,
            lambda t=transport: HaloExchanger(d, [d.zeros() for _ in range(n)], t),
            PatternError,
            "different numbers of fields",
        )
    d.comm.close()


def check_device_memory_needs_cuda_aware_mpi(comm):
    """This MPICH is not CUDA-aware: device fields with transport 'mpi' (or auto, or a configured
    MpiTransport) raise TransportError on every rank, before the fake pointer is ever used."""
    import gridcomm.mpilib

    assert gridcomm.mpilib.mpi_cuda_aware() is False, "expected the PyPI MPICH not to be CUDA-aware"
    d = _local(comm)
    for name, transport in TRANSPORT_CHOICES.items():
        # cma and shm move host memory only; every MPI transport must say that this MPI is not CUDA-aware.
        words = "host memory" if name.startswith(("cma", "shm")) else "CUDA-aware"
        assert_raises_everywhere(
            comm, lambda t=transport: HaloExchanger(d, FakeDeviceArray(d.local_shape), t), TransportError, words
        )
    # Host and device fields together are refused whatever the transport.
    assert_raises_everywhere(
        comm, lambda: HaloExchanger(d, [d.zeros(), FakeDeviceArray(d.local_shape)]), FieldError, "different memories"
    )
    d.comm.close()


def check_other_bad_arguments(comm):
    d = _local(comm)
    assert_raises_everywhere(comm, lambda: HaloExchanger(d, []), FieldError, "empty")
    assert_raises_everywhere(
        comm, lambda: HaloExchanger(d, d.zeros(), "carrier-pigeon"), TransportError, "carrier-pigeon", "unknown"
    )
    assert_raises_everywhere(comm, lambda: HaloExchanger(d, d.zeros(), timeout=0), ValueError, "timeout")
    assert_raises_everywhere(
        comm, lambda: HaloExchanger(d, [d.zeros(), [[1.0]]]), FieldError, "field 1", "not an array"
    )
    assert_raises_everywhere(
        comm, lambda: CartesianDecomposition(comm, (8, 8), stencil="cross"), DecompositionError, "stencil", "'cross'"
    )
    assert_raises_everywhere(
        comm, lambda: CartesianDecomposition(comm, (8, 8), halo=(1, 1, 1)), DecompositionError, "halo", "3 dimension(s)"
    )
    assert_raises_everywhere(
        comm, lambda: CartesianDecomposition(comm, (8, 8), halo=-1), DecompositionError, "halo", ">= 0"
    )
    assert_raises_everywhere(
        comm, lambda: CartesianDecomposition(comm, (8, 8), periodic=(True,)), DecompositionError, "periodic"
    )
    assert_raises_everywhere(
        comm, lambda: CartesianDecomposition(comm, (2, 2, 2, 2)), DecompositionError, "1 to 3 dimensions"
    )
    assert_raises_everywhere(comm, lambda: CartesianDecomposition(comm, (8, 0)), DecompositionError, "at least 1 point")
    d.comm.close()
