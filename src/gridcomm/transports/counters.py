"""Rows of counters in host memory that the ranks of one node share (node_memory.NodeMemory): one int64 per rank
of the communicator, each in a cache line of its own, that a rank's peers write into and it polls (shm's arrivals
and acknowledgements, cma's "ready" and "done"). Read and written through memoryviews, not NumPy: ``min()`` of 16
counters takes 0.5 µs against NumPy's 1.1, a store 30 ns against 45.

A number stored after the data it announces is seen after that data only where the processor keeps stores in
order for the other cores: x86-64 does (glibc's ``memcpy`` fences its non-temporal stores); other processors do
not, and there the transports that signal so say they cannot (``store_order_reason``).
"""

from __future__ import annotations

import platform

import numpy as np

from .node_memory import NodeMemory

LINE = 64  # bytes between two counters: each in a cache line of its own, so that two writers never share one
PAGE = 4096
NEVER = 2**63 - 1  # the counter of a rank that is not a peer: never behind
ORDERED_STORES = ("x86_64", "amd64", "i386", "i686")


def store_order_reason(what: str, instead: str) -> str | None:
    """None on a processor that keeps stores in order for the other cores, else why ``what`` cannot rely on it
    and what to use ``instead``."""
    machine = platform.machine().lower()
    if machine in ORDERED_STORES:
        return None
    return (
        f"{what} orders its counters after the data by the store order of x86-64, which this {machine} "
        f"processor does not keep; use {instead}"
    )


def rows_bytes(size: int, rows: int = 2) -> int:
    """Bytes of ``rows`` rows of ``size`` counters, rounded up to a page."""
    return -(-rows * size * LINE // PAGE) * PAGE


def row(memory: NodeMemory, index: int, size: int) -> memoryview:
    """Row ``index`` of the counters at the start of ``memory``: ``size`` int64, one per rank."""
    start = index * size * LINE
    return memoryview(memory.array[start : start + size * LINE]).cast("q")[:: LINE // 8]


def watched(counters: memoryview, peers: list[int]) -> tuple[memoryview, int]:
    """The part of a row of ``counters`` from the first of ``peers`` to the last, and that first rank; the ranks in
    between that are not peers set never behind. No peers: a row of one counter that is never behind. (A poll
    then reads no more of the row than the peers span: a node's ranks of a large job.)"""
    if not peers:
        return memoryview(np.array([NEVER], dtype=np.int64)).cast("B").cast("q"), 0
    first, last = min(peers), max(peers)
    for rank in set(range(first, last + 1)) - set(peers):
        counters[rank] = NEVER
    return counters[first : last + 1], first
