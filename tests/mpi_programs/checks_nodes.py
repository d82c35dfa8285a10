"""A transport per group of peers: the peers on a rank's node and the others, each served by its own transport.

Run with ``GRIDCOMM_RANKS_PER_NODE=k`` (tests/test_mpi.py), which makes gridcomm treat ranks [0, k), [k, 2k), ...
as separate nodes when it picks transports, so that one host tests what runs across nodes. Every exchange is
compared bit for bit with the serial reference; the exchanger says which transport serves each peer.
"""

from __future__ import annotations

import os

import numpy as np
from harness import (
    ON_GPU,
    HaloExchanger,
    assert_everywhere,
    assert_raises_everywhere,
    cell_bytes,
    describe_mismatch,
    expected_cells,
    local_with_sentinel,
    random_global,
    ranks,
)

import gridcomm
from gridcomm import CartesianDecomposition, DecompositionError, TransportError, Transposer
from gridcomm.transports import MpiTransport

K = int(os.environ.get("GRIDCOMM_RANKS_PER_NODE") or 0)


def _decomposition(comm: gridcomm.Communicator) -> CartesianDecomposition:
    """A 1-D ring of the ranks (each rank's two neighbours: one on its node and one beyond it, for k = 2)."""
    return CartesianDecomposition(comm, (3 * comm.size + 1, 5, 4), halo=1, periodic=True, proc_grid=(comm.size, 1, 1))


def _exchanged(d: CartesianDecomposition, transport, seed: int) -> tuple[dict[int, str], str | None, str]:
    """(the transport of each peer, a mismatch with the serial reference or None, the exchanger's transport)."""
    g = random_global(d.global_shape, "float64", seed)
    f = local_with_sentinel(d, g)
    with HaloExchanger(d, f, transport) as ex:
        ex.exchange()
        served, name = ex.transports, ex.transport.name
    return served, describe_mismatch(f, expected_cells(g, d.global_slices, d.halo, d.periodic, d.stencil)), name


def _same_node(comm: gridcomm.Communicator, peer: int) -> bool:
    return comm.nodes[peer] == comm.nodes[comm.rank]


def check_declared_nodes(comm):
    """Communicator.nodes numbers the declared nodes: rank r is on node r // k (every rank on one host here)."""
    with gridcomm.Communicator(comm) as gc:
        want = tuple(r // K for r in range(gc.size)) if K else (0,) * gc.size
        assert_everywhere(comm, None if gc.nodes == want else f"nodes {gc.nodes}, expected {want}")


@ranks(minimum=2)
def check_auto_serves_each_group_with_its_own(comm):
    """auto: the peers on this node go through a transport of the node or any other, those beyond it through
    one that crosses nodes; the exchange is right, and the exchanger names both where there are two groups."""
    problems = []
    with gridcomm.Communicator(comm) as gc:
        d = _decomposition(gc)
        served, mismatch, name = _exchanged(d, "auto", 3)
        if mismatch:
            problems.append(f"auto ({name}): {mismatch}")
        node_only = {"ipc"} if ON_GPU else {"cma"}
        for peer, transport in served.items():
            if not _same_node(gc, peer) and transport in node_only:
                problems.append(f"peer {peer} on another node is served by {transport}, which reaches one node only")
        several = (
            len(set(gc.nodes)) > 1
            and any(_same_node(gc, p) for p in served)
            and any(not _same_node(gc, p) for p in served)
        )
        if several and "+" not in name and len(set(served.values())) > 1:
            problems.append(f"two transports serve the peers ({served}) but the exchanger says {name!r}")
        d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)


@ranks(minimum=2)
def check_a_mapping_names_each_groups_transport(comm):
    """{"node": ..., "network": ...}: each group's transport as given (a name, a configured one); right results."""
    problems = []
    node, network = ("ipc", "nccl") if ON_GPU else ("cma", MpiTransport(method="neighbor"))
    with gridcomm.Communicator(comm) as gc:
        d = _decomposition(gc)
        served, mismatch, _ = _exchanged(d, {"node": node, "network": network}, 4)
        if mismatch:
            problems.append(f"mapping: {mismatch}")
        for peer, transport in served.items():
            want = node if _same_node(gc, peer) or len(set(gc.nodes)) == 1 else network
            want = want if isinstance(want, str) else want.name
            if transport != want:
                problems.append(f"peer {peer} served by {transport}, expected {want}")
        d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)


@ranks(minimum=2)
def check_benchmarks_mix_each_node_transport_with_each_network_one(comm):
    """transports.mixes (what bench alltoall times beside the single transports on several nodes): none on one
    node; across nodes every pair of a transport of one node and one that crosses them, and each moves the
    exchange right."""
    from gridcomm.transports import kind, mixes

    problems = []
    with gridcomm.Communicator(comm) as gc:
        found = mixes(gc, ON_GPU)
        if len(set(gc.nodes)) == 1:
            problems += [f"mixes on one node: {found}"] if found else []
        elif not found:
            problems.append("no mix across the declared nodes")
        d = _decomposition(gc)
        for label, mapping in found.items():
            if label != f"{mapping['node']}+{mapping['network']}" or kind(mapping["node"]).reach != "node":
                problems.append(f"{label}: {mapping}")
            _, mismatch, name = _exchanged(d, mapping, 5)
            problems += [f"{label} ({name}): {mismatch}"] if mismatch else []
        d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)


def check_bad_mappings_are_refused_on_every_rank(comm):
    """A reach that is not "node" or "network", an unknown transport, and (across declared nodes) a transport of
    one node for the network group or for every peer: TransportError on every rank, saying why."""
    with gridcomm.Communicator(comm) as gc:
        d = _decomposition(gc)
        f = d.zeros(np.float64)
        assert_raises_everywhere(comm, lambda: HaloExchanger(d, f, {"galaxy": "mpi"}), TransportError, "galaxy")
        assert_raises_everywhere(comm, lambda: HaloExchanger(d, f, {"node": "smoke"}), TransportError, "unknown")
        if len(set(gc.nodes)) > 1 and not ON_GPU:
            assert_raises_everywhere(comm, lambda: HaloExchanger(d, f, {"network": "cma"}), TransportError, "one node")
            assert_raises_everywhere(comm, lambda: HaloExchanger(d, f, "cma"), TransportError, "other nodes")
        d.comm.close()


@ranks(minimum=2)
def check_node_sizes_that_differ_between_ranks_are_refused(comm):
    """GRIDCOMM_RANKS_PER_NODE set differently on one rank: DecompositionError on every rank."""
    saved = os.environ.get("GRIDCOMM_RANKS_PER_NODE")
    os.environ["GRIDCOMM_RANKS_PER_NODE"] = "1" if comm.Get_rank() == 0 else str(comm.Get_size())
    try:
        with gridcomm.Communicator(comm) as gc:
            assert_raises_everywhere(comm, lambda: gc.nodes, DecompositionError, "different node sizes")
    finally:
        if saved is None:
            os.environ.pop("GRIDCOMM_RANKS_PER_NODE")
        else:
            os.environ["GRIDCOMM_RANKS_PER_NODE"] = saved


@ranks(minimum=2)
def check_transposer_per_peer(comm):
    """An all-to-all of the ranks' blocks with auto: each peer served by its group's transport, every block right."""
    problems = []
    with gridcomm.Communicator(comm) as gc:
        n, p, r = 3, gc.size, gc.rank
        xp = np
        if ON_GPU:
            import cupy as xp
        source = xp.asarray(np.arange(n * p * 4, dtype=np.float64).reshape(n * p, 4) + 1000 * r)
        destination = xp.zeros_like(source)
        with Transposer.from_counts(gc, [n] * p, None, [n] * p, None, source, destination) as t:
            t.exchange()
            served = t.transports
        got = np.asarray(destination.get() if ON_GPU else destination).reshape(p, n, 4)
        for q in range(p):
            want = np.arange(n * p * 4, dtype=np.float64).reshape(n * p, 4)[r * n : r * n + n] + 1000 * q
            if not np.array_equal(got[q], want):
                problems.append(f"the block from rank {q} ({served.get(q, 'own')}) is wrong")
        node_only = {"ipc"} if ON_GPU else {"cma"}
        problems += [f"peer {q} on another node served by {t}" for q, t in served.items()
                     if t in node_only and not _same_node(gc, q)]  # fmt: skip
    assert_everywhere(comm, "\n".join(problems) or None)


@ranks(minimum=2)
def check_only_one_group_moves_its_peers_halos(comm):
    """exchanger.only(reach): the exchanges in the block move only that group's peers (the halo facing a peer of
    the other group keeps what it held), bit for bit; a block of each group in turn gives the whole exchange; a
    group the exchanger does not have is an ArgumentError naming it (host fields; on the GPU the benchmarks
    time the groups alone)."""
    if ON_GPU:
        return
    problems = []
    with gridcomm.Communicator(comm) as gc:
        one_node = len(set(gc.nodes)) == 1

        def group_of(peer: int) -> str:
            return "all" if one_node else "node" if _same_node(gc, peer) else "network"

        d = _decomposition(gc)
        g = random_global(d.global_shape, "float64", 5)
        f = local_with_sentinel(d, g)
        before = f.copy()
        want = expected_cells(g, d.global_slices, d.halo, d.periodic, d.stencil)
        # The ring's neighbours along axis 0: the halo slab on each side comes from that one rank alone.
        sides = ((slice(0, 1), (gc.rank - 1) % gc.size), (slice(-1, None), (gc.rank + 1) % gc.size))
        moved: set[str] = set()
        with gridcomm.HaloExchanger(d, f, {"node": "cma", "network": "mpi"}) as ex:
            if ex.reaches != (("all",) if one_node else ("node", "network") if K > 1 else ("network",)):
                problems.append(f"groups {ex.reaches}")
            for reach in ex.reaches:
                with ex.only(reach):
                    ex.exchange()
                moved.add(reach)
                for side, peer in sides:  # as cell bytes, as expected_cells gives them
                    expected = want[side] if group_of(peer) in moved else cell_bytes(before)[side]
                    if not np.array_equal(cell_bytes(f)[side], expected):
                        problems.append(f"after only({reach!r}): the halo facing rank {peer} is wrong")
            if p := describe_mismatch(f, want):
                problems.append(f"after each group alone: {p}")
            missing = next(r for r in ("node", "network", "all") if r not in ex.reaches)
            assert_raises_everywhere(comm, lambda: ex.only(missing).__enter__(), gridcomm.ArgumentError, missing)
        d.comm.close()
    assert_everywhere(comm, "\n".join(problems) or None)


def check_a_mapping_binds_a_plan_with_no_peers(comm):
    """A transposition where every rank keeps its own block (no rank has a peer), with a mapping whose "node"
    transport reaches one node: it binds on every rank however the ranks are spread over nodes (nothing crosses
    them), and each rank's block lands."""
    node = "ipc" if ON_GPU else "cma"
    problems = []
    with gridcomm.Communicator(comm) as gc:
        xp = np
        if ON_GPU:
            import cupy as xp
        p, r = gc.size, gc.rank
        counts = [3 if q == r else 0 for q in range(p)]
        source = xp.asarray(np.arange(12, dtype=np.float64).reshape(3, 4) + 100 * r)
        destination = xp.zeros_like(source)
        try:
            with Transposer.from_counts(gc, counts, None, counts, None, source, destination, {"node": node}) as t:
                t.exchange()
        except TransportError as error:
            problems.append(f"refused: {error}")
        else:
            got = np.asarray(destination.get() if ON_GPU else destination)
            if not np.array_equal(got, np.asarray(source.get() if ON_GPU else source)):
                problems.append("the rank's own block did not land")
    assert_everywhere(comm, "\n".join(problems) or None)
