"""In-process tests on one rank (mpi4py starts MPI as a singleton when imported without mpiexec)."""

from __future__ import annotations

import pickle
import re
import sys

import numpy as np
import pytest
from harness import DTYPES, TRANSPORT_CHOICES, describe_mismatch, expected_cells, local_with_sentinel, random_global

import gridcomm
import gridcomm.comm
import gridcomm.mpilib
from gridcomm import (
    DecompositionError,
    FieldError,
    GridcommError,
    GridcommTimeout,
    HaloExchanger,
    PatternError,
    TransportError,
)
from gridcomm.transports import MpiTransport


class FakeDeviceArray:
    """Claims to live in GPU memory (CUDA array interface); its pointer is never used."""

    def __init__(self, shape, typestr="<f8"):
        self.shape, self.dtype = tuple(shape), np.dtype(typestr)
        self._typestr = typestr

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self._typestr, "data": (0, False), "version": 3}


@pytest.fixture
def fresh_cuda_query(monkeypatch):
    """mpi_cuda_aware() is functools.cache'd: clear it before and after the test."""
    gridcomm.mpilib.mpi_cuda_aware.cache_clear()
    yield monkeypatch
    gridcomm.mpilib.mpi_cuda_aware.cache_clear()


def test_mpi_runs_as_a_singleton_here():
    from mpi4py import MPI

    assert MPI.COMM_WORLD.Get_size() == 1
    with gridcomm.Communicator() as comm:
        assert (comm.rank, comm.size) == (0, 1)


# -- exchanges on one rank: periodic wrap onto itself ---------------------------------------------------------


@pytest.mark.parametrize("transport", sorted(TRANSPORT_CHOICES))
@pytest.mark.parametrize(
    ("shape", "halo", "periodic", "stencil"),
    [
        ((7,), [(2, 1)], True, "box"),
        ((5, 6), ((1, 2), (2, 0)), (True, False), "box"),
        ((4, 5, 3), 1, True, "box"),
        ((4, 5, 3), ((1, 0), (2, 2), (1, 1)), True, "star"),
        ((3, 3), 3, False, "box"),  # halo wider than the grid is fine where nothing is exchanged
    ],
)
def test_single_rank_exchange_matches_reference(decompose, transport, shape, halo, periodic, stencil):
    d = decompose(shape, halo=halo, periodic=periodic, stencil=stencil)
    specs = [("float64", "C"), ("int16", "F"), ("complex64", "F"), ("bool", "C")]
    globals_ = [random_global(shape, dt, i) for i, (dt, _) in enumerate(specs)]
    fields = [local_with_sentinel(d, g, order) for g, (_, order) in zip(globals_, specs, strict=True)]
    with HaloExchanger(d, fields, TRANSPORT_CHOICES[transport]) as ex:
        ex.exchange()
        ex.start().wait()  # twice: same result
    for f, g, spec in zip(fields, globals_, specs, strict=True):
        assert describe_mismatch(f, expected_cells(g, d.global_slices, d.halo, d.periodic, d.stencil)) is None, spec


def test_arguments_are_normalised(decompose):
    d = decompose(
        (6, 5, 4), halo=[1, (2, 0), np.int64(3)], periodic=[True, np.bool_(False), 1 == 1], proc_grid=(0, 1, 0)
    )
    assert d.halo == ((1, 1), (2, 0), (3, 3))
    assert d.periodic == (True, False, True)
    assert d.proc_grid == (1, 1, 1)
    assert d.local_shape == (8, 7, 10)
    assert d.interior_slices == (slice(1, 7), slice(2, 7), slice(3, 7))
    assert decompose((6,), halo=2).halo == ((2, 2),)
    assert decompose((6, 2), periodic=True).periodic == (True, True)


def test_local_arrays_and_interior(decompose):
    d = decompose((6, 5), halo=(1, 2))
    for order in "CF":
        a = d.zeros(np.int32, order=order)
        assert a.shape == d.local_shape == (8, 9)
        assert a.dtype == np.int32 and (a == 0).all()
        assert a.flags.c_contiguous if order == "C" else a.flags.f_contiguous
        assert d.empty(np.complex64, order=order).shape == d.local_shape
        view = d.interior(a)
        view[...] = 7
        assert np.shares_memory(view, a)
        assert a.sum() == 7 * 30 and (a[1:7, 2:7] == 7).all()


def test_single_rank_gather_scatter(decompose):
    d = decompose((5, 4), halo=1)
    g = np.arange(20.0).reshape(5, 4)
    local = d.scatter(g, order="F")
    assert local.flags.f_contiguous and local.shape == (7, 6)
    assert np.array_equal(d.interior(local), g) and local.sum() == g.sum()
    assert np.array_equal(d.gather(local), g)


# -- bad input -------------------------------------------------------------------------------------------------


def test_halo_wider_than_subdomain(decompose):
    with pytest.raises(DecompositionError, match=r"halo width 3 in dimension 1 is wider .* \(2 points"):
        decompose((8, 2), halo=(1, 3), periodic=True)


def test_proc_grid_product_is_not_the_rank_count(decompose):
    with pytest.raises(DecompositionError, match=r"proc_grid=\(2, 1\) has 2 ranks but the communicator has 1"):
        decompose((8, 8), proc_grid=(2, 1))


def test_field_of_wrong_shape(decompose):
    d = decompose((6, 5), halo=1, periodic=True)
    with pytest.raises(FieldError, match=r"field 1 has shape \(8, 6\).*\(8, 7\)"):
        HaloExchanger(d, [d.zeros(), np.zeros((8, 6))])
    with pytest.raises(FieldError, match=r"shape \(6, 5\).*expected \(8, 7\)"):
        d.interior(np.zeros((6, 5)))


def test_strided_field(decompose):
    d = decompose((6, 5), halo=1, periodic=True)
    with pytest.raises(FieldError, match="field 0 is not contiguous"):
        HaloExchanger(d, np.zeros((16, 7))[::2])
    with pytest.raises(FieldError, match="not contiguous"):
        HaloExchanger(d, np.zeros((10, 9))[1:-1, 1:-1])


@pytest.mark.parametrize(
    "dtype",
    [
        object,
        [("a", "f8"), ("b", "i4")],
        "U3",
        "S4",
        ">f8" if sys.byteorder == "little" else "<f8",
        "datetime64[s]",
        np.longdouble,
    ],
    ids=["object", "structured", "unicode", "bytes", "non-native", "datetime", "longdouble"],
)
def test_unsupported_dtype(decompose, dtype):
    d = decompose((6, 5), halo=1, periodic=True)
    field = np.zeros(d.local_shape, dtype=dtype)
    with pytest.raises(FieldError, match=r"field 0 has dtype .* which gridcomm cannot exchange; use one of"):
        HaloExchanger(d, field)
    with pytest.raises(FieldError, match="cannot exchange"):
        d.zeros(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_documented_dtype_is_accepted(decompose, dtype):
    d = decompose((4,), halo=1, periodic=True)
    with HaloExchanger(d, d.zeros(dtype)) as ex:
        ex.exchange()


def test_scatter_of_wrong_global_shape(decompose):
    d = decompose((5, 4), halo=1)
    with pytest.raises(FieldError, match=r"scatter.*shape \(4, 4\), expected \(5, 4\)"):
        d.scatter(np.zeros((4, 4)))


# The MPI transport's configurations (labels with a slash, but shm's and cma's, which move host memory only:
# checks_errors)
@pytest.mark.parametrize(
    "transport",
    ["mpi", "auto", *sorted(k for k in TRANSPORT_CHOICES if "/" in k and not k.startswith(("shm", "cma")))],
)
def test_device_memory_needs_cuda_aware_mpi(decompose, transport):
    assert gridcomm.mpilib.mpi_cuda_aware() is False  # the MPICH wheel is not built with CUDA
    d = decompose((6, 5), halo=1, periodic=True)
    with pytest.raises(TransportError, match="CUDA-aware"):
        HaloExchanger(d, FakeDeviceArray(d.local_shape), TRANSPORT_CHOICES[transport])


def test_transport_error_only_suggests_transports_that_exist(decompose):
    """The 'not CUDA-aware' error tells users which transport= to use instead; each must be a real one."""
    d = decompose((6, 5), halo=1, periodic=True)
    with pytest.raises(TransportError) as info:
        HaloExchanger(d, FakeDeviceArray(d.local_shape), "mpi")
    suggested = set(re.findall(r"transport='(\w+)'|or '(\w+)'", str(info.value)))
    names = {name for pair in suggested for name in pair if name}
    unknown = names - set(gridcomm.transports.names())
    assert not unknown, (
        f"the message suggests transports {sorted(unknown)}, which gridcomm does not have "
        f"(it has {gridcomm.transports.names()}): {info.value}"
    )


def test_cuda_aware_override_is_honoured(fresh_cuda_query):
    fresh_cuda_query.setenv("GRIDCOMM_MPI_CUDA_AWARE", "0")
    assert gridcomm.mpilib.mpi_cuda_aware() is False
    gridcomm.mpilib.mpi_cuda_aware.cache_clear()
    fresh_cuda_query.setenv("GRIDCOMM_MPI_CUDA_AWARE", "1")
    assert gridcomm.mpilib.mpi_cuda_aware() is True
    gridcomm.mpilib.mpi_cuda_aware.cache_clear()
    fresh_cuda_query.delenv("GRIDCOMM_MPI_CUDA_AWARE")
    assert gridcomm.mpilib.mpi_cuda_aware() is False  # asked MPI itself


def test_an_mpi_built_with_cuda_is_not_cuda_aware_without_the_driver(fresh_cuda_query, monkeypatch):
    """Open MPI 4.1 built with CUDA says yes even where it could not load libcuda (and then crashes on device
    pointers): gridcomm also asks whether the driver loads."""
    monkeypatch.setattr(gridcomm.mpilib, "_mpi_says_cuda_aware", lambda: True)
    monkeypatch.setattr(gridcomm.mpilib, "_cuda_driver_loads", lambda: False)
    assert gridcomm.mpilib.mpi_cuda_aware() is False
    gridcomm.mpilib.mpi_cuda_aware.cache_clear()
    monkeypatch.setattr(gridcomm.mpilib, "_cuda_driver_loads", lambda: True)
    assert gridcomm.mpilib.mpi_cuda_aware() is True


@pytest.mark.parametrize("library", ["Open MPI v4.1.4, package: Open MPI", "MPICH Version: 4.3.0"])
def test_open_mpi_neighbourhood_collectives_refuse_device_fields(fresh_cuda_query, monkeypatch, decompose, library):
    """A CUDA-aware Open MPI crashed in MPI_Ineighbor_alltoallw on device buffers: method="neighbor" is refused
    there with what to use instead; p2p, and neighbor on other libraries, bind."""
    from gridcomm.transports import MpiTransport
    from gridcomm.transports import mpi as mpi_module

    fresh_cuda_query.setenv("GRIDCOMM_MPI_CUDA_AWARE", "1")
    monkeypatch.setattr(mpi_module, "mpi_library_version", lambda: library)
    neighbor, p2p = MpiTransport(method="neighbor"), MpiTransport(method="p2p")
    assert p2p.local_reason(on_device=True) is None and neighbor.local_reason(on_device=False) is None
    why = neighbor.local_reason(on_device=True)
    if library.startswith("Open MPI"):
        assert why is not None and "method='p2p'" in why
        d = decompose((6, 5), halo=1, periodic=True)
        with pytest.raises(TransportError, match="neighbourhood collectives do not take GPU memory"):
            HaloExchanger(d, FakeDeviceArray(d.local_shape), neighbor)
    else:
        assert why is None


def test_cuda_aware_override_zero_refuses_device_fields(fresh_cuda_query, decompose):
    fresh_cuda_query.setenv("GRIDCOMM_MPI_CUDA_AWARE", "0")
    d = decompose((4, 4), halo=1, periodic=True)
    assert d.comm.cuda_aware is False
    with pytest.raises(TransportError, match="CUDA-aware"):
        HaloExchanger(d, FakeDeviceArray(d.local_shape), "mpi")


def test_host_and_device_fields_together(decompose):
    d = decompose((4, 4), halo=1, periodic=True)
    with pytest.raises(FieldError, match=r"different memories \(field 0: host, field 1: GPU\)"):
        HaloExchanger(d, [d.zeros(), FakeDeviceArray(d.local_shape)])


def test_read_only_field_is_refused(decompose):
    """Received halos are written into the fields, so a read-only field must be refused up front (FieldError),
    not written behind NumPy's back (datatype packing) or fail half-way through an exchange (copies)."""
    for transport in TRANSPORT_CHOICES.values():
        d = decompose((6,), halo=1, periodic=True)
        a = d.zeros()
        a.flags.writeable = False
        try:
            ex = HaloExchanger(d, a, transport)
        except FieldError as exc:
            assert re.search(r"read-only|writeable|writable", str(exc)), exc
            continue
        ex.close()
        pytest.fail(f"HaloExchanger accepted a read-only field with transport {transport!r}")


def test_jax_arrays_are_refused_as_immutable(decompose):
    """DLPack lends JAX's memory out (on the GPU with no read-only flag), but a JAX array must never change
    under JAX's feet: the exchanger and the transposer refuse it and say what to do instead."""
    jnp = pytest.importorskip("jax.numpy")
    d = decompose((6, 5), halo=1, periodic=True)
    with pytest.raises(FieldError, match=r"field 0 is a JAX array, which is immutable.*jax\.dlpack"):
        HaloExchanger(d, jnp.zeros(d.local_shape))
    box = gridcomm.Box((0,), (4,))
    with pytest.raises(FieldError, match="destination 0 is a JAX array"):
        gridcomm.Transposer(None, {0: box}, {0: box}, np.zeros(4, np.float32), jnp.zeros(4, jnp.float32))


def test_gather_accepts_torch_tensors(decompose):
    """The exchanger takes torch tensors; gather must too (it read them with CuPy's .get() before)."""
    torch = pytest.importorskip("torch")
    d = decompose((6, 5), halo=1, periodic=True)
    local = torch.arange(np.prod(d.local_shape), dtype=torch.float64).reshape(d.local_shape)
    whole = d.gather(local)
    assert np.array_equal(whole, local.numpy()[d.interior_slices])


def test_misuse_of_the_exchanger(decompose):
    d = decompose((6, 5), halo=1, periodic=True)
    ex = HaloExchanger(d, d.zeros())
    handle = ex.start()
    with pytest.raises(GridcommError, match="already in flight"):
        ex.start()
    with pytest.raises(GridcommError, match="in flight"):
        ex.close()
    handle.wait()
    ex.close()
    ex.close()
    with pytest.raises(GridcommError, match="closed"):
        ex.start()
    with pytest.raises(FieldError, match="empty"):
        HaloExchanger(d, [])
    with pytest.raises(TransportError, match=r"transport='pigeon' is unknown"):
        HaloExchanger(d, d.zeros(), "pigeon")
    with pytest.raises(ValueError, match="timeout"):
        HaloExchanger(d, d.zeros(), timeout=-1)


def test_mpi_transport_options_are_checked():
    with pytest.raises(ValueError, match="method='udp'"):
        MpiTransport(method="udp")
    with pytest.raises(ValueError, match="packing='zip'"):
        MpiTransport(packing="zip")


def test_transport_labels_configure_transports():
    from gridcomm.transports import IpcTransport, by_label

    assert by_label("nccl") == "nccl" and by_label("auto") == "auto"
    assert by_label("ipc/copy-engine") == IpcTransport(method="copy-engine")
    assert by_label("ipc/blocks=32") == IpcTransport(blocks=32)
    assert by_label("ipc/method=copy-engine/blocks=4") == IpcTransport(method="copy-engine", blocks=4)
    assert by_label("mpi/method=neighbor") == MpiTransport(method="neighbor")
    assert by_label("ipc/two-way") == IpcTransport(one_way_bytes=0) == by_label("ipc/one_way_bytes=0")
    assert by_label("ipc/blocks=66+nccl") == {"node": IpcTransport(blocks=66), "network": "nccl"}
    with pytest.raises(TransportError, match="'pigeon' is unknown"):
        by_label("ipc+pigeon/blocks=3")
    with pytest.raises(
        TransportError, match=r"'speed=3' is not an option of ipc.*\['blocks', 'method', 'one_way_bytes'\]"
    ):
        by_label("ipc/speed=3")
    with pytest.raises(TransportError, match="'pigeon' is unknown"):
        by_label("pigeon/blocks=3")
    with pytest.raises(ValueError, match="at least 1"):
        by_label("ipc/blocks=0")
    with pytest.raises(ValueError, match="one_way_bytes"):
        IpcTransport(one_way_bytes=-1)


def test_timeouts_from_environment(monkeypatch):
    monkeypatch.setenv("GRIDCOMM_TIMEOUT", "2.5")
    assert gridcomm.comm.default_timeout() == 2.5
    with gridcomm.Communicator() as comm:
        assert comm.timeout == 2.5
    with gridcomm.Communicator(timeout=9) as comm:
        assert comm.timeout == 9.0
    monkeypatch.delenv("GRIDCOMM_TIMEOUT")
    assert gridcomm.comm.default_timeout() == 60.0
    for bad in ("soon", "0", "-3"):
        monkeypatch.setenv("GRIDCOMM_TIMEOUT", bad)
        with pytest.raises(ValueError, match="GRIDCOMM_TIMEOUT"):
            gridcomm.comm.default_timeout()
    monkeypatch.delenv("GRIDCOMM_TIMEOUT")
    with pytest.raises(ValueError, match="timeout"):
        gridcomm.Communicator(timeout=0)
    with pytest.raises(TypeError, match="mpi4py communicator"):
        gridcomm.Communicator("COMM_WORLD")


def test_error_hierarchy():
    for cls, base in (
        (DecompositionError, ValueError),
        (FieldError, ValueError),
        (PatternError, ValueError),
        (TransportError, RuntimeError),
        (GridcommTimeout, TimeoutError),
    ):
        assert issubclass(cls, GridcommError) and issubclass(cls, base)
        assert getattr(gridcomm, cls.__name__) is cls


def test_gridcomm_timeout_attributes_and_message():
    exc = GridcommTimeout("halo exchange #3 (exchanger tag 1, 2 field(s))", 4, [5, 7], 1.25)
    assert (exc.operation, exc.rank, exc.peers, exc.elapsed) == (
        "halo exchange #3 (exchanger tag 1, 2 field(s))",
        4,
        (5, 7),
        1.25,
    )
    assert str(exc).startswith("rank 4: halo exchange #3")
    assert "rank(s) 5, 7" in str(exc) and "1.2 s" in str(exc)


def test_gridcomm_timeout_survives_pickling():
    """mpi4py's lower-case collectives, multiprocessing and concurrent.futures pickle exceptions."""
    exc = GridcommTimeout("halo exchange #1", 0, [1], 2.0)
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is GridcommTimeout
    assert (back.operation, back.rank, back.peers, back.elapsed) == (exc.operation, 0, (1,), 2.0)
    assert str(back) == str(exc)


def test_ipc_goes_one_way_for_small_messages_only():
    """The one-way protocol serves an exchange whose every message (and the rank's copy to itself) is at most
    one_way_bytes: one thread block moves each, so one large message takes the whole exchange to the fields."""
    from types import SimpleNamespace

    from gridcomm.transports import IpcTransport

    def layout(*sizes):
        return SimpleNamespace(sends=[SimpleNamespace(nbytes=n) for n in sizes], recvs=[])

    small = IpcTransport(one_way_bytes=100)
    with gridcomm.Communicator() as comm:
        assert small.goes_one_way(comm, layout(100, 40))
        assert not small.goes_one_way(comm, layout(40, 101))
        assert not small.goes_one_way(comm, layout(40), SimpleNamespace(send_nbytes=101))  # its own copy too
        assert small.goes_one_way(comm, layout(), SimpleNamespace(send_nbytes=100))
        assert not IpcTransport(one_way_bytes=0).goes_one_way(comm, layout(8))


def test_the_lean_replay_launches_reads_the_reports_and_books(decompose):
    """The lean way of a replayed exchange (GPU-only in use; driven here with stand-ins on one rank): start() runs
    the checks and launches the graph, wait() reads the GPU waits' reports and books the replay; a report that says
    a wait gave up takes the whole way, and a check that raises a timeout gives up and leaves the lean way."""
    from gridcomm.exchange import _LeanReplay

    calls = []

    class Stream:
        def is_capturing(self) -> bool:
            return False

    class Graph:
        def launch(self, stream) -> None:
            calls.append("launch")

    d = decompose((6,), halo=1, periodic=False)
    with HaloExchanger(d, d.zeros(), "mpi", on_timeout="raise") as ex:
        report = np.zeros(4, dtype=np.int64)
        stream = Stream()

        def track(on, operation, timeout) -> None:
            calls.append(("track", on is stream, timeout))

        ex._lean = _LeanReplay(ex.timeout, Graph(), [report], [lambda: calls.append("check")], [track])
        handle = ex.start(stream)
        assert handle.replayed and not handle.done and ex.count == 1
        handle.wait()
        assert handle.done and not handle.replayed
        assert calls == ["check", "launch", ("track", True, ex.timeout)]
        ex.timeout = ex.timeout + 1  # captured with another limit: not the lean way (nor a replay, on the host)
        ex.start(stream).wait()
        assert calls[3:] == [] and ex.count == 2
        ex.timeout -= 1
        report[0] = 1  # a GPU-side wait gave up: wait() takes the whole way (which completes this host exchange)
        ex.start(stream).wait()
        assert calls[3:] == ["check", "launch"] and ex._lean is not None

        def late() -> None:
            raise GridcommTimeout("halo exchange #4 (a check)", 0, [1], 1.0)

        ex._lean = ex._lean._replace(checks=[late])
        with pytest.raises(GridcommTimeout, match="a check"):
            ex.start(stream)
        assert ex._lean is None
