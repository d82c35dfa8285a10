// The spectral transform's Fourier half on the GPU, besides cuFFT (apps/spectral/fourier.py): the fold before
// the inverse row FFTs and the pick after the direct ones, each one launch over every row and field.
//
// Arrays are C-contiguous complex128 (double2): Fourier coefficients (batch, M, rows), half spectra
// (batch, bins) with each row's bins side by side from bin_offsets[row]. Both steps move data between the m axis
// (rows fastest) and the rows' bins (bin fastest): a transposition, done through a 32 x 32 tile in shared memory
// so that loads and stores both run along contiguous memory (for wavenumbers in ascending runs). A block of
// 32 x 8 threads does one tile for `batch_per_block` fields in turn (its index loads then hit L1).
#define TILE 32

// spectra[b, bin_offsets[r] + k] = sum of the terms codes[first[j] .. first[j + 1]) of bin j = bin_offsets[r] + k:
// code c < M is F_c, M <= c < 2M is conj F_(c - M), 2M is zero. Tile: bins k0.. of rows r0..
extern "C" __global__ void gridcomm_fold(
    const double2* __restrict__ fourier, int count, int rows, int batch, int batch_per_block,
    const long long* __restrict__ bin_offsets, const long long* __restrict__ first, const int* __restrict__ codes,
    long long bins, double2* __restrict__ spectra)
{
    __shared__ double2 tile[TILE][TILE + 1];  // [bin][row]; the padding staggers the banks of a column
    const int k0 = blockIdx.x * TILE, r0 = blockIdx.y * TILE;
    const int b_end = min(batch, (int)(blockIdx.z + 1) * batch_per_block);
    for (int b = blockIdx.z * batch_per_block; b < b_end; ++b) {
        const double2* f = fourier + (long long)b * count * rows;
        for (int y = threadIdx.y; y < TILE; y += blockDim.y) {  // loads along the rows (the m axis's fast one)
            const int r = r0 + threadIdx.x;
            double2 sum = make_double2(0.0, 0.0);
            if (r < rows) {
                const long long j = bin_offsets[r] + k0 + y;
                if (j < bin_offsets[r + 1]) {
                    for (long long t = first[j]; t < first[j + 1]; ++t) {
                        const int c = codes[t];
                        if (c < count) {
                            const double2 v = f[(long long)c * rows + r];
                            sum.x += v.x;
                            sum.y += v.y;
                        } else if (c < 2 * count) {
                            const double2 v = f[(long long)(c - count) * rows + r];
                            sum.x += v.x;
                            sum.y -= v.y;
                        }
                    }
                }
            }
            tile[y][threadIdx.x] = sum;
        }
        __syncthreads();
        for (int y = threadIdx.y; y < TILE; y += blockDim.y) {  // stores along each row's bins
            const int r = r0 + y;
            if (r < rows) {
                const long long j = bin_offsets[r] + k0 + threadIdx.x;
                if (j < bin_offsets[r + 1]) spectra[(long long)b * bins + j] = tile[threadIdx.x][y];
            }
        }
        __syncthreads();
    }
}

// out[b, i, r] = spectra[b, picks[r, i]] times factors[r, i] part by part: the bin holding wavenumber i's F_m on
// row r, scaled by 1 / n, its imaginary part negated where the bin holds conj F_m. Tile: wavenumbers i0.. of
// rows r0..
extern "C" __global__ void gridcomm_pick(
    const double2* __restrict__ spectra, long long bins, const long long* __restrict__ picks,
    const double2* __restrict__ factors, int count, int rows, int batch, int batch_per_block,
    double2* __restrict__ out)
{
    __shared__ double2 tile[TILE][TILE + 1];  // [row][wavenumber]
    const int i0 = blockIdx.x * TILE, r0 = blockIdx.y * TILE;
    const int b_end = min(batch, (int)(blockIdx.z + 1) * batch_per_block);
    for (int b = blockIdx.z * batch_per_block; b < b_end; ++b) {
        for (int y = threadIdx.y; y < TILE; y += blockDim.y) {  // loads along a row's bins
            const int r = r0 + y, i = i0 + threadIdx.x;
            if (r < rows && i < count) {
                const long long p = (long long)r * count + i;
                const double2 v = spectra[(long long)b * bins + picks[p]];
                const double2 s = factors[p];
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
