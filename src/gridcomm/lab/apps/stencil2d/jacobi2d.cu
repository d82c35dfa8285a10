// One Jacobi relaxation step of the 2-D five-point star stencil on a rectangle of a rank's block: jacobi_point
// (jacobi2d.cuh) for row0 <= i < row1 and col0 <= j < col1, in local indices of arrays of `pitch` elements per
// row (C order, j contiguous).
//
// Threads: 2-D blocks, threadIdx.x along j (consecutive threads read and write consecutive addresses: coalesced),
// threadIdx.y along i. Grid-stride loops in both directions, so any grid covers any rectangle (the host caps the
// grid's y extent at 65535). The same kernel updates the whole block, the interior that needs no halo, or one
// boundary strip: only the bounds differ.

#include "jacobi2d.cuh"

template <typename T>
__device__ __forceinline__ void jacobi_rectangle(const T* __restrict__ u, T* __restrict__ v, long long pitch,
                                                 int row0, int row1, int col0, int col1, T fifth) {
    const int row_step = static_cast<int>(gridDim.y * blockDim.y);
    const int col_step = static_cast<int>(gridDim.x * blockDim.x);
    for (int i = row0 + static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y); i < row1; i += row_step) {
        const long long row = static_cast<long long>(i) * pitch;
        for (int j = col0 + static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); j < col1; j += col_step) {
            v[row + j] = jacobi_point<T>(u, row + j, pitch, fifth);
        }
    }
}

extern "C" __global__ void gridcomm_jacobi2d_f64(const double* __restrict__ u, double* __restrict__ v,
                                                 long long pitch, int row0, int row1, int col0, int col1,
                                                 double fifth) {
    jacobi_rectangle<double>(u, v, pitch, row0, row1, col0, col1, fifth);
}

extern "C" __global__ void gridcomm_jacobi2d_f32(const float* __restrict__ u, float* __restrict__ v,
                                                 long long pitch, int row0, int row1, int col0, int col1,
                                                 float fifth) {
    jacobi_rectangle<float>(u, v, pitch, row0, row1, col0, col1, fifth);
}
