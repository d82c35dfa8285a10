// The spectral transform's Legendre half on the GPU, besides cuBLAS (apps/spectral/transform.py): the moves
// between the caller's arrays and the matrix products' operands, one launch each per chunk of wavenumbers.
//
// The caller's arrays keep the fields (batch) slowest: coefficients (batch, ncoef) and Fourier coefficients
// (batch, M, 2N), complex128 (double2), the latter laid out by per-row tables (operands.RowLayout): element
// (b, m, r) at base[r] + (b * M + m) * width[r], where width[r] is the row count of r's block of rows
// (a C-contiguous (batch, M, width) array) and base[r] the block's start plus r's place in it. One block of all
// 2N rows (base[r] = r, width[r] = 2N) is the plain (batch, M, 2N) array; the distributed dwarf keeps one block
// per peer (and stage of wavenumbers) so that each block travels as one contiguous message. The products want the
// fields fastest, as the columns of one real matrix (real and imaginary parts side by side are then simply the
// columns 2b and 2b + 1): operands
// (chunk, parity, depth, batch) and (chunk, parity, N, batch), complex. Every kernel here is thus a
// transposition between "fields slowest" and "fields fastest", done through a 32 x 32 tile in shared memory so
// that loads and stores both run along contiguous memory; the gathers, the zero padding and the even/odd
// combinations ride along at no extra pass.
//
// Wavenumber i of a chunk: its coefficients start at offsets[i] and number lengths[i] = T - m + 1 (degree
// l = m + j at offsets[i] + j), and its Fourier coefficients sit at position positions[i] of the m axis.
// Coefficient j = 2 k + p goes to parity p (of l - m), depth k; depths past the wavenumber's own are zero.
#include "../../../transports/ipc_exchange.cuh"

#define TILE 32

struct Tile {
    double2 v[TILE][TILE + 1];  // the padding staggers the banks of a column
};

// Where F[b, m, .] of northern row r and of its southern mirror 2N - 1 - r lie in ``fourier`` (the row tables
// ``base`` and ``width``, top of this file): the offsets of the field-and-wavenumber index 0, and the stride of
// that index (at = b * count + m) for each row.
struct RowPair {
    long long north_base, south_base, north_width, south_width;
    __device__ RowPair(const long long* base, const int* width, int r, int n)
        : north_base(base[r]), south_base(base[2 * n - 1 - r]),
          north_width(width[r]), south_width(width[2 * n - 1 - r]) {}
    __device__ long long north(long long at) const { return north_base + at * north_width; }
    __device__ long long south(long long at) const { return south_base + at * south_width; }
};

// operand[i, p, k, b] = a[b, offsets[i] + 2 k + p] (zero past lengths[i]). Tile: j = 2k + p in j0.., b in b0..
extern "C" __global__ void gridcomm_legendre_gather(
    const double2* __restrict__ a, long long ncoef, int batch, const long long* __restrict__ offsets,
    const long long* __restrict__ lengths, int depth, double2* __restrict__ operand)
{
    __shared__ Tile t;
    const int i = blockIdx.z, j0 = blockIdx.x * TILE, b0 = blockIdx.y * TILE;
    const long long offset = offsets[i], length = lengths[i];
    for (int y = threadIdx.y; y < TILE; y += blockDim.y) {  // loads along a field's coefficients
        const int b = b0 + y, j = j0 + threadIdx.x;
        double2 v = make_double2(0.0, 0.0);
        if (b < batch && j < length) v = a[(long long)b * ncoef + offset + j];
        t.v[y][threadIdx.x] = v;
    }
    __syncthreads();
    for (int y = threadIdx.y; y < TILE; y += blockDim.y) {  // stores along the fields
        const int j = j0 + y, b = b0 + threadIdx.x;
        if (b < batch && j < 2 * depth)
            operand[(((long long)i * 2 + (j & 1)) * depth + (j >> 1)) * batch + b] = t.v[threadIdx.x][y];
    }
}

// a[b, offsets[i] + 2 k + p] = product[i, p, k, b] for 2 k + p < lengths[i]: gather's reverse.
extern "C" __global__ void gridcomm_legendre_scatter(
    const double2* __restrict__ product, int batch, const long long* __restrict__ offsets,
    const long long* __restrict__ lengths, int depth, long long ncoef, double2* __restrict__ a)
{
    __shared__ Tile t;
    const int i = blockIdx.z, j0 = blockIdx.x * TILE, b0 = blockIdx.y * TILE;
    const long long offset = offsets[i], length = lengths[i];
    for (int y = threadIdx.y; y < TILE; y += blockDim.y) {  // loads along the fields
        const int j = j0 + y, b = b0 + threadIdx.x;
        if (b < batch && j < length)
            t.v[y][threadIdx.x] = product[(((long long)i * 2 + (j & 1)) * depth + (j >> 1)) * batch + b];
    }
    __syncthreads();
    for (int y = threadIdx.y; y < TILE; y += blockDim.y) {  // stores along a field's coefficients
        const int b = b0 + y, j = j0 + threadIdx.x;
        if (b < batch && j < length) a[(long long)b * ncoef + offset + j] = t.v[threadIdx.x][y];
    }
}

// From the products of both parities on the northern rows, product (chunk, 2, N, batch): the Fourier
// coefficients of every row, F[b, m, r] = even + odd on the northern row r and F[b, m, 2N - 1 - r] = even - odd
// on its southern mirror, m = positions[i] - first (``first``: the position of F's first wavenumber, where F holds
// a run of them), F laid out in ``fourier`` by the row tables ``base`` and ``width`` (top of this file); a row of
// width 0 is not written. One tile: the northern rows listed[r0..] (r0.. where ``listed`` is null, of ``nrows``),
// fields b0.., wavenumber i. Every thread of the block calls it; it ends with the tiles free for the next.
__device__ __forceinline__ void unfold_tile(
    const double2* __restrict__ product, int n, int batch, const int* __restrict__ positions, int count, int first,
    const long long* __restrict__ base, const int* __restrict__ width, double2* __restrict__ fourier,
    const int* __restrict__ listed, int nrows, int i, int r0, int b0, Tile& north, Tile& south)
{
    const double2* even = product + (long long)i * 2 * n * batch;
    const double2* odd = even + (long long)n * batch;
    for (int y = threadIdx.y; y < TILE; y += blockDim.y) {  // loads along the fields
        const int k = r0 + y, b = b0 + threadIdx.x;
        if (k < nrows && b < batch) {
            const long long r = listed ? listed[k] : k;
            const double2 e = even[r * batch + b], o = odd[r * batch + b];
            north.v[y][threadIdx.x] = make_double2(e.x + o.x, e.y + o.y);
            south.v[y][threadIdx.x] = make_double2(e.x - o.x, e.y - o.y);
        }
    }
    __syncthreads();
    const int k = r0 + threadIdx.x;
    if (k < nrows) {
        // Consecutive threads hold consecutive rows: their stores stay contiguous within a block of rows.
        const RowPair rows(base, width, listed ? listed[k] : k, n);
        for (int y = threadIdx.y; y < TILE; y += blockDim.y) {  // stores along each field's rows
            const int b = b0 + y;
            if (b < batch) {
                const long long at = (long long)b * count + (positions[i] - first);
                if (rows.north_width) fourier[rows.north(at)] = north.v[threadIdx.x][y];
                if (rows.south_width) fourier[rows.south(at)] = south.v[threadIdx.x][y];
            }
        }
    }
    __syncthreads();
}

// Tile: rows blockIdx.x * TILE.., fields blockIdx.y * TILE.., wavenumber blockIdx.z.
extern "C" __global__ void gridcomm_legendre_unfold(
    const double2* __restrict__ product, int n, int batch, const int* __restrict__ positions, int count, int first,
    const long long* __restrict__ base, const int* __restrict__ width, double2* __restrict__ fourier)
{
    __shared__ Tile north, south;
    unfold_tile(product, n, batch, positions, count, first, base, width, fourier, nullptr, n, blockIdx.z,
                blockIdx.x * TILE, blockIdx.y * TILE, north, south);
}

// The unfold of ``wavenumbers`` products as one exchange of the ipc transport's kernel method
// (transports/ipc_exchange.cuh): F written straight into the destinations, in this rank and its peers, for the
// northern rows ``listed`` (``nrows``) alone; the row tables then hold offsets from ``fourier`` to every row of
// every destination (in elements: any allocation mapped here), width 0 for the rows that this exchange does not
// write. The blocks take the tiles in turn, the rows fastest, so that every peer's rows are written at once.
extern "C" __global__ void gridcomm_legendre_unfold_exchange(
    const double2* __restrict__ product, int n, int batch, const int* __restrict__ positions, int count, int first,
    const long long* __restrict__ base, const int* __restrict__ width, double2* fourier,
    const int* __restrict__ listed, int nrows, int wavenumbers, IPC_EXCHANGE_PARAMS)
{
    __shared__ Tile north, south;
    const long long across = (nrows + TILE - 1) / TILE, down = (batch + TILE - 1) / TILE;
    const long long tiles = across * down * wavenumbers;
    if (ipc_exchange_open(IPC_EXCHANGE_ARGS)) {
        for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
            const long long rest = t / across;
            unfold_tile(product, n, batch, positions, count, first, base, width, fourier, listed, nrows,
                        (int)(rest / down), (int)(t % across) * TILE, (int)(rest % down) * TILE, north, south);
        }
    }
    ipc_exchange_close(IPC_EXCHANGE_ARGS);
}

// unfold's counterpart for the quadrature: sums[i, 0, r, b] = north + south and sums[i, 1, r, b] = north - south
// of F[b, positions[i] - first, .] on the northern row r and its southern mirror 2N - 1 - r, F laid out in
// ``fourier`` by the row tables ``base`` and ``width``.
extern "C" __global__ void gridcomm_legendre_fold(
    const double2* __restrict__ fourier, int n, int batch, const int* __restrict__ positions, int count, int first,
    const long long* __restrict__ base, const int* __restrict__ width, double2* __restrict__ sums)
{
    __shared__ Tile plus, minus;
    const int i = blockIdx.z, r0 = blockIdx.x * TILE, b0 = blockIdx.y * TILE;
    const int r = r0 + threadIdx.x;
    if (r < n) {  // the loads of this thread's row (threads past the last row still reach __syncthreads())
        const RowPair rows(base, width, r, n);
        for (int y = threadIdx.y; y < TILE; y += blockDim.y) {  // loads along each field's rows
            const int b = b0 + y;
            if (b < batch) {
                const long long at = (long long)b * count + (positions[i] - first);
                const double2 north = fourier[rows.north(at)];
                const double2 south = fourier[rows.south(at)];
                plus.v[y][threadIdx.x] = make_double2(north.x + south.x, north.y + south.y);
                minus.v[y][threadIdx.x] = make_double2(north.x - south.x, north.y - south.y);
            }
        }
    }
    __syncthreads();
    double2* even = sums + (long long)i * 2 * n * batch;
    double2* odd = even + (long long)n * batch;
    for (int y = threadIdx.y; y < TILE; y += blockDim.y) {  // stores along the fields
        const int r = r0 + y, b = b0 + threadIdx.x;
        if (r < n && b < batch) {
            even[(long long)r * batch + b] = plus.v[threadIdx.x][y];
            odd[(long long)r * batch + b] = minus.v[threadIdx.x][y];
        }
    }
}
