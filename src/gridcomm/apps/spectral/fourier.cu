// The spectral transform's Fourier half on the GPU, besides cuFFT (apps/spectral/fourier.py): the fold before
// the inverse row FFTs and the pick after the direct ones, each one launch over every row.
//
// Arrays are C-contiguous complex128 (double2): Fourier coefficients (batch, M, rows), half spectra
// (batch, bins) with the rows' bins side by side. Threads walk the output in order (a grid-stride loop), so
// stores are coalesced; the gathered loads of one field stay within a few MB, which L2 holds.

// spectra[b, j] = sum of the terms codes[first[j] .. first[j + 1]) of bin j (on row bin_row[j]):
// code c < M is F_c, M <= c < 2M is conj F_(c - M), 2M is zero.
extern "C" __global__ void gridcomm_fold(
    const double2* __restrict__ fourier, int count, int rows,
    const int* __restrict__ bin_row, const long long* __restrict__ first, const int* __restrict__ codes,
    long long bins, long long total, double2* __restrict__ spectra)
{
    for (long long g = blockIdx.x * (long long)blockDim.x + threadIdx.x; g < total;
         g += (long long)gridDim.x * blockDim.x) {
        const long long b = g / bins, j = g - b * bins;
        const double2* f = fourier + b * count * (long long)rows + bin_row[j];
        double2 sum = make_double2(0.0, 0.0);
        for (long long t = first[j]; t < first[j + 1]; ++t) {
            const int c = codes[t];
            if (c < count) {
                const double2 v = f[(long long)c * rows];
                sum.x += v.x;
                sum.y += v.y;
            } else if (c < 2 * count) {
                const double2 v = f[(long long)(c - count) * rows];
                sum.x += v.x;
                sum.y -= v.y;
            }
        }
        spectra[g] = sum;
    }
}

// out[b, i] = spectra[b, picks[i]] times factors[i] part by part (i runs over M x rows): the bin holding F_m on
// each row, scaled by 1 / n, its imaginary part negated where the bin holds conj F_m.
extern "C" __global__ void gridcomm_pick(
    const double2* __restrict__ spectra, long long bins, const long long* __restrict__ picks,
    const double2* __restrict__ factors, long long per_field, long long total, double2* __restrict__ out)
{
    for (long long g = blockIdx.x * (long long)blockDim.x + threadIdx.x; g < total;
         g += (long long)gridDim.x * blockDim.x) {
        const long long b = g / per_field, i = g - b * per_field;
        const double2 v = spectra[b * bins + picks[i]];
        const double2 f = factors[i];
        out[g] = make_double2(v.x * f.x, v.y * f.y);
    }
}
