// MPDATA's step on the GPU (apps/mpdata/cuda_kernels.py): four node kernels and one edge kernel, each one pass over
// a list of nodes or edges.
//
// Fields are C-contiguous (nodes, levels) float64, levels the fast axis. Every node sum runs over the padded
// node-to-edge table of the update nodes, (degree, pitch) row-major: slot k of update position u holds a local
// edge and its sign in one int (edge * 4 + 1 where u is the edge's first node, sign +1; edge * 4 + 2 where the
// second, sign -1; tag 0 in padding, sign 0: one load instead of two), and the node at the other end (u's own
// node in padding). A node's sum thus needs no atomics and adds the same terms in the same
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
//
// The kernels are latency-bound gathers, so every dependent load removed from the chain before the field loads
// counts: a list of positions that is one contiguous run (every part on one rank, the usual inner part) is
// passed as its first entry (`first` >= 0) instead of read from memory, and an owned update position is its
// own local node (owned nodes come first), so only halo positions read update_nodes.
#ifndef LEVELS_PER_THREAD
#define LEVELS_PER_THREAD 1
#endif
#ifndef DEGREE
#define DEGREE 7
#endif
#ifndef PREFETCH
#define PREFETCH 0  // 1: fetch a thread's next item's table row ahead (for_each_item)
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1  // blocks of THREADS per SM the register allocation must allow (__launch_bounds__)
#endif
#define THREADS 256
#define KERNEL extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
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

__device__ __forceinline__ const double* at(const double* f, long long node, int levels, int level)
{
    return f + node * levels + level;
}

// The node-to-edge table and the per-edge data every kernel reads (passed as separate arguments, MESH_ARGS,
// since a kernel launch from CuPy takes arrays and scalars only, and gathered into one struct by MESH).
struct Mesh {
    const int* update_nodes;  // (n_update,) local node of each update position
    const int* edge_tab;      // (DEGREE, pitch) local edge * 4 + sign tag of slot k of update position u
    const int* other_tab;     // (DEGREE, pitch)
    int pitch;
    int n_owned;              // update positions below are owned nodes, their own local node
    const double* dt_area;    // (n_update,) dt / dual volume, s / m^2

    __device__ __forceinline__ long long node(int u) const { return u < n_owned ? u : __ldg(update_nodes + u); }
};
#define MESH_ARGS                                                                                                  \
    const int *__restrict__ update_nodes, const int *__restrict__ edge_tab, const int *__restrict__ other_tab, \
        int pitch, int n_owned, const double *__restrict__ dt_area
#define MESH const Mesh mesh{update_nodes, edge_tab, other_tab, pitch, n_owned, dt_area}

// A slot's local edge and sign.
struct Slot {
    int edge;
    double sign;
};

// Entry i of a list of positions (or edges): the list's `first` + i where it is one contiguous run, else read.
__device__ __forceinline__ int entry(const int* __restrict__ list, int first, int i)
{
    return first >= 0 ? first + i : __ldg(list + i);
}

// A node item's table row: its update position, and each slot's edge code and other node.
struct NodeRow {
    int u;
    int code[DEGREE];
    int other[DEGREE];

    // Slot k's local edge and sign.
    __device__ __forceinline__ Slot slot(int k) const
    {
        const int tag = code[k] & 3;
        return Slot{code[k] >> 2, tag == 1 ? 1.0 : (tag == 2 ? -1.0 : 0.0)};
    }
};

// The row of entry i of a list of update positions (nodes = nullptr, first = 0: position i itself).
__device__ __forceinline__ NodeRow node_row(const Mesh& mesh, const int* __restrict__ nodes, int first, int i)
{
    NodeRow r;
    r.u = entry(nodes, first, i);
#pragma unroll
    for (int k = 0; k < DEGREE; ++k) {
        r.code[k] = __ldg(mesh.edge_tab + k * mesh.pitch + r.u);
        r.other[k] = __ldg(mesh.other_tab + k * mesh.pitch + r.u);
    }
    return r;
}

// An edge item's row: the local edge and its two nodes.
struct EdgeRow {
    int e;
    int i;
    int j;
};

// Runs body(row, level) for each of this thread's items: item = (list entry, LPT levels from `level`), the
// thread's first item its global index, then every gridDim.x * blockDim.x-th (the host launches the kernel's
// items per thread of cuda_kernels.KERNEL_SHAPES). The kernels' loads form chains (list entry,
// table row, then the fields the row names); with PREFETCH the next item's row is fetched before the current
// item's field loads, so that the two chains overlap, at the cost of the registers that hold it.
template <class Row, class Fetch, class Body>
__device__ __forceinline__ void for_each_item(unsigned int count, int levels, Fetch fetch, Body body)
{
    const unsigned long long chunks = levels / LPT, total = count * chunks, stride = gridDim.x * blockDim.x;
    unsigned long long index = blockIdx.x * blockDim.x + threadIdx.x;
    if (index >= total) return;
    Row row = fetch(int(index / chunks));
    for (;;) {
        const unsigned long long next = index + stride;
        const bool more = next < total;
        Row ahead;
        if (PREFETCH && more) ahead = fetch(int(next / chunks));
        body(row, int(index % chunks) * LPT);
        if (!more) return;
        index = next;
        row = PREFETCH ? ahead : fetch(int(index / chunks));
    }
}

// (first, second) end of an edge from the node's value and the other end's: the node is first where s > 0.
__device__ __forceinline__ double first_end(double s, double own, double other) { return s > 0.0 ? own : other; }
__device__ __forceinline__ double second_end(double s, double own, double other) { return s > 0.0 ? other : own; }

// Upwind pass: psi1[u] = psi[u] - dt/A_u sum_k s_k (V+ psi_i + V- psi_j) over u's edges, for update positions
// nodes[0 .. count).
// V+ = max(V, 0) and V- = min(V, 0) are worked out here from V (exactly, as NumPy's maximum and minimum do).
KERNEL gridcomm_mpdata_upwind(
    const double* __restrict__ psi, double* __restrict__ psi1, const int* __restrict__ nodes, int first,
    unsigned int count, MESH_ARGS, const double* __restrict__ volume_flux, int levels)
{
    MESH;
    const auto fetch = [&](int i) { return node_row(mesh, nodes, first, i); };
    for_each_item<NodeRow>(count, levels, fetch, [&](const NodeRow& row, int level) {
        const long long node = mesh.node(row.u);
        const Vec own = load(at(psi, node, levels, level));
        Vec total;
#pragma unroll
        for (int k = 0; k < DEGREE; ++k) {
            const Slot sl = row.slot(k);
            const double s = sl.sign, v = __ldg(volume_flux + sl.edge), vp = fmax(v, 0.0), vn = fmin(v, 0.0);
            const Vec other = load(at(psi, row.other[k], levels, level));
#pragma unroll
            for (int t = 0; t < LPT; ++t) {
                const double pi = first_end(s, own.v[t], other.v[t]), pj = second_end(s, own.v[t], other.v[t]);
                const double term = (vp * pi + vn * pj) * s;
                total.v[t] = k == 0 ? term : total.v[t] + term;
            }
        }
        const double dta = __ldg(mesh.dt_area + row.u);
#pragma unroll
        for (int t = 0; t < LPT; ++t) total.v[t] = own.v[t] - dta * total.v[t];
        store(psi1 + node * levels + level, total);
    });
}

// Green-Gauss gradient of psi1 on owned nodes (update positions = local nodes 0 .. count), tangent to the
// sphere: g = (1/A) sum_k (psi1_other - psi1_u)/2 n_k, then minus its radial part (g . r) r.
// normals is (n_edges, 3), each edge's face normal from its first node to its second, signed here out of the
// node (times the slot's sign: exact, the same values as the NumPy path's table); grad is (3, n_local, levels).
KERNEL gridcomm_mpdata_gradient(
    const double* __restrict__ psi1, double* __restrict__ grad, unsigned int count, MESH_ARGS,
    const double* __restrict__ normals, const double* __restrict__ area, const double* __restrict__ radial,
    long long field_stride, int levels)
{
    MESH;
    const auto fetch = [&](int i) { return node_row(mesh, nullptr, 0, i); };
    for_each_item<NodeRow>(count, levels, fetch, [&](const NodeRow& row, int level) {
        const int u = row.u;
        const Vec own = load(at(psi1, u, levels, level));
        Vec g[3];
#pragma unroll
        for (int k = 0; k < DEGREE; ++k) {
            const Slot sl = row.slot(k);
            const Vec other = load(at(psi1, row.other[k], levels, level));
            const double* n = normals + 3 * (long long)sl.edge;
#pragma unroll
            for (int c = 0; c < 3; ++c) {
                const double nc = __ldg(n + c) * sl.sign;
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
        for (int c = 0; c < 3; ++c) store(grad + c * field_stride + (long long)u * levels + level, g[c]);
    });
}

// The antidiffusive flux of every edge in edges[0 .. count) on every level, flux (n_edges, levels), from |V|, dt V
// and the wind at the edge's midpoint (3 components) per edge: the upwind flux
// of psi1 with MPDATA's pseudo-velocity (|V| (psi1_j - psi1_i) - dt V v . grad psi1) / (|psi1_i| + |psi1_j| + eps),
// grad psi1 the mean of its ends' gradients. Stored once per edge, then read by both its ends in the FCT bounds
// and the corrective update (recomputing it there took 4 times the arithmetic and a quarter of the occupancy).
KERNEL gridcomm_mpdata_fluxes(
    const double* __restrict__ psi1, const double* __restrict__ grad, double* __restrict__ flux,
    const int* __restrict__ edges, int first, unsigned int count, const int* __restrict__ edge_i,
    const int* __restrict__ edge_j,
    const double* __restrict__ vabs, const double* __restrict__ vdt, const double* __restrict__ wind0,
    const double* __restrict__ wind1, const double* __restrict__ wind2, long long field_stride, int levels)
{
    const auto fetch = [&](int n) {
        const int e = entry(edges, first, n);
        return EdgeRow{e, __ldg(edge_i + e), __ldg(edge_j + e)};
    };
    const double* g1 = grad + field_stride;
    const double* g2 = grad + 2 * field_stride;
    for_each_item<EdgeRow>(count, levels, fetch, [&](const EdgeRow& row, int level) {
        const int e = row.e, i = row.i, j = row.j;
        const Vec pi = load(at(psi1, i, levels, level)), pj = load(at(psi1, j, levels, level));
        const Vec g0i = load(at(grad, i, levels, level)), g0j = load(at(grad, j, levels, level));
        const Vec g1i = load(at(g1, i, levels, level)), g1j = load(at(g1, j, levels, level));
        const Vec g2i = load(at(g2, i, levels, level)), g2j = load(at(g2, j, levels, level));
        const double va = __ldg(vabs + e), vd = __ldg(vdt + e), w0 = __ldg(wind0 + e), w1 = __ldg(wind1 + e);
        const double w2 = __ldg(wind2 + e);
        Vec out;
#pragma unroll
        for (int t = 0; t < LPT; ++t) {
            const double wind_grad =
                0.5 * (w0 * (g0i.v[t] + g0j.v[t]) + w1 * (g1i.v[t] + g1j.v[t]) + w2 * (g2i.v[t] + g2j.v[t]));
            const double pseudo =
                (va * (pj.v[t] - pi.v[t]) - vd * wind_grad) / (fabs(pi.v[t]) + fabs(pj.v[t]) + EPS);
            out.v[t] = fmax(pseudo, 0.0) * pi.v[t] + fmin(pseudo, 0.0) * pj.v[t];
        }
        store(flux + (long long)e * levels + level, out);
    });
}

// FCT limiter coefficients of update positions nodes[0 .. count): the bounds of psi and psi1 over the node
// and its neighbours, the sums of the antidiffusive fluxes out of and into the node, and from them
// beta_up = (max - psi1) / (dt/A inflow + eps), beta_dn = (psi1 - min) / (dt/A outflow + eps).
KERNEL gridcomm_mpdata_bounds(
    const double* __restrict__ psi, const double* __restrict__ psi1, const double* __restrict__ flux,
    double* __restrict__ beta_up, double* __restrict__ beta_dn, const int* __restrict__ nodes, int first,
    unsigned int count, MESH_ARGS, int levels)
{
    MESH;
    const auto fetch = [&](int i) { return node_row(mesh, nodes, first, i); };
    for_each_item<NodeRow>(count, levels, fetch, [&](const NodeRow& row, int level) {
        const long long node = mesh.node(row.u);
        const Vec p = load(at(psi, node, levels, level)), p1 = load(at(psi1, node, levels, level));
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
            const long long o = row.other[k];
            const Slot sl = row.slot(k);
            const double s = sl.sign;
            const Vec q = load(at(psi, o, levels, level)), q1 = load(at(psi1, o, levels, level));
            const Vec f = load(at(flux, sl.edge, levels, level));
#pragma unroll
            for (int t = 0; t < LPT; ++t) {
                high.v[t] = fmax(high.v[t], fmax(q.v[t], q1.v[t]));
                low.v[t] = fmin(low.v[t], fmin(q.v[t], q1.v[t]));
                const double out = f.v[t] * s;
                outflow.v[t] += fmax(out, 0.0);
                inflow.v[t] += fmin(out, 0.0);
            }
        }
        const double dta = __ldg(mesh.dt_area + row.u);
        Vec up, dn;
#pragma unroll
        for (int t = 0; t < LPT; ++t) {
            up.v[t] = (high.v[t] - p1.v[t]) / (dta * -inflow.v[t] + EPS);
            dn.v[t] = (p1.v[t] - low.v[t]) / (dta * outflow.v[t] + EPS);
        }
        store(beta_up + node * levels + level, up);
        store(beta_dn + node * levels + level, dn);
    });
}

// The corrective update of owned nodes (update positions = local nodes 0 .. count): psi = psi1 - dt/A sum_k s_k
// F_k over the antidiffusive fluxes, each scaled (limit != 0) by min(1, beta_dn of its sender, beta_up of its
// receiver).
KERNEL gridcomm_mpdata_corrective(
    double* __restrict__ psi, const double* __restrict__ psi1, const double* __restrict__ flux,
    const double* __restrict__ beta_up, const double* __restrict__ beta_dn, unsigned int count, MESH_ARGS,
    int limit, int levels)
{
    MESH;
    const auto fetch = [&](int i) { return node_row(mesh, nullptr, 0, i); };
    for_each_item<NodeRow>(count, levels, fetch, [&](const NodeRow& row, int level) {
        const int u = row.u;
        Vec own_up, own_dn;
        if (limit) {
            own_up = load(at(beta_up, u, levels, level));
            own_dn = load(at(beta_dn, u, levels, level));
        }
        Vec total;
#pragma unroll
        for (int k = 0; k < DEGREE; ++k) {
            const Slot sl = row.slot(k);
            const double s = sl.sign;
            Vec f = load(at(flux, sl.edge, levels, level));
            if (limit) {
                const long long o = row.other[k];
                const Vec other_up = load(at(beta_up, o, levels, level)), other_dn = load(at(beta_dn, o, levels, level));
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
        const Vec p1 = load(at(psi1, u, levels, level));
        const double dta = __ldg(mesh.dt_area + u);
#pragma unroll
        for (int t = 0; t < LPT; ++t) total.v[t] = p1.v[t] - dta * total.v[t];
        store(psi + (long long)u * levels + level, total);
    });
}
