// The five-point update of one point, shared by every stencil2d kernel (jacobi2d.cu, jacobi2d_nvshmem.cu):
//
//   v[c] = ((((u[c] + u[c - pitch]) + u[c + pitch]) + u[c - 1]) + u[c + 1]) * fifth
//
// (jacobi_sum takes the five values, for a caller whose halo values come from elsewhere)
//
// in the summation order NumPy uses in numpy_kernel.py; compiled without contraction (--fmad=false) every point
// is bitwise NumPy's value.
#pragma once

template <typename T>
__device__ __forceinline__ T jacobi_sum(T centre, T up, T down, T left, T right, T fifth) {
    T sum = centre + up;
    sum = sum + down;
    sum = sum + left;
    sum = sum + right;
    return sum * fifth;
}

template <typename T>
__device__ __forceinline__ T jacobi_point(const T* __restrict__ u, long long c, long long pitch, T fifth) {
    return jacobi_sum<T>(u[c], u[c - pitch], u[c + pitch], u[c - 1], u[c + 1], fifth);
}
