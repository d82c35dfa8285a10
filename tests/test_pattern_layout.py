"""Exchange patterns, message layouts and copy packing, checked serially for every rank of a decomposition.

A decomposition is built for each rank of an n-rank world without MPI (a stand-in communicator that only
knows its rank and size), so whole exchanges can be simulated in one process: message by message, each
sender's selections copied into the receiver's, in the order the pattern gives. The result must equal
the same serial reference the MPI tests use. Fast, so hypothesis can try many more cases than under MPI.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from harness import (
    DTYPES,
    cell_bytes,
    describe_mismatch,
    every_rank,
    examples,
    expected_cells,
    local_with_sentinel,
    random_global,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from gridcomm import Box, Pattern, PatternError, PeerPlan
from gridcomm.decomp.procgrid import factorisations
from gridcomm.packing import CopyPacker, FieldSpec, Layout, OwnCopier
from gridcomm.packing.layout import ALIGNMENT


@st.composite
def decompositions(draw, max_ranks=12):
    n = draw(st.integers(1, max_ranks))
    ndim = draw(st.integers(1, 3))
    grid = draw(st.sampled_from(list(factorisations(n, ndim))))
    halo = tuple((draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in range(ndim))
    least = [max(p, p * max(h)) for p, h in zip(grid, halo, strict=True)]
    shape = tuple(draw(st.integers(n, n + 9)) for n in least)
    periodic = tuple(draw(st.booleans()) for _ in range(ndim))
    stencil = draw(st.sampled_from(["box", "star"]))
    return every_rank(n, shape, halo=halo, periodic=periodic, proc_grid=grid, stencil=stencil)


def plans_by_peer(d) -> dict[int, PeerPlan]:
    return {p.rank: p for p in d.pattern().peers}


@settings(max_examples=examples(1000))
@given(decompositions(), st.sampled_from(DTYPES), st.sampled_from("CF"), st.integers(0, 2**32 - 1))
def test_pattern_exchange_simulated_serially_matches_reference(ranks, dtype, order, seed):
    """Copy every sender's boxes into the receiver's boxes, pairing them in pattern order: exact result."""
    d0 = ranks[0]
    g = random_global(d0.global_shape, dtype, seed)
    locals_ = [local_with_sentinel(d, g, order) for d in ranks]
    originals = [a.copy() for a in locals_]  # senders read the data as it was before the exchange
    plans = [plans_by_peer(d) for d in ranks]
    for sender, plan in enumerate(plans):
        for receiver, out in plan.items():
            back = plans[receiver].get(sender)
            assert back is not None, f"rank {sender} sends to {receiver}, which expects nothing from it"
            assert len(out.send) == len(back.recv), f"{sender}->{receiver}: {out.send} vs {back.recv}"
            for src, dst in zip(out.send, back.recv, strict=True):
                assert src.shape == dst.shape, f"{sender}->{receiver}: {src} into {dst}"
                cell_bytes(locals_[receiver])[dst.slices] = cell_bytes(originals[sender])[src.slices]
    for rank, (d, a) in enumerate(zip(ranks, locals_, strict=True)):
        expect = expected_cells(g, d.global_slices, d.halo, d.periodic, d.stencil)
        problem = describe_mismatch(a, expect)
        assert problem is None, f"rank {rank} of {d.proc_grid} {d.global_shape} halo {d.halo} {d.stencil}: {problem}"


@settings(max_examples=examples(400))
@given(decompositions(), st.lists(st.tuples(st.sampled_from(DTYPES), st.sampled_from("CF")), min_size=1, max_size=4))
def test_layout_segments_aligned_and_disjoint(ranks, fields):
    specs = [FieldSpec(np.dtype(dt), order) for dt, order in fields]
    layouts = [Layout.build(d.pattern(), specs) for d in ranks]
    for rank, layout in enumerate(layouts):
        for messages, total in ((layout.sends, layout.send_nbytes), (layout.recvs, layout.recv_nbytes)):
            spans = []
            for m in messages:
                assert m.offset % ALIGNMENT == 0 and ALIGNMENT == 16
                assert m.offset >= 0 and m.offset + m.nbytes <= total
                spans.append((m.offset, m.offset + m.nbytes))
                inner = []
                for seg in m.segments:
                    assert seg.offset % 16 == 0, f"rank {rank}: segment at {seg.offset}"
                    assert m.offset <= seg.offset and seg.offset + seg.nbytes <= m.offset + m.nbytes
                    spec = specs[seg.field]
                    assert seg.nbytes == seg.selection.size * spec.dtype.itemsize
                    inner.append((seg.offset, seg.offset + seg.nbytes))
                assert_disjoint(inner)
            assert_disjoint(spans)
        # What a rank sends to a peer is exactly as long as what that peer expects from it.
        for m in layout.sends:
            (back,) = [r for r in layouts[m.peer].recvs if r.peer == rank]
            assert back.nbytes == m.nbytes and len(back.segments) == len(m.segments)


def assert_disjoint(spans):
    spans = sorted(s for s in spans if s[1] > s[0])
    for (a0, a1), (b0, _) in itertools.pairwise(spans):
        assert a1 <= b0, f"[{a0}, {a1}) overlaps [{b0}, ...)"


@settings(max_examples=examples(400))
@given(
    decompositions(max_ranks=8),
    st.lists(st.tuples(st.sampled_from(DTYPES), st.sampled_from("CF")), min_size=1, max_size=3),
    st.integers(0, 2**32 - 1),
    st.sampled_from([1, 64, 256 << 10]),
)
def test_copy_packer_messages_simulated_serially(ranks, fields, seed, chunk):
    """Pack on every rank (what it sends itself copied by an OwnCopier, as an exchanger does, in chunks of at
    most ``chunk`` bytes where its boxes allow), move each message's bytes to its receiver, unpack: exact result
    for every field."""
    specs = [FieldSpec(np.dtype(dt), order) for dt, order in fields]
    d0 = ranks[0]
    globals_ = [random_global(d0.global_shape, dt, seed + i) for i, (dt, _) in enumerate(fields)]
    arrays = [[local_with_sentinel(d, g, order) for g, (_, order) in zip(globals_, fields, strict=True)] for d in ranks]
    packers, copiers = [], []
    for r, d in enumerate(ranks):
        full = d.pattern()
        others = Pattern(full.local_shape, tuple(p for p in full.peers if p.rank != r), full.trailing_axes)
        own = next((p for p in full.peers if p.rank == r), None)
        packers.append(CopyPacker(Layout.build(others, specs), arrays[r]))
        if own is not None:
            copiers.append(OwnCopier(specs, arrays[r], arrays[r], [own] * len(specs), chunk_bytes=chunk))
    for p in packers:
        p.pack()
    for c in copiers:
        c.copy()
        c.close()
    for sender, p in enumerate(packers):
        for i, m in enumerate(p.layout.sends):
            receiver = packers[m.peer]
            (j,) = [j for j, r in enumerate(receiver.layout.recvs) if r.peer == sender]
            receiver.recv_message(j)[...] = p.send_message(i)
    for p in packers:
        p.unpack()
        p.close()
    for rank, d in enumerate(ranks):
        for i, g in enumerate(globals_):
            expect = expected_cells(g, d.global_slices, d.halo, d.periodic, d.stencil)
            problem = describe_mismatch(arrays[rank][i], expect)
            assert problem is None, f"rank {rank}, field {i} {fields[i]}: {problem}"


@st.composite
def cut_blocks(draw):
    """A block of a source array and a block of a destination array of other shapes holding as many elements,
    each cut along one axis into 1-3 boxes (differently on the two sides): what a rank sends itself in a
    transposition whose blocks are cut differently."""

    def side(extents):
        shape = tuple(e + draw(st.integers(0, 2)) for e in extents)
        start = tuple(draw(st.integers(0, n - e)) for n, e in zip(shape, extents, strict=True))
        axis = draw(st.integers(0, len(extents) - 1))
        cuts = (
            sorted(set(draw(st.lists(st.integers(1, max(extents[axis] - 1, 1)), max_size=2))))
            if extents[axis] > 1
            else []
        )
        edges = [0, *cuts, extents[axis]]
        boxes = []
        for lo, hi in itertools.pairwise(edges):
            first = list(start)
            last = [s + e for s, e in zip(start, extents, strict=True)]
            first[axis], last[axis] = start[axis] + lo, start[axis] + hi
            boxes.append(Box(tuple(first), tuple(last)))
        return shape, tuple(boxes)

    a, b, c = (draw(st.integers(1, 4)) for _ in range(3))
    src_shape, sent = side((a, b, c))
    dst_shape, received = side(draw(st.sampled_from([(a, b, c), (a * b, c, 1), (c, a * b, 1), (a, b * c, 1)])))
    return src_shape, sent, dst_shape, received


@settings(max_examples=300, deadline=None)
@given(
    cut_blocks(),
    st.sampled_from(DTYPES),
    st.sampled_from("CF"),
    st.integers(0, 2**32 - 1),
    st.sampled_from([1, 16, 256 << 10]),
)
def test_own_copier_copies_in_memory_order(blocks, dtype, order, seed, chunk):
    """The elements of the send boxes, one after the other in the field's memory order, land in the receive
    boxes in the same order, bit for bit, however the two sides are cut and however small the chunks."""
    src_shape, sent, dst_shape, received = blocks
    source = np.asarray(random_global(src_shape, dtype, seed), order=order)
    destination = np.asarray(random_global(dst_shape, dtype, seed + 1), order=order)
    expected = destination.copy(order="A")
    stream = np.concatenate([source[b.slices].ravel(order=order) for b in sent])
    at = 0
    for b in received:
        expected[b.slices] = stream[at : at + b.size].reshape(b.shape, order=order)
        at += b.size
    specs = (FieldSpec(np.dtype(dtype), order),)
    copier = OwnCopier(specs, [source], [destination], [PeerPlan(0, sent, received)], chunk_bytes=chunk)
    copier.copy()
    copier.close()
    assert np.array_equal(cell_bytes(destination), cell_bytes(expected)), (sent, received)


def test_box():
    box = Box((1, 0, 2), (4, 2, 2))
    assert box.shape == (3, 2, 0)
    assert box.size == 0
    assert box.slices == (slice(1, 4), slice(0, 2), slice(2, 2))
    assert Box((0,), (5,)).size == 5


def test_pattern_check_bounds():
    inside = Pattern((4, 4), (PeerPlan(1, (Box((1, 1), (3, 2)),), (Box((0, 0), (4, 1)),)),))
    inside.check_bounds()
    for bad in (Box((0, 0), (5, 1)), Box((-1, 0), (1, 1)), Box((2, 2), (1, 3))):
        with pytest.raises(PatternError, match="peer 1"):
            Pattern((4, 4), (PeerPlan(1, (bad,), ()),)).check_bounds()


def test_star_pattern_has_no_edge_or_corner_boxes():
    for d in every_rank(4, (8, 8, 8), halo=1, periodic=True, stencil="star", proc_grid=(2, 2, 1)):
        for peer in d.pattern().peers:
            for box in peer.recv:
                outside = sum(
                    1
                    for a, b, (lo, _), n in zip(box.start, box.stop, d.halo, d.interior_shape, strict=True)
                    if b <= lo or a >= lo + n
                )
                assert outside == 1, f"star stencil receives {box}"


def test_uneven_ownership_and_c_order_ranks():
    ranks = every_rank(6, (10, 7), halo=0, proc_grid=(3, 2))
    assert [d.coords for d in ranks] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    assert [d.interior_shape for d in ranks] == [(4, 4), (4, 3), (3, 4), (3, 3), (3, 4), (3, 3)]
    assert ranks[3].global_slices == (slice(4, 7), slice(4, 7))
    assert ranks[0].rank_of((2, 1)) == 5
    assert ranks[0].coords_of(5) == (2, 1)


def test_pattern_checks_receive_boxes_against_recv_shape():
    """A transposition's pattern: send boxes lie in ``local_shape``, receive boxes in ``recv_shape``."""
    plan = PeerPlan(1, (Box((0, 0), (2, 3)),), (Box((0, 0), (3, 2)),))
    Pattern((2, 3), (plan,), recv_shape=(3, 2)).check_bounds()
    with pytest.raises(PatternError, match="receive selection for peer 1"):
        Pattern((2, 3), (plan,)).check_bounds()  # without recv_shape the (3, 2) box must fit (2, 3)
    with pytest.raises(PatternError, match="send selection for peer 1"):
        Pattern((2, 3), (PeerPlan(1, (Box((0, 0), (3, 2)),), ()),), recv_shape=(3, 2)).check_bounds()
    with pytest.raises(PatternError, match="2 axes"):
        Pattern((4,), (PeerPlan(1, (), (Box((0, 0), (1, 1)),)),)).check_bounds()


def test_field_aligned_layout_packs_a_fields_boxes_back_to_back():
    """align='field' pads only between fields, so a block cut into other boxes on the receiving side still
    has the same bytes in the same places; align='segment' (halo exchanges, GPU kernels) pads every box."""
    plan = PeerPlan(1, (Box((0,), (3,)), Box((5,), (6,))), (Box((0,), (4,)),))
    specs = [FieldSpec(np.dtype("float32"), "C"), FieldSpec(np.dtype("int8"), "C")]
    pattern = Pattern((8,), (plan,))
    by_field = Layout.build(pattern, specs, align="field")
    assert [s.offset for s in by_field.sends[0].segments] == [0, 12, 16, 19]
    assert [s.offset for s in by_field.recvs[0].segments] == [0, 16]
    assert by_field.sends[0].nbytes == by_field.recvs[0].nbytes == 2 * ALIGNMENT
    by_segment = Layout.build(pattern, specs)
    assert [s.offset for s in by_segment.sends[0].segments] == [0, 16, 32, 48]
    with pytest.raises(ValueError, match="align"):
        Layout.build(pattern, specs, align="none")


def test_staged_chunks_cover_each_message_in_order():
    """The staged transport's chunks of a message: back to back from its offset, none larger than the chunk size,
    together exactly its bytes; none for an empty message."""
    import itertools

    from gridcomm.transports.staged import chunks

    assert chunks(100, 0, 64) == []
    assert chunks(16, 64, 64) == [(16, 64)]
    got = chunks(32, 1000, 96)
    assert got[0][0] == 32 and all(n <= 96 for _, n in got) and sum(n for _, n in got) == 1000
    assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(got))


def _copy_runs(src: np.ndarray, src_grid, dst: np.ndarray, dst_grid) -> None:
    """Copy run (i0, i1) of ``src_grid`` to run (i0, i1) of ``dst_grid``, bytes as the GPU copies would."""
    a, b = src.reshape(-1).view(np.uint8), dst.reshape(-1).view(np.uint8)
    n = src_grid.run_bytes
    for s, d in zip(src_grid.offsets(), dst_grid.offsets(), strict=True):
        b[d : d + n] = a[s : s + n]


@pytest.mark.parametrize("order", ["C", "F"])
def test_paired_grids_pair_a_contiguous_range_with_a_box_of_as_many_elements(order):
    """A block of a 1-D buffer pairs with a box of a 3-D array holding as many elements, either way round: the
    range takes the box's runs, so that the box's elements come out in memory order (what a message carries)."""
    from gridcomm.packing.geometry import paired_grids

    spec = FieldSpec(np.dtype(np.complex128), order)
    shape, box = (3, 5, 7), Box((0, 1, 2), (3, 4, 6))  # 36 elements in runs of 4 (C) or 3 (F)
    buffer = np.arange(100, dtype=np.complex128) * (1 + 1j)
    field = np.zeros(shape, np.complex128, order=order)
    src, dst = paired_grids(buffer.shape, Box((10,), (46,)), shape, box, spec)
    assert src.run_bytes == dst.run_bytes and src.n0 * src.n1 == dst.n0 * dst.n1 > 1
    _copy_runs(buffer, src, field.reshape(-1, order="A"), dst)
    np.testing.assert_array_equal(field[box.slices].reshape(-1, order=order), buffer[10:46])
    back = np.zeros_like(buffer)
    src, dst = paired_grids(shape, box, back.shape, Box((50,), (86,)), spec)
    _copy_runs(field.reshape(-1, order="A"), src, back, dst)
    np.testing.assert_array_equal(back[50:86], buffer[10:46])
    # A whole row of a 2-D array is one contiguous range too (C order).
    if order == "C":
        src, dst = paired_grids((4, 36), Box((2, 0), (3, 36)), shape, box, spec)
        assert src.start == 2 * 36 * 16 and src.n0 * src.n1 == dst.n0 * dst.n1


def test_paired_grids_refuse_boxes_of_different_extents_unless_one_is_a_range():
    from gridcomm.packing.geometry import paired_grids

    spec = FieldSpec(np.dtype(np.float64), "C")
    with pytest.raises(ValueError, match="extents"):  # two boxes of strided runs, 6 elements each
        paired_grids((4, 4), Box((0, 0), (2, 3)), (4, 4), Box((0, 0), (3, 2)), spec)
    with pytest.raises(ValueError, match="extents"):  # a range of another size
        paired_grids((10,), Box((0,), (5,)), (4, 4), Box((0, 0), (2, 3)), spec)


@pytest.mark.parametrize("order", ["C", "F"])
def test_own_copier_copies_a_block_of_a_1d_array_into_a_box_in_chunks(order):
    """A rank's block to itself from a 1-D buffer into a box of a 3-D array (the spectral dwarf's diagonal
    block), and back: the box goes in slabs, so the copy runs in chunks of at most chunk_bytes, and every element
    lands in memory order."""
    from gridcomm.packing.copy import _own_units

    spec = FieldSpec(np.dtype(np.complex128), order)
    shape, box = (6, 5, 7), Box((0, 1, 2), (6, 4, 6))  # 72 elements: 6 slabs of 12 (C), 4 of 18 (F)
    slabs = 6 if order == "C" else 4
    flat = np.arange(100, dtype=np.complex128) * (1 - 2j)
    field = np.zeros(shape, np.complex128, order=order)
    into = [PeerPlan(0, (Box((20,), (92,)),), (box,))]
    assert len(list(_own_units([spec], [flat], [field], into))) == slabs
    copier = OwnCopier([spec], [flat], [field], into, chunk_bytes=300)  # one slab per chunk (192 or 288 bytes)
    assert len(copier._calls) == slabs
    copier.copy()
    np.testing.assert_array_equal(field[box.slices].reshape(-1, order=order), flat[20:92])
    back = np.zeros_like(flat)
    OwnCopier([spec], [field], [back], [PeerPlan(0, (box,), (Box((10,), (82,)),))]).copy()
    np.testing.assert_array_equal(back[10:82], flat[20:92])


# -- messages moved from and into the arrays themselves (nccl's direct messages) ------------------------------


def _message(peer: int, *segments: tuple[int, object, int]) -> object:
    from gridcomm.packing.layout import PeerMessage, Segment

    parts = tuple(Segment(field, sel, 0, nbytes) for field, sel, nbytes in segments)
    return PeerMessage(peer, 0, sum(s.nbytes for s in parts), parts)


def test_a_message_is_a_range_of_its_array_only_where_it_lies_as_one():
    """Whole rows of a C-order array, or a block of a 1-D one: (address, bytes); a box cut inside its rows, the
    same box of a Fortran-order array, two selections, rows picked by index: None (packed instead)."""
    from gridcomm import Rows
    from gridcomm.packing.table import address, message_range

    a = np.zeros((10, 4))
    c, f = FieldSpec(np.dtype("f8"), "C"), FieldSpec(np.dtype("f8"), "F")
    rows = Box((2, 0), (5, 4))
    assert message_range(_message(1, (0, rows, 96)), [c], [a]) == (address(a) + 2 * 4 * 8, 96)
    b = np.zeros(10)
    assert message_range(_message(1, (0, Box((3,), (7,)), 32)), [c], [b]) == (address(b) + 24, 32)
    assert message_range(_message(1, (0, Box((2, 1), (5, 3)), 48)), [c], [a]) is None
    assert message_range(_message(1, (0, rows, 96)), [f], [np.asfortranarray(a)]) is None
    assert message_range(_message(1, (0, rows, 96), (0, Box((6, 0), (7, 4)), 32)), [c], [a]) is None
    assert message_range(_message(1, (0, Rows(np.array([1, 2])), 64)), [c], [a]) is None


class _Told:
    """A stand-in communicator of ``size`` ranks whose alltoall answers what the peers would tell this rank."""

    def __init__(self, size: int, answers: list[tuple[bool, bool]]) -> None:
        self.size, self.answers, self.sent = size, answers, None
        self.mpi = self

    def alltoall(self, sent: list[tuple[bool, bool]]) -> list[tuple[bool, bool]]:
        self.sent = sent
        return self.answers


def _packer(layout: Layout, sources: list, destinations: list) -> object:
    import types

    return types.SimpleNamespace(layout=layout, sources=sources, destinations=destinations)


def test_direct_messages_are_agreed_with_each_peer_and_never_overlap():
    """A message goes without the buffers only where both ends of the pair lie as one range (each rank tells
    its peers what it can), and nowhere where what a rank sends from overlaps what it receives into."""
    from gridcomm.packing.table import address
    from gridcomm.transports.nccl import direct_messages

    c = FieldSpec(np.dtype("f8"), "C")
    source, destination = np.zeros(8), np.zeros(8)
    block = lambda peer: _message(peer, (0, Box((4 * peer,), (4 * peer + 4,)), 32))  # noqa: E731
    layout = Layout((c,), (block(1),), (block(1),), 32, 32)
    comm = _Told(2, [(False, False), (True, True)])  # rank 1 sends to me and receives from me from its arrays
    sends, recvs = direct_messages(comm, _packer(layout, [source], [destination]))
    assert sends == {0: (address(source) + 32, 32)} and recvs == {0: (address(destination) + 32, 32)}
    assert comm.sent == [(False, False), (True, True)]
    comm = _Told(2, [(False, False), (True, False)])  # rank 1 receives from me into its buffer: I pack for it
    assert direct_messages(comm, _packer(layout, [source], [destination])) == ({}, {0: (address(destination) + 32, 32)})
    comm = _Told(2, [(False, False), (True, True)])
    assert direct_messages(comm, _packer(layout, [source], [source])) == ({}, {})  # transposed into itself
    assert comm.sent == [(False, False), (False, False)]  # and the peer is told so
