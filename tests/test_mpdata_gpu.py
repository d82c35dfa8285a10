"""MPDATA on the GPU (CUDA kernels, exchanges, graphs) against the NumPy run on the CPU; and, on the CPU, the
tables the kernels read (node-to-edge ordering, the split of nodes for overlapping exchanges, bytes counted).

The CUDA kernels are compiled without fused multiply-adds and do NumPy's operations in NumPy's order (see
mpdata.cu), so the GPU's values equal the CPU's exactly: the tests use np.array_equal (which counts -0.0 and
0.0 as equal: the sign of a zero may differ where a max or min picks one of two zeros), no tolerance.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from conftest import run_mpi
from gpu_support import gpu_count, needs_gpus
from gridcomm.grids import LocalMesh, MedianDualMesh, equal_regions
from gridcomm.lab.apps.mpdata import MeshTables, node_edge_table, setup_mpdata
from gridcomm.lab.apps.mpdata.cuda_kernels import (
    KernelShape,
    common_degree,
    edge_codes,
    kernel_shape,
    run_start,
    slot_table,
)
from gridcomm.lab.bench.mpdata import kernel_bytes

PROGRAM = Path(__file__).resolve().parent / "mpi_programs" / "mpdata_ranks.py"
needs_gpu = needs_gpus(1)


# -- CPU: the tables ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("nparts", [1, 3])
def test_node_edge_table_lists_each_nodes_edges_in_global_order(nparts):
    mesh = MedianDualMesh(8)
    owner = equal_regions(mesh, nparts)
    local = LocalMesh.build(mesh, owner, nparts - 1, layers=2)
    edges, signs, others = node_edge_table(local)
    gids = local.global_ids
    for u, node in enumerate(local.update_nodes):
        real = signs[:, u] != 0
        k = int(real.sum())
        assert real[:k].all() and not real[k:].any(), "padding comes last"
        mine = mesh.node_edge_ids[mesh.node_edge_offsets[gids[node]] : mesh.node_edge_offsets[gids[node] + 1]]
        assert (local.edge_ids[edges[:k, u]] == mine).all(), "the node's edges, ascending global id"
        ends = local.edge_nodes[edges[:k, u]]
        assert (np.where(signs[:k, u] > 0, ends[:, 0], ends[:, 1]) == node).all(), "+1 where the node is i"
        assert (np.where(signs[:k, u] > 0, ends[:, 1], ends[:, 0]) == others[:k, u]).all()
        assert (others[k:, u] == node).all(), "padding points back at the node"


def test_inner_nodes_read_owned_values_only():
    mesh = MedianDualMesh(8)
    owner = equal_regions(mesh, 4)
    local = LocalMesh.build(mesh, owner, 1, layers=2)
    t = MeshTables.build(local, np.zeros(local.n_edges), np.zeros((local.n_edges, 3)), 1.0, 2)
    assert len(np.union1d(t.inner, t.outer)) == t.n_update and not len(np.intersect1d(t.inner, t.outer))
    owned = local.halo_layer == 0
    assert owned[t.update_nodes[t.inner]].all() and owned[t.other_tab[:, t.inner]].all()
    reads_halo = ~owned[t.update_nodes[t.outer]] | ~owned[t.other_tab[:, t.outer]].all(axis=0)
    assert reads_halo.all()
    assert 0 < len(t.inner) < local.n_owned
    ends_owned = owned[local.edge_nodes].all(axis=1)
    assert ends_owned[t.inner_edges].all() and not ends_owned[t.outer_edges].any()
    assert len(t.inner_edges) + len(t.outer_edges) == local.n_edges
    # the inner nodes' edges are all inner: their fluxes are ready before the exchange ends
    assert np.isin(t.edge_tab[:, t.inner], t.inner_edges).all()


def test_kernel_bytes_count_each_field_value_once():
    """On one part (V nodes, E edges, no halo) with L levels, in values per level: the upwind pass reads psi and
    writes psi1 (2V); the gradient reads psi1 and writes 3 components (4V); the fluxes read psi1 and the gradient
    and write one value per edge (4V + E); the bounds read psi, psi1 and the fluxes and write 2 (4V + E); the
    limited corrective pass reads psi1, the fluxes, both betas and writes psi (4V + E; 2V + E unlimited). Tables
    and edge data come on top, at most a few hundred bytes per node."""
    mesh = MedianDualMesh(6)
    local = LocalMesh.serial(mesh)
    levels = 16
    t = MeshTables.build(local, np.zeros(local.n_edges), np.zeros((local.n_edges, 3)), 1.0, levels)
    nodes, edges = np.arange(t.n_update), np.arange(local.n_edges)
    V, E = mesh.n_nodes, mesh.n_edges
    expected = {"upwind": 2 * V, "gradient": 4 * V, "fluxes": 4 * V + E, "bounds": 4 * V + E, "corrective": 4 * V + E}
    for phase, values in expected.items():
        field_bytes = 8 * values * levels
        total = kernel_bytes(t, phase, edges if phase == "fluxes" else nodes)
        assert field_bytes < total < field_bytes + 400 * V, phase
    unlimited = kernel_bytes(t, "corrective", nodes, limit=False)
    assert 8 * (2 * V + E) * levels < unlimited < kernel_bytes(t, "corrective", nodes)
    assert kernel_bytes(t, "upwind", nodes[:0]) == 0
    with pytest.raises(ValueError, match="unknown phase"):
        kernel_bytes(t, "sideways", nodes)


def test_graphs_need_the_gpu_and_xp_must_be_an_array_module():
    with pytest.raises(ValueError, match="needs the GPU"):
        setup_mpdata(None, "O4", graphs=True)
    with pytest.raises(ValueError, match="pass the array module, numpy"):
        setup_mpdata(None, "O4", xp="torch")


# -- GPU -------------------------------------------------------------------------------------------------------


def _cpu_and_gpu(grid: str, steps: int, **options) -> tuple[np.ndarray, np.ndarray]:
    import cupy

    on_cpu = {k: v for k, v in options.items() if k not in ("graphs", "levels_per_thread")}
    cpu = setup_mpdata(None, grid, alpha=math.pi / 4, **on_cpu)
    cpu.solver.run(steps)
    gpu = setup_mpdata(None, grid, alpha=math.pi / 4, xp=cupy, **options)
    gpu.solver.run(steps)
    gpu.solver.synchronize()
    result = gpu.solver.psi.get()
    gpu.solver.close()
    return cpu.solver.psi, result


def _equal_or_report(cpu: np.ndarray, gpu: np.ndarray) -> None:
    if not np.array_equal(cpu, gpu):
        diff = np.abs(cpu - gpu)
        raise AssertionError(
            f"GPU differs from CPU: max |diff| {diff.max():.3e} (max |psi| {np.abs(cpu).max():.3e}) at "
            f"{np.argwhere(diff > 0)[:5].tolist()} of {diff.size} values, {int((diff > 0).sum())} differ"
        )


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("grid", ["O32", "O64"])
@pytest.mark.parametrize(("fct", "iterations"), [(True, 1), (False, 1), (True, 0)], ids=["fct", "no-fct", "upwind"])
def test_gpu_equals_cpu(grid, fct, iterations):
    _equal_or_report(*_cpu_and_gpu(grid, 12, levels=4, fct=fct, iterations=iterations))


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize(("levels", "per_thread"), [(1, 1), (3, 1), (6, 2), (8, 4), (8, None)])
def test_gpu_equals_cpu_for_every_levels_per_thread(levels, per_thread):
    _equal_or_report(*_cpu_and_gpu("O32", 8, levels=levels, levels_per_thread=per_thread))


@pytest.mark.gpu
@needs_gpu
def test_gpu_graph_replays_equal_cpu():
    _equal_or_report(*_cpu_and_gpu("O32", 10, levels=2, graphs=True))


@pytest.mark.gpu
@needs_gpu
def test_gpu_levels_per_thread_must_divide_the_levels():
    import cupy

    with pytest.raises(ValueError, match="divide the level count 3"):
        setup_mpdata(None, "O8", levels=3, xp=cupy, levels_per_thread=2)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("nranks", [1, 2])
def test_gpu_ranks_equal_serial_cpu(nranks):
    """Every GPU transport (ranks share the GPU where there are fewer GPUs: nccl is then left out), the host
    round trip, and graphs with ipc, nccl and no exchange, against the serial NumPy run."""
    rc, out = run_mpi(nranks, [str(PROGRAM), "O32", "8", "4", "--gpu"], timeout=600)
    assert rc == 0 and f"MPDATA-RANKS OK {nranks}" in out, out[-6000:]


@pytest.mark.gpu
@needs_gpu
def test_gpu_graphs_refuse_a_transport_that_needs_the_host():
    rc, out = run_mpi(1, ["-c", GRAPH_REFUSAL], timeout=300)
    assert rc == 0 and "REFUSED" in out, out[-4000:]


GRAPH_REFUSAL = """
import cupy, gridcomm
from gridcomm.lab.apps.mpdata import setup_mpdata
try:
    setup_mpdata(gridcomm.Communicator(), "O8", xp=cupy, transport="staged", graphs=True)
except ValueError as error:
    assert "ipc" in str(error) and "nccl" in str(error), error
    print("REFUSED")
"""


@pytest.mark.gpu
@needs_gpus(2)
def test_gpu_two_ranks_on_two_gpus_run_nccl():
    assert gpu_count() >= 2
    rc, out = run_mpi(2, [str(PROGRAM), "O64", "6", "2", "--gpu"], timeout=600)
    assert rc == 0 and "MPDATA-RANKS OK 2" in out, out[-6000:]


def test_edge_codes_fold_each_slots_sign_into_its_edge():
    """mpdata.cu decodes a slot as (code >> 2, tag 1: +1, tag 2: -1, tag 0: padding, sign 0)."""
    edge_tab = np.array([[0, 5], [7, 5]])
    sign_tab = np.array([[1.0, -1.0], [-1.0, 0.0]])
    codes = edge_codes(edge_tab, sign_tab)
    assert (codes >> 2 == edge_tab).all()
    tags = codes & 3
    assert (np.select([tags == 1, tags == 2], [1.0, -1.0], 0.0) == sign_tab).all()
    with pytest.raises(ValueError, match="2\\^29"):
        edge_codes(np.array([[2**29]]), np.array([[1.0]]))


def test_run_start_finds_one_contiguous_run_only():
    assert run_start(np.arange(4, 9)) == 4
    assert run_start(np.array([3])) == 3
    assert run_start(np.array([1, 2, 4])) == -1
    assert run_start(np.array([2, 1, 0, 3])) == -1  # same span, not ascending
    assert run_start(np.array([], int)) == -1


def test_slot_table_pairs_each_slots_code_with_its_other_node_in_whole_16_byte_rows():
    edge_tab = np.array([[0, 5], [7, 5], [2, 5]])
    sign_tab = np.array([[1.0, -1.0], [-1.0, 0.0], [1.0, 0.0]])
    other_tab = np.array([[3, 1], [4, 1], [6, 1]])
    table = slot_table(edge_tab, sign_tab, other_tab)
    assert table.shape == (2, 4, 2) and table.dtype == np.int32 and table.nbytes % (2 * 16) == 0
    assert (table[:, :3, 0] == edge_codes(edge_tab, sign_tab).T).all()
    assert (table[:, :3, 1] == other_tab.T).all()
    assert (table[:, 3] == 0).all(), "the slot that rounds a row up to even is padding"


def test_common_degree_covers_nearly_every_node():
    signs = np.zeros((7, 1000))
    signs[:6] = 1.0
    signs[6, :5] = -1.0  # 5 nodes of 1000 have a 7th edge
    assert common_degree(signs) == 6
    signs[6, :20] = -1.0  # 2 %: the 7th slot is common
    assert common_degree(signs) == 7
    signs[5, 500:] = 0.0  # half the nodes have 5 edges: 6 still covers 98 %
    assert common_degree(signs, share=0.97) == 6
    assert common_degree(np.zeros((0, 0))) == 1


def test_kernel_shape_halves_levels_per_thread_until_it_divides_the_levels():
    assert kernel_shape("upwind", 32, 4).levels_per_thread == 4
    assert kernel_shape("upwind", 6, 4).levels_per_thread == 2
    assert kernel_shape("bounds", 3).levels_per_thread == 1
    shape = kernel_shape("fluxes", 32)
    assert isinstance(shape, KernelShape) and shape.blocks_per_sm >= 1 and shape.items_per_thread >= 1
