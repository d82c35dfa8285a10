// MPDATA's step on the GPU (apps/mpdata/cuda_kernels.py): four node kernels, each one pass over a list of nodes.
//
// Fields are C-contiguous (nodes, levels) float64, levels the fast axis. Every node sum runs over the padded
// node-to-edge table of the update nodes, (degree, pitch) row-major: slot k of update position u holds a local
// edge, its sign (+1 where u is the edge's first node, -1 where the second, 0 in padding) and the node at the
// other end (u's own node in padding). A node's sum thus needs no atomics and adds the same terms in the same
// order as the NumPy path (numpy_kernels.py); compiled with --fmad=false, every operation below is the NumPy
// path's operation in the NumPy path's order, so results equal the CPU's (to the sign of a zero).
//
// A thread does LEVELS_PER_THREAD neighbouring levels of one node (vector loads of double2 where that is even):
// the node's table entries and edge coefficients are loaded once for all of them. The upwind pass recomputes
// an edge's flux at both its ends (two products and a sum: cheaper than storing it); the antidiffusive fluxes,
// with a division each, are computed once per edge (gridcomm_mpdata_fluxes) and read by both ends.
//
// The slot loops are unrolled over DEGREE, the table's width, known when the kernels are compiled: the loads of
// all slots are then in flight together. An edge's two ends are the node itself, whose values are loaded once,
// and the slot's other node; the sign says which is first.
#ifndef LEVELS_PER_THREAD
#define LEVELS_PER_THREAD 1
#endif
#ifndef DEGREE
#define DEGREE 7
#endif
#define LPT LEVELS_PER_THREAD
#define EPS 1e-15  // as scheme.EPS: guards MPDATA's and FCT's ratios where a field and its fluxes vanish

struct Vec {
    double v[LPT];
};

__device__ __forceinline__ Vec load(const double* __restrict__ p)
{
    Vec r;
#if LPT % 2 == 0
#pragma unroll
    for (int t = 0; t < LPT; t += 2) {
        const double2 d = __ldg(reinterpret_cast<const double2*>(p + t));
        r.v[t] = d.x;
        r.v[t + 1] = d.y;
    }
#else
#pragma unroll
    for (int t = 0; t < LPT; ++t) r.v[t] = __ldg(p + t);
#endif
    return r;
}

__device__ __forceinline__ void store(double* __restrict__ p, const Vec& a)
{
#if LPT % 2 == 0
#pragma unroll
    for (int t = 0; t < LPT; t += 2) *reinterpret_cast<double2*>(p + t) = make_double2(a.v[t], a.v[t + 1]);
#else
#pragma unroll
    for (int t = 0; t < LPT; ++t) p[t] = a.v[t];
#endif
}

// The thread's work item: position `u` in the node list and the offset of its first level in a field.
struct Item {
    int u;
    int level;
};

__device__ __forceinline__ bool item_of(unsigned int index, unsigned int count, int levels, Item& item)
{
    const unsigned int chunks = levels / LPT;
    if (index >= count * chunks) return false;
    item.u = index / chunks;
    item.level = (index - item.u * chunks) * LPT;
    return true;
}

__device__ __forceinline__ const double* at(const double* f, long long node, int levels, int level)
{
    return f + node * levels + level;
}

// The node-to-edge table and the per-edge data every kernel reads (passed as separate arguments, MESH_ARGS,
// since a kernel launch from CuPy takes arrays and scalars only, and gathered into one struct by MESH).
struct Mesh {
    const int* update_nodes;  // (n_update,) local node of each update position
    const int* edge_tab;      // (DEGREE, pitch) local edge of slot k of update position u
    const double* sign_tab;   // (DEGREE, pitch)
    const int* other_tab;     // (DEGREE, pitch)
    int pitch;
    const double* dt_area;    // (n_update,) dt / dual volume, s / m^2
};
#define MESH_ARGS                                                                                                  \
    const int *__restrict__ update_nodes, const int *__restrict__ edge_tab, const double *__restrict__ sign_tab, \
        const int *__restrict__ other_tab, int pitch, const double *__restrict__ dt_area
#define MESH const Mesh mesh{update_nodes, edge_tab, sign_tab, other_tab, pitch, dt_area}

// (first, second) end of an edge from the node's value and the other end's: the node is first where s > 0.
__device__ __forceinline__ double first_end(double s, double own, double other) { return s > 0.0 ? own : other; }
__device__ __forceinline__ double second_end(double s, double own, double other) { return s > 0.0 ? other : own; }

// Upwind pass: psi1[u] = psi[u] - dt/A_u sum_k s_k (V+ psi_i + V- psi_j) over u's edges, for update positions
// nodes[0 .. count).
extern "C" __global__ void gridcomm_mpdata_upwind(
    const double* __restrict__ psi, double* __restrict__ psi1, const int* __restrict__ nodes, unsigned int count,
    MESH_ARGS, const double* __restrict__ vpos, const double* __restrict__ vneg, int levels)
{
    MESH;
    Item it;
    if (!item_of(blockIdx.x * blockDim.x + threadIdx.x, count, levels, it)) return;
    const int u = __ldg(nodes + it.u);
    const long long node = __ldg(mesh.update_nodes + u);
    const Vec own = load(at(psi, node, levels, it.level));
    Vec total;
#pragma unroll
    for (int k = 0; k < DEGREE; ++k) {
        const int e = __ldg(mesh.edge_tab + k * mesh.pitch + u);
        const double s = __ldg(mesh.sign_tab + k * mesh.pitch + u), vp = __ldg(vpos + e), vn = __ldg(vneg + e);
        const Vec other = load(at(psi, __ldg(mesh.other_tab + k * mesh.pitch + u), levels, it.level));
#pragma unroll
        for (int t = 0; t < LPT; ++t) {
            const double pi = first_end(s, own.v[t], other.v[t]), pj = second_end(s, own.v[t], other.v[t]);
            const double term = (vp * pi + vn * pj) * s;
            total.v[t] = k == 0 ? term : total.v[t] + term;
        }
    }
    const double dta = __ldg(mesh.dt_area + u);
#pragma unroll
    for (int t = 0; t < LPT; ++t) total.v[t] = own.v[t] - dta * total.v[t];
    store(psi1 + node * levels + it.level, total);
}

// Green-Gauss gradient of psi1 on owned nodes (update positions = local nodes 0 .. count), tangent to the
// sphere: g = (1/A) sum_k (psi1_other - psi1_u)/2 n_k, then minus its radial part (g . r) r.
// normal_tab is (DEGREE, 3, owned) (face normals signed out of the node); grad is (3, n_local, levels).
extern "C" __global__ void gridcomm_mpdata_gradient(
    const double* __restrict__ psi1, double* __restrict__ grad, unsigned int count, MESH_ARGS,
    const double* __restrict__ normal_tab, const double* __restrict__ area, const double* __restrict__ radial,
    long long field_stride, int levels)
{
    MESH;
    Item it;
    if (!item_of(blockIdx.x * blockDim.x + threadIdx.x, count, levels, it)) return;
    const int u = it.u;
    const Vec own = load(at(psi1, u, levels, it.level));
    Vec g[3];
#pragma unroll
    for (int k = 0; k < DEGREE; ++k) {
        const Vec other = load(at(psi1, __ldg(mesh.other_tab + k * mesh.pitch + u), levels, it.level));
        const double* n = normal_tab + (long long)k * 3 * count + u;
#pragma unroll
        for (int c = 0; c < 3; ++c) {
            const double nc = __ldg(n + c * (long long)count);
#pragma unroll
            for (int t = 0; t < LPT; ++t) {
                const double half_diff = 0.5 * (other.v[t] - own.v[t]);
                g[c].v[t] = k == 0 ? half_diff * nc : g[c].v[t] + half_diff * nc;
            }
        }
    }
    const double a = __ldg(area + u), r0 = __ldg(radial + 3 * u), r1 = __ldg(radial + 3 * u + 1);
    const double r2 = __ldg(radial + 3 * u + 2);
#pragma unroll
    for (int t = 0; t < LPT; ++t) {
        const double g0 = g[0].v[t] / a, g1 = g[1].v[t] / a, g2 = g[2].v[t] / a;
        const double along = g0 * r0 + g1 * r1 + g2 * r2;
        g[0].v[t] = g0 - along * r0;
        g[1].v[t] = g1 - along * r1;
        g[2].v[t] = g2 - along * r2;
    }
#pragma unroll
    for (int c = 0; c < 3; ++c) store(grad + c * field_stride + (long long)u * levels + it.level, g[c]);
}

// The antidiffusive flux of every edge in edges[0 .. count) on every level, flux (n_edges, levels), from |V|, dt V
// and the wind at the edge's midpoint (3 components) per edge: the upwind flux
// of psi1 with MPDATA's pseudo-velocity (|V| (psi1_j - psi1_i) - dt V v . grad psi1) / (|psi1_i| + |psi1_j| + eps),
// grad psi1 the mean of its ends' gradients. Stored once per edge, then read by both its ends in the FCT bounds
// and the corrective update (recomputing it there took 4 times the arithmetic and a quarter of the occupancy).
extern "C" __global__ void gridcomm_mpdata_fluxes(
    const double* __restrict__ psi1, const double* __restrict__ grad, double* __restrict__ flux,
    const int* __restrict__ edges, unsigned int count, const int* __restrict__ edge_i, const int* __restrict__ edge_j,
    const double* __restrict__ vabs, const double* __restrict__ vdt, const double* __restrict__ wind0,
    const double* __restrict__ wind1, const double* __restrict__ wind2, long long field_stride, int levels)
{
    Item it;
    if (!item_of(blockIdx.x * blockDim.x + threadIdx.x, count, levels, it)) return;
    const int e = __ldg(edges + it.u);
    const long long i = __ldg(edge_i + e), j = __ldg(edge_j + e);
    const double* g1 = grad + field_stride;
    const double* g2 = grad + 2 * field_stride;
    const Vec pi = load(at(psi1, i, levels, it.level)), pj = load(at(psi1, j, levels, it.level));
    const Vec g0i = load(at(grad, i, levels, it.level)), g0j = load(at(grad, j, levels, it.level));
    const Vec g1i = load(at(g1, i, levels, it.level)), g1j = load(at(g1, j, levels, it.level));
    const Vec g2i = load(at(g2, i, levels, it.level)), g2j = load(at(g2, j, levels, it.level));
    const double va = __ldg(vabs + e), vd = __ldg(vdt + e), w0 = __ldg(wind0 + e), w1 = __ldg(wind1 + e);
    const double w2 = __ldg(wind2 + e);
    Vec out;
#pragma unroll
    for (int t = 0; t < LPT; ++t) {
        const double wind_grad =
            0.5 * (w0 * (g0i.v[t] + g0j.v[t]) + w1 * (g1i.v[t] + g1j.v[t]) + w2 * (g2i.v[t] + g2j.v[t]));
        const double pseudo = (va * (pj.v[t] - pi.v[t]) - vd * wind_grad) / (fabs(pi.v[t]) + fabs(pj.v[t]) + EPS);
        out.v[t] = fmax(pseudo, 0.0) * pi.v[t] + fmin(pseudo, 0.0) * pj.v[t];
    }
    store(flux + (long long)e * levels + it.level, out);
}

// FCT limiter coefficients of update positions nodes[0 .. count): the bounds of psi and psi1 over the node
// and its neighbours, the sums of the antidiffusive fluxes out of and into the node, and from them
// beta_up = (max - psi1) / (dt/A inflow + eps), beta_dn = (psi1 - min) / (dt/A outflow + eps).
extern "C" __global__ void gridcomm_mpdata_bounds(
    const double* __restrict__ psi, const double* __restrict__ psi1, const double* __restrict__ flux,
    double* __restrict__ beta_up, double* __restrict__ beta_dn, const int* __restrict__ nodes, unsigned int count,
    MESH_ARGS, int levels)
{
    MESH;
    Item it;
    if (!item_of(blockIdx.x * blockDim.x + threadIdx.x, count, levels, it)) return;
    const int u = __ldg(nodes + it.u);
    const long long node = __ldg(mesh.update_nodes + u);
    const Vec p = load(at(psi, node, levels, it.level)), p1 = load(at(psi1, node, levels, it.level));
    Vec high, low, outflow, inflow;
#pragma unroll
    for (int t = 0; t < LPT; ++t) {
        high.v[t] = fmax(p.v[t], p1.v[t]);
        low.v[t] = fmin(p.v[t], p1.v[t]);
        outflow.v[t] = 0.0;
        inflow.v[t] = 0.0;
    }
#pragma unroll
    for (int k = 0; k < DEGREE; ++k) {
        const long long o = __ldg(mesh.other_tab + k * mesh.pitch + u);
        const long long e = __ldg(mesh.edge_tab + k * mesh.pitch + u);
        const double s = __ldg(mesh.sign_tab + k * mesh.pitch + u);
        const Vec q = load(at(psi, o, levels, it.level)), q1 = load(at(psi1, o, levels, it.level));
        const Vec f = load(at(flux, e, levels, it.level));
#pragma unroll
        for (int t = 0; t < LPT; ++t) {
            high.v[t] = fmax(high.v[t], fmax(q.v[t], q1.v[t]));
            low.v[t] = fmin(low.v[t], fmin(q.v[t], q1.v[t]));
            const double out = f.v[t] * s;
            outflow.v[t] += fmax(out, 0.0);
            inflow.v[t] += fmin(out, 0.0);
        }
    }
    const double dta = __ldg(mesh.dt_area + u);
    Vec up, dn;
#pragma unroll
    for (int t = 0; t < LPT; ++t) {
        up.v[t] = (high.v[t] - p1.v[t]) / (dta * -inflow.v[t] + EPS);
        dn.v[t] = (p1.v[t] - low.v[t]) / (dta * outflow.v[t] + EPS);
    }
    store(beta_up + node * levels + it.level, up);
    store(beta_dn + node * levels + it.level, dn);
}

// The corrective update of owned nodes (update positions = local nodes 0 .. count): psi = psi1 - dt/A sum_k s_k
// F_k over the antidiffusive fluxes, each scaled (limit != 0) by min(1, beta_dn of its sender, beta_up of its
// receiver).
extern "C" __global__ void gridcomm_mpdata_corrective(
    double* __restrict__ psi, const double* __restrict__ psi1, const double* __restrict__ flux,
    const double* __restrict__ beta_up, const double* __restrict__ beta_dn, unsigned int count, MESH_ARGS,
    int limit, int levels)
{
    MESH;
    Item it;
    if (!item_of(blockIdx.x * blockDim.x + threadIdx.x, count, levels, it)) return;
    const int u = it.u;
    Vec own_up, own_dn;
    if (limit) {
        own_up = load(at(beta_up, u, levels, it.level));
        own_dn = load(at(beta_dn, u, levels, it.level));
    }
    Vec total;
#pragma unroll
    for (int k = 0; k < DEGREE; ++k) {
        const long long e = __ldg(mesh.edge_tab + k * mesh.pitch + u);
        const double s = __ldg(mesh.sign_tab + k * mesh.pitch + u);
        Vec f = load(at(flux, e, levels, it.level));
        if (limit) {
            const long long o = __ldg(mesh.other_tab + k * mesh.pitch + u);
            const Vec other_up = load(at(beta_up, o, levels, it.level)), other_dn = load(at(beta_dn, o, levels, it.level));
#pragma unroll
            for (int t = 0; t < LPT; ++t) {
                const double up_i = first_end(s, own_up.v[t], other_up.v[t]);
                const double up_j = second_end(s, own_up.v[t], other_up.v[t]);
                const double dn_i = first_end(s, own_dn.v[t], other_dn.v[t]);
                const double dn_j = second_end(s, own_dn.v[t], other_dn.v[t]);
                const double scale = f.v[t] >= 0.0 ? fmin(dn_i, up_j) : fmin(up_i, dn_j);
                f.v[t] *= fmin(scale, 1.0);
            }
        }
#pragma unroll
        for (int t = 0; t < LPT; ++t) {
            const double term = f.v[t] * s;
            total.v[t] = k == 0 ? term : total.v[t] + term;
        }
    }
    const Vec p1 = load(at(psi1, u, levels, it.level));
    const double dta = __ldg(mesh.dt_area + u);
#pragma unroll
    for (int t = 0; t < LPT; ++t) total.v[t] = p1.v[t] - dta * total.v[t];
    store(psi + (long long)u * levels + it.level, total);
}
