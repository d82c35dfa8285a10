"""Collective checks of gridcomm.Transposer (all-to-all(v)), run on 1, 2, 3, 4 and 8 ranks (host arrays).

Every result is compared bit for bit with a serial reference computed here, in plain NumPy, from the
sources of every rank gathered to every rank: each block a rank sends is the concatenation of its send
boxes, each flattened in the field's memory order, and lands in the receiver's boxes in that order.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

import numpy as np
from harness import (
    DTYPES,
    HOST_TRANSPORTS,
    SENTINEL_BYTE,
    assert_everywhere,
    assert_raises_everywhere,
    block_partition,
    cell_bytes,
    random_global,
    rank_counts,
    ranks,
    run_property,
    shared_copy,
)
from hypothesis import strategies as st

from gridcomm import (
    Box,
    FieldError,
    GridcommError,
    GridcommTimeout,
    PatternError,
    TransportError,
    Transposer,
)

# Every CPU transport the halo exchanger offers on the host (this program never runs on GPUs).
TRANSPORTS = {**HOST_TRANSPORTS, "mpi": "mpi"}

MAX_EXAMPLES = int(os.environ.get("GRIDCOMM_PROPERTY_TRANSPOSE_EXAMPLES", "300"))


# -- arrays and the serial reference -------------------------------------------------------------------------


def sentinel(shape, dtype, order) -> np.ndarray:
    a = np.empty(shape, dtype=dtype, order=order)
    cell_bytes(a)[...] = SENTINEL_BYTE
    return a


def filled(shape, dtype, order, seed) -> np.ndarray:
    """Random bits (identical for the same seed), in memory order ``order``."""
    return np.asarray(random_global(shape, dtype, seed), order=order)


def raw(a: np.ndarray) -> np.ndarray:
    """``a`` viewed as opaque elements of its size: copies and comparisons are bitwise."""
    return a.view(f"V{a.itemsize}")


def counts_plan(counts, send_displs, recv_displs, rank, trailing) -> tuple[dict, dict]:
    """The boxes (send, recv) of ``rank`` in an all-to-all(v) given per pair of ranks: counts[s][d] first-axis
    entries go from send_displs[s][d] of rank s to recv_displs[d][s] of rank d."""
    n, rest = len(counts), tuple(trailing)

    def box(start, count):
        return Box((start, *(0,) * len(rest)), (start + count, *rest))

    send = {d: [box(send_displs[rank][d], counts[rank][d])] for d in range(n) if counts[rank][d]}
    recv = {s: [box(recv_displs[rank][s], counts[s][rank])] for s in range(n) if counts[s][rank]}
    return send, recv


def expected(initial: np.ndarray, rank: int, sources: list[np.ndarray], plans: list[tuple[dict, dict]], order: str):
    """What ``rank``'s destination must hold: ``initial`` with every block sent to it written in."""
    out = raw(initial.copy(order="A"))
    for s, src in enumerate(sources):
        send_boxes, recv_boxes = plans[s][0].get(rank, []), plans[rank][1].get(s, [])
        stream = [raw(src)[b.slices].ravel(order=order) for b in send_boxes]
        stream = np.concatenate(stream) if stream else np.zeros(0, dtype=out.dtype)
        offset = 0
        for b in recv_boxes:
            out[b.slices] = stream[offset : offset + b.size].reshape(b.shape, order=order)
            offset += b.size
        if offset != len(stream):
            raise AssertionError(f"the test's own plan is inconsistent between ranks {s} and {rank}")
    return out


def mismatch(got: np.ndarray, want_raw: np.ndarray, limit: int = 5) -> str | None:
    """None when ``got`` holds exactly the elements of ``want_raw`` (a raw() view), else a description."""
    want = want_raw.view(got.dtype)
    if got.shape != want.shape:
        return f"shape {got.shape} != expected {want.shape}"
    wrong = np.argwhere((cell_bytes(got) != cell_bytes(want)).any(axis=-1))
    if len(wrong) == 0:
        return None
    cells = [tuple(int(i) for i in w) for w in wrong[:limit]]
    detail = ", ".join(
        f"{c}: {cell_bytes(got)[c].tobytes().hex()} != {cell_bytes(want)[c].tobytes().hex()}" for c in cells
    )
    return f"{len(wrong)} of {got.size} elements wrong ({detail})"


def gathered_problems(sub, sources, destinations, initials, plans, orders, label) -> list[str]:
    """Gather every rank's sources (collective over ``sub``) and compare this rank's destinations."""
    rank, problems = sub.Get_rank(), []
    everyone = sub.allgather(sources)
    for i, (dst, initial, order) in enumerate(zip(destinations, initials, orders, strict=True)):
        want = expected(initial, rank, [srcs[i] for srcs in everyone], plans, order)
        if p := mismatch(dst, want):
            problems.append(f"{label}, field {i} ({dst.dtype}, {order}): {p}")
    return problems


# -- a deterministic all-to-all(v) with zeros ----------------------------------------------------------------


def fixed_counts(n: int) -> tuple[list[list[int]], list[list[int]], list[list[int]], list[int], list[int]]:
    """counts[s][d] with zeros (the diagonal of rank 1 among them); send blocks in reverse rank order with
    a gap, receive blocks in rank order with gaps. Returns counts, send and recv displacements, lengths."""
    counts = [[(s + 2 * d + 1) % 4 for d in range(n)] for s in range(n)]
    if n > 1:
        counts[1][1] = 0
    send_displs, source_len = [], []
    for s in range(n):
        displs, at = [0] * n, 1
        for d in reversed(range(n)):
            displs[d] = at
            at += counts[s][d]
        send_displs.append(displs)
        source_len.append(at + 2)
    recv_displs, dest_len = [], []
    for d in range(n):
        displs, at = [0] * n, 0
        for s in range(n):
            displs[s] = at
            at += counts[s][d] + (s % 2)
        recv_displs.append(displs)
        dest_len.append(at + 1)
    return counts, send_displs, recv_displs, source_len, dest_len


FIELD_SETS = {  # trailing shape -> (dtype, order) of each field
    (): [("float64", "C"), ("int8", "C"), ("complex128", "C")],
    (3,): [("int16", "F"), ("float32", "C"), ("bool", "F")],
}


def check_alltoallv_every_transport(comm):
    """from_counts with zero counts (a zero diagonal too), gaps and reordered blocks, 1-D fields of three dtypes
    and 2-D fields (a trailing axis of 3, C and F) in one exchange, every CPU transport; bitwise."""
    n, rank = comm.Get_size(), comm.Get_rank()
    counts, send_displs, recv_displs, source_len, dest_len = fixed_counts(n)
    problems = []
    for trailing, specs in FIELD_SETS.items():
        plans = [counts_plan(counts, send_displs, recv_displs, r, trailing) for r in range(n)]
        for name, transport in TRANSPORTS.items():
            sources = [filled((source_len[rank], *trailing), dt, o, 10 * rank + i) for i, (dt, o) in enumerate(specs)]
            destinations = [sentinel((dest_len[rank], *trailing), dt, o) for dt, o in specs]
            initials = [d.copy(order="A") for d in destinations]
            sends = [counts[rank][d] for d in range(n)]
            recvs = [counts[s][rank] for s in range(n)]
            rdispls = [recv_displs[rank][s] for s in range(n)]
            with Transposer.from_counts(
                comm, sends, send_displs[rank], recvs, rdispls, sources, destinations, transport
            ) as t:
                t.exchange()
                sent, received = t.elements_per_exchange
                if (sent, received) != (sum(sends) * math.prod(trailing), sum(recvs) * math.prod(trailing)):
                    problems.append(f"{name}: elements_per_exchange {(sent, received)}")
            orders = [o for _, o in specs]
            problems += gathered_problems(comm, sources, destinations, initials, plans, orders, f"{trailing} {name}")
    assert_everywhere(comm, "\n".join(problems) or None)


def check_packed_displacements_and_single_array(comm):
    """Displacements None (blocks one after the other in rank order), one array (not a list), a read-only
    source: equals MPI's own Alltoallv on the same counts."""
    n, rank = comm.Get_size(), comm.Get_rank()
    sends = [(rank + d) % 3 for d in range(n)]
    recvs = [(s + rank) % 3 for s in range(n)]
    source = np.arange(sum(sends), dtype=np.int64) + 1000 * rank
    source.setflags(write=False)
    reference = np.full(sum(recvs), -1, dtype=np.int64)
    comm.Alltoallv([source, sends], [reference, recvs])
    problems = []
    for name, transport in TRANSPORTS.items():
        dest = np.full(sum(recvs), -1, dtype=np.int64)
        with Transposer.from_counts(comm, sends, None, recvs, None, source, dest, transport) as t:
            t.exchange()
        if not np.array_equal(dest, reference):
            problems.append(f"{name}: {dest.tolist()} != MPI_Alltoallv's {reference.tolist()}")
    assert_everywhere(comm, "\n".join(problems) or None)


# -- n-D slabs: the classic transposition --------------------------------------------------------------------


def slab_plans(n: int, shape: tuple[int, ...]) -> list[tuple[dict, dict]]:
    """Rows (axis 0) distributed -> columns (axis 1) distributed, further axes whole: rank r holds global rows
    R_r (all columns) before and columns C_r (all rows) after."""
    rows, cols, rest = block_partition(shape[0], n), block_partition(shape[1], n), tuple(shape[2:])
    zeros = (0,) * len(rest)
    plans = []
    for r in range(n):
        nrows, ncols = rows[r][1] - rows[r][0], cols[r][1] - cols[r][0]
        send = {s: [Box((0, cols[s][0], *zeros), (nrows, cols[s][1], *rest))] for s in range(n)}
        recv = {s: [Box((rows[s][0], 0, *zeros), (rows[s][1], ncols, *rest))] for s in range(n)}
        plans.append((send, recv))
    return plans


def check_slab_transposition_rows_to_columns_and_back(comm):
    """A 2-D (and a 3-D) global array distributed by rows becomes distributed by columns, equal to the
    gathered array's columns bit for bit, C and F fields together; the inverse transposer brings it back."""
    n, rank = comm.Get_size(), comm.Get_rank()
    problems = []
    for shape in [(2 * n + 3, 3 * n + 1), (n + 2, 2 * n + 1, 3)]:
        rows, cols = block_partition(shape[0], n)[rank], block_partition(shape[1], n)[rank]
        plans = slab_plans(n, shape)
        send, recv = plans[rank]
        back_send, back_recv = recv, send  # columns -> rows: the same boxes, the other way
        for name, transport in TRANSPORTS.items():
            globals_ = [random_global(shape, "float64", 1), random_global(shape, "int32", 2)]
            orders = ["C", "F"]
            slabs = [np.asarray(g[rows[0] : rows[1]], order=o) for g, o in zip(globals_, orders, strict=True)]
            pencils = [
                sentinel((shape[0], cols[1] - cols[0], *shape[2:]), g.dtype, o)
                for g, o in zip(globals_, orders, strict=True)
            ]
            with Transposer(comm, send, recv, slabs, pencils, transport) as t:
                t.exchange()
            for i, (g, p) in enumerate(zip(globals_, pencils, strict=True)):
                if q := mismatch(p, raw(np.ascontiguousarray(g[:, cols[0] : cols[1]]))):
                    problems.append(f"{shape} {name} field {i} rows->columns: {q}")
            again = [sentinel(s.shape, s.dtype, o) for s, o in zip(slabs, orders, strict=True)]
            with Transposer(comm, back_send, back_recv, pencils, again, transport) as t:
                t.exchange()
            for i, (s, a) in enumerate(zip(slabs, again, strict=True)):
                if q := mismatch(a, raw(np.ascontiguousarray(s))):
                    problems.append(f"{shape} {name} field {i} columns->rows: {q}")
    assert_everywhere(comm, "\n".join(problems) or None)


def check_blocks_split_differently_on_each_side(comm):
    """A block sent as two boxes and received as one box of another shape (and the reverse): the elements
    travel in memory order, as the reference says, on every transport; the diagonal block too."""
    n, rank = comm.Get_size(), comm.Get_rank()
    # Rank r sends rank d a (2, 3) block of its (2n, 3) source as rows [2d, 2d+1) and [2d+1, 2d+2), and
    # receives from rank s a (3, 2) box of its (3n, 2) destination at rows [3s, 3s+3).
    plans = []
    for _ in range(n):
        send = {d: [Box((2 * d, 0), (2 * d + 1, 3)), Box((2 * d + 1, 0), (2 * d + 2, 3))] for d in range(n)}
        recv = {s: [Box((3 * s, 0), (3 * s + 3, 2))] for s in range(n)}
        plans.append((send, recv))
    problems = []
    for order in "CF":
        for name, transport in TRANSPORTS.items():
            sources = [filled((2 * n, 3), "uint16", order, rank)]
            destinations = [sentinel((3 * n, 2), "uint16", order)]
            initials = [destinations[0].copy(order="A")]
            with Transposer(comm, *plans[rank], sources, destinations, transport) as t:
                t.exchange()
            problems += gathered_problems(comm, sources, destinations, initials, plans, [order], f"{order} {name}")
    assert_everywhere(comm, "\n".join(problems) or None)


def check_blocks_of_a_1d_array_land_in_boxes_and_back(comm):
    """Each block one contiguous range of a 1-D array on one side and a box of runs on the other (the spectral
    dwarf's Legendre and Fourier sides), both ways, the diagonal block too: on every transport (on the GPU ipc
    included, the range taking the box's runs), the elements in memory order, as the reference says."""
    n, rank = comm.Get_size(), comm.Get_rank()
    # Rank s's block to rank d: elements 6d..6d+5 of its (6n,) array <-> rows 2s, 2s+1 and columns 0..2 of d's
    # (2n, 4) array: two runs of 3 elements, a row apart.
    ranges = {d: [Box((6 * d,), (6 * d + 6,))] for d in range(n)}
    boxes = {s: [Box((2 * s, 0), (2 * s + 2, 3))] for s in range(n)}
    problems = []
    for forward in (True, False):
        plans = [(ranges, boxes) if forward else (boxes, ranges)] * n
        shapes = ((6 * n,), (2 * n, 4)) if forward else ((2 * n, 4), (6 * n,))
        for order in "CF":
            for name, transport in TRANSPORTS.items():
                sources = [filled(shapes[0], "float64", order, rank + 10)]
                destinations = [sentinel(shapes[1], "float64", order)]
                initials = [destinations[0].copy(order="A")]
                with Transposer(comm, *plans[rank], sources, destinations, transport) as t:
                    t.exchange()
                label = f"{'range to box' if forward else 'box to range'}, {order} {name}"
                problems += gathered_problems(comm, sources, destinations, initials, plans, [order], label)
    assert_everywhere(comm, "\n".join(problems) or None)


# -- running: start/wait, repetition, two at once, context manager, misuse ----------------------------------


def _simple(comm, transport, seed=0, dtype="float64"):
    """A from_counts transposer over ``transport``: rank r sends (r + d) % 3 + 1 entries to rank d."""
    n, rank = comm.Get_size(), comm.Get_rank()
    sends = [(rank + d) % 3 + 1 for d in range(n)]
    recvs = [(s + rank) % 3 + 1 for s in range(n)]
    counts = [[(s + d) % 3 + 1 for d in range(n)] for s in range(n)]
    sdispls = [[sum(counts[s][:d]) for d in range(n)] for s in range(n)]
    rdispls = [[sum(counts[s2][d] for s2 in range(s)) for s in range(n)] for d in range(n)]
    plans = [counts_plan(counts, sdispls, rdispls, r, ()) for r in range(n)]
    source = filled((sum(sends),), dtype, "C", seed + rank)
    dest = sentinel((sum(recvs),), dtype, "C")
    return Transposer.from_counts(comm, sends, None, recvs, None, source, dest, transport), source, dest, plans


def check_start_wait_with_work_in_between_and_repeated(comm):
    """start(); unrelated work and reading the sources; wait(); then 12 exchanges of changing data through
    one transposer (exchange() and start().wait() alternately): every result right, count == 13."""
    problems = []
    for name, transport in TRANSPORTS.items():
        t, source, dest, plans = _simple(comm, transport)
        initial = dest.copy()
        with t:
            handle = t.start()
            checksum = float(np.sum(source.view(np.uint8), dtype=np.float64))  # work reading the sources
            scratch = np.cumsum(np.arange(1000.0))  # work on other memory
            handle.wait()
            handle.wait()  # a second wait() is a no-op
            problems += gathered_problems(comm, [source], [dest], [initial], plans, ["C"], f"{name} start/wait")
            if checksum != float(np.sum(source.view(np.uint8), dtype=np.float64)) or scratch[-1] != 499500.0:
                problems.append(f"{name}: the sources changed under the exchange")
            for step in range(12):
                cell_bytes(source)[...] = cell_bytes(filled(source.shape, source.dtype, "C", 100 + step))
                if step % 2:
                    t.exchange()
                else:
                    t.start().wait()
                problems += gathered_problems(comm, [source], [dest], [initial], plans, ["C"], f"{name} step {step}")
            if t.count != 13:
                problems.append(f"{name}: count {t.count} after 13 exchanges")
    assert_everywhere(comm, "\n".join(problems) or None)


def check_two_transposers_in_flight_at_once(comm):
    """Two transposers over one communicator, both started, completed in reverse order: messages kept apart."""
    problems = []
    for name, transport in TRANSPORTS.items():
        t1, s1, d1, plans = _simple(comm, transport, seed=1, dtype="int32")
        t2, s2, d2, _ = _simple(comm, transport, seed=50, dtype="int32")
        initial = d1.copy()
        with t1, t2:
            h1 = t1.start()
            h2 = t2.start()
            h2.wait()
            h1.wait()
        for label, s, d in (("first", s1, d1), ("second", s2, d2)):
            problems += gathered_problems(comm, [s], [d], [initial], plans, ["C"], f"{name} {label}")
    assert_everywhere(comm, "\n".join(problems) or None)


def check_context_manager_close_and_misuse(comm):
    """A second start() before wait() and close() in flight raise GridcommError; the with block closes;
    close() twice is harmless; start() and exchange() after close() raise."""
    for transport in TRANSPORTS.values():
        t, _, _, _ = _simple(comm, transport)
        with t:
            handle = t.start()
            assert_raises_everywhere(comm, t.start, GridcommError, "in flight")
            assert_raises_everywhere(comm, t.close, GridcommError, "in flight")
            handle.wait()
        assert_everywhere(comm, None if t._closed else "the with block did not close the transposer")
        t.close()
        t.close()
        assert_raises_everywhere(comm, t.start, GridcommError, "closed", "Transposer")
        assert_raises_everywhere(comm, t.exchange, GridcommError, "closed")


# -- bad input: the right error on every rank ----------------------------------------------------------------


class FakeDeviceArray:
    """Claims to live in GPU memory; never dereferenced."""

    shape, dtype = (4,), np.dtype("float64")

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": "<f8", "data": (0, False), "version": 3}


def _counts(comm, sends=None, recvs=None, source=None, dest=None, transport="auto", **kwargs):
    """from_counts with one entry to and from every rank unless told otherwise."""
    n = comm.Get_size()
    sends = [1] * n if sends is None else sends
    recvs = [1] * n if recvs is None else recvs
    source = np.zeros(n) if source is None else source
    dest = np.zeros(n) if dest is None else dest
    return lambda: Transposer.from_counts(comm, sends, None, recvs, None, source, dest, transport, **kwargs)


def check_mismatched_counts_between_ranks(comm):
    """Rank 0 sends 2 entries to the last rank, which expects 1: PatternError on every rank naming both."""
    n, rank = comm.Get_size(), comm.Get_rank()
    sends = [1] * n
    if rank == 0:
        sends[n - 1] = 2
    source = np.zeros(sum(sends))
    assert_raises_everywhere(
        comm, _counts(comm, sends=sends, source=source), PatternError,
        f"rank 0 sends 2 elements per field to rank {n - 1}", "expects 1",
    )  # fmt: skip


def check_destination_box_outside_the_destination(comm):
    """Only the last rank receives into a box reaching past its destination: PatternError everywhere."""
    n, rank = comm.Get_size(), comm.Get_rank()
    send = {d: Box((d,), (d + 1,)) for d in range(n)}
    recv = {s: Box((s,), (s + 1,)) for s in range(n)}
    if rank == n - 1:
        recv[0] = Box((n,), (n + 1,))
    make = lambda: Transposer(comm, send, recv, np.zeros(n), np.zeros(n))  # noqa: E731
    assert_raises_everywhere(comm, make, PatternError, "outside", f"({n},)")
    # Boxes with the wrong number of axes, and overlapping receive boxes.
    bad = {0: Box((0, 0), (1, 1))}
    make = lambda: Transposer(comm, {}, bad if rank == 0 else {}, np.zeros(n), np.zeros(n))  # noqa: E731
    assert_raises_everywhere(comm, make, PatternError, "axes")
    overlapping = {s: Box((0,), (1,)) for s in range(n)}
    if n == 1:
        overlapping = {0: [Box((0,), (1,)), Box((0,), (1,))]}
        send = {0: [Box((0,), (1,)), Box((1,), (2,))]}
    make = lambda: Transposer(comm, send, overlapping, np.zeros(n + 1), np.zeros(n))  # noqa: E731
    assert_raises_everywhere(comm, make, PatternError, "overlap")


def check_wrong_dtype_order_or_memory(comm):
    """Source and destination of different dtypes (on the last rank only), of different orders, a
    destination sharing memory with a source, a read-only destination, dtypes that differ between ranks."""
    n, rank = comm.Get_size(), comm.Get_rank()
    last = rank == n - 1
    dest = np.zeros(n, dtype=np.float32 if last else np.float64)
    assert_raises_everywhere(comm, _counts(comm, dest=dest), FieldError, "dtype", ("float32", "rank"))
    c2, f2 = np.zeros((n + 1, 2)), np.zeros((n + 1, 2), order="F")
    assert_raises_everywhere(comm, _counts(comm, source=c2, dest=f2), FieldError, "order")
    shared = np.zeros(2 * n)
    assert_raises_everywhere(comm, _counts(comm, source=shared[:n], dest=shared[n - 1 :][:n]), FieldError, "memory")
    frozen = np.zeros(n)
    frozen.setflags(write=False)
    assert_raises_everywhere(comm, _counts(comm, dest=frozen), FieldError, "read-only")
    kind = "int32" if rank % 2 else "int64"
    either = np.zeros(n, dtype=kind)
    if n > 1:
        assert_raises_everywhere(
            comm, _counts(comm, source=either, dest=either.copy()), PatternError, "different dtypes"
        )


def check_sources_of_different_shapes_and_bad_counts(comm):
    n, rank = comm.Get_size(), comm.Get_rank()
    make = lambda: Transposer.from_counts(  # noqa: E731
        comm, [1] * n, None, [1] * n, None, [np.zeros(n), np.zeros(n + 1)], [np.zeros(n), np.zeros(n)]
    )
    assert_raises_everywhere(comm, make, FieldError, "source 1", "one shape")
    make = lambda: Transposer.from_counts(comm, [1] * n, None, [1] * n, None, [np.zeros(n)], [])  # noqa: E731
    assert_raises_everywhere(comm, make, FieldError, "destination")
    negative = [1] * n
    if rank == 0:
        negative[0] = -1
    assert_raises_everywhere(comm, _counts(comm, sends=negative), PatternError, ("negative", "rank 0"))
    assert_raises_everywhere(comm, _counts(comm, recvs=[1] * (n + 1)), PatternError, f"{n + 1} entries")
    two_d = (np.zeros((n, 3)), np.zeros((n, 2)))
    assert_raises_everywhere(comm, _counts(comm, source=two_d[0], dest=two_d[1]), FieldError, "trailing shape")
    assert_raises_everywhere(comm, _counts(comm, dest=FakeDeviceArray()), FieldError, "different memories")
    assert_raises_everywhere(comm, _counts(comm, transport="nccl"), TransportError, "nccl")
    assert_raises_everywhere(comm, _counts(comm, timeout=-1 if rank == 0 else None), ValueError, ("timeout", "rank 0"))


def check_boxes_cma_cannot_describe(comm):
    """4-D Fortran arrays, first-axis blocks: more than 2 axes outside the contiguous runs, which cma (copying
    between the arrays directly) cannot describe. Named cma raises PatternError on every rank; "auto" takes
    the next transport and is right; the MPI transports are right."""
    n, rank = comm.Get_size(), comm.Get_rank()
    shape = (2 * n + 1, 2, 3, 2)  # never a whole first axis
    counts = [[2] * n for _ in range(n)]
    displs = [[2 * d for d in range(n)] for _ in range(n)]
    plans = [counts_plan(counts, displs, displs, r, shape[1:]) for r in range(n)]

    def make(transport):
        source = filled(shape, "float32", "F", rank)
        dest = sentinel(shape, "float32", "F")
        return Transposer.from_counts(comm, [2] * n, None, [2] * n, None, source, dest, transport), source, dest

    assert_raises_everywhere(comm, lambda: make(TRANSPORTS["cma"])[0], PatternError, "cma", "transport='mpi'")
    problems = []
    for name in ("auto", "p2p/datatype", "neighbor/copy"):
        t, source, dest = make(TRANSPORTS[name])
        initial = dest.copy(order="A")
        with t:
            t.exchange()
            if t.transport.name == "cma":
                problems.append(f"{name}: chose cma for boxes it cannot describe")
        problems += gathered_problems(comm, [source], [dest], [initial], plans, ["F"], name)
    assert_everywhere(comm, "\n".join(problems) or None)


# -- a silent peer --------------------------------------------------------------------------------------------

RELEASE_TAG = 4343
TIMEOUT_S = 1.0


@ranks(only=[2])
def check_timeout_names_rank_and_peer_then_completes(comm):
    """Rank 0 transposes with timeout=1 while rank 1 stays away: GridcommTimeout within a few seconds naming
    rank 0, peer 1 and the transposition; rank 1 then joins and rank 0's second wait() completes, right."""
    rank = comm.Get_rank()
    problems = []
    for name, transport in TRANSPORTS.items():
        source = np.arange(4, dtype=np.int64) + 10 * rank
        dest = np.full(4, -1, dtype=np.int64)
        t = Transposer.from_counts(
            comm,
            [2, 2],
            None,
            [2, 2],
            None,
            source,
            dest,
            transport,
            timeout=TIMEOUT_S if rank == 0 else None,
            on_timeout="raise",
        )
        if rank == 0:
            handle = t.start()
            start = time.perf_counter()
            try:
                handle.wait()
                problems.append(f"{name}: wait() returned although rank 1 never started")
            except GridcommTimeout as exc:
                seconds = time.perf_counter() - start
                if not TIMEOUT_S <= seconds < TIMEOUT_S + 4 or exc.rank != 0 or tuple(exc.peers) != (1,):
                    problems.append(f"{name}: after {seconds:.2f} s, rank={exc.rank} peers={exc.peers}")
                for words in ("rank 0", "transposition", "rank(s) 1", "timed out"):
                    if words not in str(exc):
                        problems.append(f"{name}: message lacks {words!r}: {exc}")
            except Exception as exc:
                problems.append(f"{name}: wait() raised {type(exc).__name__}: {exc}, expected GridcommTimeout")
            finally:
                comm.send("go", dest=1, tag=RELEASE_TAG)
            handle.wait()
        else:
            request = comm.irecv(source=0, tag=RELEASE_TAG)
            while not request.test()[0]:
                time.sleep(0.001)
            t.exchange()
        t.close()
        want = {0: [0, 1, 10, 11], 1: [2, 3, 12, 13]}[rank]
        if dest.tolist() != want:
            problems.append(f"{name}: destination {dest.tolist()}, expected {want}")
    assert_everywhere(comm, "\n".join(problems) or None)


# -- the property: random all-to-all(v)s against the serial reference ----------------------------------------


@dataclass(frozen=True)
class Case:
    nranks: int
    counts: tuple[tuple[int, ...], ...]  # counts[s][d]: first-axis entries rank s sends rank d
    send_displs: tuple[tuple[int, ...], ...]  # [s][d]
    recv_displs: tuple[tuple[int, ...], ...]  # [d][s]
    source_len: tuple[int, ...]
    dest_len: tuple[int, ...]
    trailing: tuple[int, ...]
    fields: tuple[tuple[str, str], ...]  # (dtype, order)
    api: str  # "counts", "packed" (displacements None) or "boxes" (split into several boxes)
    cuts: tuple[tuple[int, int], ...]  # "boxes": where block (s, d) is cut on the send and on the receive side
    as_list: bool
    transport: str
    seed: int
    rounds: int


@st.composite
def cases(draw, world_size: int) -> Case:
    n = draw(rank_counts(world_size))
    counts = tuple(tuple(draw(st.sampled_from([0, 0, 0, 1, 2, 3, 6])) for _ in range(n)) for _ in range(n))
    api = draw(st.sampled_from(["counts", "packed", "boxes"]))
    packed = api == "packed"
    send_displs, source_len = [], []
    for s in range(n):
        total = sum(counts[s])
        length = total + (0 if packed else draw(st.integers(0, 3)))
        if packed:
            displs = [sum(counts[s][:d]) for d in range(n)]
        else:  # anywhere in the source; send blocks may overlap
            displs = [draw(st.integers(0, length - counts[s][d])) for d in range(n)]
        send_displs.append(tuple(displs))
        source_len.append(length)
    recv_displs, dest_len = [], []
    for d in range(n):
        order = list(range(n)) if packed else draw(st.permutations(range(n)))
        displs, at = [0] * n, 0
        for s in order:  # receive blocks never overlap: in a random order, with random gaps
            at += 0 if packed else draw(st.integers(0, 2))
            displs[s] = at
            at += counts[s][d]
        recv_displs.append(tuple(displs))
        dest_len.append(at + draw(st.integers(0, 2)))
    cuts = tuple(
        (draw(st.integers(0, c)), draw(st.integers(0, c))) for s in range(n) for c in counts[s]
    )  # fmt: skip
    nfields = draw(st.integers(1, 3))
    return Case(
        nranks=n,
        counts=counts,
        send_displs=tuple(send_displs),
        recv_displs=tuple(recv_displs),
        source_len=tuple(source_len),
        dest_len=tuple(dest_len),
        trailing=draw(st.sampled_from([(), (), (1,), (3,)])),
        fields=tuple((draw(st.sampled_from(DTYPES)), draw(st.sampled_from("CF"))) for _ in range(nfields)),
        api=api,
        cuts=cuts,
        as_list=nfields > 1 or draw(st.booleans()),
        transport=draw(st.sampled_from(sorted(TRANSPORTS))),
        seed=draw(st.integers(0, 2**31)),
        rounds=draw(st.integers(1, 2)),
    )


def case_plans(case: Case) -> list[tuple[dict, dict]]:
    """Every rank's boxes; with api "boxes" each block is cut in two along the first axis, at one place on
    the send side and another on the receive side (empty pieces dropped)."""
    n, rest = case.nranks, case.trailing
    plans = [counts_plan(case.counts, case.send_displs, case.recv_displs, r, rest) for r in range(n)]
    if case.api != "boxes":
        return plans

    def cut(box: Box, at: int) -> list[Box]:
        middle = box.start[0] + at
        pieces = [Box(box.start, (middle, *box.stop[1:])), Box((middle, *box.start[1:]), box.stop)]
        return [p for p in pieces if p.size]

    for s in range(n):
        for d in range(n):
            if case.counts[s][d]:
                send_at, recv_at = case.cuts[s * n + d]
                plans[s][0][d] = cut(plans[s][0][d][0], send_at)
                plans[d][1][s] = cut(plans[d][1][s][0], recv_at)
    return plans


def run_case(sub, case: Case) -> list[str]:
    rank = sub.Get_rank()
    plans = case_plans(case)
    orders = [o if case.trailing and case.trailing != (1,) else "C" for _, o in case.fields]
    shape_src, shape_dst = (case.source_len[rank], *case.trailing), (case.dest_len[rank], *case.trailing)
    sources = [filled(shape_src, dt, o, case.seed + 7 * rank + i) for i, (dt, o) in enumerate(case.fields)]
    destinations = [sentinel(shape_dst, dt, o) for dt, o in case.fields]
    initials = [d.copy(order="A") for d in destinations]
    transport = TRANSPORTS[case.transport]
    src_arg = sources if case.as_list else sources[0]
    dst_arg = destinations if case.as_list else destinations[0]
    if case.api == "boxes":
        t = Transposer(sub, *plans[rank], src_arg, dst_arg, transport)
    else:
        displs = (None, None) if case.api == "packed" else (case.send_displs[rank], case.recv_displs[rank])
        sends = list(case.counts[rank])
        recvs = [case.counts[s][rank] for s in range(case.nranks)]
        t = Transposer.from_counts(sub, sends, displs[0], recvs, displs[1], src_arg, dst_arg, transport)
    problems = []
    with t:
        for round_ in range(case.rounds):
            if round_:  # new data in place, same transposer
                for i, s in enumerate(sources):
                    cell_bytes(s)[...] = cell_bytes(filled(s.shape, s.dtype, "C", case.seed + 1000 + 7 * rank + i))
            t.exchange()
            problems += gathered_problems(sub, sources, destinations, initials, plans, orders, f"round {round_}")
    return problems


@ranks(only=[8])
def check_random_alltoallv_match_serial_reference(comm):
    """Hypothesis: random counts per pair of ranks (zeros included), displacements, 1-3 fields of random
    dtypes and orders, 1-D or with a trailing axis, from_counts or split boxes, any CPU transport, on 1..8
    ranks (harness.rank_counts): bitwise equal to the serial reference. GRIDCOMM_PROPERTY_TRANSPOSE_EXAMPLES
    sets the number of examples."""
    run_property(
        comm,
        cases(comm.Get_size()),
        run_case,
        MAX_EXAMPLES,
        tally={"with a zero count": lambda c: any(0 in row for row in c.counts), "split": lambda c: c.api == "boxes"},
    )


# -- slabs and pencils: the global array split along some axes, then along others ------------------------------

SLAB_EXAMPLES = int(os.environ.get("GRIDCOMM_PROPERTY_SLAB_EXAMPLES", "100"))


@dataclass(frozen=True)
class SlabCase:
    nranks: int
    shape: tuple[int, ...]
    from_axes: tuple[int, ...]
    to_axes: tuple[int, ...]
    proc_grid: tuple[int, ...]
    give_grid: bool  # pass proc_grid (pencils), or leave it to gridcomm (slabs: one axis, all the ranks)
    fields: tuple[tuple[str, str], ...]  # (dtype, order)
    transport: str
    seed: int
    shared: bool = False  # the sources in memory the node's ranks share (gridcomm.shared_zeros)


def grids(n: int, dims: int) -> list[tuple[int, ...]]:
    """Every process grid of ``dims`` dimensions with ``n`` ranks (written here, not taken from gridcomm)."""
    if dims == 1:
        return [(n,)]
    return [(p, *rest) for p in range(1, n + 1) if n % p == 0 for rest in grids(n // p, dims - 1)]


@st.composite
def slab_cases(draw, world_size: int) -> SlabCase:
    n = draw(st.integers(1, min(world_size, 4)))
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 6)) for _ in range(ndim))  # fewer points than ranks too: empty blocks
    split = draw(st.integers(1, min(2, ndim)))
    from_axes = tuple(draw(st.permutations(range(ndim)))[:split])
    to_axes = tuple(draw(st.permutations(range(ndim)))[:split])
    nfields = draw(st.integers(1, 2))
    return SlabCase(
        nranks=n,
        shape=shape,
        from_axes=from_axes,
        to_axes=to_axes,
        proc_grid=draw(st.sampled_from(grids(n, split))),
        give_grid=split > 1 or draw(st.booleans()),
        fields=tuple((draw(st.sampled_from(DTYPES)), draw(st.sampled_from("CF"))) for _ in range(nfields)),
        transport=draw(st.sampled_from(sorted(TRANSPORTS))),
        seed=draw(st.integers(0, 2**31)),
        shared=draw(st.booleans()),
    )


def reference_block(shape, axes, grid, rank) -> tuple[slice, ...]:
    """The global slices ``rank`` holds (coordinates in C order over ``grid``), from harness.block_partition."""
    coords = np.unravel_index(rank, grid)
    index = [slice(0, n) for n in shape]
    for axis, parts, c in zip(axes, grid, coords, strict=True):
        start, stop = block_partition(shape[axis], parts)[int(c)]
        index[axis] = slice(start, stop)
    return tuple(index)


def run_slab_case(sub, case: SlabCase) -> list[str]:
    rank = sub.Get_rank()
    globals_ = [random_global(case.shape, dt, case.seed + i) for i, (dt, _) in enumerate(case.fields)]
    before = reference_block(case.shape, case.from_axes, case.proc_grid, rank)
    after = reference_block(case.shape, case.to_axes, case.proc_grid, rank)
    sources = [np.asarray(g[before], order=o) for g, (_, o) in zip(globals_, case.fields, strict=True)]
    if case.shared:  # cma then copies out of a mapping of the sender's memory
        sources = [shared_copy(a) for a in sources]
    destinations = [sentinel(g[after].shape, g.dtype, o) for g, (_, o) in zip(globals_, case.fields, strict=True)]
    transport = TRANSPORTS[case.transport]
    if len(case.from_axes) == 1 and not case.give_grid:
        t = Transposer.slabs(sub, case.shape, case.from_axes[0], case.to_axes[0], sources, destinations, transport)
    else:
        t = Transposer.pencils(
            sub, case.shape, case.from_axes, case.to_axes, sources, destinations, transport, proc_grid=case.proc_grid
        )
    with t:
        t.exchange()
    problems = []
    for i, (g, d) in enumerate(zip(globals_, destinations, strict=True)):
        if q := mismatch(d, raw(np.ascontiguousarray(g[after]))):
            problems.append(f"field {i} ({d.dtype}, {case.fields[i][1]}): {q}")
    return problems


@ranks(only=[4])
def check_slabs_and_pencils_match_the_serial_transpose(comm):
    """Hypothesis: a random global array of 1-3 axes (1-6 points each, so blocks may be empty) split along one
    axis (Transposer.slabs) or two (Transposer.pencils, any process grid) on 1-4 ranks, redistributed to
    another split over any CPU transport, C and F fields: each rank's destination equals the global array's
    block bit for bit (blocks computed here, as harness.block_partition cuts them)."""
    run_property(
        comm,
        slab_cases(comm.Get_size()),
        run_slab_case,
        SLAB_EXAMPLES,
        tally={
            "pencils": lambda c: len(c.from_axes) > 1,
            "an empty block": lambda c: min(c.shape) < c.nranks,
            "shared sources over cma": lambda c: c.shared and c.transport.startswith("cma"),
        },
    )


@ranks(minimum=2, maximum=3)
def check_slabs_refuse_arrays_of_the_wrong_shape_and_disagreeing_ranks(comm):
    """A source larger than its slab (its boxes would fit: a silent wrong result) and ranks passing different
    global shapes raise on every rank, naming the shape to allocate or the disagreement."""
    import gridcomm

    rank, size = comm.Get_rank(), comm.Get_size()
    shape = (5, 4)
    dst = np.zeros(gridcomm.slab(shape, 1, rank, size).shape)
    big = np.zeros((5, 4))  # the whole array on every rank, not its slab
    assert_raises_everywhere(
        comm, lambda: Transposer.slabs(comm, shape, 0, 1, big, dst), FieldError, "slab(global_shape, from_axis"
    )
    own = (5 + rank, 4)  # every rank its own idea of the global shape, and arrays that fit it
    src = np.zeros(gridcomm.slab(own, 0, rank, size).shape)
    mine = np.zeros(gridcomm.slab(own, 1, rank, size).shape)
    assert_raises_everywhere(
        comm, lambda: Transposer.slabs(comm, own, 0, 1, src, mine), PatternError, "different global shapes"
    )
    assert_raises_everywhere(
        comm, lambda: Transposer.slabs(comm, shape, 0, 2, src, dst), GridcommError, "to_axis=2", "2-D array"
    )


def check_bench_host_leg_moves_every_block(comm):
    """The bench's ceiling for the staged transport's host leg (lab.bench.ceilings.HostSendRecv): each call moves
    a block from every peer into its place, at block sizes from none to 3 bytes, called twice."""
    from gridcomm import Communicator
    from gridcomm.lab.bench.ceilings import HostSendRecv

    problems = []
    with Communicator(comm) as gc:
        peers = [r for r in range(gc.size) if r != gc.rank]
        for nbytes in (0, 1, 3):
            leg = HostSendRecv(gc, nbytes, peers)
            for _ in range(2):
                leg.received[:] = 0
                leg()
                got = leg.received[: nbytes * len(peers)].reshape(len(peers), nbytes)
                if not all((got[k] == p % 256).all() for k, p in enumerate(peers)):
                    problems.append(f"{nbytes} B per peer: received {got.tolist()} from {peers}")
    assert_everywhere(comm, "\n".join(problems) or None)
