// The 2-D Jacobi dwarf with GPU-initiated halo exchange (NVSHMEM), halo width 1: the modes `nvshmem` and
// `persistent` of stencil2d (shmem_kernel.py). Built by nvcc against libnvshmem_device (gridcomm/shmem.py).
//
// Both fields live in NVSHMEM's symmetric heap, so a rank's field has the same address on every PE. A point on
// the edge of the block is written twice when computed: into this rank's field and straight into the
// neighbour's halo (a store through nvshmem_ptr: NVLink, or the same GPU). Where the neighbour is not reachable
// by stores (another node), the edge is put after the step with nvshmem_putmem / nvshmem_iput instead.
//
// signals[side] (symmetric uint64) holds k + 1 once the neighbour on `side` has delivered the edge of the field
// after step k into this rank's halo (k = 0: the initial field). Step t reads the field after step t - 1, so it
// waits for signals >= t on every side with a neighbour, and signals t + 1 to the neighbours once its own edge
// is out. That is enough: a rank writes the halo of the buffer its neighbour read two steps earlier, and it got
// there only after the neighbour said it had finished that step.
//
// Waits give up after limit_ns (gpu_waits.cuh) and report to host-mapped memory; the kernels then stop.
#include <cooperative_groups.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include "../../packing/kernels/gpu_waits.cuh"
#include "jacobi2d.cuh"

namespace cg = cooperative_groups;

enum Side { UP, DOWN, LEFT, RIGHT, SIDES };
// The plan (int64, built once by shmem_kernel.py): the block is n x n points at local rows and columns 1..n
// of arrays of `pitch` elements per row; PE of the neighbour per side (-1: none); the update region; then up to
// four rectangles (the boundary strips of the nvshmem mode).
enum Plan { N, PITCH, PE_UP, PE_DOWN, PE_LEFT, PE_RIGHT, ROW0, ROW1, COL0, COL1, NRECTS, RECTS, PLAN = RECTS + 16 };

__device__ __forceinline__ int opposite(int side) { return side ^ 1; }

// Where a point of this rank's block lands in the neighbour on `side`: its halo row or column facing this rank.
__device__ __forceinline__ long long landing(int side, int i, int j, int n, long long pitch) {
    switch (side) {
        case UP: return static_cast<long long>(n + 1) * pitch + j;   // my row 1 -> its row n + 1
        case DOWN: return j;                                       // my row n -> its row 0
        case LEFT: return static_cast<long long>(i) * pitch + n + 1; // my column 1 -> its column n + 1
        default: return static_cast<long long>(i) * pitch;         // my column n -> its column 0
    }
}

// The neighbours' fields, as pointers this thread can store through (nullptr: no neighbour, or not reachable).
template <typename T>
struct Remote {
    T* field[SIDES];
    bool by_put[SIDES];  // a neighbour that stores cannot reach: its edge is put after the step
    bool stores;         // some neighbour is reached by stores: they must be fenced before the signal
    bool any;            // some neighbour at all
};

template <typename T>
__device__ Remote<T> remote_fields(T* v, const long long* plan) {
    Remote<T> r;
    r.stores = r.any = false;
    for (int s = 0; s < SIDES; ++s) {
        const int pe = static_cast<int>(plan[PE_UP + s]);
        r.field[s] = pe >= 0 ? static_cast<T*>(nvshmem_ptr(v, pe)) : nullptr;
        r.by_put[s] = pe >= 0 && r.field[s] == nullptr;
        r.stores = r.stores || r.field[s] != nullptr;
        r.any = r.any || pe >= 0;
    }
    return r;
}

// Computes point (i, j) into v, and into every neighbour that faces it.
template <typename T>
__device__ __forceinline__ void update(const T* __restrict__ u, T* __restrict__ v, const Remote<T>& r, int i, int j,
                                       int n, long long pitch, T fifth) {
    const long long c = static_cast<long long>(i) * pitch + j;
    const T value = jacobi_point<T>(u, c, pitch, fifth);
    v[c] = value;
    if (i == 1 && r.field[UP]) r.field[UP][landing(UP, i, j, n, pitch)] = value;
    if (i == n && r.field[DOWN]) r.field[DOWN][landing(DOWN, i, j, n, pitch)] = value;
    if (j == 1 && r.field[LEFT]) r.field[LEFT][landing(LEFT, i, j, n, pitch)] = value;
    if (j == n && r.field[RIGHT]) r.field[RIGHT][landing(RIGHT, i, j, n, pitch)] = value;
}

// Puts the edges of v to neighbours that stores cannot reach (one thread each; rare: another node), then fences
// and signals `value` to every neighbour. One thread.
template <typename T>
__device__ void deliver(T* v, const long long* plan, const Remote<T>& r, uint64_t* signals, uint64_t value) {
    if (!r.any) return;
    const int n = static_cast<int>(plan[N]);
    const long long pitch = plan[PITCH];
    bool put = false;
    for (int s = 0; s < SIDES; ++s) {
        if (!r.by_put[s]) continue;
        put = true;
        const int pe = static_cast<int>(plan[PE_UP + s]);
        const int i = s == DOWN ? n : 1, j = s == RIGHT ? n : 1;
        const long long from = static_cast<long long>(i) * pitch + j, to = landing(s, i, j, n, pitch);
        if (s == UP || s == DOWN)
            nvshmem_putmem(v + to, v + from, n * sizeof(T), pe);
        else if (sizeof(T) == 8)
            nvshmem_double_iput(reinterpret_cast<double*>(v + to), reinterpret_cast<const double*>(v + from), pitch,
                                pitch, n, pe);
        else
            nvshmem_float_iput(reinterpret_cast<float*>(v + to), reinterpret_cast<const float*>(v + from), pitch,
                               pitch, n, pe);
    }
    __threadfence_system();  // the stores through nvshmem_ptr are visible before the signals
    if (put) nvshmem_fence();  // and so are the puts
    for (int s = 0; s < SIDES; ++s) {
        const int pe = static_cast<int>(plan[PE_UP + s]);
        if (pe >= 0) nvshmemx_signal_op(signals + opposite(s), value, NVSHMEM_SIGNAL_SET, pe);
    }
}

// Thread 0 of the block waits until every neighbour has delivered the field after step `step - 1`.
__device__ bool halos_arrived(const long long* plan, uint64_t* signals, long long step, unsigned long long limit_ns,
                              volatile long long* error) {
    const unsigned long long start = now_ns();
    for (int s = 0; s < SIDES; ++s) {
        const int pe = static_cast<int>(plan[PE_UP + s]);
        if (pe >= 0 && !wait_at_least(reinterpret_cast<volatile long long*>(signals + s), step, start, limit_ns,
                                      error, pe, WAIT_DATA))
            return false;
    }
    return true;
}

// The initial exchange: every edge of the field after step `step` (all of the block's edge rows and columns)
// to the neighbours, then signal step + 1. One block per side.
template <typename T>
__device__ void send_edges(T* v, const long long* plan, uint64_t* signals, long long step, unsigned int* finished) {
    const int n = static_cast<int>(plan[N]);
    const long long pitch = plan[PITCH];
    __shared__ Remote<T> r;
    if (threadIdx.x == 0) r = remote_fields<T>(v, plan);
    __syncthreads();
    const int s = blockIdx.x;
    if (s < SIDES && r.field[s]) {
        for (int k = 1 + threadIdx.x; k <= n; k += blockDim.x) {
            const int i = s == UP ? 1 : s == DOWN ? n : k, j = s == LEFT ? 1 : s == RIGHT ? n : k;
            r.field[s][landing(s, i, j, n, pitch)] = v[static_cast<long long>(i) * pitch + j];
        }
    }
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0 && atomicAdd(finished, 1u) == gridDim.x - 1) {
        *finished = 0;
        deliver<T>(v, plan, r, signals, static_cast<uint64_t>(step + 1));
    }
}

// The nvshmem mode's boundary kernel for step `step`: wait for the halos, update the boundary strips (their edge
// points go straight to the neighbours), and the last block to finish signals. The interior is jacobi2d.cu's.
template <typename T>
__device__ void boundary_step(const T* u, T* v, const long long* plan, uint64_t* signals, long long step, T fifth,
                              unsigned int* finished, unsigned long long limit_ns, volatile long long* error) {
    const int n = static_cast<int>(plan[N]);
    const long long pitch = plan[PITCH];
    __shared__ Remote<T> r;
    __shared__ bool arrived;
    if (threadIdx.x == 0) {
        r = remote_fields<T>(v, plan);
        arrived = halos_arrived(plan, signals, step, limit_ns, error);
    }
    __syncthreads();
    if (arrived) {
        const long long* rect = plan + RECTS;
        long long total = 0;
        for (int k = 0; k < plan[NRECTS]; ++k) total += (rect[4 * k + 1] - rect[4 * k]) * (rect[4 * k + 3] - rect[4 * k + 2]);
        for (long long p = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; p < total;
             p += static_cast<long long>(gridDim.x) * blockDim.x) {
            long long q = p;
            int k = 0;
            for (;; ++k) {
                const long long points = (rect[4 * k + 1] - rect[4 * k]) * (rect[4 * k + 3] - rect[4 * k + 2]);
                if (q < points) break;
                q -= points;
            }
            const long long cols = rect[4 * k + 3] - rect[4 * k + 2];
            update<T>(u, v, r, static_cast<int>(rect[4 * k] + q / cols), static_cast<int>(rect[4 * k + 2] + q % cols), n,
                      pitch, fifth);
        }
    }
    if (r.stores) __threadfence_system();  // this thread's stores into the neighbours land before the signal
    __syncthreads();
    if (threadIdx.x == 0 && atomicAdd(finished, 1u) == gridDim.x - 1) {
        *finished = 0;
        if (arrived) deliver<T>(v, plan, r, signals, static_cast<uint64_t>(step + 1));
    }
}

// The persistent mode: `steps` steps from step `first + 1` in one cooperative launch. Each step: wait for the
// halos, update the whole region tile by tile (blockDim.y x blockDim.x points; edges straight into the
// neighbours), sync grid-wide (a block barrier when the grid is one block: small n, where the step is all
// latency), one thread signals. A wait that gives up stops every block at the next sync.
template <typename T>
__device__ void persistent(T* a, T* b, const long long* plan, uint64_t* signals, long long first, int steps, T fifth,
                           unsigned int* stop, unsigned long long limit_ns, volatile long long* error) {
    cg::grid_group grid = cg::this_grid();
    const int n = static_cast<int>(plan[N]);
    const long long pitch = plan[PITCH];
    const int row0 = static_cast<int>(plan[ROW0]), row1 = static_cast<int>(plan[ROW1]);
    const int col0 = static_cast<int>(plan[COL0]), col1 = static_cast<int>(plan[COL1]);
    const int tile_rows = blockDim.y, tile_cols = blockDim.x;
    const int tiles_across = (col1 - col0 + tile_cols - 1) / tile_cols;
    const int tiles = row1 > row0 ? ((row1 - row0 + tile_rows - 1) / tile_rows) * tiles_across : 0;
    const bool leader = threadIdx.x == 0 && threadIdx.y == 0;
    __shared__ Remote<T> remote[2];
    if (leader) {
        remote[0] = remote_fields<T>(b, plan);  // step first + 1 writes b
        remote[1] = remote_fields<T>(a, plan);
    }
    for (int s = 0; s < steps; ++s) {
        const long long step = first + 1 + s;
        const T* u = (s & 1) ? b : a;
        T* v = (s & 1) ? a : b;
        if (leader && !halos_arrived(plan, signals, step, limit_ns, error)) atomicExch(stop, 1u);
        __syncthreads();
        const Remote<T>& r = remote[s & 1];
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            const int i = row0 + (t / tiles_across) * tile_rows + threadIdx.y;
            const int j = col0 + (t % tiles_across) * tile_cols + threadIdx.x;
            if (i < row1 && j < col1) update<T>(u, v, r, i, j, n, pitch, fifth);
        }
        if (r.stores) __threadfence_system();  // this thread's stores into the neighbours land before the signal
        if (gridDim.x == 1)
            __syncthreads();
        else
            grid.sync();
        if (*reinterpret_cast<volatile unsigned int*>(stop)) break;  // every block sees it after the same sync
        if (leader && blockIdx.x == 0) deliver<T>(v, plan, r, signals, static_cast<uint64_t>(step + 1));
    }
}

#define GRIDCOMM_JACOBI_SHMEM(T, suffix)                                                                              \
    extern "C" __global__ void gridcomm_jacobi2d_send_edges_##suffix(T* v, const long long* plan, uint64_t* signals,  \
                                                                     long long step, unsigned int* finished) {        \
        send_edges<T>(v, plan, signals, step, finished);                                                             \
    }                                                                                                                 \
    extern "C" __global__ void gridcomm_jacobi2d_boundary_##suffix(                                                   \
        const T* u, T* v, const long long* plan, uint64_t* signals, long long step, T fifth, unsigned int* finished,  \
        unsigned long long limit_ns, volatile long long* error) {                                                     \
        boundary_step<T>(u, v, plan, signals, step, fifth, finished, limit_ns, error);                               \
    }                                                                                                                 \
    extern "C" __global__ void __launch_bounds__(1024) gridcomm_jacobi2d_persistent_##suffix(                         \
        T* a, T* b, const long long* plan, uint64_t* signals, long long first, int steps, T fifth, unsigned int* stop, \
        unsigned long long limit_ns, volatile long long* error) {                                                     \
        persistent<T>(a, b, plan, signals, first, steps, fifth, stop, limit_ns, error);                              \
    }

GRIDCOMM_JACOBI_SHMEM(double, f64)
GRIDCOMM_JACOBI_SHMEM(float, f32)
