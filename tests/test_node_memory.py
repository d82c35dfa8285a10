"""The staged transport's node memory (transports/node_memory.py) on the host, CUDA's registration stubbed out."""

from __future__ import annotations

import os
import sys
import types

import numpy as np
import pytest

from gridcomm.transports import node_memory
from gridcomm.transports.node_memory import NodeMemory


@pytest.fixture
def registered(monkeypatch, tmp_path):
    """CuPy's hostRegister/hostUnregister recorded instead of called; the files under a folder of the test's."""
    calls: list[tuple[str, int]] = []
    runtime = types.SimpleNamespace(
        hostRegister=lambda address, nbytes, flags: calls.append(("register", nbytes)),
        hostUnregister=lambda address: calls.append(("unregister", 0)),
    )
    cuda = types.SimpleNamespace(runtime=runtime)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setattr(node_memory, "FOLDER", str(tmp_path))
    return calls


def test_a_peer_sees_what_the_owner_writes_and_the_name_goes(registered, tmp_path):
    inbox = NodeMemory.create(10_000)
    assert inbox is not None and os.path.exists(inbox.path)
    peer = NodeMemory.open(inbox.path, inbox.nbytes)
    assert peer is not None
    peer.array[123:130] = np.arange(7, dtype=np.uint8)
    assert inbox.array[123:130].tolist() == list(range(7))
    inbox.forget_name()
    assert not os.listdir(tmp_path)  # nothing left behind, while both still map it
    inbox.array[0] = 42
    assert peer.array[0] == 42
    peer.close()
    inbox.close()
    assert registered == [("register", 10_000), ("register", 10_000), ("unregister", 0), ("unregister", 0)]


def test_no_node_memory_where_it_cannot_be_had(registered, tmp_path, monkeypatch):
    assert NodeMemory.open(str(tmp_path / "gridcomm-not-there"), 64) is None  # another host's inbox
    inbox = NodeMemory.create(64)
    assert NodeMemory.open(inbox.path, 128) is None  # smaller than the sender expects
    inbox.close()
    inbox.forget_name()
    monkeypatch.setattr(node_memory, "FOLDER", str(tmp_path / "missing"))
    assert NodeMemory.create(64) is None  # no /dev/shm: staged goes through MPI
    room = os.statvfs(tmp_path)
    monkeypatch.setattr(node_memory, "FOLDER", str(tmp_path))
    assert NodeMemory.create(room.f_bavail * room.f_frsize + (1 << 30)) is None  # too little room


def test_a_failed_registration_leaves_no_file(registered, tmp_path, monkeypatch):
    def refuse(address, nbytes, flags):
        raise RuntimeError("cudaErrorHostMemoryAlreadyRegistered")

    monkeypatch.setattr(sys.modules["cupy"].cuda.runtime, "hostRegister", refuse)
    assert NodeMemory.create(64) is None or pytest.fail("create() kept memory CUDA refused to pin")
    assert not os.listdir(tmp_path)
