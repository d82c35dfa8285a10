"""Pinned host memory shared by the processes of one node: a staged transfer's inbox that its senders copy into.

The owner creates a file of ``/dev/shm`` (its space reserved at once, so that a full ``/dev/shm`` is an error
here and not a SIGBUS later), maps it and registers it with CUDA; the processes that write into it map and
register it too, then the owner removes the file (``forget_name``): the memory lives while a process maps it and
goes when the last one exits, crashed or not, with nothing left behind. A process of another host cannot open the
file, so a sender learns that a peer is on its node by mapping the peer's inbox.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import uuid

import numpy as np

FOLDER = "/dev/shm"


class NodeMemory:
    """``nbytes`` of host memory mapped here from a file of ``FOLDER``, pinned for CUDA copies.

    Use ``create`` (the owner) or ``open`` (a peer of the same node); ``array`` is a uint8 view, ``address`` its
    first byte. ``close()`` unregisters and unmaps it (the views must be gone by then)."""

    def __init__(self, path: str, nbytes: int, create: bool) -> None:
        import cupy

        self.path, self.nbytes = path, nbytes
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
        try:
            cupy.cuda.runtime.hostRegister(self.address, nbytes, 0)
        except Exception:
            self.array = None
            self._map.close()
            if create:
                os.unlink(path)
            raise

    @classmethod
    def create(cls, nbytes: int) -> NodeMemory | None:
        """New shared memory owned by this process, or None where ``FOLDER`` is missing or has too little room
        (a container's small /dev/shm) or CUDA will not pin it: the caller then stages through MPI."""
        try:
            room = os.statvfs(FOLDER)
            if room.f_bavail * room.f_frsize < nbytes:
                return None
            return cls(os.path.join(FOLDER, f"gridcomm-{uuid.uuid4().hex}"), nbytes, create=True)
        except Exception:  # OSError, or CUDA refusing to pin it
            return None

    @classmethod
    def open(cls, path: str, nbytes: int) -> NodeMemory | None:
        """A peer's shared memory mapped here, or None where it cannot be (another host, no room to pin)."""
        try:
            return cls(path, nbytes, create=False)
        except Exception:  # OSError (not on this host), or CUDA refusing to register it
            return None

    def forget_name(self) -> None:
        """Remove the file (the owner, once its peers have mapped it): the memory stays while mapped."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def close(self) -> None:
        import cupy

        if self.array is None:
            return
        cupy.cuda.runtime.hostUnregister(self.address)
        self.array = None
        with contextlib.suppress(BufferError):  # a view still held elsewhere: unmapped when the last one goes
            self._map.close()
