"""A silent peer: GridcommTimeout on the rank that waits, then the exchange completes once the peer joins.

Run on exactly 2 ranks. Rank 1 stays out of the exchange until rank 0 tells it (over the check's own
communicator) that it has seen its timeout; so the only timing in here is the timeout being measured.
"""

from __future__ import annotations

import time

import numpy as np
from harness import TRANSPORTS, assert_everywhere, ranks

from gridcomm import CartesianDecomposition, GridcommError, GridcommTimeout, HaloExchanger

RELEASE_TAG = 4242
TIMEOUT_S = 1.0


def _field(d):
    f = d.zeros(np.int64)
    d.interior(f)[...] = 10 * (d.comm.rank + 1) + np.arange(d.interior_shape[0])
    return f


def _right(d, f) -> str | None:
    # 1-D, 8 points over 2 ranks, halo 1, not periodic: rank 0 holds 10..13 and gets 20 on its right;
    # rank 1 holds 20..23 and gets 13 on its left. The outer halo cells stay 0.
    expect = {0: [0, 10, 11, 12, 13, 20], 1: [13, 20, 21, 22, 23, 0]}[d.comm.rank]
    return None if f.tolist() == expect else f"local array {f.tolist()}, expected {expect}"


def release(comm, sender: int = 0) -> None:
    """``sender`` tells the other rank of two that it is done."""
    comm.send("go", dest=1 - sender, tag=RELEASE_TAG)


def await_release(comm, sender: int = 0) -> None:
    """Wait (politely, for at most a minute) until ``sender`` says it is done."""
    request = comm.irecv(source=sender, tag=RELEASE_TAG)
    start = time.monotonic()
    while not request.test()[0]:
        if time.monotonic() - start > 60:
            raise RuntimeError(f"rank {sender} never released rank {1 - sender}")
        time.sleep(0.001)


def describe_timeout(exc: BaseException, seconds: float) -> list[str]:
    problems = []
    if not isinstance(exc, GridcommTimeout):
        return [f"wait() raised {type(exc).__name__}: {exc}, expected GridcommTimeout"]
    if not TIMEOUT_S <= seconds < TIMEOUT_S + 4:
        problems.append(f"GridcommTimeout after {seconds:.2f} s with timeout={TIMEOUT_S}")
    if exc.rank != 0 or tuple(exc.peers) != (1,) or exc.elapsed < TIMEOUT_S:
        problems.append(f"attributes rank={exc.rank} peers={exc.peers} elapsed={exc.elapsed}")
    if "halo exchange" not in exc.operation:
        problems.append(f"operation {exc.operation!r} does not say 'halo exchange'")
    text = str(exc)
    for words in ("rank 0", "halo exchange", "rank(s) 1", "timed out"):
        if words not in text:
            problems.append(f"message lacks {words!r}: {text}")
    return problems


def wait_expecting_timeout(handle, name: str) -> list[str]:
    """Rank 0's wait() on an exchange rank 1 never started: the problems with the timeout it must raise."""
    start = time.perf_counter()
    try:
        handle.wait()
        return [f"{name}: wait() returned although rank 1 never started the exchange"]
    except Exception as exc:
        return [f"{name}: {p}" for p in describe_timeout(exc, time.perf_counter() - start)]


@ranks(only=[2])
def check_timeout_names_rank_and_peer_then_completes(comm):
    """Rank 0 exchanges with timeout=1 while rank 1 stays away: GridcommTimeout within a few seconds,
    naming rank 0, peer 1 and the halo exchange; rank 1 then joins and rank 0's second wait() completes,
    with the right data on both ranks."""
    problems = []
    for name, transport in TRANSPORTS.items():
        d = CartesianDecomposition(comm, (8,), halo=1)
        f = _field(d)
        ex = HaloExchanger(d, f, transport, timeout=TIMEOUT_S if comm.Get_rank() == 0 else None, on_timeout="raise")
        if comm.Get_rank() == 0:
            handle = ex.start()
            try:
                problems += wait_expecting_timeout(handle, name)
            finally:
                release(comm)
            start = time.perf_counter()
            handle.wait()
            if time.perf_counter() - start > 10:
                problems.append(f"{name}: the second wait() took {time.perf_counter() - start:.1f} s")
        else:
            await_release(comm)
            ex.exchange()
        if p := _right(d, f):
            problems.append(f"{name}: {p}")
        ex.close()
        d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)


@ranks(only=[2])
def check_timeout_propagates_out_of_a_with_block(comm):
    """A GridcommTimeout raised inside ``with HaloExchanger(...)`` must reach the caller as GridcommTimeout
    (the exchanger's __exit__ must not replace it with another error)."""
    problems = []
    for name, transport in TRANSPORTS.items():
        d = CartesianDecomposition(comm, (8,), halo=1)
        f = _field(d)
        ex = HaloExchanger(
            d, f, transport, timeout=TIMEOUT_S if comm.Get_rank() == 0 else None, on_timeout="raise"
        )  # collective
        if comm.Get_rank() == 0:
            handle = None
            try:
                with ex:
                    handle = ex.start()
                    handle.wait()
                problems.append(f"{name}: no exception although rank 1 never started the exchange")
            except GridcommTimeout:
                pass
            except GridcommError as exc:
                problems.append(
                    f"{name}: the with block raised {type(exc).__name__}({exc}) instead of the "
                    f"GridcommTimeout raised inside it (context: {exc.__context__!r})"
                )
            finally:
                release(comm)
            handle.wait()  # completes now that rank 1 takes part
            ex.close()
        else:
            await_release(comm)
            with ex:
                ex.exchange()
        if p := _right(d, f):
            problems.append(f"{name}: {p}")
        d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)


@ranks(only=[2])
def check_shm_sender_times_out_on_a_receiver_that_never_unpacks(comm):
    """shm writes into its receivers' buffers, so before a rank packs the next exchange it waits until they have
    unpacked the last one. Rank 1 starts an exchange and stays away from its wait(): rank 0 completes that
    exchange, and its next start() raises GridcommTimeout naming rank 1 (nothing is overwritten); once rank 1
    has waited, both go on and every exchange is right."""
    problems = []
    d = CartesianDecomposition(comm, (8,), halo=1)
    f = _field(d)
    ex = HaloExchanger(d, f, "shm", timeout=TIMEOUT_S if comm.Get_rank() == 0 else None, on_timeout="raise")
    if comm.Get_rank() == 0:
        ex.exchange()  # rank 1 has started its side: its data is in
        begun = time.perf_counter()
        try:
            ex.start()
            problems.append("the next start() returned although rank 1 had not unpacked the last exchange")
        except GridcommTimeout as exc:
            problems += describe_timeout(exc, time.perf_counter() - begun)
            if "have not unpacked" not in exc.operation or "halo exchange #1 " not in exc.operation:
                problems.append(f"the timeout does not say what rank 1 has not done: {exc}")
        except Exception as exc:
            problems.append(f"start() raised {type(exc).__name__}: {exc}, expected GridcommTimeout")
        finally:
            release(comm)
        ex.exchange()
    else:
        handle = ex.start()
        await_release(comm)
        handle.wait()
        ex.exchange()
    if p := _right(d, f):
        problems.append(p)
    ex.close()
    d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)
