// The spectral transform's Fourier half on the GPU, besides cuFFT (apps/spectral/fourier.py): the fold before
// the inverse row FFTs and the pick after the direct ones, each one launch over every row and field.
//
// Arrays are C-contiguous complex128 (double2): Fourier coefficients (batch, M, rows), half spectra
// (batch, bins) with each row's bins side by side from bin_offsets[row]. Both steps move data between the m axis
// (rows fastest) and the rows' bins (bin fastest): a transposition through shared memory, so that loads and
// stores both run along contiguous memory. A block does its part for `batch_per_block` fields in turn (its index
// loads then hit L1).
#include "../../../transports/ipc_exchange.cuh"

#define TILE 32  // the pick's tile side

// Row r of n = 2h points is h complex points z_j = x_2j + i x_2j+1 to cuFFT, whose complex transform of length h
// costs less than the real one of length n (fourier.py). Its half spectrum, bins B_0..B_h from
// bin_offsets[r], is then the slots of Z_0..Z_h-1 (slot h unused), related by the twiddles
// w_k = exp(2 pi i k / n) (``twiddle``, computed where used: a table of every w_k doubled the bytes the fold and
// the pick read, and two small tables whose products give w_k took as long as this; w_h-k = -conj w_k):
//   inverse (fold): Z_k = (B_k + conj B_h-k) + i w_k (B_k - conj B_h-k), with B_0 and B_h taken real (as a real
//   inverse FFT takes them);
//   direct (pick):  B_k = ((Y_k + conj Y_h-k) - i conj(w_k) (Y_k - conj Y_h-k)) / 2, Y's indices mod h.
__device__ __forceinline__ double2 twiddle(int k, int n)
{
    double2 w;
    sincospi(2.0 * k / n, &w.y, &w.x);
    return w;
}

__device__ __forceinline__ double2 twiddled(double2 low, double2 high, double2 w)
{  // (low + conj high) + i w (low - conj high)
    const double2 odd = make_double2(low.x - high.x, low.y + high.y);
    return make_double2(low.x + high.x - (w.x * odd.y + w.y * odd.x), low.y - high.y + (w.x * odd.x - w.y * odd.y));
}

// Bin B_k, k = j - bin_offsets[r], is the sum of the terms codes[first[j] .. first[j + 1]): code c < M is F_c,
// M <= c < 2M is conj F_(c - M), 2M is zero. Where simple[r], every bin k of row r has the one term direct[k]
// (the position of m = k, or 2M where no m = k is there): the rows at least 2M long. ``row`` is the row's F_c,
// staged in shared memory.
__device__ __forceinline__ double2 bin_sum(
    const double2* row, int count, bool simple, long long j, int k, const long long* __restrict__ first,
    const int* __restrict__ codes, const int* __restrict__ direct)
{
    double2 sum = make_double2(0.0, 0.0);
    if (simple) {  // the one term of bin k is F_k, or zero (no index loads)
        const int c = direct[k];
        if (c < count) sum = row[c];
        return sum;
    }
    for (long long t = first[j]; t < first[j + 1]; ++t) {
        const int c = codes[t];
        if (c < count) {
            const double2 v = row[c];
            sum.x += v.x;
            sum.y += v.y;
        } else if (c < 2 * count) {
            const double2 v = row[c - count];
            sum.x += v.x;
            sum.y -= v.y;
        }
    }
    return sum;
}

// spectra[b, bin_offsets[r] + k] = Z_k of row r (above), from the bins B_k that fold the F_m onto the row.
//
// A block does the G = `group` (at most FOLD_GROUP) rows from G * blockIdx.x for `batch_per_block` fields in
// turn. It first stages the group's F_c of every c in shared memory, loading the G neighbouring rows of one c
// together (contiguous), and keeping row g's at staged[g * S + c], S = M rounded up to odd: the bins that
// neighbouring threads sum then read neighbouring words, and the staging stores hit distinct banks. Its threads
// then share out the group's pairs of bins (k, h - k), k = 0..h/2, each summing both bins' terms from there and
// storing Z_k and Z_h-k (Z_0 alone for k = 0). Every F_c is read from memory once however many bins it folds
// onto: the rows shorter than 2M, whose bins gather several terms each from all over the m axis, cost no more
// than the others.
#ifndef FOLD_GROUP
#define FOLD_GROUP 8  // fourier.py's FOLD_GROUP, which it passes when it compiles this file
#endif
extern "C" __global__ void gridcomm_fold(
    const double2* __restrict__ fourier, int count, int rows, int batch, int batch_per_block,
    int group, const long long* __restrict__ bin_offsets, const long long* __restrict__ first,
    const int* __restrict__ codes, const unsigned char* __restrict__ simple, const int* __restrict__ direct,
    long long bins, double2* __restrict__ spectra)
{
    extern __shared__ double2 staged[];  // [group][count | 1]
    __shared__ long long ends[FOLD_GROUP + 1];  // the group's rows' first bins, and one past the last's
    __shared__ int pair_ends[FOLD_GROUP + 1];  // the same in pairs of bins, from the group's first
    __shared__ bool single[FOLD_GROUP];  // simple[r] of the group's rows
    const int r0 = blockIdx.x * group, in_group = min(group, rows - r0);
    if (threadIdx.x <= in_group) ends[threadIdx.x] = bin_offsets[r0 + threadIdx.x];
    if (threadIdx.x < in_group) single[threadIdx.x] = simple[r0 + threadIdx.x];
    if (threadIdx.x == 0) {
        pair_ends[0] = 0;
        for (int g = 0; g < in_group; ++g)  // h / 2 + 1 pairs for h + 1 bins
            pair_ends[g + 1] = pair_ends[g] + (int)(bin_offsets[r0 + g + 1] - bin_offsets[r0 + g] - 1) / 2 + 1;
    }
    const int stride = count | 1, staged_count = count * group;
    const int b_end = min(batch, (int)(blockIdx.y + 1) * batch_per_block);
    for (int b = blockIdx.y * batch_per_block; b < b_end; ++b) {
        const double2* f = fourier + (long long)b * count * rows;
#pragma unroll 4
        for (int e = threadIdx.x; e < staged_count; e += blockDim.x) {
            const int c = e / group;
            const int g = e - c * group;
            if (g < in_group) staged[g * stride + c] = f[(long long)c * rows + r0 + g];
        }
        __syncthreads();  // also orders the tables above before their first use
        double2* out = spectra + (long long)b * bins;
        int g = 0;  // the row of pair q: q only grows, so the search only moves on
        for (int q = threadIdx.x; q < pair_ends[in_group]; q += blockDim.x) {
            while (q >= pair_ends[g + 1]) ++g;
            const long long at = ends[g];
            const int h = (int)(ends[g + 1] - at) - 1, k = q - pair_ends[g];
            const double2* row = staged + g * stride;
            double2 low = bin_sum(row, count, single[g], at + k, k, first, codes, direct);
            double2 high = bin_sum(row, count, single[g], at + h - k, h - k, first, codes, direct);
            if (k == 0) low.y = high.y = 0.0;  // B_0 and B_h: their real parts alone
            const double2 w = twiddle(k, 2 * h);
            out[at + k] = twiddled(low, high, w);
            if (k != 0 && 2 * k != h) out[at + h - k] = twiddled(high, low, make_double2(-w.x, w.y));
        }
        __syncthreads();
    }
}

// out[b, i, r] = B_k times factors[r, i] part by part, B_k being the bin of row r holding wavenumber i's F_m
// (picks[r, i], from Z2Z's Y by the twiddles, above), scaled by 1 / n, its imaginary part negated where the bin
// holds conj F_m; on a simple row (see the fold) that is bin ms[i] times inverse_lengths[r], without the
// per-(row, m) loads. One tile: wavenumbers listed[i0..] (i0.. where ``listed`` is null; ``nlisted`` of them) of
// rows r0.., fields b_first..b_end - 1 in turn; element (b, i, r) of ``out`` at out_at[2 k] + b out_at[2 k + 1] + r
// for the k-th listed wavenumber (where ``out_at`` is null, the (batch, count, rows) array: (b count + i) rows + r).
__device__ __forceinline__ void pick_tile(
    const double2* __restrict__ spectra, long long bins, const long long* __restrict__ picks,
    const double2* __restrict__ factors, const unsigned char* __restrict__ simple,
    const long long* __restrict__ bin_offsets, const int* __restrict__ ms, const double* __restrict__ inverse_lengths,
    int count, int rows, const int* __restrict__ listed, int nlisted, const long long* __restrict__ out_at,
    double2* __restrict__ out, int i0, int r0, int b_first, int b_end, double2 (*tile)[TILE + 1])
{
    for (int b = b_first; b < b_end; ++b) {
        for (int y = threadIdx.y; y < TILE; y += blockDim.y) {  // loads along a row's bins
            const int r = r0 + y, k = i0 + threadIdx.x;
            if (r < rows && k < nlisted) {
                const int i = listed ? listed[k] : k;
                long long bin;
                double2 s;
                if (simple[r]) {
                    bin = bin_offsets[r] + ms[i];
                    s = make_double2(inverse_lengths[r], inverse_lengths[r]);
                } else {
                    const long long p = (long long)r * count + i;
                    bin = picks[p];
                    s = factors[p];
                }
                const long long at = bin_offsets[r];
                const int h = (int)(bin_offsets[r + 1] - at) - 1, j = (int)(bin - at);
                const double2* field = spectra + (long long)b * bins + at;
                const double2 low = field[j == h ? 0 : j], high = field[j == 0 ? 0 : h - j];  // Y_j, Y_h-j
                const double2 w = twiddle(j, 2 * h);
                // (low + conj high) - i conj(w) (low - conj high), halved
                const double2 odd = make_double2(low.x - high.x, low.y + high.y);
                const double2 v = make_double2(
                    0.5 * (low.x + high.x + (w.x * odd.y - w.y * odd.x)),
                    0.5 * (low.y - high.y - (w.x * odd.x + w.y * odd.y)));
                tile[y][threadIdx.x] = make_double2(v.x * s.x, v.y * s.y);
            }
        }
        __syncthreads();
        for (int y = threadIdx.y; y < TILE; y += blockDim.y) {  // stores along the rows
            const int k = i0 + y, r = r0 + threadIdx.x;
            if (k < nlisted && r < rows) {
                const long long at = out_at ? out_at[2 * k] + b * out_at[2 * k + 1] : ((long long)b * count + k) * rows;
                out[at + r] = tile[threadIdx.x][y];
            }
        }
        __syncthreads();
    }
}

// Tile: wavenumbers blockIdx.x * TILE.. of rows blockIdx.y * TILE.., fields blockIdx.z * batch_per_block..
extern "C" __global__ void gridcomm_pick(
    const double2* __restrict__ spectra, long long bins, const long long* __restrict__ picks,
    const double2* __restrict__ factors, const unsigned char* __restrict__ simple,
    const long long* __restrict__ bin_offsets, const int* __restrict__ ms, const double* __restrict__ inverse_lengths,
    int count, int rows, int batch, int batch_per_block, double2* __restrict__ out)
{
    __shared__ double2 tile[TILE][TILE + 1];  // [row][wavenumber]
    const int b_first = blockIdx.z * batch_per_block, b_end = min(batch, b_first + batch_per_block);
    pick_tile(spectra, bins, picks, factors, simple, bin_offsets, ms, inverse_lengths, count, rows, nullptr, count,
              nullptr, out, blockIdx.x * TILE, blockIdx.y * TILE, b_first, b_end, tile);
}

// The pick of the wavenumbers ``listed`` as one exchange of the ipc transport's kernel method
// (transports/ipc_exchange.cuh): each straight into the Legendre side of the rank that owns it, this rank's or a
// peer's, at ``out_at`` (offsets from ``out``, in elements: any allocation mapped here). The blocks take the tiles
// in turn, the wavenumbers fastest, so that every peer's are written at once.
extern "C" __global__ void gridcomm_pick_exchange(
    const double2* __restrict__ spectra, long long bins, const long long* __restrict__ picks,
    const double2* __restrict__ factors, const unsigned char* __restrict__ simple,
    const long long* __restrict__ bin_offsets, const int* __restrict__ ms, const double* __restrict__ inverse_lengths,
    int count, int rows, int batch, int batch_per_block, double2* out, const int* __restrict__ listed, int nlisted,
    const long long* __restrict__ out_at, IPC_EXCHANGE_PARAMS)
{
    __shared__ double2 tile[TILE][TILE + 1];
    const long long across = (nlisted + TILE - 1) / TILE, down = (rows + TILE - 1) / TILE;
    const long long tiles = across * down * ((batch + batch_per_block - 1) / batch_per_block);
    if (ipc_exchange_open(IPC_EXCHANGE_ARGS)) {
        for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
            const long long rest = t / across;
            const int b_first = (int)(rest / down) * batch_per_block;
            pick_tile(spectra, bins, picks, factors, simple, bin_offsets, ms, inverse_lengths, count, rows, listed,
                      nlisted, out_at, out, (int)(t % across) * TILE, (int)(rest % down) * TILE, b_first,
                      min(batch, b_first + batch_per_block), tile);
        }
    }
    ipc_exchange_close(IPC_EXCHANGE_ARGS);
}
