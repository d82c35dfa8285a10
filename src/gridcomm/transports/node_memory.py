"""Host memory shared by the processes of one node: an inbox that its senders copy into (the staged transport's,
pinned for CUDA copies; the shm transport's, plain host memory).

The owner creates a file of ``/dev/shm`` (its space reserved at once, so that a full ``/dev/shm`` is an error
here and not a SIGBUS later), maps it and, where it is pinned, registers it with CUDA; the processes that write
into it map (and register) it too, then the owner removes the file (``forget_name``): the memory lives while a
process maps it and goes when the last one exits, crashed or not, with nothing left behind. A process of another
host cannot open the file, so a sender learns that a peer is on its node by mapping the peer's inbox.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import uuid
from collections.abc import Iterable
from typing import Any

import numpy as np

FOLDER = "/dev/shm"


class NodeMemory:
    """``nbytes`` of host memory mapped here from a file of ``FOLDER``, pinned for CUDA copies where ``pinned``.

    Use ``create`` (the owner) or ``open`` (a peer of the same node); ``array`` is a uint8 view, ``address`` its
    first byte. ``close()`` unregisters and unmaps it (the views must be gone by then)."""

    def __init__(self, path: str, nbytes: int, create: bool, pinned: bool = True) -> None:
        self.path, self.nbytes, self.pinned = path, nbytes, pinned
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.posix_fallocate(fd, 0, nbytes)
            elif os.fstat(fd).st_size < nbytes:
                raise OSError(f"{path} holds {os.fstat(fd).st_size} bytes, not {nbytes}")
            self._map = mmap.mmap(fd, nbytes)
        except BaseException:
            if create:
                os.unlink(path)
            raise
        finally:
            os.close(fd)
        self.array = np.frombuffer(self._map, dtype=np.uint8)
        self.address = self.array.ctypes.data
        if not pinned:
            return
        try:
            import cupy

            cupy.cuda.runtime.hostRegister(self.address, nbytes, 0)
        except Exception:
            self.array = None
            self._map.close()
            if create:
                os.unlink(path)
            raise

    @classmethod
    def create(cls, nbytes: int, pinned: bool = True) -> NodeMemory | None:
        """New shared memory owned by this process, or None where ``FOLDER`` is missing or has too little room
        (a container's small /dev/shm) or CUDA will not pin it: the caller then goes through MPI."""
        try:
            room = os.statvfs(FOLDER)
            if room.f_bavail * room.f_frsize < nbytes:
                return None
            return cls(os.path.join(FOLDER, f"gridcomm-{uuid.uuid4().hex}"), nbytes, create=True, pinned=pinned)
        except Exception:  # OSError, or CUDA refusing to pin it
            return None

    @classmethod
    def open(cls, path: str, nbytes: int, pinned: bool = True) -> NodeMemory | None:
        """A peer's shared memory mapped here, or None where it cannot be (another host, no room to pin)."""
        try:
            return cls(path, nbytes, create=False, pinned=pinned)
        except Exception:  # OSError (not on this host), or CUDA refusing to register it
            return None

    def forget_name(self) -> None:
        """Remove the file (the owner, once its peers have mapped it): the memory stays while mapped."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def close(self) -> None:
        if self.array is None:
            return
        if self.pinned:
            import cupy

            cupy.cuda.runtime.hostUnregister(self.address)
        self.array = None
        with contextlib.suppress(BufferError):  # a view still held elsewhere: unmapped when the last one goes
            self._map.close()


def map_peers(
    mpi: Any, own: NodeMemory, peers: Iterable[int], transport: str, what: str
) -> tuple[dict[int, NodeMemory], str | None]:
    """Collective over ``mpi``: every rank's ``own`` memory (plain host memory) made known to the others, and that of
    each of ``peers`` mapped here. Returns the mappings by rank and, where one could not be made, why (naming the
    ``transport`` and ``what`` the memory holds; the caller agrees on it with its peers and closes the mappings)."""
    files = mpi.allgather((own.path, own.nbytes))
    mapped: dict[int, NodeMemory] = {}
    for peer in sorted(set(peers)):
        memory = NodeMemory.open(*files[peer], pinned=False)
        if memory is None:
            rank = mpi.Get_rank()
            return mapped, f"{transport}: rank {rank} cannot map rank {peer}'s {what} ({files[peer][0]}): not this host"
        mapped[peer] = memory
    return mapped, None


def release(own: NodeMemory | None, mapped: dict[int, NodeMemory]) -> None:
    """Unmap the peers' memories ``mapped`` and close this rank's ``own`` (its file's name removed first, where it
    is still there): what a channel of node memory holds, let go (the caller forgets both)."""
    for memory in mapped.values():
        memory.close()
    if own is not None:
        own.forget_name()
        own.close()
