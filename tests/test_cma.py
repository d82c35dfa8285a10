"""The cma transport's options and refusals, in process on one rank (the exchanges themselves run in every MPI suite,
with counters in shared memory, and on two threads with MPI's messages: tests/mpi_programs/harness.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from gridcomm import ArgumentError, HaloExchanger, TransportError
from gridcomm.transports import CmaTransport, by_label, counters, node_memory
from gridcomm.transports.cma import cpus_each


def test_options_are_checked_and_read_from_labels():
    with pytest.raises(ArgumentError, match="signals='pipe'"):
        CmaTransport(signals="pipe")
    with pytest.raises(ArgumentError, match="threads"):
        CmaTransport(threads=0)
    with pytest.raises(ArgumentError, match="thread_bytes"):
        CmaTransport(thread_bytes=-1)
    assert by_label("cma/threads=4/signals=mpi") == CmaTransport(threads=4, signals="mpi")


def test_threads_share_the_nodes_cpus_among_its_ranks(decompose):
    cores = len(os.sched_getaffinity(0))
    comm = decompose((4,), halo=1).comm  # one rank: the node's CPUs are this process's
    assert comm.local_cpus == cores and comm.local_size == 1
    assert cpus_each(comm.local_cpus, comm.local_size) == cores
    assert cpus_each(cores, cores * 4) == 1  # more ranks than cores: one each, no threads


def exchanged(d, transport):
    """A periodic 1-D halo exchange on one rank through ``transport``: its channel's signalling, and the field."""
    f = d.zeros()
    d.interior(f)[...] = np.arange(12.0)
    with HaloExchanger(d, f, transport) as ex:
        ex.exchange()
        signalling = ex.channel.signalling
    assert f.tolist() == [10.0, 11.0, *range(12), 0.0, 1.0]
    return signalling


def test_signals_in_memory_on_x86_64_and_by_mpi_elsewhere(decompose, monkeypatch):
    d = decompose((12,), halo=2, periodic=True)
    assert exchanged(d, CmaTransport(signals="mpi")) == "mpi"
    if counters.store_order_reason("cma", "mpi") is None:  # this processor keeps stores in order
        assert exchanged(d, "cma") == "memory"
    monkeypatch.setattr(counters.platform, "machine", lambda: "aarch64")
    assert exchanged(d, "cma") == "mpi"
    with pytest.raises(TransportError, match=r"x86-64.*aarch64.*signals='mpi'"):
        HaloExchanger(d, d.zeros(), CmaTransport(signals="memory"))


def test_no_shared_memory_falls_back_to_mpi_or_refuses_and_leaves_no_file(decompose, monkeypatch, tmp_path):
    if counters.store_order_reason("cma", "mpi") is not None:
        pytest.skip("counters in memory need a processor that keeps stores in order (x86-64)")
    monkeypatch.setattr(node_memory, "FOLDER", str(tmp_path / "missing"))
    d = decompose((12,), halo=2, periodic=True)
    assert exchanged(d, "cma") == "mpi"
    with pytest.raises(TransportError, match="no room for its counters"):
        HaloExchanger(d, d.zeros(), CmaTransport(signals="memory"))
    monkeypatch.setattr(node_memory, "FOLDER", str(tmp_path))
    assert exchanged(d, CmaTransport(signals="memory", threads=2, thread_bytes=0)) == "memory"
    assert not os.listdir(tmp_path)  # the counters' name went once the peers (none) had mapped them


def test_shared_zeros_are_zeros_in_a_memory_file_that_goes_with_the_last_view():
    import gc

    from gridcomm import shared_zeros, sharing

    a = shared_zeros((3, 4), np.complex64)
    assert a.shape == (3, 4) and a.dtype == np.complex64 and a.flags.c_contiguous and not a.any()
    runs = np.array([[a.ctypes.data + 8, 16], [a.ctypes.data + 40, 8]])
    fd, start, nbytes = sharing.segment_of(runs)
    assert start == a.ctypes.data and nbytes == a.nbytes and os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:")
    assert sharing.segment_of(np.array([[np.zeros(4).ctypes.data, 8]])) is None  # not one of them
    assert sharing.segment_of(np.array([[a.ctypes.data, a.nbytes + 1]])) is None  # past its end
    mapped = sharing.map_segment(os.getpid(), fd, nbytes)  # what a peer of the node does
    a[1, 2] = 1 + 2j
    assert np.frombuffer(mapped, np.complex64)[6] == 1 + 2j
    mapped.close()
    view = a[1:]
    del a
    gc.collect()
    assert os.path.exists(f"/proc/self/fd/{fd}")  # a view still holds the memory
    del view
    gc.collect()
    assert sharing.segment_of(runs) is None  # forgotten, its descriptor closed
    assert not os.path.exists(f"/proc/self/fd/{fd}") or not os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:")


def test_shared_zeros_refuse_what_is_not_an_array_of_numbers():
    from gridcomm import shared_zeros

    with pytest.raises(ArgumentError, match="dtype of numbers"):
        shared_zeros(3, object)
    with pytest.raises(ArgumentError, match="extent"):
        shared_zeros((2, -1))
    assert shared_zeros(0).shape == (0,)


def test_pieces_copied_out_of_a_mapping_in_one_numpy_copy_only_where_they_form_a_grid():
    from gridcomm.transports.cma import _grid

    def grid(local, remote, width=8):
        local, remote = np.array(local), np.array(remote)
        return _grid(local, remote, np.full(len(local), width))

    assert grid([100], [0]) == ((1, 1), (0, 0), (0, 0))
    assert grid([100, 200, 300], [0, 16, 32]) == ((1, 3), (0, 100), (0, 16))  # a slab transposition's block
    # two rows of three pieces (a box cut on two axes), on both sides
    assert grid([0, 10, 20, 100, 110, 120], [0, 8, 16, 64, 72, 80]) == ((2, 3), (100, 10), (64, 8))
    assert grid([0, 10, 20, 100, 110], [0, 8, 16, 64, 72]) is None  # a short last row
    assert grid([0, 10, 25], [0, 8, 16]) is None  # uneven here
    assert grid([0, 10, 20], [32, 16, 0]) is None  # backwards there
    assert _grid(np.array([0, 10]), np.array([0, 8]), np.array([8, 4])) is None  # pieces of two lengths


def byte_pairs(local, remote):
    """Every byte's (address here, address there) of pieces pairwise of one length."""
    return [(a + i, b + i) for (a, n), (b, _) in zip(local.tolist(), remote.tolist(), strict=True) for i in range(n)]


@pytest.mark.parametrize("parts", [1, 2, 3, 7, 64])
def test_a_read_cut_into_parts_moves_every_byte_once_in_parts_of_about_equal_size(parts):
    """The parts that cma hands to its threads: the same bytes, each once, in order, none empty, as even as bytes
    allow, a piece that straddles a cut split on both sides alike."""
    from gridcomm.transports.cma import _cut

    local = np.array([[1000, 5], [2000, 1], [3000, 13], [4000, 2]])
    remote = np.array([[50, 5], [70, 1], [90, 13], [130, 2]])
    cut = _cut(local, remote, parts)
    assert len(cut) == min(parts, 21)
    sizes = [int(here[:, 1].sum()) for here, _ in cut]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 21
    assert all(np.array_equal(here[:, 1], there[:, 1]) for here, there in cut)
    joined = [pair for here, there in cut for pair in byte_pairs(here, there)]
    assert joined == byte_pairs(local, remote)


def test_a_copy_out_of_a_mapping_cut_into_parts_copies_the_same_elements():
    from gridcomm.transports.cma import _MappedRead

    source = np.arange(2 * 3 * 8, dtype=np.uint8).reshape(2, 3, 8)
    for parts in (1, 2, 3, 5, 16):
        destination = np.zeros_like(source)
        pieces = _MappedRead(None, destination, source).split(parts)
        assert sum(p.total for p in pieces) == source.size and len(pieces) <= max(parts, 1)
        for piece in pieces:
            piece.run()
        assert np.array_equal(destination, source)
