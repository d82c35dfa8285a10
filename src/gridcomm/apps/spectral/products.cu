// The spectral transform's Legendre half on the GPU (apps/spectral/products.py): per zonal wavenumber m, the
// products of both parities of l - m on FP64 tensor cores (mma.sync m16n8k16), with the moves between the
// caller's arrays and the products' operands done in the loads and stores of the same kernel, one launch per
// direction for every wavenumber:
//
//   synthesis: fourier[b, pos, r] = even + odd and fourier[b, pos, 2N - 1 - r] = even - odd on northern row r,
//              parity p's product = sum_k tables[p, k, r] a[b, off + 2k + p] (degrees l = m + 2k + p);
//   analysis:  a[b, off + 2k + p] = sum_r weighted[p, r, k] S_p[b, r], S_0 = north + south, S_1 = north - south.
//
// A block computes a BM x BN tile of both parities' products (BM rows or degrees by BN / 2 complex fields: a
// field's real and imaginary parts are neighbouring real columns, since the tables are real). Operand tiles of
// KT along the sum are copied global -> shared by cp.async in STAGES stages, zero-filled past the data, so that
// the loads of later tiles fly while the tensor cores work on the current one. Each warp computes a 32 x 32
// part of one parity's product (holding both parities' accumulators, a warp's part would be half as large at
// the same registers, and its operands read from shared memory per product twice as many). The caller's arrays keep the fields slowest (complex128): a field's coefficients of
// one m, and its Fourier coefficients of one m on the rows, are contiguous, and the loads run along them.
#ifndef BM
#define BM 64  // rows (synthesis) or degrees (analysis) per block
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1  // blocks per SM the register allocation must allow (__launch_bounds__)
#endif
#define BN 64  // real columns per block: 32 complex fields
#define KT 16  // the sum's extent per stage: one m16n8k16 step
#define WARPS_M (BM / 32)
#define WARPS_N (BN / 32)
#define PARITY_WARPS (WARPS_M * WARPS_N)  // warps per parity: warps 0.. do the even, the rest the odd degrees
#define THREADS (64 * PARITY_WARPS)
#define MT 2  // m16 tiles per warp
#define NT 4  // n8 tiles per warp
#define SA (BM + 4)  // row pitches in doubles: 4 mod 16 spreads a fragment's loads over every bank
#define SB (BN + 4)

struct Stage {
    double a[2][KT][SA];  // A tile of each parity, [sum index][row of the product]
    double b[2][KT][SB];  // B tile of each parity, [sum index][real column]
};

__device__ __forceinline__ void copy16(void* shared, const void* global, bool valid)
{
    const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(shared));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(global), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }

__device__ __forceinline__ void wait_stage() { asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2)); }

// d += a b for one m16 x n8 tile and k16 of the sum, in the fragment layouts of mma.m16n8k16 (f64): a[e] is
// A[g + 8 (e & 1)][4 (e >> 1) + t], b[e] is B[t + 4 e][g], d[c] is D[g + 8 (c >> 1)][2 t + (c & 1)], g = lane / 4,
// t = lane % 4. Hopper has the shape itself; sm_80 to sm_89 (or SPLIT_MMA) run it as 8 m8n8k4 products, whose
// fragments are the same values: A[g][t], B[t][g] and D[g][2t], D[g][2t + 1] of each 8-row half and k4 quarter.
__device__ __forceinline__ void mma(double (&d)[4], const double (&a)[8], const double (&b)[4])
{
#if __CUDA_ARCH__ >= 900 && !defined(SPLIT_MMA)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7,%8,%9,%10,%11}, "
        "{%12,%13,%14,%15}, {%0,%1,%2,%3};\n"
        : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
        : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]), "d"(b[0]),
          "d"(b[1]), "d"(b[2]), "d"(b[3]));
#else
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int q = 0; q < 4; ++q)
            asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
                         : "+d"(d[2 * half]), "+d"(d[2 * half + 1])
                         : "d"(a[2 * q + half]), "d"(b[q]));
#endif
}

// This warp's part of its parity's product over `steps` stages of the sum: load(stage, step) issues the
// stage's cp.async copies, prepare(stage) finishes it in shared memory once they have landed (between two
// barriers). acc[i][j] is the m16 x n8 tile (i, j) of the warp's part, in mma's accumulator layout. Tiles whose
// rows start at or past `rows` (all zero) are skipped.
struct Warp {
    int parity, wm, wn, g, t;  // parity, the part's first row and column in the tile, the lane's group and place

    __device__ __forceinline__ Warp()
    {
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % PARITY_WARPS;
        parity = warp / PARITY_WARPS;
        wm = (part / WARPS_N) * 32;
        wn = (part % WARPS_N) * 32;
        g = lane >> 2;
        t = lane & 3;
    }

    // Runs f(row, field, re, im) for each value of acc: row within the tile, field within its BN / 2.
    template <class F>
    __device__ __forceinline__ void for_each_value(const double (&acc)[MT][NT][4], F f) const
    {
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    f(wm + 16 * i + g + 8 * h, (wn + 8 * j + 2 * t) / 2, acc[i][j][2 * h], acc[i][j][2 * h + 1]);
    }
};

template <class Load, class Prepare>
__device__ __forceinline__ void products(
    Stage* stages, int steps, int rows, Load load, Prepare prepare, const Warp& w, double (&acc)[MT][NT][4])
{
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < steps) load(stages[s], s);
        commit();  // empty groups too: the wait below then counts stages
    }
    for (int step = 0; step < steps; ++step) {
        wait_stage();
        __syncthreads();  // this stage has landed for every thread; the one loaded next is free
        Stage& st = stages[step % STAGES];
        prepare(st);
        if (step + STAGES - 1 < steps) load(stages[(step + STAGES - 1) % STAGES], step + STAGES - 1);
        commit();
        double a[MT][8], b[NT][4];
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int e = 0; e < 8; ++e)
                a[i][e] = st.a[w.parity][4 * (e >> 1) + w.t][w.wm + 16 * i + w.g + 8 * (e & 1)];
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) b[j][e] = st.b[w.parity][w.t + 4 * e][w.wn + 8 * j + w.g];
#pragma unroll
        for (int i = 0; i < MT; ++i) {
            if (w.wm + 16 * i >= rows) continue;
#pragma unroll
            for (int j = 0; j < NT; ++j) mma(acc[i][j], a[i], b[j]);
        }
    }
    asm volatile("cp.async.wait_all;\n" ::);
    __syncthreads();  // every stage is free: the epilogue may use their memory
}

// Inverse (spectral to Fourier). Wavenumber i = blockIdx.z: coefficients a[b, offsets[i] + j], j < lengths[i];
// tables at tables + table_offsets[i], (2, depths[i], n_pitch) doubles (zero past its degrees and rows, depths
// a multiple of KT, n_pitch a multiple of BM); Fourier coefficients (batch, count, 2n), wavenumber i at i.
extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) gridcomm_legendre_synthesis(
    const double2* __restrict__ a, long long ncoef, int batch, const long long* __restrict__ offsets,
    const int* __restrict__ lengths, const int* __restrict__ depths, const long long* __restrict__ table_offsets,
    const double* __restrict__ tables, int n, int n_pitch, int count, double2* __restrict__ fourier)
{
    extern __shared__ __align__(16) unsigned char shared[];
    Stage* stages = reinterpret_cast<Stage*>(shared);
    const int i = blockIdx.z, r0 = blockIdx.x * BM, b0 = blockIdx.y * (BN / 2);
    const long long offset = offsets[i];
    const int length = lengths[i], depth = depths[i];
    const double* table = tables + table_offsets[i];
    const auto load = [&](Stage& st, int step) {
        const int k0 = step * KT;
        for (int c = threadIdx.x; c < 2 * KT * (BM / 2); c += THREADS) {  // along each table row
            const int p = c / (KT * (BM / 2)), k = c / (BM / 2) % KT, r = 2 * (c % (BM / 2));
            copy16(&st.a[p][k][r], table + ((long long)p * depth + k0 + k) * n_pitch + r0 + r, true);
        }
        for (int c = threadIdx.x; c < (BN / 2) * 2 * KT; c += THREADS) {  // along each field's coefficients
            const int b = c / (2 * KT), j = c % (2 * KT), l = 2 * k0 + j;
            const bool valid = b0 + b < batch && l < length;
            copy16(&st.b[j & 1][j >> 1][2 * b], valid ? a + (long long)(b0 + b) * ncoef + offset + l : a, valid);
        }
    };
    const Warp w;
    double acc[MT][NT][4];
    products(stages, depth / KT, BM, load, [](Stage&) {}, w, acc);
    // The odd warps hand their products to the even ones through shared memory, which write both rows.
    double2(*odd)[BN / 2 + 1] = reinterpret_cast<double2(*)[BN / 2 + 1]>(shared);
    if (w.parity == 1)
        w.for_each_value(acc, [&](int row, int b, double re, double im) { odd[row][b] = make_double2(re, im); });
    __syncthreads();
    if (w.parity == 1) return;
    const long long field = (long long)count * 2 * n, at = (long long)i * 2 * n;
    w.for_each_value(acc, [&](int row, int b, double re, double im) {
        const int r = r0 + row;
        if (r >= n || b0 + b >= batch) return;
        const double2 o = odd[row][b];
        double2* f = fourier + (b0 + b) * field + at;
        f[r] = make_double2(re + o.x, im + o.y);
        f[2 * n - 1 - r] = make_double2(re - o.x, im - o.y);
    });
}

// Direct (Fourier to spectral), synthesis's counterpart: weighted at tables + table_offsets[i], (2, n, depths[i])
// doubles (the tables times the quadrature weights, zero past its degrees); a block's tile is BM degrees
// (blockIdx.x) by BN / 2 fields, the sum runs over the n northern rows.
extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) gridcomm_legendre_analysis(
    const double2* __restrict__ fourier, int n, int batch, int count, const long long* __restrict__ offsets, const int* __restrict__ lengths, const int* __restrict__ depths,
    const long long* __restrict__ table_offsets, const double* __restrict__ tables, long long ncoef,
    double2* __restrict__ a)
{
    extern __shared__ __align__(16) unsigned char shared[];
    Stage* stages = reinterpret_cast<Stage*>(shared);
    const int i = blockIdx.z, k0 = blockIdx.x * BM, b0 = blockIdx.y * (BN / 2);
    const int depth = depths[i];
    if (k0 >= depth) return;  // the whole block: its degrees are past this wavenumber's
    const long long offset = offsets[i];
    const int length = lengths[i];
    const double* table = tables + table_offsets[i];
    const long long field = (long long)count * 2 * n;
    const double2* f = fourier + (long long)i * 2 * n;
    const auto load = [&](Stage& st, int step) {
        const int r0 = step * KT;
        for (int c = threadIdx.x; c < 2 * KT * (BM / 2); c += THREADS) {  // along each weighted row
            const int p = c / (KT * (BM / 2)), r = c / (BM / 2) % KT, k = 2 * (c % (BM / 2));
            const bool valid = r0 + r < n && k0 + k < depth;
            copy16(&st.a[p][r][k], valid ? table + ((long long)p * n + r0 + r) * depth + k0 + k : table, valid);
        }
        for (int c = threadIdx.x; c < 2 * (BN / 2) * KT; c += THREADS) {  // along each field's rows
            const int side = c / ((BN / 2) * KT), b = c / KT % (BN / 2), r = c % KT;
            const bool valid = b0 + b < batch && r0 + r < n;
            const int row = side ? 2 * n - 1 - (r0 + r) : r0 + r;
            copy16(&st.b[side][r][2 * b], valid ? f + (b0 + b) * field + row : f, valid);
        }
    };
    const auto prepare = [](Stage& st) {  // north, south -> north + south, north - south
        for (int c = threadIdx.x; c < KT * BN; c += THREADS) {
            const int r = c / BN, col = c % BN;
            const double north = st.b[0][r][col], south = st.b[1][r][col];
            st.b[0][r][col] = north + south;
            st.b[1][r][col] = north - south;
        }
        __syncthreads();
    };
    const Warp w;
    double acc[MT][NT][4];
    products(stages, (n + KT - 1) / KT, depth - k0, load, prepare, w, acc);
    w.for_each_value(acc, [&](int row, int b, double re, double im) {
        const int l = 2 * (k0 + row) + w.parity;
        if (l < length && b0 + b < batch) a[(long long)(b0 + b) * ncoef + offset + l] = make_double2(re, im);
    });
}
