// MPDATA's step on the GPU (apps/mpdata/cuda_kernels.py): four node kernels and one edge kernel, each one pass over
// a list of nodes or edges.
//
// Fields are C-contiguous (nodes, levels) float64, levels the fast axis. Every node sum runs over the padded
// node-to-edge table of the update nodes, (n_update, WIDTH) pairs of ints, WIDTH = DEGREE rounded up to even
// so that a node's row is whole 16-byte loads: slot k of update position u holds a local edge and its sign in
// one int (edge * 4 + 1 where u is the edge's first node, sign +1; edge * 4 + 2 where the second, sign -1;
// tag 0 in padding, sign 0), and the node at the other end (u's own node in padding). A node's sum thus needs
// no atomics and adds the same terms in the same order as the NumPy path (numpy_kernels.py); compiled with
// --fmad=false, every operation below is the NumPy path's operation in the NumPy path's order, so results
// equal the CPU's (to the sign of a zero).
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
// The kernels were bound by the instructions they issued as much as by their gathers (at O1280 the upwind
// pass's SASS, times its warps, filled the schedulers for 96 % of its time), so the code per item is kept
// short (the L2's throughput is what bounds most of them now, docs/mpdata.md):
// - the level count is compiled in (LEVELS): an item's node and levels are a shift or a multiply by a constant
//   away from the thread's index, and every offset is 32-bit (the host checks that fields hold < 2^32 values);
// - slots beyond COMMON_DEGREE (the degree nearly every node has: 6 on the octahedral mesh, whose table is 7
//   wide for a few nodes) run only where the node has that edge; padding adds only zeros, so skipping it leaves
//   every sum as it is (to the sign of a zero);
// - a slot's sign chooses coefficients once for all its levels instead of choosing values per level
//   (swapping the operands of a sum or a product, and negating, are exact).
// Every dependent load removed from the chain before the field loads counts as well: a list of positions
// that is one contiguous run (every part on one rank, the usual inner part) is passed as its first entry
// (`first` >= 0) instead of read from memory, and an owned update position is its own local node (owned nodes
// come first), so only halo positions read update_nodes.
#ifndef LEVELS
#define LEVELS 32  // levels of every field, compiled in (cuda_kernels.mpdata_function)
#endif
#ifndef LEVELS_PER_THREAD
#define LEVELS_PER_THREAD 1
#endif
#ifndef DEGREE
#define DEGREE 7
#endif
#ifndef COMMON_DEGREE
#define COMMON_DEGREE DEGREE  // slots every node runs; the rest run only where in use
#endif
#ifndef ITEMS
#define ITEMS 1  // items each thread computes (for_each_item)
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1  // blocks of THREADS per SM the register allocation must allow (__launch_bounds__)
#endif
#define THREADS 256
#define KERNEL extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
#define LPT LEVELS_PER_THREAD
#define CHUNKS (LEVELS / LPT)  // items per node (or edge)
#define PAIRS ((DEGREE + 1) / 2)  // 16-byte loads per table row: two slots of (code, other) each
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

// Value (node, level) of a (nodes, LEVELS) field: a 32-bit offset (the host checks the fields' sizes).
template <class T>
__device__ __forceinline__ T* at(T* f, unsigned int node, unsigned int level)
{
    return f + (node * LEVELS + level);
}

// The node-to-edge table and the per-edge data every kernel reads (passed as separate arguments, MESH_ARGS,
// since a kernel launch from CuPy takes arrays and scalars only, and gathered into one struct by MESH).
struct Mesh {
    const int* update_nodes;  // (n_update,) local node of each update position
    const int4* slots;        // (n_update, PAIRS): (code, other) of slots 2p and 2p + 1 of update position u
    int n_owned;              // update positions below are owned nodes, their own local node
    const double* dt_area;    // (n_update,) dt / dual volume, s / m^2

    __device__ __forceinline__ unsigned int node(int u) const { return u < n_owned ? u : __ldg(update_nodes + u); }
};
#define MESH_ARGS                                                                                                  \
    const int *__restrict__ update_nodes, const int4 *__restrict__ slots, int n_owned, \
        const double *__restrict__ dt_area
#define MESH const Mesh mesh{update_nodes, slots, n_owned, dt_area}

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

    // Runs f(k) for the slots in use: the first COMMON_DEGREE always (padding among them adds zeros), the
    // others only where the node has that edge. k is a constant in every unrolled call.
    template <class F>
    __device__ __forceinline__ void for_each_slot(F f) const
    {
#pragma unroll
        for (int k = 0; k < DEGREE; ++k) {
            if (k < COMMON_DEGREE || (code[k] & 3) != 0) f(k);
        }
    }
};

// The row of entry i of a list of update positions (nodes = nullptr, first = 0: position i itself).
__device__ __forceinline__ NodeRow node_row(const Mesh& mesh, const int* __restrict__ nodes, int first, int i)
{
    NodeRow r;
    r.u = entry(nodes, first, i);
    const int4* row = mesh.slots + (unsigned long long)(unsigned int)r.u * PAIRS;
#pragma unroll
    for (int q = 0; q < PAIRS; ++q) {
        const int4 pair = __ldg(row + q);
        r.code[2 * q] = pair.x;
        r.other[2 * q] = pair.y;
        if (2 * q + 1 < DEGREE) {
            r.code[2 * q + 1] = pair.z;
            r.other[2 * q + 1] = pair.w;
        }
    }
    return r;
}

// An edge item's row: the local edge and its two nodes.
struct EdgeRow {
    int e;
    int i;
    int j;
};

// Runs body(row, level) for each of this thread's items, item = (list entry, LPT levels from `level`). A block
// computes ITEMS * THREADS consecutive items, a thread every THREADS-th of them: consecutive nodes are compact
// patches of the mesh (grids.local), so that a block finds most of the neighbours it gathers in its SM's L1,
// which it filled for the items before (the L2 is what bounds these kernels).
template <class Fetch, class Body>
__device__ __forceinline__ void for_each_item(unsigned int count, Fetch fetch, Body body)
{
    const unsigned int total = count * CHUNKS;  // < 2^32 (host check)
    unsigned int index = blockIdx.x * (THREADS * ITEMS) + threadIdx.x;
    if (index >= total) return;
#pragma unroll 1
    for (int k = 1;; ++k) {
        body(fetch(index / CHUNKS), index % CHUNKS * LPT);
        if (k == ITEMS || total - index <= THREADS) return;
        index += THREADS;
    }
}

// The larger and the smaller of two values, as NumPy's maximum and minimum give them for numbers (a select:
// cheaper than fmax and fmin, which also handle NaN; the fields hold none).
__device__ __forceinline__ double larger(double a, double b) { return a > b ? a : b; }
__device__ __forceinline__ double smaller(double a, double b) { return a < b ? a : b; }

// Upwind pass: psi1[u] = psi[u] - dt/A_u sum_k s_k (V+ psi_i + V- psi_j) over u's edges, for update positions
// nodes[0 .. count). V+ = max(V, 0) and V- = min(V, 0) are worked out here from V. A slot's term is computed
// as a psi_own + b psi_other with a = s V+, b = s V- where the node is the edge's first end and swapped where
// it is the second: the same products, summed in the other order and negated with s, all exact.
KERNEL gridcomm_mpdata_upwind(
    const double* __restrict__ psi, double* __restrict__ psi1, const int* __restrict__ nodes, int first,
    unsigned int count, MESH_ARGS, const double* __restrict__ volume_flux)
{
    MESH;
    const auto fetch = [&](int i) { return node_row(mesh, nodes, first, i); };
    for_each_item(count, fetch, [&](const NodeRow& row, unsigned int level) {
        const unsigned int node = mesh.node(row.u);
        const Vec own = load(at(psi, node, level));
        Vec total;
        row.for_each_slot([&](int k) {
            const Slot sl = row.slot(k);
            const double s = sl.sign, v = __ldg(volume_flux + sl.edge);
            const double vp = larger(v, 0.0) * s, vn = smaller(v, 0.0) * s;
            const double a = s > 0.0 ? vp : vn, b = s > 0.0 ? vn : vp;
            const Vec other = load(at(psi, row.other[k], level));
#pragma unroll
            for (int t = 0; t < LPT; ++t) {
                const double term = a * own.v[t] + b * other.v[t];
                total.v[t] = k == 0 ? term : total.v[t] + term;
            }
        });
        const double dta = __ldg(mesh.dt_area + row.u);
#pragma unroll
        for (int t = 0; t < LPT; ++t) total.v[t] = own.v[t] - dta * total.v[t];
        store(at(psi1, node, level), total);
    });
}

// Green-Gauss gradient of psi1 on owned nodes (update positions = local nodes 0 .. count), tangent to the
// sphere: g = (1/A) sum_k (psi1_other - psi1_u)/2 n_k (1/A stored per node, as the NumPy path multiplies by it),
// then minus its radial part (g . r) r.
// normals is (n_edges, 4): half each edge's face normal (and a pad: two 16-byte loads) from its first node to its
// second, signed here out of the node (times the slot's sign); NumPy's (d / 2) n is d (n / 2): the same product,
// since halving is exact. grad is (3, n_local, levels).
KERNEL gridcomm_mpdata_gradient(
    const double* __restrict__ psi1, double* __restrict__ grad, unsigned int count, MESH_ARGS,
    const double* __restrict__ normals, const double* __restrict__ inv_area, const double* __restrict__ radial,
    long long field_stride)
{
    MESH;
    const auto fetch = [&](int i) { return node_row(mesh, nullptr, 0, i); };
    for_each_item(count, fetch, [&](const NodeRow& row, unsigned int level) {
        const int u = row.u;
        const Vec own = load(at(psi1, u, level));
        Vec g[3];
        row.for_each_slot([&](int k) {
            const Slot sl = row.slot(k);
            const Vec other = load(at(psi1, row.other[k], level));
            const double2* n = reinterpret_cast<const double2*>(normals + 4 * (unsigned long long)sl.edge);
            const double2 n01 = __ldg(n), n2 = __ldg(n + 1);
            const double normal[3] = {n01.x, n01.y, n2.x};
#pragma unroll
            for (int c = 0; c < 3; ++c) {
                const double half_nc = normal[c] * sl.sign;
#pragma unroll
                for (int t = 0; t < LPT; ++t) {
                    const double term = (other.v[t] - own.v[t]) * half_nc;
                    g[c].v[t] = k == 0 ? term : g[c].v[t] + term;
                }
            }
        });
        const double inv_a = __ldg(inv_area + u), r0 = __ldg(radial + 3 * u), r1 = __ldg(radial + 3 * u + 1);
        const double r2 = __ldg(radial + 3 * u + 2);
#pragma unroll
        for (int t = 0; t < LPT; ++t) {
            const double g0 = g[0].v[t] * inv_a, g1 = g[1].v[t] * inv_a, g2 = g[2].v[t] * inv_a;
            const double along = g0 * r0 + g1 * r1 + g2 * r2;
            g[0].v[t] = g0 - along * r0;
            g[1].v[t] = g1 - along * r1;
            g[2].v[t] = g2 - along * r2;
        }
#pragma unroll
        for (int c = 0; c < 3; ++c) store(at(grad + c * field_stride, u, level), g[c]);
    });
}

// The antidiffusive flux of every edge in edges[0 .. count) on every level, flux (n_edges, levels), from the
// edge's ends (i, j) and coefficients (n_edges, 6): |V|, dt V, the wind at its midpoint (3 components) and a pad
// (three 16-byte loads): the upwind flux
// of psi1 with MPDATA's pseudo-velocity (|V| (psi1_j - psi1_i) - dt V v . grad psi1) / (|psi1_i| + |psi1_j| + eps),
// grad psi1 the mean of its ends' gradients. Stored once per edge, then read by both its ends in the FCT bounds
// and the corrective update (recomputing it there took 4 times the arithmetic and a quarter of the occupancy).
// NumPy's max(W, 0) psi_i + min(W, 0) psi_j is W psi_i or W psi_j by the sign of W (the other product is a zero).
KERNEL gridcomm_mpdata_fluxes(
    const double* __restrict__ psi1, const double* __restrict__ grad, double* __restrict__ flux,
    const int* __restrict__ edges, int first, unsigned int count, const int2* __restrict__ ends,
    const double2* __restrict__ coefficients, long long field_stride)
{
    const auto fetch = [&](int n) {
        const int e = entry(edges, first, n);
        const int2 ij = __ldg(ends + e);
        return EdgeRow{e, ij.x, ij.y};
    };
    const double* g1 = grad + field_stride;
    const double* g2 = grad + 2 * field_stride;
    for_each_item(count, fetch, [&](const EdgeRow& row, unsigned int level) {
        const int e = row.e, i = row.i, j = row.j;
        const Vec pi = load(at(psi1, i, level)), pj = load(at(psi1, j, level));
        const Vec g0i = load(at(grad, i, level)), g0j = load(at(grad, j, level));
        const Vec g1i = load(at(g1, i, level)), g1j = load(at(g1, j, level));
        const Vec g2i = load(at(g2, i, level)), g2j = load(at(g2, j, level));
        const double2* c = coefficients + 3 * (unsigned long long)(unsigned int)e;
        const double2 c0 = __ldg(c), c1 = __ldg(c + 1), c2 = __ldg(c + 2);
        const double va = c0.x, vd = c0.y, w0 = c1.x, w1 = c1.y, w2 = c2.x;
        Vec out;
#pragma unroll
        for (int t = 0; t < LPT; ++t) {
            const double wind_grad =
                0.5 * (w0 * (g0i.v[t] + g0j.v[t]) + w1 * (g1i.v[t] + g1j.v[t]) + w2 * (g2i.v[t] + g2j.v[t]));
            const double pseudo =
                (va * (pj.v[t] - pi.v[t]) - vd * wind_grad) / (fabs(pi.v[t]) + fabs(pj.v[t]) + EPS);
            out.v[t] = pseudo * (pseudo > 0.0 ? pi.v[t] : pj.v[t]);
        }
        store(at(flux, e, level), out);
    });
}

// FCT limiter coefficients of update positions nodes[0 .. count): the bounds of psi and psi1 over the node
// and its neighbours, the sums of the antidiffusive fluxes out of and into the node, and from them
// beta_up = (max - psi1) / (dt/A inflow + eps), beta_dn = (psi1 - min) / (dt/A outflow + eps).
KERNEL gridcomm_mpdata_bounds(
    const double* __restrict__ psi, const double* __restrict__ psi1, const double* __restrict__ flux,
    double* __restrict__ beta_up, double* __restrict__ beta_dn, const int* __restrict__ nodes, int first,
    unsigned int count, MESH_ARGS)
{
    MESH;
    const auto fetch = [&](int i) { return node_row(mesh, nodes, first, i); };
    for_each_item(count, fetch, [&](const NodeRow& row, unsigned int level) {
        const unsigned int node = mesh.node(row.u);
        const Vec p = load(at(psi, node, level)), p1 = load(at(psi1, node, level));
        Vec high, low, outflow, inflow;
#pragma unroll
        for (int t = 0; t < LPT; ++t) {
            high.v[t] = larger(p.v[t], p1.v[t]);
            low.v[t] = smaller(p.v[t], p1.v[t]);
            outflow.v[t] = 0.0;
            inflow.v[t] = 0.0;
        }
        row.for_each_slot([&](int k) {
            const unsigned int o = row.other[k];
            const Slot sl = row.slot(k);
            const double s = sl.sign;
            const Vec q = load(at(psi, o, level)), q1 = load(at(psi1, o, level));
            const Vec f = load(at(flux, sl.edge, level));
#pragma unroll
            for (int t = 0; t < LPT; ++t) {
                const bool q_larger = q.v[t] > q1.v[t];  // one comparison for both bounds
                high.v[t] = larger(high.v[t], q_larger ? q.v[t] : q1.v[t]);
                low.v[t] = smaller(low.v[t], q_larger ? q1.v[t] : q.v[t]);
                const double out = f.v[t] * s;
                const bool leaving = out > 0.0;
                outflow.v[t] += leaving ? out : 0.0;
                inflow.v[t] += leaving ? 0.0 : out;
            }
        });
        const double dta = __ldg(mesh.dt_area + row.u);
        Vec up, dn;
#pragma unroll
        for (int t = 0; t < LPT; ++t) {
            up.v[t] = (high.v[t] - p1.v[t]) / (dta * -inflow.v[t] + EPS);
            dn.v[t] = (p1.v[t] - low.v[t]) / (dta * outflow.v[t] + EPS);
        }
        store(at(beta_up, node, level), up);
        store(at(beta_dn, node, level), dn);
    });
}

// The corrective update of owned nodes (update positions = local nodes 0 .. count): psi = psi1 - dt/A sum_k s_k
// F_k over the antidiffusive fluxes, each scaled (limit != 0) by min(1, beta_dn of its sender, beta_up of its
// receiver). The node sends where F >= 0 and it is the edge's first end (s > 0), or F < 0 and it is the
// second: NumPy's choice by the sign of F, taken from the node's side (min is symmetric).
KERNEL gridcomm_mpdata_corrective(
    double* __restrict__ psi, const double* __restrict__ psi1, const double* __restrict__ flux,
    const double* __restrict__ beta_up, const double* __restrict__ beta_dn, unsigned int count, MESH_ARGS,
    int limit)
{
    MESH;
    const auto fetch = [&](int i) { return node_row(mesh, nullptr, 0, i); };
    for_each_item(count, fetch, [&](const NodeRow& row, unsigned int level) {
        const int u = row.u;
        Vec own_up, own_dn;
        if (limit) {
            own_up = load(at(beta_up, u, level));
            own_dn = load(at(beta_dn, u, level));
        }
        Vec total;
        row.for_each_slot([&](int k) {
            const Slot sl = row.slot(k);
            const double s = sl.sign;
            Vec f = load(at(flux, sl.edge, level));
            if (limit) {
                const unsigned int o = row.other[k];
                const Vec other_up = load(at(beta_up, o, level)), other_dn = load(at(beta_dn, o, level));
#pragma unroll
                for (int t = 0; t < LPT; ++t) {
                    const bool sends = (f.v[t] >= 0.0) == (s > 0.0);
                    const double scale =
                        sends ? smaller(own_dn.v[t], other_up.v[t]) : smaller(own_up.v[t], other_dn.v[t]);
                    f.v[t] *= smaller(scale, 1.0);
                }
            }
#pragma unroll
            for (int t = 0; t < LPT; ++t) {
                const double term = f.v[t] * s;
                total.v[t] = k == 0 ? term : total.v[t] + term;
            }
        });
        const Vec p1 = load(at(psi1, u, level));
        const double dta = __ldg(mesh.dt_area + u);
#pragma unroll
        for (int t = 0; t < LPT; ++t) total.v[t] = p1.v[t] - dta * total.v[t];
        store(at(psi, u, level), total);
    });
}
