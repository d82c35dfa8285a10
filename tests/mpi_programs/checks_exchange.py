"""Deterministic collective checks of decompositions and halo exchanges (run on 1, 2, 3, 4 and 8 ranks).

Every exchange check runs over all four MPI transport configurations (p2p/neighbor x datatype/copy).
"""

from __future__ import annotations

import math
import os
import zlib

import numpy as np
from harness import (
    BOX_TRANSPORTS,
    ON_GPU,
    SENTINEL_BYTE,
    TRANSPORTS,
    HaloExchanger,
    assert_everywhere,
    assert_raises_everywhere,
    cell_bytes,
    describe_mismatch,
    expected_cells,
    local_with_sentinel,
    owned_slices,
    random_global,
    ranks,
)

import gridcomm
from gridcomm import CartesianDecomposition, GridcommError, TransportError
from gridcomm.decomp.procgrid import factorisations

# The structured suite also covers the transports that move boxes only (on the GPU: ipc's copy engines).
TRANSPORTS = {**TRANSPORTS, **BOX_TRANSPORTS}


def fitting_grids(n: int, shape: tuple[int, ...], limit: int = 4) -> list[tuple[int, ...]]:
    return [g for g in factorisations(n, len(shape)) if all(p <= s for p, s in zip(g, shape, strict=True))][:limit]


def compare(d, field, global_array) -> str | None:
    return describe_mismatch(field, expected_cells(global_array, d.global_slices, d.halo, d.periodic, d.stencil))


def exchange_problems(d, specs, transport, seed=0) -> str | None:
    """Fill fields (dtype, order) from random global arrays, exchange once, compare with the reference."""
    globals_ = [random_global(d.global_shape, dtype, seed + i) for i, (dtype, _) in enumerate(specs)]
    fields = [local_with_sentinel(d, g, order) for g, (_, order) in zip(globals_, specs, strict=True)]
    with HaloExchanger(d, fields, transport) as ex:
        ex.exchange()
    problems = [
        f"field {i} ({specs[i][0]}, {specs[i][1]}): {p}"
        for i, (f, g) in enumerate(zip(fields, globals_, strict=True))
        if (p := compare(d, f, g))
    ]
    return "\n".join(problems) or None


def grow(shape, halo, size) -> tuple[int, ...]:
    """``shape`` grown where needed so that any process grid of ``size`` ranks fits the halo (uneven splits)."""
    widths = [halo] * len(shape) if isinstance(halo, int) else list(halo)
    widest = [w if isinstance(w, int) else max(w) for w in widths]
    return tuple(max(n, size * max(w, 1) + (size > 1)) for n, w in zip(shape, widest, strict=True))


# Decompositions to exchange over: (global_shape, halo, periodic); shapes grow with the rank count.
CASES = [
    ((17,), 2, True),
    ((13,), [(1, 3)], False),
    ((9, 10), 1, (True, False)),
    ((8, 11), ((2, 0), (1, 2)), True),
    ((6, 5, 7), 1, (False, True, False)),
    ((8, 8, 4), ((1, 2), (0, 1), (1, 1)), True),
]


def check_ownership_and_rank_layout(comm):
    """proc_grid, C-order coords, block sizes (first n % p ranks one point more), rank_of/coords_of, tiling."""
    size, rank = comm.Get_size(), comm.Get_rank()
    problems = []
    for shape in [(3 * size + 2,), (7, 9), (5, 4, 6)]:
        for grid in [None, *fitting_grids(size, shape)]:
            d = CartesianDecomposition(comm, shape, halo=0, proc_grid=grid)
            where = f"shape {shape} proc_grid {grid} -> {d.proc_grid}"
            if math.prod(d.proc_grid) != size or (grid is not None and d.proc_grid != grid):
                problems.append(f"{where}: bad process grid")
            coords = tuple(int(c) for c in np.unravel_index(rank, d.proc_grid))
            if d.coords != coords:
                problems.append(f"{where}: coords {d.coords}, expected C order {coords}")
            owned = owned_slices(shape, d.proc_grid, coords)
            if tuple(d.global_slices) != owned:
                problems.append(f"{where}: global_slices {d.global_slices}, expected {owned}")
            if d.interior_shape != tuple(s.stop - s.start for s in owned) or d.local_shape != d.interior_shape:
                problems.append(f"{where}: interior {d.interior_shape} local {d.local_shape}")
            for r in range(size):
                if d.rank_of(d.coords_of(r)) != r:
                    problems.append(f"{where}: rank_of(coords_of({r})) != {r}")
            # Every global point owned exactly once.
            everyone = comm.allgather(d.global_slices)
            count = np.zeros(shape, dtype=np.int64)
            for slices in everyone:
                count[slices] += 1
            if not (count == 1).all():
                problems.append(f"{where}: global points owned {np.unique(count)} times")
            d.comm.close()
    # The first n % p ranks of a dimension get one extra point.
    d = CartesianDecomposition(comm, (3 * size + 2,), halo=1)
    base, extra = divmod(3 * size + 2, size)
    if d.interior_shape[0] != base + (rank < extra):
        problems.append(f"1-D uneven: rank {rank} owns {d.interior_shape[0]} points, expected {base + (rank < extra)}")
    if d.interior_slices != (slice(1, 1 + d.interior_shape[0]),) or d.local_shape != (d.interior_shape[0] + 2,):
        problems.append(f"1-D uneven: interior_slices {d.interior_slices}, local_shape {d.local_shape}")
    d.comm.close()
    # rank_of wraps in periodic dimensions and gives None across a non-periodic boundary.
    d = CartesianDecomposition(comm, (4 * size, 3), halo=1, periodic=(True, False), proc_grid=(size, 1))
    if d.rank_of((-1, 0)) != size - 1 or d.rank_of((size, 0)) != 0 or d.rank_of((0, 1)) is not None:
        problems.append(f"rank_of: {d.rank_of((-1, 0))}, {d.rank_of((size, 0))}, {d.rank_of((0, 1))}")
    if d.halo != ((1, 1), (1, 1)) or d.periodic != (True, False):
        problems.append(f"normalised halo {d.halo} periodic {d.periodic}")
    d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)


def check_neighbor_collective_of_an_mpi_3_library(comm):
    """MpiTransport(method="neighbor") on a library without persistent collectives (Open MPI 4.1 raises
    NotImplementedError for MPI_Neighbor_alltoallw_init): one non-blocking collective per exchange, twice over,
    every cell right."""
    from gridcomm.transports import MpiTransport
    from gridcomm.transports import mpi as mpi_module

    if ON_GPU and not gridcomm.mpilib.mpi_cuda_aware():
        return  # device fields never reach such an MPI
    if ON_GPU and MpiTransport(method="neighbor").local_reason(on_device=True):  # Open MPI: refused, not crashed
        d = CartesianDecomposition(comm, grow(*CASES[0][:2], comm.Get_size()), halo=CASES[0][1], periodic=True)
        make = lambda: HaloExchanger(d, d.zeros(np.float64), MpiTransport(method="neighbor"))  # noqa: E731 (on GPU)
        assert_raises_everywhere(comm, make, TransportError, "neighbourhood collectives")
        d.comm.close()
        return
    problems = []
    saved, mpi_module._NeighborChannel.persistent = mpi_module._NeighborChannel.persistent, False
    try:
        for shape, halo, periodic in CASES[:3]:
            d = CartesianDecomposition(comm, grow(shape, halo, comm.Get_size()), halo=halo, periodic=periodic)
            for seed in (0, 1):
                if p := exchange_problems(d, [("float64", "C"), ("int16", "F")], MpiTransport(method="neighbor"), seed):
                    problems.append(f"{d.global_shape} halo={halo} periodic={periodic}, seed {seed}: {p}")
            d.comm.close()
    finally:
        mpi_module._NeighborChannel.persistent = saved
    assert_everywhere(comm, "\n".join(problems) or None)


def check_exchange_matches_reference(comm):
    """Box stencil, 1-3-D, periodic or not, asymmetric halos: every local cell, halo included."""
    problems = []
    for shape, halo, periodic in CASES:
        shape = grow(shape, halo, comm.Get_size())
        d = CartesianDecomposition(comm, shape, halo=halo, periodic=periodic)
        for name, transport in TRANSPORTS.items():
            if p := exchange_problems(d, [("float64", "C")], transport):
                problems.append(f"{shape} halo={halo} periodic={periodic} on {d.proc_grid}, {name}: {p}")
        d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)


def check_halo_beyond_open_boundary_never_written(comm):
    """Cells beyond a non-periodic boundary keep their sentinel, on every rank that has such cells."""
    problems, checked = [], 0
    for shape, halo, periodic in [((12, 9), 2, (False, True)), ((6, 7, 5), ((1, 2), (2, 1), (1, 1)), False)]:
        shape = grow(shape, halo, comm.Get_size())
        d = CartesianDecomposition(comm, shape, halo=halo, periodic=periodic)
        # Cells whose global index lies outside the grid in some non-periodic dimension.
        beyond = np.zeros(d.local_shape, dtype=bool)
        for k, ((lo, _), s, n) in enumerate(zip(d.halo, d.global_slices, shape, strict=True)):
            g = np.arange(s.start - lo, s.start - lo + d.local_shape[k])
            mask = ((g < 0) | (g >= n)) & (not d.periodic[k])
            beyond |= mask.reshape([-1 if j == k else 1 for j in range(len(shape))])
        checked += int(beyond.sum())
        for name, transport in TRANSPORTS.items():
            g = random_global(shape, "int16", 7)
            fields = [local_with_sentinel(d, g, "C"), local_with_sentinel(d, g, "F")]
            with HaloExchanger(d, fields, transport) as ex:
                ex.exchange()
            for f in fields:
                touched = (cell_bytes(f)[beyond] != SENTINEL_BYTE).any(axis=-1)
                if touched.any():
                    problems.append(f"{shape} {name}: {int(touched.sum())} cells beyond the boundary were written")
                if p := compare(d, f, g):
                    problems.append(f"{shape} {name}: {p}")
        d.comm.close()
    if comm.allreduce(checked) == 0:
        problems.append("no rank had a cell beyond a non-periodic boundary: the check checked nothing")
    assert_everywhere(comm, "\n".join(problems) or None)


def check_star_stencil_leaves_edges_and_corners(comm):
    """stencil='star': faces exchanged, halo cells outside the interior in 2+ dimensions never written."""
    problems = []
    for shape, halo in [((10, 9), 2), ((6, 6, 5), ((1, 2), (1, 1), (2, 1)))]:
        shape = grow(shape, halo, comm.Get_size())
        d = CartesianDecomposition(comm, shape, halo=halo, periodic=True, stencil="star")
        outside = np.zeros(d.local_shape, dtype=np.int64)
        for k, (lo, _) in enumerate(d.halo):
            i = np.arange(d.local_shape[k])
            mask = (i < lo) | (i >= lo + d.interior_shape[k])
            outside += mask.reshape([-1 if j == k else 1 for j in range(len(shape))])
        corners = outside >= 2
        if not corners.any():
            problems.append("no edge or corner cells: the check checked nothing")
        for name, transport in TRANSPORTS.items():
            g = random_global(shape, "complex64", 3)
            f = local_with_sentinel(d, g, "F")
            with HaloExchanger(d, f, transport) as ex:
                ex.exchange()
            if (cell_bytes(f)[corners] != SENTINEL_BYTE).any():
                problems.append(f"{shape} {name}: edge/corner halo cells were written with stencil='star'")
            if p := compare(d, f, g):
                problems.append(f"{shape} {name}: {p}")
        d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)


MIXED = [("float64", "C"), ("int32", "F"), ("complex128", "C"), ("uint8", "F"), ("bool", "C"), ("float16", "F")]


def check_several_fields_equal_separate_exchanges(comm):
    """Six fields of different dtypes and orders in one exchange == each exchanged alone, bit for bit."""
    problems = []
    for shape, halo, periodic in [((11, 7), (2, 1), (True, False)), ((5, 6, 7), 1, True)]:
        shape = grow(shape, halo, comm.Get_size())
        d = CartesianDecomposition(comm, shape, halo=halo, periodic=periodic)
        globals_ = [random_global(shape, dt, 40 + i) for i, (dt, _) in enumerate(MIXED)]
        for name, transport in TRANSPORTS.items():
            together = [local_with_sentinel(d, g, o) for g, (_, o) in zip(globals_, MIXED, strict=True)]
            with HaloExchanger(d, together, transport) as ex:
                ex.exchange()
            for i, (g, (_, order)) in enumerate(zip(globals_, MIXED, strict=True)):
                alone = local_with_sentinel(d, g, order)
                with HaloExchanger(d, [alone], transport) as ex:
                    ex.exchange()
                if not np.array_equal(cell_bytes(alone), cell_bytes(together[i])):
                    problems.append(f"{shape} {name}: field {i} {MIXED[i]} differs from its own exchange")
                if p := compare(d, together[i], g):
                    problems.append(f"{shape} {name}: field {i} {MIXED[i]}: {p}")
        d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)


def check_start_wait_with_work_in_between(comm):
    """start(); compute and rewrite interior points that are not sent; wait(): halos as if exchanged at start."""
    problems = []
    size = comm.Get_size()
    shape, halo = (6 * size + 5, 9, 8), 2
    d = CartesianDecomposition(comm, shape, halo=halo, periodic=(True, False, True), proc_grid=(size, 1, 1))
    deep = tuple(slice(2 * halo, n - 2 * halo) for n in d.local_shape)  # interior minus the sent border
    for name, transport in TRANSPORTS.items():
        g = random_global(shape, "float64", 11)
        f = local_with_sentinel(d, g, "C")
        before = f.copy()
        with HaloExchanger(d, f, transport) as ex:
            handle = ex.start()
            checksum = zlib.crc32(np.ascontiguousarray(d.interior(f)).tobytes())  # work reading the interior
            f[deep] = -1.5  # writes to points that are neither sent nor received
            handle.wait()
            handle.wait()  # a second wait() is a no-op
            expect = expected_cells(g, d.global_slices, d.halo, d.periodic, d.stencil)
            expect[deep] = cell_bytes(np.full(f[deep].shape, -1.5))
            if p := describe_mismatch(f, expect):
                problems.append(f"{name}: {p}")
            if checksum != zlib.crc32(np.ascontiguousarray(before[d.interior_slices]).tobytes()):
                problems.append(f"{name}: interior changed under the exchange")
            # The exchanger is reusable afterwards: a plain exchange of fresh data is right.
            g2 = random_global(shape, "float64", 12)
            cell_bytes(f)[d.interior_slices] = cell_bytes(g2)[d.global_slices]
            ex.exchange()
            if p := compare(d, f, g2):
                problems.append(f"{name}, exchange after start/wait: {p}")
    d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)


def check_misuse_raises(comm):
    """A second start() before wait() and close() in flight raise GridcommError; after close(), start() and
    exchange() raise; close() twice is harmless."""
    d = CartesianDecomposition(comm, (4 * comm.Get_size(), 5), halo=1, periodic=True)
    for transport in TRANSPORTS.values():
        g = random_global(d.global_shape, "int64", 5)
        f = local_with_sentinel(d, g, "C")
        ex = HaloExchanger(d, f, transport)
        handle = ex.start()
        assert_raises_everywhere(comm, ex.start, GridcommError, "in flight")
        assert_raises_everywhere(comm, ex.close, GridcommError, "in flight")
        handle.wait()
        assert_everywhere(comm, compare(d, f, g))
        ex.close()
        ex.close()
        assert_raises_everywhere(comm, ex.start, GridcommError, "closed")
        assert_raises_everywhere(comm, ex.exchange, GridcommError, "closed")
    d.comm.close()


def check_repeated_exchanges_follow_changing_data(comm):
    """One exchanger, 20 exchanges; the fields change in place between them; every result is right."""
    problems = []
    shape = grow((7, 6, 5), (1, 2, 1), comm.Get_size())
    d = CartesianDecomposition(comm, shape, halo=(1, 2, 1), periodic=(True, True, False))
    for name, transport in TRANSPORTS.items():
        a = local_with_sentinel(d, random_global(d.global_shape, "float32", 0), "F")
        b = local_with_sentinel(d, random_global(d.global_shape, "int64", 1), "C")
        with HaloExchanger(d, [a, b], transport) as ex:
            for step in range(20):
                ga = random_global(d.global_shape, "float32", 100 + step)
                gb = random_global(d.global_shape, "int64", 200 + step)
                cell_bytes(a)[d.interior_slices] = cell_bytes(ga)[d.global_slices]
                cell_bytes(b)[d.interior_slices] = cell_bytes(gb)[d.global_slices]
                if step % 2:
                    ex.exchange()
                else:
                    ex.start().wait()
                for label, f, g in (("a", a, ga), ("b", b, gb)):
                    if p := compare(d, f, g):
                        problems.append(f"{name} step {step} field {label}: {p}")
            if ex.count != 20:
                problems.append(f"{name}: count {ex.count} after 20 exchanges")
    d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)


def check_two_exchangers_in_flight_at_once(comm):
    """Two exchangers over one decomposition, both started, completed in reverse order: messages kept apart."""
    problems = []
    d = CartesianDecomposition(comm, (3 * comm.Get_size() + 1, 6), halo=1, periodic=True)
    for name, transport in TRANSPORTS.items():
        g1, g2 = random_global(d.global_shape, "float64", 1), random_global(d.global_shape, "float64", 2)
        f1, f2 = local_with_sentinel(d, g1), local_with_sentinel(d, g2)
        with HaloExchanger(d, f1, transport) as e1, HaloExchanger(d, f2, transport) as e2:
            h1 = e1.start()
            h2 = e2.start()
            h2.wait()
            h1.wait()
        for label, f, g in (("first", f1, g1), ("second", f2, g2)):
            if p := compare(d, f, g):
                problems.append(f"{name}, {label} exchanger: {p}")
    d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)


def check_communicator_forms_and_timeouts(comm):
    """comm may be None (COMM_WORLD), an mpi4py communicator or a Communicator; timeouts come from
    GRIDCOMM_TIMEOUT (set by the test launcher), the Communicator, or the exchanger."""
    problems = []
    # 77 s: a value of its own (GRIDCOMM_TIMEOUT is a multiple of 30), and long enough for oversubscribed ranks.
    with gridcomm.Communicator(comm, timeout=77) as own:
        for form, c in (("None", None), ("mpi4py", comm), ("Communicator", own)):
            d = CartesianDecomposition(c, (2 * comm.Get_size() + 1,), halo=1, periodic=True)
            if d.comm.size != comm.Get_size() or d.comm.rank != comm.Get_rank():
                problems.append(f"{form}: rank {d.comm.rank} of {d.comm.size}")
            for transport in TRANSPORTS.values():
                if p := exchange_problems(d, [("int8", "C")], transport):
                    problems.append(f"{form}: {p}")
            with HaloExchanger(d, d.zeros()) as ex:
                expected = 77.0 if form == "Communicator" else float(os.environ.get("GRIDCOMM_TIMEOUT", "60"))
                if ex.timeout != expected:
                    problems.append(f"{form}: exchanger timeout {ex.timeout}, expected {expected}")
            with HaloExchanger(d, d.zeros(), timeout=2.5) as ex:
                if ex.timeout != 2.5:
                    problems.append(f"{form}: HaloExchanger(timeout=2.5).timeout == {ex.timeout}")
            if form != "Communicator":
                d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)


def check_ipc_staged_selections_match_reference(comm):
    """On the GPU (GRIDCOMM_CHECK_DEVICE=gpu): ipc with every short-run selection going through the receivers'
    staging buffers (its thresholds lowered) over every case, dtype and order; and, as it is, a 2-D field whose
    columns are staged (2048 x 2048 float64 per rank: 8-byte runs over 32 MiB). Equal to the serial reference."""
    if not ON_GPU or "ipc" not in TRANSPORTS:  # the nvshmem run limits TRANSPORTS to nvshmem
        return
    from gridcomm.transports import ipc

    problems = []
    size = comm.Get_size()
    saved = ipc.STAGE_SPAN_BYTES, ipc.STAGE_RUN_BYTES
    try:
        ipc.STAGE_SPAN_BYTES, ipc.STAGE_RUN_BYTES = 0, 1 << 30
        for shape, halo, periodic in CASES:
            d = CartesianDecomposition(comm, grow(shape, halo, size), halo=halo, periodic=periodic)
            if p := exchange_problems(d, MIXED, TRANSPORTS["ipc"]):
                problems.append(f"{shape}, halo {halo}, all staged: {p}")
            d.comm.close()
    finally:
        ipc.STAGE_SPAN_BYTES, ipc.STAGE_RUN_BYTES = saved
    d = CartesianDecomposition(comm, (2048, 2048 * size), halo=1, proc_grid=(1, size), periodic=True, stencil="star")
    if p := exchange_problems(d, [("float64", "C")], TRANSPORTS["ipc"]):
        problems.append(f"2048 x 2048 per rank, columns staged: {p}")
    d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)


@ranks(minimum=2)
def check_auto_measures_the_plan_and_remembers(comm):
    """transport='auto' where several candidates can move the fields (cma and mpi on the host; ipc, its copy
    engines and nccl on the GPU) times the plan's own exchange with each and keeps the fastest; a second plan of
    the same shape takes that choice without measuring again; every exchange is right."""
    from gridcomm.transports import auto, available, reasons_for

    problems = []
    with gridcomm.Communicator(comm) as fresh:  # nothing remembered yet
        d = CartesianDecomposition(fresh, (4 * comm.Get_size(), 5, 3), halo=1, periodic=True)
        usable = list(auto.usable_candidates(available(fresh, ON_GPU), ON_GPU))
        # What each group of peers may take: on declared nodes the node's peers also have the transports of one
        # node (cma, shm on the host), which cannot serve every peer.
        reaches = ("node", "network") if len(set(fresh.nodes)) > 1 else ("all",)
        candidates = [
            t for reach in reaches for t in auto.usable_candidates(reasons_for(fresh, reach, ON_GPU), ON_GPU).values()
        ]
        names = {t if isinstance(t, str) else t.name for t in candidates}
        reasons = []
        for seed in (1, 2):
            g = random_global(d.global_shape, "float64", seed)
            f = local_with_sentinel(d, g)
            with HaloExchanger(d, f, "auto", validate=False) as ex:  # validation mode measures nothing
                reasons.append(ex.transport_reason)
                chosen = set(ex.transports.values())  # per peer (declared nodes: a group per reach)
                if not chosen <= names and len(usable) > 1:
                    problems.append(f"auto chose {sorted(chosen)}, not among the candidates {sorted(names)}")
                ex.exchange()
            if p := compare(d, f, g):
                problems.append(f"auto ({reasons[-1]}): {p}")
        if len(usable) > 1:
            if "fastest measured for this plan" not in reasons[0] or not all(u in reasons[0] for u in usable):
                problems.append(f"the first plan was not measured against every candidate {usable}: {reasons[0]!r}")
            if "measured fastest before" not in reasons[1]:
                problems.append(f"the second plan of the same shape was measured again: {reasons[1]!r}")
        elif "first usable" not in reasons[0]:
            problems.append(f"one candidate ({usable}) but the reason says {reasons[0]!r}")
        d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)


@ranks(minimum=2)
def check_independent_subcommunicators(comm):
    """Two halves of the world exchange different grids at the same time, each over its own communicator."""
    color = comm.Get_rank() % 2
    sub = comm.Split(color, comm.Get_rank())
    problems = []
    shape = grow((9, 5) if color else (4, 3, 5), 1, sub.Get_size())
    d = CartesianDecomposition(sub, shape, halo=1, periodic=True)
    for name, transport in TRANSPORTS.items():
        if name == "nvshmem":  # symmetric memory is allocated over every process: a clear refusal
            try:
                HaloExchanger(d, d.zeros(), transport)
                problems.append("nvshmem accepted a communicator of half the processes")
            except TransportError as error:
                if "all" not in str(error):
                    problems.append(f"nvshmem on half the processes: unclear error {error}")
            continue
        if p := exchange_problems(d, [("uint16", "F"), ("float32", "C")], transport, seed=color):
            problems.append(f"half {color}, {name}: {p}")
    d.comm.close()
    sub.Free()
    assert_everywhere(comm, "\n".join(problems) or None)


def check_gather_scatter_round_trip(comm):
    """gather() assembles the global array on root (None elsewhere); scatter() gives back the interior with a
    zero halo, for any root, dtype and order."""
    problems = []
    size, rank = comm.Get_size(), comm.Get_rank()
    d = CartesianDecomposition(comm, (2 * size + 1, 3, 4), halo=(2, 0, 1), periodic=(True, False, False))
    for root in sorted({0, size - 1}):
        for dtype, order in MIXED:
            g = random_global(d.global_shape, dtype, 9)
            f = local_with_sentinel(d, g, order)
            got = d.gather(f, root=root)
            if rank == root:
                if not isinstance(got, np.ndarray) or got.dtype != g.dtype or got.shape != g.shape:
                    problems.append(f"gather {dtype} to {root}: got {type(got).__name__}")
                elif not np.array_equal(cell_bytes(np.ascontiguousarray(got)), cell_bytes(g)):
                    problems.append(f"gather {dtype}/{order} to {root}: wrong values")
            elif got is not None:
                problems.append(f"gather {dtype} to {root}: non-root got {type(got).__name__}, expected None")
            back = d.scatter(g if rank == root else None, root=root, order=order)
            if back.dtype != g.dtype or back.shape != d.local_shape:
                problems.append(f"scatter {dtype} from {root}: {back.dtype} {back.shape}")
                continue
            if order == "F" and back.ndim > 1 and not back.flags.f_contiguous:
                problems.append(f"scatter(order='F') gave a non-Fortran array ({dtype})")
            expect = cell_bytes(np.zeros(d.local_shape, dtype=g.dtype)).copy()
            expect[d.interior_slices] = cell_bytes(g)[d.global_slices]
            if not np.array_equal(cell_bytes(back), expect):
                problems.append(f"scatter {dtype}/{order} from {root}: interior or zero halo wrong")
    d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)


@ranks(only=[4])
def check_readme_heat_example(comm):
    """The README's 2-D example on 4 ranks: (400, 300), halo 1, periodic in x only, 10 diffusion steps;
    the gathered field equals the same steps done serially, bit for bit, for every transport."""
    shape = (400, 300)
    g0 = np.random.default_rng(1).random(shape)
    serial = g0.copy()
    for _ in range(10):
        u = np.zeros((shape[0] + 2, shape[1] + 2))
        u[1:-1, 1:-1] = serial
        u[0, 1:-1], u[-1, 1:-1] = serial[-1], serial[0]  # periodic in x; zero halo beyond the y boundaries
        lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
        serial += 0.1 * lap
    problems = []
    grid = CartesianDecomposition(gridcomm.Communicator(comm), shape, halo=1, periodic=(True, False))
    for name, transport in TRANSPORTS.items():
        u = grid.scatter(g0 if comm.Get_rank() == 0 else None)
        with HaloExchanger(grid, [u], transport) as halos:
            for _ in range(10):
                halos.exchange()
                lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
                grid.interior(u)[...] += 0.1 * lap
        total = grid.gather(u)
        if comm.Get_rank() == 0 and not np.array_equal(total, serial):
            problems.append(
                f"{name}: gathered field differs from the serial steps at {np.argwhere(total != serial)[:4].tolist()}"
            )
    grid.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)
