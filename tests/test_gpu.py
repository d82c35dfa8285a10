"""GPU tests: the correctness suites on GPU fields over every GPU transport, GPU-only API and bad input.

Marked ``gpu`` and skipped without CuPy and a GPU (CI has none): run them on a GPU machine with
``pytest -m gpu``. The MPI suites run one rank per GPU, on 1 GPU, on 2 and on every GPU there is.
"""

from __future__ import annotations

import pytest
from harness import describe_mismatch, expected_cells, local_with_sentinel, random_global

import gridcomm
import gridcomm.comm
import gridcomm.mpilib
import gridcomm.shmem
from gpu_support import gpu_count, needs_gpus
from gridcomm import FieldError, GridcommError, HaloExchanger, TransportError

pytestmark = [pytest.mark.gpu, needs_gpus(1)]

NVSHMEM_USABLE = gridcomm.shmem.unavailable_reason() is None  # gridcomm[nvshmem] installed
GPU_TRANSPORTS = [*gridcomm.transports.runnable(on_device=True), "auto"]
# 1 and 2 ranks, and one per GPU where there are more (one rank per GPU: the all-to-all of every pair at once).
RANK_COUNTS = sorted({n for n in (1, 2, gpu_count()) if 1 <= n <= gpu_count()}) or [1]
ON_GPU = {"GRIDCOMM_CHECK_DEVICE": "gpu"}
# The structured and unstructured suites also run in validation mode: every exchange is checked against the
# checksums of what its peers sent, on top of the suites' own comparison with the serial reference.
VALIDATED = {**ON_GPU, "GRIDCOMM_VALIDATE": "1"}


# -- the MPI suites, one rank per GPU -----------------------------------------------------------------------


@pytest.mark.parametrize("nranks", RANK_COUNTS)
def test_structured_suite_on_gpu(mpi_checks, nranks):
    mpi_checks("checks_exchange", nranks, timeout=240, env=VALIDATED)


@pytest.mark.parametrize("nranks", RANK_COUNTS)
def test_structured_property_on_gpu(mpi_checks, nranks):
    mpi_checks("checks_property", nranks, timeout=240, env={**ON_GPU, "GRIDCOMM_PROPERTY_EXAMPLES": "150"})


@pytest.mark.parametrize("nranks", RANK_COUNTS)
def test_unstructured_suite_on_gpu(mpi_checks, nranks):
    env = {**VALIDATED, "GRIDCOMM_UNSTRUCTURED_EXAMPLES": "100"}
    mpi_checks("checks_unstructured", nranks, timeout=240, env=env)


@pytest.mark.parametrize("nranks", RANK_COUNTS)
def test_staggered_suite_on_gpu(mpi_checks, nranks):
    """Fields of their own halos and staggering in one exchanger, over every GPU transport, validated."""
    env = {**VALIDATED, "GRIDCOMM_PROPERTY_STAGGERED_EXAMPLES": "100"}
    mpi_checks("checks_staggered", nranks, timeout=240, env=env)


@pytest.mark.parametrize("nranks", RANK_COUNTS)
def test_transpose_suite_on_gpu(mpi_checks, nranks):
    """The Transposer's host suite over every GPU transport (both ipc methods), streams, graphs, random cases."""
    mpi_checks("checks_gpu_transpose", nranks, timeout=300, env=ON_GPU)


def test_transpose_suite_with_ranks_sharing_a_gpu(mpi_checks):
    """3 ranks on the GPUs there are (several per GPU): CUDA IPC between processes of one device works too;
    NCCL refuses two ranks on one device, so staged and ipc only."""
    env = {
        **ON_GPU,
        "GRIDCOMM_CHECK_TRANSPORTS": "staged,ipc,ipc/copy-engine",
        "GRIDCOMM_PROPERTY_TRANSPOSE_EXAMPLES": "40",
    }
    mpi_checks("checks_gpu_transpose", 3, timeout=300, env=env)


@pytest.mark.skipif(not NVSHMEM_USABLE, reason=f"NVSHMEM not usable here: {gridcomm.shmem.unavailable_reason()}")
@pytest.mark.parametrize("suite", ["checks_exchange", "checks_gpu_transpose", "checks_unstructured"])
def test_nvshmem_suites_on_two_ranks(mpi_checks, suite):
    """The suites over the nvshmem transport on 2 ranks: one GPU each where there are 2, else both on one GPU
    (NVSHMEM runs several processes per GPU; puts between them go through the GPU's own memory)."""
    env = {**ON_GPU, "GRIDCOMM_CHECK_TRANSPORTS": "nvshmem", "GRIDCOMM_PROPERTY_TRANSPOSE_EXAMPLES": "30"}
    env.update({"GRIDCOMM_UNSTRUCTURED_EXAMPLES": "40"} if suite == "checks_unstructured" else {})
    mpi_checks(suite, 2, timeout=400, env=env)


@pytest.mark.skipif(gpu_count() != 1, reason="with 2 GPUs test_gpu_transports_between_two_gpus runs these checks")
def test_gpu_side_timeouts_with_ranks_sharing_a_gpu(mpi_checks):
    """ipc's and nvshmem's GPU-side waits, and the persistent stencil kernel's, give up on a silent peer when the
    two ranks share the one GPU there is (tests/mpi_programs/checks_gpu.py)."""
    checks = ("check_gpu_side_waits_time_out_then_recover", "check_persistent_stencil_silent_neighbour_times_out")
    mpi_checks("checks_gpu", 2, timeout=200, env=ON_GPU, checks=checks)


@needs_gpus(2)
def test_gpu_transports_between_two_gpus(mpi_checks):
    """Streams, graphs, timeouts and device checks that need a peer GPU (tests/mpi_programs/checks_gpu.py)."""
    mpi_checks("checks_gpu", 2, timeout=100, env=ON_GPU)


@needs_gpus(2)
@pytest.mark.parametrize("program", ["checks_nodes", "checks_exchange", "checks_gpu_transpose"])
def test_suites_across_declared_nodes_on_gpu(mpi_checks, program):
    """One rank per GPU declared as nodes of half the ranks (GRIDCOMM_RANKS_PER_NODE): auto serves the peers on
    a rank's node and the others each with its own GPU transport (ipc and nccl), bit for bit."""
    nranks = gpu_count()
    env = {**ON_GPU, "GRIDCOMM_RANKS_PER_NODE": str(max(1, nranks // 2))}
    mpi_checks(program, nranks, timeout=300, env=env)


# -- one rank, in process ---------------------------------------------------------------------------------


@pytest.fixture
def cupy():
    import cupy

    cupy.cuda.Device(0).use()
    return cupy


def device_field(cupy, d, g, order="C"):
    return cupy.array(local_with_sentinel(d, g, order), order=order)


@pytest.mark.parametrize("transport", GPU_TRANSPORTS)
@pytest.mark.parametrize("order", "CF")
def test_single_gpu_periodic_exchange_matches_reference(cupy, decompose, transport, order):
    """One rank, periodic in every dimension: every halo comes from the rank itself (the field-to-field copies)."""
    d = decompose((9, 7, 5), halo=((2, 1), (1, 2), (1, 1)), periodic=True)
    globals_ = [random_global(d.global_shape, dt, i) for i, dt in enumerate(("float64", "int32", "complex64"))]
    fields = [device_field(cupy, d, g, order) for g in globals_]
    with HaloExchanger(d, fields, transport) as ex:
        ex.exchange()
        cupy.cuda.get_current_stream().synchronize()
    for f, g in zip(fields, globals_, strict=True):
        assert describe_mismatch(f.get(), expected_cells(g, d.global_slices, d.halo, d.periodic, d.stencil)) is None


@pytest.mark.parametrize("transport", GPU_TRANSPORTS)
def test_an_exchange_with_nothing_to_move(cupy, decompose, transport):
    """One rank, nothing periodic: no peer and no halo to fill; the exchange still completes, twice."""
    d = decompose((12, 10), halo=1)
    f = d.zeros(xp=cupy)
    with HaloExchanger(d, f, transport) as ex:
        ex.exchange()
        ex.exchange()
    cupy.cuda.Device().synchronize()
    assert float(abs(f).sum()) == 0.0


@pytest.mark.parametrize("transport", ["nccl", "ipc"] + (["nvshmem"] if NVSHMEM_USABLE else []))
def test_capture_replays_the_exchange(cupy, decompose, transport):
    d = decompose((12, 10), halo=1, periodic=True)
    g = random_global(d.global_shape, "float32", 3)
    f = device_field(cupy, d, g)
    with HaloExchanger(d, f, transport) as ex:
        graph = ex.capture()
        stream = cupy.cuda.Stream(non_blocking=True)
        for _ in range(3):
            f[d.interior_slices] = cupy.asarray(g[d.global_slices])
            f[0, :] = -1  # a halo row, which the replay must fill again
            cupy.cuda.get_current_stream().synchronize()
            graph.launch(stream)
            stream.synchronize()
            ex.check()
            assert describe_mismatch(f.get(), expected_cells(g, d.global_slices, d.halo, d.periodic, "box")) is None
    with pytest.raises(GridcommError, match="released"):  # closing the exchanger freed the graph
        graph.launch(stream)


@pytest.mark.parametrize("replay", ["1", "0"], ids=["replayed", "enqueued"])
@pytest.mark.parametrize("transport", ["nccl", "ipc", "staged"])
def test_eager_exchanges_replay_a_graph_of_their_own(cupy, decompose, monkeypatch, transport, replay):
    """start() launches a graph of the whole exchange where the transport can be captured (GRIDCOMM_REPLAY=0:
    each part enqueued from Python); a changed timeout is captured anew; the replays after the first take the
    lean way (launch; read the GPU waits' reports, ipc, or book the replay with the watchdog, nccl), and a capture
    of the user's or replay switched off and on again in between still moves the right halos."""
    monkeypatch.setenv("GRIDCOMM_REPLAY", replay)
    d = decompose((14, 9), halo=2, periodic=True)
    g = random_global(d.global_shape, "float64", 11)
    f = device_field(cupy, d, g)
    lean = replay == "1" and transport != "staged"  # ipc reads its reports, nccl books its replays
    with HaloExchanger(d, f, transport) as ex:
        assert ex.replay == (replay == "1" and transport != "staged")  # nccl: its abort runs beside the replay
        for step in range(7):
            if step == 2:
                ex.timeout = 30.0  # the GPU-side waits' limit is in the graph: captured again
            if step == 4 and ex.replay:
                ex.replay = False
            if step == 5 and replay == "1" and transport != "staged":
                ex.replay = True
            f[d.interior_slices] = cupy.asarray(g[d.global_slices]) + step
            f[0, :] = -1
            if step == 6 and transport != "staged":  # a capture of the user's: the parts, not the exchanger's graph
                stream = cupy.cuda.Stream(non_blocking=True)
                cupy.cuda.get_current_stream().synchronize()
                with stream:
                    stream.begin_capture()
                    ex.start(stream).wait()
                    graph = stream.end_capture()
                graph.launch(stream)
                stream.synchronize()
            else:
                ex.exchange()
            want = expected_cells(g + step, d.global_slices, d.halo, d.periodic, "box")
            assert describe_mismatch(f.get(), want) is None, (step, transport)
            if step in (3, 5):
                assert (ex._lean is not None) == lean, (step, transport)  # the lean way was taken, where it can be
        assert ex.count == 7


def test_nccl_is_aborted_without_the_gil(cupy):
    """nccl_abort reads the handle CuPy keeps (NCCL confirms its rank, size and device) and aborts it on a thread
    of its own, beside a graph that captured the communicator; CuPy's object is left with no handle, so that its
    own calls fail cleanly and its destroy does nothing (a second destroy of the handle segfaulted at exit)."""
    from cupy.cuda import nccl
    from mpi4py import MPI

    from gridcomm.gpu import nccl_communicator
    from gridcomm.transports import nccl_abort

    comm = gridcomm.Communicator(MPI.COMM_SELF)
    communicator = nccl_communicator(comm)
    raw = nccl_abort.handle(communicator)
    assert raw is not None, "the ncclComm_t could not be read from CuPy's NcclCommunicator"
    x = cupy.ones(1024, dtype=cupy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    stream.begin_capture()
    communicator.allReduce(x.data.ptr, x.data.ptr, x.size, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr)
    graph = stream.end_capture()
    graph.launch(stream)
    stream.synchronize()
    comm.nccl = None
    aborting = nccl_abort.abort_in_background(communicator, raw)
    del graph  # Python runs while the abort runs in NCCL
    aborting.join(120.0)
    assert not aborting.is_alive(), "NCCL's abort still runs after the graph was freed"
    assert nccl_abort.handle(communicator) is None  # CuPy's object holds no handle any more
    with pytest.raises(nccl.NcclError):
        communicator.rank_id()
    communicator.destroy()  # nothing to destroy
    comm.close()


def test_capture_keeps_the_streams_priorities(cupy):
    """A step forked to a stream of the highest priority and joined back, captured whole: it replays in order,
    and its graph runs each kernel at the priority of the stream it was captured from."""
    from gridcomm.device import HIGHEST_PRIORITY
    from gridcomm.graphs import capture

    main = cupy.cuda.Stream(non_blocking=True)
    side = cupy.cuda.Stream(non_blocking=True, priority=HIGHEST_PRIORITY)
    forked, joined = cupy.cuda.Event(disable_timing=True), cupy.cuda.Event(disable_timing=True)
    x = cupy.zeros(1 << 16, dtype=cupy.float64)
    main.synchronize()

    def step():
        main.record(forked)
        side.wait_event(forked)
        with side:
            x[...] += 1
        side.record(joined)
        main.wait_event(joined)
        with main:
            x[...] *= 3
        return "stepped"

    graph, result = capture(main, step)
    assert result == "stepped" and graph.keeps_priorities
    assert float(x.sum()) == 0.0  # capturing ran nothing
    graph.launch(main)
    graph.launch(main)
    main.synchronize()
    assert (x == 12.0).all()  # ((0 + 1) * 3 + 1) * 3
    graph.close()
    with pytest.raises(RuntimeError, match="closed"):
        graph.launch(main)


def test_capture_ends_when_the_work_fails(cupy):
    from gridcomm.graphs import capture

    stream = cupy.cuda.Stream(non_blocking=True)

    def failing():
        with stream:
            cupy.ones(8) * 2
        raise ValueError("the step failed")

    with pytest.raises(ValueError, match="the step failed"):
        capture(stream, failing)
    assert not stream.is_capturing()
    y = cupy.zeros(8)
    stream.synchronize()

    def fill():
        with stream:
            y.fill(5.0)

    graph, _ = capture(stream, fill)  # the stream captures again
    graph.launch(stream)
    stream.synchronize()
    assert (y == 5.0).all()


def test_staged_cannot_be_captured(cupy, decompose):
    d = decompose((8, 8), halo=1, periodic=True)
    with HaloExchanger(d, d.zeros(xp=cupy), "staged") as ex, pytest.raises(GridcommError, match="CUDA graph"):
        ex.capture()


@pytest.mark.parametrize("transport", GPU_TRANSPORTS)
def test_start_on_a_stream_of_ones_own(cupy, decompose, transport):
    """start(stream) enqueues on that stream; work after wait() on the same stream sees the halos."""
    d = decompose((16, 6), halo=2, periodic=True)
    g = random_global(d.global_shape, "float64", 5)
    f = device_field(cupy, d, g)
    stream = cupy.cuda.Stream(non_blocking=True)
    with HaloExchanger(d, f, transport) as ex:
        ex.start(stream).wait()
        with stream:
            copy = f.copy()  # ordered after the unpack on `stream`
        stream.synchronize()
    assert describe_mismatch(copy.get(), expected_cells(g, d.global_slices, d.halo, d.periodic, "box")) is None


def test_dlpack_arrays_are_exchanged_in_place(decompose):
    """A torch tensor on the GPU is viewed through DLPack, not copied: its own memory gets the halos."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    d = decompose((10, 6), halo=1, periodic=True)
    g = random_global(d.global_shape, "float64", 9)
    t = torch.from_numpy(local_with_sentinel(d, g)).cuda()
    with HaloExchanger(d, t, "auto") as ex:
        assert ex.fields[0].data.ptr == t.data_ptr()  # the same memory
        ex.exchange()
        torch.cuda.synchronize()
    assert describe_mismatch(t.cpu().numpy(), expected_cells(g, d.global_slices, d.halo, d.periodic, "box")) is None


def test_host_and_device_fields_in_one_exchanger(cupy, decompose):
    d = decompose((8, 8), halo=1)
    with pytest.raises(FieldError, match="different memories"):
        HaloExchanger(d, [d.zeros(), d.zeros(xp=cupy)])


def test_device_fields_on_a_non_cuda_aware_mpi(cupy, decompose, monkeypatch):
    monkeypatch.setenv("GRIDCOMM_MPI_CUDA_AWARE", "0")
    gridcomm.mpilib.mpi_cuda_aware.cache_clear()
    try:
        d = decompose((8, 8), halo=1)
        with pytest.raises(TransportError, match="not CUDA-aware"):
            HaloExchanger(d, d.zeros(xp=cupy), "mpi")
    finally:
        gridcomm.mpilib.mpi_cuda_aware.cache_clear()


@needs_gpus(2)
def test_field_on_another_gpu(cupy, decompose):
    d = decompose((8, 8), halo=1)
    with cupy.cuda.Device(1):
        elsewhere = d.zeros(xp=cupy)
    with pytest.raises(FieldError, match="not on the current GPU"):
        HaloExchanger(d, elsewhere, "nccl")


def test_auto_picks_a_gpu_transport_and_says_why(cupy):
    comm = gridcomm.Communicator()
    reasons = gridcomm.transports.available(comm, on_device=True)
    why = gridcomm.transports.auto_choice_reason(reasons, on_device=True)
    ordered = gridcomm.transports.auto_choice_reason(reasons, on_device=True, measuring=False)
    assert ordered.split(":")[0] in {"ipc", "nccl", "mpi", "staged"}, ordered
    assert why == ordered or (why.startswith("the fastest of ipc, ipc/copy-engine, nccl") and "measured" in why), why
    comm.close()


def test_pack_kernels_fill_every_byte(cupy, decompose):
    """Pack then unpack of random halos through the device buffers: nothing lost, nothing extra."""
    d = decompose((33, 17, 9), halo=((3, 2), (1, 3), (2, 2)), periodic=True)
    g = random_global(d.global_shape, "int16", 11)  # 2-byte cells: odd run lengths, no 16-byte vectors
    f = device_field(cupy, d, g, "F")
    with HaloExchanger(d, f, "ipc") as ex:
        for _ in range(2):
            ex.exchange()
    cupy.cuda.get_current_stream().synchronize()
    assert describe_mismatch(f.get(), expected_cells(g, d.global_slices, d.halo, d.periodic, "box")) is None


@needs_gpus(2)
def test_bench_halo_on_declared_nodes_times_the_gpu_mixes(tmp_path):
    """2 ranks as 2 declared nodes of 1 GPU: ipc cannot serve the rank on the other node, so the GPU halo bench
    (one halo and mixed halos) times the mixes (ipc on the node, nccl or staged across) beside the transports
    that serve every peer, and leaves ipc alone out."""
    import json
    import os
    import subprocess
    import sys

    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HYDRA_", "GRIDCOMM_"))}
    environ.update(GRIDCOMM_RANKS_PER_NODE="1", GRIDCOMM_TIMEOUT="120")
    for extra, name in (((), "halo-gpu-2r-*.json"), (("--mixed",), "halo-mixed-gpu-2r-*.json")):
        command = ["bench", "halo", "--gpu", "--np", "2", "--sizes", "16", "--samples", "3", *extra]
        proc = subprocess.run(
            [sys.executable, "-m", "gridcomm", *command, "--out", str(tmp_path)],
            capture_output=True, text=True, env=environ, timeout=600,
        )  # fmt: skip
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        (path,) = tmp_path.glob(name)
        for row in json.loads(path.read_text())["results"]:
            labels = set(row["times"])
            assert "ipc+nccl" in labels and "ipc" not in labels, labels


@needs_gpus(2)
def test_bench_p2p_times_the_staged_legs_beside_staged(tmp_path):
    """bench p2p times the staged transport's legs alone (pinned copies down and up, MPI between host buffers)
    and staged's share of its slowest leg."""
    import json
    import os
    import subprocess
    import sys

    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HYDRA_", "GRIDCOMM_"))}
    command = ["bench", "p2p", "--np", "2", "--largest", "65536", "--samples", "3", "--out", str(tmp_path)]
    proc = subprocess.run(
        [sys.executable, "-m", "gridcomm", *command], capture_output=True, text=True, env=environ, timeout=600
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    (path,) = tmp_path.glob("p2p-gpu-2r-*.json")
    for row in json.loads(path.read_text())["results"]:
        legs = {"pinned copy down", "pinned copy up", "pinned copies both ways", "host MPI", "staged", "staged/mpi"}
        assert legs <= set(row["times"]), row["times"].keys()
        assert row["staged_ceiling_leg"] in row["times"] and row["staged_share_of_ceiling"] > 0, row
        assert row["staged_share_of_both_ways"] > 0, row
