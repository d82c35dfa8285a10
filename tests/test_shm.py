"""The shm transport's refusals, in process on one rank (the exchanges themselves run in every MPI suite)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from gridcomm import HaloExchanger, TransportError
from gridcomm.transports import ShmTransport, counters, node_memory, shm


def test_refused_where_stores_may_be_reordered_and_for_gpu_memory(monkeypatch):
    monkeypatch.setattr(counters.platform, "machine", lambda: "aarch64")
    reason = ShmTransport().local_reason(on_device=False)
    assert reason is not None and "x86-64" in reason and "aarch64" in reason and "cma or mpi" in reason
    assert "host memory only" in (ShmTransport().local_reason(on_device=True) or "")


def test_no_shared_memory_is_a_transport_error_and_leaves_no_file(decompose, monkeypatch, tmp_path):
    monkeypatch.setattr(node_memory, "FOLDER", str(tmp_path / "missing"))
    d = decompose((12,), halo=2, periodic=True)
    with pytest.raises(TransportError, match="no room for its receive buffer"):
        HaloExchanger(d, d.zeros(), "shm")
    monkeypatch.setattr(node_memory, "FOLDER", str(tmp_path))
    f = d.zeros()
    d.interior(f)[...] = np.arange(12.0)
    with HaloExchanger(d, f, ShmTransport(direct_bytes=0)) as ex:
        ex.exchange()
        assert not os.listdir(tmp_path)  # the receive buffer's name went once its peers (none) had mapped it
    assert f.tolist() == [10.0, 11.0, *range(12), 0.0, 1.0]


def test_a_receive_buffer_never_bound_leaves_no_file_at_exit(decompose, monkeypatch, tmp_path):
    monkeypatch.setattr(node_memory, "FOLDER", str(tmp_path))
    d = decompose((12,), halo=2, periodic=True)
    buffer = ShmTransport().receive_buffer(d.comm, 100)
    assert buffer is not None and len(os.listdir(tmp_path)) == 1
    shm._forget_unbound()  # what the process does at exit
    assert not os.listdir(tmp_path)
    shm._INBOXES.pop(buffer.ctypes.data).close()
