"""The GPU kernels' descriptor tables, replayed on the host (no GPU needed).

packing/table.py describes every copy of an exchange as rows of run grids (packing/runs.cuh). Here the same
rows are built over NumPy arrays and replayed with memmove, block by block and piece by piece as the kernel
walks them: pack into a message and unpack on the receiver (the staged, mpi and nccl path), and field to
field into another rank's array of a different shape (the ipc path), for random decompositions of 1 to 8
ranks, dtypes, memory orders, block counts and piece sizes. The result must equal the serial reference bit for bit.
"""

from __future__ import annotations

import contextlib
import ctypes
from types import SimpleNamespace
from unittest import mock

import numpy as np
from harness import (
    DTYPES,
    describe_mismatch,
    every_rank,
    examples,
    expected_cells,
    local_with_sentinel,
    random_global,
)
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from gridcomm import Box, DecompositionError, Pattern
from gridcomm.packing import FieldSpec, Layout
from gridcomm.packing.geometry import run_grid
from gridcomm.packing.table import (
    DST,
    DST_INDEX,
    DST_STRIDE0,
    DST_STRIDE1,
    N1,
    SRC,
    SRC_INDEX,
    SRC_STRIDE0,
    SRC_STRIDE1,
    UNIT,
    UNITS,
    UNITS_PER_RUN,
    Descriptors,
    address,
    balanced_pieces,
)
from gridcomm.transports import ipc


def replay(rows: Descriptors, blocks: int = 3, piece_units: int = 0) -> None:
    """Do what gridcomm_copy_runs does on a grid of ``blocks`` blocks: each block's pieces
    (``balanced_pieces``), each piece's units run by run, the parts of runs at a piece's ends included."""
    index_of = {address(a): a for a in rows.keep}
    piece_segment, piece_first, piece_last = balanced_pieces([row[UNITS] for row in rows.rows], blocks, piece_units)
    for block in range(blocks):
        for p in range(block, len(piece_segment), blocks):
            row, first, last = rows.rows[piece_segment[p]], int(piece_first[p]), int(piece_last[p])
            per_run = row[UNITS_PER_RUN]
            for run in range(first // per_run, -(-last // per_run)):
                i0, i1 = divmod(run, row[N1])
                lo, hi = max(first, run * per_run), min(last, (run + 1) * per_run)
                ends = []
                for base, s0, s1, index in (
                    (SRC, SRC_STRIDE0, SRC_STRIDE1, SRC_INDEX),
                    (DST, DST_STRIDE0, DST_STRIDE1, DST_INDEX),
                ):
                    j = index_of[row[index]][i1] if row[index] else i1
                    ends.append(row[base] + i0 * row[s0] + int(j) * row[s1] + (lo - run * per_run) * row[UNIT])
                ctypes.memmove(ends[1], ends[0], (hi - lo) * row[UNIT])


@settings(max_examples=examples(300))
@given(st.lists(st.integers(1, 50), max_size=12), st.integers(1, 40), st.sampled_from([0, 1, 4, 16, 64]))
def test_balanced_pieces_give_every_block_an_equal_share(units, blocks, piece_units):
    """Every unit of every segment in exactly one piece; each block's share within one unit of U / blocks
    (contiguous shares) or within one piece of it (pieces dealt out in turn)."""
    piece_segment, piece_first, piece_last = balanced_pieces(units, blocks, piece_units)
    assert len(piece_segment) % blocks == 0 and np.all(piece_last >= piece_first)
    covered = [np.zeros(n, int) for n in units]
    for s, first, last in zip(piece_segment, piece_first, piece_last, strict=True):
        if last > first:
            assert 0 <= first < last <= units[s]
            covered[s][first:last] += 1
    assert all(np.all(c == 1) for c in covered)
    sizes = piece_last - piece_first
    shares = [int(np.sum(sizes[b::blocks])) for b in range(blocks)]
    assert sum(shares) == sum(units)
    assert max(shares) - min(shares) <= max(1, piece_units), shares
    if piece_units:
        assert int(sizes.max(initial=0)) <= piece_units


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 3)), max_size=12),
    st.integers(1, 40),
    st.sampled_from([1, 4, 16]),
)
def test_pieces_of_lanes_are_interleaved(segments, blocks, piece_units):
    """With lanes (the ipc all-to-all's peers), every unit still lies in exactly one piece and every block gets an
    equal share; the pieces are dealt out lane by lane: share j of lane L is the (j * lanes + L)-th piece dealt
    (lanes in increasing order, leaving out those run out), so the blocks running together write to every peer."""
    units, lanes = [u for u, _ in segments], [lane for _, lane in segments]
    piece_segment, piece_first, piece_last = balanced_pieces(units, blocks, piece_units, lanes)
    covered = [np.zeros(n, int) for n in units]
    for s, first, last in zip(piece_segment, piece_first, piece_last, strict=True):
        covered[s][first:last] += 1
    assert all(np.all(c == 1) for c in covered)
    sizes = piece_last - piece_first
    shares = [int(np.sum(sizes[b::blocks])) for b in range(blocks)]
    assert max(shares, default=0) - min(shares, default=0) <= piece_units * (1 + len(set(lanes)))
    # Each piece's (share within its lane, lane): offsets of a lane's segments taken one after another.
    offset, before = {}, {}
    for s, (u, lane) in enumerate(segments):
        offset[s] = before.get(lane, 0)
        before[lane] = offset[s] + u
    order = sorted(set(lanes))
    keys = {}  # list position -> (share, lane)
    for p, (s, first, last) in enumerate(zip(piece_segment, piece_first, piece_last, strict=True)):
        if last > first:
            keys[p] = ((offset[s] + int(first)) // piece_units, order.index(lanes[s]))
    dealt = {key: g for g, key in enumerate(sorted(set(keys.values())))}
    for p, key in keys.items():
        assert p % blocks == dealt[key] % blocks, (p, key)  # the block that copies it
    for b in range(blocks):
        mine = [keys[p] for p in range(b, len(piece_segment), blocks) if p in keys]
        assert mine == sorted(mine)  # each block walks its pieces in the order they were dealt


@st.composite
def cases(draw):
    n = draw(st.integers(1, 8))
    ndim = draw(st.integers(1, 3))
    halo = tuple((draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in range(ndim))
    # Uneven sizes: the ranks' local arrays differ in shape, so runs pair across different strides.
    shape = tuple(draw(st.integers(6, 14)) for _ in range(ndim))
    periodic = tuple(draw(st.booleans()) for _ in range(ndim))
    try:
        ranks = every_rank(n, shape, halo=halo, periodic=periodic, stencil=draw(st.sampled_from(["box", "star"])))
    except DecompositionError:  # no grid of n ranks fits that halo: not a case
        reject()
    fields = draw(st.lists(st.tuples(st.sampled_from(DTYPES), st.sampled_from("CF")), min_size=1, max_size=3))
    blocks, piece_units = draw(st.integers(1, 64)), draw(st.sampled_from([0, 1, 8, 256]))
    path = draw(st.sampled_from(["buffered", "direct", "staged", "one-way"]))
    return ranks, fields, path, draw(st.integers(0, 2**32 - 1)), blocks, piece_units


def _layouts(d, specs):
    """(layout to other ranks, layout of what the rank sends itself or None), as HaloExchanger builds them."""
    full = d.pattern()
    others = Pattern(full.local_shape, tuple(p for p in full.peers if p.rank != d.comm.rank))
    own = [p for p in full.peers if p.rank == d.comm.rank]
    return Layout.build(others, specs), Layout.build(Pattern(full.local_shape, tuple(own)), specs) if own else None


@settings(max_examples=examples(300))
@given(cases())
def test_descriptor_tables_move_every_halo(case):
    """Every halo arrives bit for bit by each path: packed into a buffer and unpacked by the receiver (staged, mpi,
    nccl), written straight into the receiver's fields (ipc), ipc with every short-run selection going
    through the receiver's staging buffer (``ipc.staged``, its thresholds lowered so that all such are), and
    ipc's one-way protocol for small exchanges (lines with flags in the receiver's landing area)."""
    ranks, fields, path, seed, blocks, piece_units = case
    specs = [FieldSpec(np.dtype(dt), order) for dt, order in fields]
    globals_ = [random_global(ranks[0].global_shape, dt, seed + i) for i, (dt, _) in enumerate(fields)]
    arrays = [[local_with_sentinel(d, g, o) for g, (_, o) in zip(globals_, fields, strict=True)] for d in ranks]
    layouts = [_layouts(d, specs) for d in ranks]
    lowered = mock.patch.multiple(ipc, STAGE_SPAN_BYTES=0, STAGE_RUN_BYTES=1 << 30)
    with lowered if path == "staged" else contextlib.nullcontext():
        if path == "buffered":
            _replay_buffered(layouts, arrays, specs, blocks, piece_units)
        elif path == "one-way":
            _replay_one_way(layouts, arrays)
        else:
            _replay_direct(layouts, arrays, blocks, piece_units)
    for d, mine in zip(ranks, arrays, strict=True):
        for i, (a, g) in enumerate(zip(mine, globals_, strict=True)):
            problem = describe_mismatch(a, expected_cells(g, d.global_slices, d.halo, d.periodic, d.stencil))
            assert problem is None, f"rank {d.comm.rank} field {i} {fields[i]} {path}: {problem}"


def _replay_direct(layouts, arrays, blocks, piece_units):
    """The ipc path (transports/ipc.py's own rows): each rank's fields into its receivers' fields, or into their
    staging buffers which each receiver then unpacks. Senders read their interiors only and receivers write their
    halos only: any order of replay works, once every sender is done before any receiver unpacks."""
    staging = [np.zeros(max(layout.recv_nbytes, 1), np.uint8) for layout, _ in layouts]
    for rank, (layout, own) in enumerate(layouts):
        rows = Descriptors(np)
        rows.local(own, arrays[rank], arrays[rank])
        for message in layout.sends:
            there = next(m for m in layouts[message.peer][0].recvs if m.peer == rank)
            mine = arrays[message.peer]
            selections = [(r.field, r.selection) for r in there.segments]
            where = ([a.shape for a in mine], selections, [address(a) for a in mine])
            staged_at = address(staging[message.peer]) + there.offset - message.offset
            ipc.peer_rows(rows, message, arrays[rank], layout, where, staged_at)
        replay(rows, blocks, piece_units)
    for (layout, _), mine, inbox in zip(layouts, arrays, staging, strict=True):
        unpack = Descriptors(np)
        ipc.unpack_rows(unpack, layout, mine, address(inbox))
        replay(unpack, blocks, piece_units)


def _rows_between(rows, first, last):
    part = Descriptors(np)
    part.rows, part.keep = rows.rows[first:last], rows.keep
    return part


def _replay_one_way(layouts, arrays):
    """ipc's one-way path (``ipc.one_way_tables``, ipc.cu's gridcomm_ipc_one_way), two exchanges: each message
    packed into the sender's scratch buffer and written as lines (8 data bytes, each 4 beside the exchange number
    e) into half e mod 2 of the receiver's landing area, at the place the receiver's own tables give it; the
    receiver checks every line's flags, copies the data into its scratch buffer and unpacks it. The first
    exchange moves other data (its lines must not be read by the second, which lands in the other half)."""
    ranks = range(len(layouts))
    sizes = [[ipc.landing_places([m.nbytes for m in getattr(layout, side)])[2] for side in ("sends", "recvs")]
             for layout, _ in layouts]  # fmt: skip
    scratch = [[np.zeros(max(n, 1), np.uint8) for n in pair] for pair in sizes]
    tables = [
        ipc.one_way_tables(
            np,
            SimpleNamespace(layout=layout, fields=arrays[r], destinations=arrays[r], local=own),
            address(scratch[r][0]),
            address(scratch[r][1]),
        )
        for r, (layout, own) in enumerate(layouts)
    ]
    landing = [np.zeros(2 * t.half + 16, np.uint8) for t in tables]
    real = [[a.copy() for a in mine] for mine in arrays]
    for e in (1, 2):
        for r in ranks:  # the first exchange moves other bytes of the same fields
            for a, b in zip(arrays[r], real[r], strict=True):
                a[...] = b if e == 2 else np.flip(b)
        for r in ranks:
            t = tables[r]
            replay(_rows_between(t.pack, *t.local))
            for row in t.sends[: len(layouts[r][0].sends)]:
                peer, first, last, at, lines = (int(x) for x in row[: ipc.LANDING])
                replay(_rows_between(t.pack, first, last))
                there = tables[peer]
                (place,) = [int(x[ipc.LANDING]) for x in there.recvs if x[ipc.PEER_RANK] == r and x[ipc.LINES] == lines]
                data = scratch[r][0][at : at + ipc.LINE_DATA * lines].view(np.uint32).reshape(-1, 2)
                line = np.stack([data[:, 0], np.full(lines, e), data[:, 1], np.full(lines, e)], axis=1).astype(
                    np.uint32
                )
                start = (e & 1) * there.half + place
                landing[peer][start : start + ipc.LINE_BYTES * lines] = line.reshape(-1).view(np.uint8)
        for r in ranks:
            t = tables[r]
            for row in t.recvs[: len(layouts[r][0].recvs)]:
                _, first, last, at, lines, place = (int(x) for x in row[: ipc.HALF])
                start = (e & 1) * t.half + place
                line = landing[r][start : start + ipc.LINE_BYTES * lines].view(np.uint32).reshape(-1, 4)
                assert np.all(line[:, 1] == e) and np.all(line[:, 3] == e), f"rank {r}: lines of another exchange"
                scratch[r][1][at : at + ipc.LINE_DATA * lines] = line[:, [0, 2]].reshape(-1).view(np.uint8)
                replay(_rows_between(t.unpack, first, last))


def _replay_buffered(layouts, arrays, specs, blocks, piece_units):
    """The packed path: each rank packs into its send buffer, each receiver unpacks its part."""
    for rank, (layout, own) in enumerate(layouts):
        rows = Descriptors(np)
        rows.local(own, arrays[rank], arrays[rank])
        buffer = np.zeros(max(layout.send_nbytes, 1), np.uint8)
        rows.messages(layout.sends, specs, arrays[rank], address(buffer), into=True)
        replay(rows, blocks, piece_units)
        for message in layout.sends:
            receiver_layout = layouts[message.peer][0]
            there = next(m for m in receiver_layout.recvs if m.peer == rank)
            inbox = np.zeros(max(receiver_layout.recv_nbytes, 1), np.uint8)
            inbox[there.offset : there.offset + there.nbytes] = buffer[message.offset : message.offset + message.nbytes]
            unpack = Descriptors(np)
            unpack.messages((there,), specs, arrays[message.peer], address(inbox), into=False)
            replay(unpack, blocks, piece_units)


def test_staging_takes_short_runs_spread_wide_only():
    """A column of a large 2-D float64 field (8-byte runs a row apart over more than STAGE_SPAN_BYTES) is staged;
    rows, long runs, and short runs close together are written straight into the peer."""
    spec = FieldSpec(np.dtype("float64"), "C")
    n = 2048  # rows of 16 KiB: a column spans 32 MiB
    assert ipc.staged(run_grid((n, n), spec, Box((0, 1), (n, 2))))
    assert not ipc.staged(run_grid((n, n), spec, Box((1, 0), (2, n))))  # a row: one run
    assert not ipc.staged(run_grid((64, 64), spec, Box((0, 1), (64, 2))))  # a column of a small field
    assert not ipc.staged(run_grid((n, n, 60), spec, Box((0, 1, 0), (n, 2, 60))))  # 480-byte runs of levels


def test_rows_keep_the_widest_aligned_unit():
    """16-byte vector units where every address, stride and run length allows, narrower otherwise."""
    d = every_rank(1, (8, 16), halo=((2, 2), (0, 0)), periodic=True)[0]
    spec = FieldSpec(np.dtype("float64"), "C")
    a = np.zeros(d.local_shape)  # runs of 16 doubles (128 B) at 16-byte-aligned rows
    own = _layouts(d, [spec])[1]
    rows = Descriptors(np)
    rows.local(own, [a], [a])
    units = {row[UNIT] for row in rows.rows}
    assert units == {16 if address(a) % 16 == 0 else 8}, units
    odd = np.zeros(d.local_shape, dtype=np.int8)
    rows = Descriptors(np)
    rows.local(_layouts(d, [FieldSpec(np.dtype("int8"), "C")])[1], [odd], [odd])
    assert {row[UNIT] for row in rows.rows} <= {1, 2, 4, 8, 16}
