// The five-point update of one point, shared by every stencil2d kernel (jacobi2d.cu, jacobi2d_nvshmem.cu):
//
//   v[c] = ((((u[c] + u[c - pitch]) + u[c + pitch]) + u[c - 1]) + u[c + 1]) * fifth
//
// in the summation order NumPy uses in numpy_kernel.py; compiled without contraction (--fmad=false) every point
// is bitwise NumPy's value.
#pragma once

template <typename T>
__device__ __forceinline__ T jacobi_point(const T* __restrict__ u, long long c, long long pitch, T fifth) {
    T sum = u[c] + u[c - pitch];
    sum = sum + u[c + pitch];
    sum = sum + u[c - 1];
    sum = sum + u[c + 1];
    return sum * fifth;
}
