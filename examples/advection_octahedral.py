"""Your own scheme on an unstructured mesh: a tracer carried around the sphere by a solid-body rotation, first-order
upwind on the median-dual mesh of the octahedral grid, partitioned over the ranks, one halo exchange per step.

    mpiexec -n 4 python examples/advection_octahedral.py [--quick] [--cpu] [--grid O96]

gridcomm.grids gives the mesh (MedianDualMesh), a partition into compact parts (equal_regions) and each part's
local mesh with one halo layer (LocalMesh: owned nodes first, then the halo); UnstructuredDecomposition turns the
owned and halo node ids into an exchange pattern. The scheme is the few lines of ``Upwind``. Each node sums its
edges' fluxes in ascending global edge id on any part (the node-to-edge table of gridcomm.lab.apps.mpdata), every other
operation is elementwise, so rank 0's serial run must agree bit for bit. Arrays are CuPy on a GPU (one rank per
GPU), NumPy otherwise; the tracer has a few levels, which travel with each node in the same messages.
"""

from __future__ import annotations

import math
import types
from typing import Any

import numpy as np
from common import parser, say, time_per_step, usable_cupy, verdict

import gridcomm
from gridcomm.grids import LocalMesh, MedianDualMesh, equal_regions
from gridcomm.lab.apps.mpdata import node_edge_table

DAY_S = 86400.0
COURANT = 0.9  # upwind is stable while no cell sends out more than it holds in a step


def rotation_fluxes(mesh: MedianDualMesh, alpha: float) -> np.ndarray:
    """Volume flux (m^2/s) through each edge's dual face, from node i to node j, of a solid-body rotation once in 12
    days about an axis tilted by ``alpha`` from the pole. The wind is k x grad(s) for the stream function
    s = -u0 R (axis . x), so the flux through a face is the difference of s at its ends (the centroids of the
    triangles either side): the fluxes out of every cell sum to zero, and the tracer's mass is kept to round-off."""
    u0 = 2.0 * math.pi * mesh.radius / (12.0 * DAY_S)
    stream = -u0 * mesh.radius * (mesh.centroids @ np.array([-math.sin(alpha), 0.0, math.cos(alpha)]))
    left, right = mesh.edge_triangles.T
    return stream[right] - stream[left]


def bell(mesh: MedianDualMesh, levels: int) -> np.ndarray:
    """A cosine bell of radius R/3 on the equator at longitude 270 degrees, (nodes, levels), k + 1 high on level k."""
    r = np.arccos(np.clip(mesh.xyz @ np.array([0.0, -1.0, 0.0]), -1.0, 1.0))  # great-circle distance, in units of R
    height = np.where(r < 1.0 / 3.0, 0.5 * (1.0 + np.cos(3.0 * math.pi * r)), 0.0)
    return height[:, None] * np.arange(1, levels + 1)


class Upwind:
    """One part's upwind step: psi_i -= dt / A_i * sum over its edges of s_ie F_e, with the donor-cell flux
    F_e = [V_e]+ psi_i + [V_e]- psi_j and s_ie = +1 where i is the edge's first node, -1 where it is the second."""

    def __init__(self, local: LocalMesh, fluxes: np.ndarray, dt: float, levels: int, xp: types.ModuleType) -> None:
        edge_tab, sign_tab, _ = node_edge_table(local)  # (degree, owned nodes): padding has sign 0
        owned = local.halo_layer[local.edge_nodes] == 0
        on = xp.asarray
        self.n_owned = local.n_owned
        self.i, self.j = on(local.edge_nodes[:, 0]), on(local.edge_nodes[:, 1])
        self.v_out, self.v_in = on(np.maximum(fluxes, 0.0)[:, None]), on(np.minimum(fluxes, 0.0)[:, None])
        self.edge_tab, self.sign_tab = on(edge_tab), on(sign_tab[:, :, None])
        self.dt_area = on(dt / local.dual_volumes[: local.n_owned, None])
        self.inner = on(np.flatnonzero(owned.all(axis=1)))  # edges with both ends owned: no halo value needed
        self.outer = on(np.flatnonzero(~owned.all(axis=1)))
        self.flux = xp.zeros((local.n_edges, levels))

    def fluxes(self, psi: Any, edges: Any) -> None:
        i, j = self.i[edges], self.j[edges]
        self.flux[edges] = self.v_out[edges] * psi[i] + self.v_in[edges] * psi[j]

    def update(self, psi: Any) -> None:
        divergence = self.flux[self.edge_tab[0]] * self.sign_tab[0]
        for k in range(1, len(self.edge_tab)):  # slot by slot: every node adds its edges in the same order anywhere
            divergence += self.flux[self.edge_tab[k]] * self.sign_tab[k]
        psi[: self.n_owned] -= self.dt_area * divergence


def serial_run(mesh: MedianDualMesh, fluxes: np.ndarray, dt: float, psi0: np.ndarray, steps: int, xp: Any) -> Any:
    whole = LocalMesh.serial(mesh)
    upwind = Upwind(whole, fluxes[whole.edge_ids], dt, psi0.shape[1], xp)
    psi = xp.asarray(psi0[whole.global_ids])
    everything = xp.arange(whole.n_edges)
    for _ in range(steps):
        upwind.fluxes(psi, everything)
        upwind.update(psi)
    by_id = xp.empty_like(psi)
    by_id[xp.asarray(whole.global_ids)] = psi  # the serial part's own node order back to global ids
    return by_id


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--grid", help="octahedral grid (default: O24 with --quick, else O96)")
    options.add_argument("--levels", type=int, default=4, help="tracer levels (default 4)")
    options.add_argument("--steps", type=int, help="time steps (default: 40 with --quick, else one revolution)")
    options.add_argument("--alpha", type=float, default=math.pi / 4, help="tilt of the rotation axis, radians")
    args = options.parse_args()
    comm = gridcomm.Communicator()
    xp = (None if args.cpu else usable_cupy()) or np
    device = "the CPU" if xp is np else f"GPU {gridcomm.use_local_gpu(comm)}"

    # Every rank builds the whole mesh (cheap next to the run) and takes its own part of it.
    mesh = MedianDualMesh(args.grid or ("O24" if args.quick else "O96"))
    fluxes = rotation_fluxes(mesh, args.alpha)
    # The volume each cell sends out per second: upwind stays stable while dt * outflow <= its volume.
    i, j = mesh.edges.T
    out_of_i, out_of_j = np.maximum(fluxes, 0.0), np.maximum(-fluxes, 0.0)
    outflow = np.bincount(i, out_of_i, mesh.n_nodes) + np.bincount(j, out_of_j, mesh.n_nodes)
    dt = COURANT * float(np.min(mesh.dual_volumes / outflow))
    steps = args.steps or (40 if args.quick else math.ceil(12.0 * DAY_S / dt))
    local = LocalMesh.build(mesh, equal_regions(mesh, comm.size), comm.rank, layers=1)
    decomposition = gridcomm.UnstructuredDecomposition(comm, local.owned_ids, local.halo_ids)

    psi0 = bell(mesh, args.levels)
    psi = xp.asarray(psi0[local.global_ids])  # (owned + halo nodes, levels), the rows the decomposition expects
    upwind = Upwind(local, fluxes[local.edge_ids], dt, args.levels, xp)
    with gridcomm.HaloExchanger(decomposition, [psi]) as halos:

        def step() -> None:
            handle = halos.start()
            # Reads owned nodes only, so it may run while the halo is in flight (on the GPU it is enqueued after the
            # exchange on the same stream: heat3d.py shows the exchange on a stream of its own).
            upwind.fluxes(psi, upwind.inner)
            handle.wait()
            upwind.fluxes(psi, upwind.outer)
            upwind.update(psi)

        sync = xp.cuda.Device().synchronize if xp is not np else None
        seconds = time_per_step(comm, steps, step, sync)
        transport = halos.transport.name
    final = decomposition.gather(psi)
    sizes = comm.mpi.gather((local.n_owned, local.n_halo, len(decomposition.pattern().peers)))
    devices = sorted(set(comm.mpi.allgather(device)))
    say(
        comm,
        f"advection_octahedral: {mesh.grid.name}: {mesh.n_nodes} nodes, {mesh.n_edges} edges, {args.levels} levels, "
        f"over {comm.size} rank(s) (owned, halo, peers per rank: {sizes})",
        f"advection_octahedral: {xp.__name__} float64 arrays on {', '.join(devices)}; exchange over {transport!r}",
        f"advection_octahedral: {steps} steps of {dt:.0f} s ({steps * dt / (12 * DAY_S):.2f} revolutions), "
        f"{seconds * 1e3:.3f} ms per step (slowest rank)",
    )
    ok = None
    if comm.rank == 0:
        reference = serial_run(mesh, fluxes, dt, psi0, steps, xp)
        reference = reference.get() if xp is not np else reference
        area = mesh.dual_volumes[:, None]
        drift = abs(float((area * final).sum() / (area * psi0).sum()) - 1.0)
        say(comm, f"advection_octahedral: peak 1 -> {final[:, 0].max():.4f} (upwind smears), mass drift {drift:.1e}")
        ok = np.array_equal(final, reference) and drift < 1e-12
    verdict(comm, "advection_octahedral", ok, "gathered tracer vs the serial run on rank 0, bit for bit; mass kept")


if __name__ == "__main__":
    main()
