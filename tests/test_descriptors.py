"""The GPU kernels' descriptor tables, replayed on the host (no GPU needed).

packing/cuda.py describes every copy of an exchange as rows of run grids (kernels/runs.cuh). Here the same
rows are built over NumPy arrays and replayed with memmove, block by block and piece by piece as the kernel
walks them: pack into a message and unpack on the receiver (the staged, mpi and nccl path), and field to
field into another rank's array of a different shape (the ipc path), for random decompositions of 1 to 8
ranks, dtypes, memory orders, block counts and piece sizes. The result must equal the serial reference bit for bit.
"""

from __future__ import annotations

import ctypes

import numpy as np
from harness import (
    DTYPES,
    describe_mismatch,
    examples,
    expected_cells,
    local_with_sentinel,
    random_global,
    stand_in_comm,
)
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from gridcomm import CartesianDecomposition, DecompositionError, Pattern
from gridcomm.packing import FieldSpec, Layout
from gridcomm.packing.cuda import (
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
from gridcomm.packing.geometry import paired_grids


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


def every_rank(n, shape, **kwargs) -> list[CartesianDecomposition]:
    return [CartesianDecomposition(stand_in_comm(r, n), shape, **kwargs) for r in range(n)]


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
    return ranks, fields, draw(st.booleans()), draw(st.integers(0, 2**32 - 1)), blocks, piece_units


def _layouts(d, specs):
    """(layout to other ranks, layout of what the rank sends itself or None), as HaloExchanger builds them."""
    full = d.pattern()
    others = Pattern(full.local_shape, tuple(p for p in full.peers if p.rank != d.comm.rank))
    own = [p for p in full.peers if p.rank == d.comm.rank]
    return Layout.build(others, specs), Layout.build(Pattern(full.local_shape, tuple(own)), specs) if own else None


@settings(max_examples=examples(300))
@given(cases())
def test_descriptor_tables_move_every_halo(case):
    ranks, fields, direct, seed, blocks, piece_units = case
    specs = [FieldSpec(np.dtype(dt), order) for dt, order in fields]
    globals_ = [random_global(ranks[0].global_shape, dt, seed + i) for i, (dt, _) in enumerate(fields)]
    arrays = [[local_with_sentinel(d, g, o) for g, (_, o) in zip(globals_, fields, strict=True)] for d in ranks]
    layouts = [_layouts(d, specs) for d in ranks]
    # Senders read their interiors only and receivers write their halos only: any order of replay works.
    for rank, (layout, own) in enumerate(layouts):
        rows = Descriptors(np)
        rows.local(own, arrays[rank], arrays[rank])
        if direct:  # ipc: from this rank's fields into the receiver's, paired segment by segment
            for message in layout.sends:
                there = next(m for m in layouts[message.peer][0].recvs if m.peer == rank)
                for s, r in zip(message.segments, there.segments, strict=True):
                    src_field, dst_field = arrays[rank][s.field], arrays[message.peer][r.field]
                    src, dst = paired_grids(src_field.shape, s.selection, dst_field.shape, r.selection, specs[s.field])
                    rows.add(address(src_field), src, address(dst_field), dst)
            replay(rows, blocks, piece_units)
            continue
        buffer = np.zeros(max(layout.send_nbytes, 1), np.uint8)  # pack, then each receiver unpacks its part
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
    for d, mine in zip(ranks, arrays, strict=True):
        for i, (a, g) in enumerate(zip(mine, globals_, strict=True)):
            problem = describe_mismatch(a, expected_cells(g, d.global_slices, d.halo, d.periodic, d.stencil))
            assert problem is None, f"rank {d.comm.rank} field {i} {fields[i]} direct={direct}: {problem}"


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
