"""CUDA graphs of a whole step that keep the priorities of the streams they were captured from.

A step that overlaps its communication with its compute puts the communication on a stream of the highest
priority, so that its small kernels are scheduled between the blocks of a running compute kernel instead of
after all of them. Stream capture copies each kernel's stream priority into its node, but a graph instantiated
without CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY (as CuPy's ``Stream.end_capture()`` does) runs every node
at the priority of the stream it is launched into: the overlap the eager step has is lost in its graph.
``capture`` instantiates with that flag (a driver call, CUDA 11.7 and later), and falls back to CuPy's
instantiation, without the priorities, where the driver refuses it.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from .device import libcuda

Result = TypeVar("Result")
log = logging.getLogger(__name__)

#: CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY (cuda.h).
USE_NODE_PRIORITY = 8


class Graph:
    """An executable CUDA graph made by ``capture``; ``launch(stream)`` replays it, as CuPy's Graph does.

    Attributes:
        keeps_priorities: whether its kernels run at the priorities of the streams they were captured from
            (else at the priority of the stream each launch is enqueued on).
    """

    def __init__(self, handle: int, keeps_priorities: bool) -> None:
        self._handle = handle
        self.keeps_priorities = keeps_priorities

    def launch(self, stream: Any = None) -> None:
        """Enqueue one replay on ``stream`` (a CuPy stream; None: the current stream)."""
        import cupy

        if not self._handle:
            raise RuntimeError("this CUDA graph was closed")
        stream = stream if stream is not None else cupy.cuda.get_current_stream()
        cupy.cuda.runtime.graphLaunch(self._handle, stream.ptr)

    def close(self) -> None:
        """Free the graph now (a replay already enqueued still runs)."""
        handle, self._handle = self._handle, 0
        if handle:
            import cupy

            cupy.cuda.runtime.graphExecDestroy(handle)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # the CUDA context may already be gone at interpreter exit
            self.close()


def capture(stream: Any, work: Callable[[], Result], *, node_priorities: bool = True) -> tuple[Graph, Result]:
    """Run ``work()`` while ``stream`` (a CuPy stream, not the legacy default one) records it, in CuPy's relaxed
    capture mode; return the graph of what it enqueued and what ``work()`` returned. Nothing runs on the GPU.

    With ``node_priorities`` each kernel keeps the priority of the stream it was captured from, its own or one
    that work forked to through events (a whole overlapped step); without, the graph runs at the priority of the
    stream each launch is enqueued on (a phase launched on one stream or another). If ``work()`` raises, the
    capture is ended and that error re-raised. Host callbacks (``launch_host_func``) cannot be captured here.
    """
    import cupy

    runtime = cupy.cuda.runtime
    stream.begin_capture()
    try:
        result = work()
    except BaseException:
        try:
            graph = runtime.streamEndCapture(stream.ptr)
        except Exception:  # the capture was invalidated: no graph to free
            pass
        else:
            if graph:
                runtime.graphDestroy(graph)
        raise
    graph = runtime.streamEndCapture(stream.ptr)
    try:
        return _instantiate(graph, node_priorities), result
    finally:
        runtime.graphDestroy(graph)


def _instantiate(graph: int, node_priorities: bool) -> Graph:
    handle = ctypes.c_void_p()
    instantiate = _instantiate_with_flags() if node_priorities else None
    if instantiate is not None:
        status = instantiate(ctypes.byref(handle), ctypes.c_void_p(graph), USE_NODE_PRIORITY)
        if status == 0:
            return Graph(handle.value or 0, keeps_priorities=True)
        log.info("cuGraphInstantiateWithFlags refused node priorities (CUresult %d): the graph runs at the "
                 "priority of the stream it is launched into", status)  # fmt: skip
    elif node_priorities:
        log.info("no cuGraphInstantiateWithFlags in this driver: the graph runs at its launch stream's priority")
    import cupy

    return Graph(cupy.cuda.runtime.graphInstantiate(graph), keeps_priorities=False)


@functools.cache
def _instantiate_with_flags() -> Any:
    """cuGraphInstantiateWithFlags, or None where the driver has no such call."""
    try:
        call = libcuda().cuGraphInstantiateWithFlags
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_ulonglong]
    call.restype = ctypes.c_int
    return call
