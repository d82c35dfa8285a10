// The spectral transform's Fourier half on the GPU, besides cuFFT (apps/spectral/fourier.py): the fold before
// the inverse row FFTs and the pick after the direct ones, each one launch over every row and field.
//
// Arrays are C-contiguous complex128 (double2): Fourier coefficients (batch, M, rows), half spectra
// (batch, bins) with each row's bins side by side from bin_offsets[row]. Both steps move data between the m axis
// (rows fastest) and the rows' bins (bin fastest): a transposition through shared memory, so that loads and
// stores both run along contiguous memory. A block does its part for `batch_per_block` fields in turn (its index
// loads then hit L1).
#define TILE 32  // the pick's tile side

// spectra[b, bin_offsets[r] + k] = sum of the terms codes[first[j] .. first[j + 1]) of bin j = bin_offsets[r] + k:
// code c < M is F_c, M <= c < 2M is conj F_(c - M), 2M is zero. Where simple[r], every bin k of row r has the one
// term direct[k] (the position of m = k, or 2M where no m = k is there): the rows at least 2M long.
//
// A block does the G = `group` (at most FOLD_GROUP) rows from G * blockIdx.x for `batch_per_block` fields in
// turn. It first stages the group's F_c of every c in shared memory, loading the G neighbouring rows of one c
// together (contiguous), and keeping row g's at staged[g * S + c], S = M rounded up to odd: the bins that
// neighbouring threads sum then read neighbouring words, and the staging stores hit distinct banks. Its threads
// then share out the group's bins (one contiguous range of the half spectra), each summing its bins' terms from
// there and storing them in turn. Every F_c is read from memory once however many bins it folds onto: the rows
// shorter than 2M, whose bins gather several terms each from all over the m axis, cost no more than the others.
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
    const int r0 = blockIdx.x * group, in_group = min(group, rows - r0);
    __shared__ bool single[FOLD_GROUP];  // simple[r] of the group's rows
    if (threadIdx.x <= in_group) ends[threadIdx.x] = bin_offsets[r0 + threadIdx.x];
    if (threadIdx.x < in_group) single[threadIdx.x] = simple[r0 + threadIdx.x];
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
        __syncthreads();
        int g = 0;  // the row of bin j: j only grows, so the search only moves on
        for (long long j = ends[0] + threadIdx.x; j < ends[in_group]; j += blockDim.x) {
            while (j >= ends[g + 1]) ++g;
            double2 sum = make_double2(0.0, 0.0);
            if (single[g]) {  // the one term of bin k is F_k, or zero (no index loads)
                const int c = direct[j - ends[g]];
                if (c < count) sum = staged[g * stride + c];
            } else {
                for (long long t = first[j]; t < first[j + 1]; ++t) {
                    const int c = codes[t];
                    if (c < count) {
                        const double2 v = staged[g * stride + c];
                        sum.x += v.x;
                        sum.y += v.y;
                    } else if (c < 2 * count) {
                        const double2 v = staged[g * stride + c - count];
                        sum.x += v.x;
                        sum.y -= v.y;
                    }
                }
            }
            spectra[(long long)b * bins + j] = sum;
        }
        __syncthreads();
    }
}

// out[b, i, r] = spectra[b, picks[r, i]] times factors[r, i] part by part: the bin holding wavenumber i's F_m on
// row r, scaled by 1 / n, its imaginary part negated where the bin holds conj F_m; on a simple row (see the fold)
// that is bin ms[i] times inverse_lengths[r], without the per-(row, m) loads. Tile: wavenumbers i0.. of rows r0..
extern "C" __global__ void gridcomm_pick(
    const double2* __restrict__ spectra, long long bins, const long long* __restrict__ picks,
    const double2* __restrict__ factors, const unsigned char* __restrict__ simple,
    const long long* __restrict__ bin_offsets, const int* __restrict__ ms, const double* __restrict__ inverse_lengths,
    int count, int rows, int batch, int batch_per_block, double2* __restrict__ out)
{
    __shared__ double2 tile[TILE][TILE + 1];  // [row][wavenumber]
    const int i0 = blockIdx.x * TILE, r0 = blockIdx.y * TILE;
    const int b_end = min(batch, (int)(blockIdx.z + 1) * batch_per_block);
    for (int b = blockIdx.z * batch_per_block; b < b_end; ++b) {
        for (int y = threadIdx.y; y < TILE; y += blockDim.y) {  // loads along a row's bins
            const int r = r0 + y, i = i0 + threadIdx.x;
            if (r < rows && i < count) {
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
                const double2 v = spectra[(long long)b * bins + bin];
                tile[y][threadIdx.x] = make_double2(v.x * s.x, v.y * s.y);
            }
        }
        __syncthreads();
        for (int y = threadIdx.y; y < TILE; y += blockDim.y) {  // stores along the rows
            const int i = i0 + y, r = r0 + threadIdx.x;
            if (i < count && r < rows) out[((long long)b * count + i) * rows + r] = tile[threadIdx.x][y];
        }
        __syncthreads();
    }
}
