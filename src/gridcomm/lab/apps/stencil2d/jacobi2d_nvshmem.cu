// The 2-D Jacobi dwarf with GPU-initiated halo exchange (NVSHMEM), halo width 1: the modes `nvshmem` and
// `persistent` of stencil2d (shmem_kernel.py). Built by nvcc against libnvshmem_device (gridcomm/shmem.py).
//
// Both fields live in NVSHMEM's symmetric heap, so a rank's field has the same address on every PE. A point on
// the edge of the block is written twice when computed: into this rank's field and straight into the
// neighbour's halo (a store through nvshmem_ptr: NVLink, or the same GPU). Where the neighbour is not reachable
// by stores (another node), the edge is put after the step with nvshmem_putmem / nvshmem_iput instead.
//
// nvshmem mode: signals[side] (symmetric uint64) holds k + 1 once the neighbour on `side` has delivered the edge
// of the field after step k into this rank's halo (k = 0: the initial field). Step t reads the field after step
// t - 1, so it waits for signals >= t on every side with a neighbour, and signals t + 1 to the neighbours once its
// own edge is out. That is enough: a rank writes the halo of the buffer its neighbour read two steps earlier, and
// it got there only after the neighbour said it had finished that step. The signal must follow the edge's
// stores, so each step pays a system-wide fence (a round trip over NVLink) before it.
//
// persistent mode, neighbours reached by stores: no fence and no signal. Each edge value travels with its step's
// tag in one line (Line below: every 8-byte half carries the tag, and 8-byte stores land whole, over NVLink
// too: NCCL's LL protocol), into lines[side][k & 1][position] of the neighbour for the value after step k. The
// thread that updates an edge point of step t polls its own line of step t - 1 until the tag is there, and only
// then computes and sends its value of step t; so a line is overwritten (step t + 1 into parity t - 1) only
// after the neighbour got the value that its reader computed from it. The lines start zeroed: tags are k + 1.
//
// Waits give up after limit_ns (gpu_waits.cuh) and report to host-mapped memory; the kernels then stop.
#include <cooperative_groups.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include "../../../transports/gpu_waits.cuh"
#include "jacobi2d.cuh"

namespace cg = cooperative_groups;

enum Side { UP, DOWN, LEFT, RIGHT, SIDES };
// The plan (int64, built once by shmem_kernel.py): the block is n x n points at local rows and columns 1..n
// of arrays of `pitch` elements per row; PE of the neighbour per side (-1: none); the update region; then up to
// four rectangles (the boundary strips of the nvshmem mode).
enum Plan { N, PITCH, PE_UP, PE_DOWN, PE_LEFT, PE_RIGHT, ROW0, ROW1, COL0, COL1, NRECTS, RECTS, PLAN = RECTS + 16 };

__device__ __forceinline__ int opposite(int side) { return side ^ 1; }

// How the edge reaches the neighbour on a side: stores into its halo then a signal (nvshmem mode), lines with
// tags (persistent mode), or puts then a signal (a neighbour that stores cannot reach: another node).
enum How { NONE, STORE, LINE, PUT };

// A halo value with its step's tag in each 8-byte half (the persistent mode's lines; see the top of the file).
template <typename T>
struct Line;

template <>
struct Line<double> {
    uint4 raw;  // low word, tag, high word, tag

    __device__ __forceinline__ void put(double value, unsigned tag) {
        const unsigned long long bits = static_cast<unsigned long long>(__double_as_longlong(value));
        asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(&raw), "r"(static_cast<unsigned>(bits)),
                     "r"(tag), "r"(static_cast<unsigned>(bits >> 32)), "r"(tag)
                     : "memory");
    }
    __device__ __forceinline__ bool take(unsigned tag, double& value) const {
        unsigned low, tag_low, high, tag_high;
        asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(low), "=r"(tag_low), "=r"(high), "=r"(tag_high)
                     : "l"(&raw)
                     : "memory");
        if (tag_low != tag || tag_high != tag) return false;
        value = __longlong_as_double(static_cast<long long>((static_cast<unsigned long long>(high) << 32) | low));
        return true;
    }
};

template <>
struct Line<float> {
    uint2 raw;  // value, tag

    __device__ __forceinline__ void put(float value, unsigned tag) {
        asm volatile("st.volatile.global.v2.u32 [%0], {%1, %2};" ::"l"(&raw), "r"(__float_as_uint(value)), "r"(tag)
                     : "memory");
    }
    __device__ __forceinline__ bool take(unsigned tag, float& value) const {
        unsigned bits, seen;
        asm volatile("ld.volatile.global.v2.u32 {%0, %1}, [%2];" : "=r"(bits), "=r"(seen) : "l"(&raw) : "memory");
        if (seen != tag) return false;
        value = __uint_as_float(bits);
        return true;
    }
};

// The line of the value after step k at `position` (0-based along the edge) of the edge that arrives from `side`.
template <typename L>  // Line<T>, const or not
__device__ __forceinline__ L* line_at(L* lines, int side, long long k, int position, int n) {
    return lines + (static_cast<long long>(side) * 2 + (k & 1)) * n + position;
}

// Where a point of this rank's block lands in the neighbour on `side`: its halo row or column facing this rank.
__device__ __forceinline__ long long landing(int side, int i, int j, int n, long long pitch) {
    switch (side) {
        case UP: return static_cast<long long>(n + 1) * pitch + j;   // my row 1 -> its row n + 1
        case DOWN: return j;                                       // my row n -> its row 0
        case LEFT: return static_cast<long long>(i) * pitch + n + 1; // my column 1 -> its column n + 1
        default: return static_cast<long long>(i) * pitch;         // my column n -> its column 0
    }
}

// Is point (i, j) on the edge that faces `side`, and where along that edge (0-based)?
__device__ __forceinline__ bool on_edge(int side, int i, int j, int n) {
    return side == UP ? i == 1 : side == DOWN ? i == n : side == LEFT ? j == 1 : j == n;
}
__device__ __forceinline__ int along(int side, int i, int j) { return side < LEFT ? j - 1 : i - 1; }
__device__ __forceinline__ bool on_any_edge(int i, int j, int n) { return i == 1 || i == n || j == 1 || j == n; }

// The neighbours, as this thread reaches them: how each side's edge goes, and the pointers it stores through
// (the neighbour's field for STORE, its lines for LINE).
template <typename T>
struct Remote {
    How how[SIDES];
    T* field[SIDES];
    Line<T>* line[SIDES];
    bool stores;    // some edge goes by stores: they must be fenced before the signal
    bool signals;   // some edge is followed by a signal (STORE or PUT): waited for, and sent by `deliver`
};

// lines: the persistent mode's (nullptr in the nvshmem mode, whose neighbours reached by stores are STORE).
template <typename T>
__device__ Remote<T> remote_fields(T* v, Line<T>* lines, const long long* plan) {
    Remote<T> r;
    r.stores = r.signals = false;
    for (int s = 0; s < SIDES; ++s) {
        const int pe = static_cast<int>(plan[PE_UP + s]);
        r.field[s] = nullptr;
        r.line[s] = nullptr;
        r.how[s] = NONE;
        if (pe < 0) continue;
        if (lines) r.line[s] = static_cast<Line<T>*>(nvshmem_ptr(lines, pe));
        if (!r.line[s]) r.field[s] = static_cast<T*>(nvshmem_ptr(v, pe));
        r.how[s] = r.line[s] ? LINE : r.field[s] ? STORE : PUT;
        r.stores = r.stores || r.how[s] == STORE;
        r.signals = r.signals || r.how[s] != LINE;
    }
    return r;
}

// Sends the value of edge point (i, j) after step `step` to every neighbour that faces it (stores or lines).
template <typename T>
__device__ __forceinline__ void send(const Remote<T>& r, T value, int i, int j, int n, long long pitch, long long step) {
    for (int s = 0; s < SIDES; ++s) {
        if (!on_edge(s, i, j, n)) continue;
        if (r.how[s] == STORE) r.field[s][landing(s, i, j, n, pitch)] = value;
        if (r.how[s] == LINE)
            line_at(r.line[s], opposite(s), step, along(s, i, j), n)->put(value, static_cast<unsigned>(step + 1));
    }
}

// Computes point (i, j) of step `step` into v, and sends it to every neighbour that faces it.
template <typename T>
__device__ __forceinline__ void update(const T* __restrict__ u, T* __restrict__ v, const Remote<T>& r, int i, int j,
                                       int n, long long pitch, T fifth, long long step) {
    const long long c = static_cast<long long>(i) * pitch + j;
    const T value = jacobi_point<T>(u, c, pitch, fifth);
    v[c] = value;
    if (on_any_edge(i, j, n)) send<T>(r, value, i, j, n, pitch, step);
}

// The persistent kernel's phases, timed per block when built with GRIDCOMM_PERSISTENT_PROFILE (only
// benchmarks/tune_persistent.py --profile does): nanoseconds summed over a launch's steps in each phase, the
// polls of lines whose value had not come yet, and the edge points that polled at all. Every lap is a block
// barrier, so a profiled step is a little slower than the library's.
enum ProfileSlot { EDGES_NS, TILES_NS, SYNC_NS, POLLS, LATE_POINTS, PROFILE_SLOTS };
#ifdef GRIDCOMM_PERSISTENT_PROFILE
constexpr int PROFILE_BLOCKS = 1024;  // more blocks than any GPU keeps resident
__device__ unsigned long long gridcomm_persistent_profile[PROFILE_BLOCKS * PROFILE_SLOTS];
__device__ __forceinline__ void profile_add(int slot, unsigned long long amount) {
    if (amount && blockIdx.x < PROFILE_BLOCKS)
        atomicAdd(&gridcomm_persistent_profile[blockIdx.x * PROFILE_SLOTS + slot], amount);
}
struct PhaseClock {
    unsigned long long last;
    __device__ void start() { last = now_ns(); }
    __device__ void lap(int slot) {  // every thread of the block calls it
        __syncthreads();
        const unsigned long long t = now_ns();
        if (threadIdx.x == 0 && threadIdx.y == 0) profile_add(slot, t - last);
        last = t;
    }
};
#else
__device__ __forceinline__ void profile_add(int, unsigned long long) {}
struct PhaseClock {
    __device__ void start() {}
    __device__ void lap(int) {}
};
#endif

// The persistent mode's update of point (i, j): an edge point first waits for the halo values that come in lines
// (those of step - 1, in place of u's halo: near[s] is the value on side s). False (reported) where a neighbour
// is still silent after limit_ns.
template <typename T>
__device__ __forceinline__ bool update_taking_lines(const T* __restrict__ u, T* __restrict__ v, const Line<T>* mine,
                                                    const Remote<T>& r, const long long* plan, int i, int j, int n,
                                                    long long pitch, T fifth, long long step,
                                                    unsigned long long limit_ns, volatile long long* error,
                                                    const volatile unsigned int* stop) {
    const long long c = static_cast<long long>(i) * pitch + j;
    if (!on_any_edge(i, j, n)) {
        v[c] = jacobi_point<T>(u, c, pitch, fifth);
        return true;
    }
    T near[SIDES] = {u[c - pitch], u[c + pitch], u[c - 1], u[c + 1]};  // UP, DOWN, LEFT, RIGHT
    bool arrived = true;
    for (int s = 0; s < SIDES && arrived; ++s) {
        if (r.how[s] != LINE || !on_edge(s, i, j, n)) continue;
        const Line<T>* line = line_at(mine, s, step - 1, along(s, i, j), n);
        const unsigned long long start = now_ns();
        unsigned long long polls = 0;
        while (arrived && !line->take(static_cast<unsigned>(step), near[s])) {
            ++polls;
            if (*stop) arrived = false;  // another wait gave up already: this step is lost anyway
            if (arrived && now_ns() - start > limit_ns) {
                report(error, static_cast<int>(plan[PE_UP + s]), step, WAIT_DATA);
                arrived = false;
            }
        }
        profile_add(POLLS, polls);
        profile_add(LATE_POINTS, polls > 0);
    }
    const T value = jacobi_sum<T>(u[c], near[UP], near[DOWN], near[LEFT], near[RIGHT], fifth);
    v[c] = value;
    if (arrived) send<T>(r, value, i, j, n, pitch, step);  // never a tagged value made from a halo that did not come
    return arrived;
}

// Puts the edges of v to neighbours that stores cannot reach (one thread each; rare: another node), then fences
// and signals `value` to every neighbour. One thread.
template <typename T>
__device__ void deliver(T* v, const long long* plan, const Remote<T>& r, uint64_t* signals, uint64_t value) {
    if (!r.signals) return;
    const int n = static_cast<int>(plan[N]);
    const long long pitch = plan[PITCH];
    bool put = false;
    for (int s = 0; s < SIDES; ++s) {
        if (r.how[s] != PUT) continue;
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
        if (r.how[s] == STORE || r.how[s] == PUT)
            nvshmemx_signal_op(signals + opposite(s), value, NVSHMEM_SIGNAL_SET, static_cast<int>(plan[PE_UP + s]));
    }
}

// Thread 0 of the block waits until every neighbour that signals has delivered the field after step `step - 1`.
template <typename T>
__device__ bool halos_arrived(const long long* plan, const Remote<T>& r, uint64_t* signals, long long step,
                              unsigned long long limit_ns, volatile long long* error) {
    const unsigned long long start = now_ns();
    for (int s = 0; s < SIDES; ++s) {
        if ((r.how[s] == STORE || r.how[s] == PUT) &&
            !wait_at_least(reinterpret_cast<volatile long long*>(signals + s), step, start, limit_ns, error,
                           static_cast<int>(plan[PE_UP + s]), WAIT_DATA))
            return false;
    }
    return true;
}

// The initial exchange: every edge of the field after step `step` (all of the block's edge rows and columns)
// to the neighbours, for either mode: stored into their halos then signalled step + 1 (nvshmem), and in lines
// (persistent, where stores reach). One block per side.
template <typename T>
__device__ void send_edges(T* v, Line<T>* lines, const long long* plan, uint64_t* signals, long long step,
                           unsigned int* finished) {
    const int n = static_cast<int>(plan[N]);
    const long long pitch = plan[PITCH];
    __shared__ Remote<T> r, by_line;
    if (threadIdx.x == 0) {
        r = remote_fields<T>(v, nullptr, plan);
        by_line = remote_fields<T>(v, lines, plan);
    }
    __syncthreads();
    const int s = blockIdx.x;
    for (int k = 1 + threadIdx.x; s < SIDES && k <= n; k += blockDim.x) {
        const int i = s == UP ? 1 : s == DOWN ? n : k, j = s == LEFT ? 1 : s == RIGHT ? n : k;
        const T value = v[static_cast<long long>(i) * pitch + j];
        if (r.how[s] == STORE) r.field[s][landing(s, i, j, n, pitch)] = value;
        if (by_line.how[s] == LINE)
            line_at(by_line.line[s], opposite(s), step, k - 1, n)->put(value, static_cast<unsigned>(step + 1));
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
        r = remote_fields<T>(v, nullptr, plan);
        arrived = halos_arrived(plan, r, signals, step, limit_ns, error);
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
                      pitch, fifth, step);
        }
    }
    if (r.stores) __threadfence_system();  // this thread's stores into the neighbours land before the signal
    __syncthreads();
    if (threadIdx.x == 0 && atomicAdd(finished, 1u) == gridDim.x - 1) {
        *finished = 0;
        if (arrived) deliver<T>(v, plan, r, signals, static_cast<uint64_t>(step + 1));
    }
}

// The edge points of the persistent mode: those facing a neighbour whose halo values come in lines. Rows `row[0]`
// and `row[1]` (the first `rows` of them) across the update region's columns, then columns `col[0]`, `col[1]`
// (the first `cols`) over the rows between; the other points of the region form the rectangle `inner`.
struct Edges {
    int rows, row[2], width, col0;
    int cols, col[2], height, row0;
    int inner[4];  // row0, row1, col0, col1

    __device__ int points() const { return rows * width + cols * height; }
    __device__ void point(int p, int& i, int& j) const {
        if (p < rows * width) {
            i = row[p / width];
            j = col0 + p % width;
        } else {
            p -= rows * width;
            j = col[p / height];
            i = row0 + p % height;
        }
    }
};

template <typename T>
__device__ Edges edges_by_line(const Remote<T>& r, const long long* plan) {
    Edges e;
    int* in = e.inner;
    for (int k = 0; k < 4; ++k) in[k] = static_cast<int>(plan[ROW0 + k]);
    // A side that comes in lines has a neighbour, so the region reaches the block's edge on that side.
    e.rows = e.cols = 0;
    if (r.how[UP] == LINE) e.row[e.rows++] = in[0]++;
    if (r.how[DOWN] == LINE && in[1] > in[0]) e.row[e.rows++] = --in[1];
    if (r.how[LEFT] == LINE) e.col[e.cols++] = in[2]++;
    if (r.how[RIGHT] == LINE && in[3] > in[2]) e.col[e.cols++] = --in[3];
    e.width = static_cast<int>(plan[COL1] - plan[COL0]);
    e.col0 = static_cast<int>(plan[COL0]);
    e.height = max(in[1] - in[0], 0);
    e.row0 = in[0];
    return e;
}

// Point (i, j) of tile t of the inner region (tiles of blockDim.y x blockDim.x points), for this thread (false:
// outside the region).
__device__ __forceinline__ bool tile_point(int t, int tiles_across, int row0, int row1, int col0, int col1, int& i,
                                           int& j) {
    i = row0 + (t / tiles_across) * static_cast<int>(blockDim.y) + static_cast<int>(threadIdx.y);
    j = col0 + (t % tiles_across) * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);
    return i < row1 && j < col1;
}

template <typename T>
__device__ __forceinline__ void update_tile_point(const T* __restrict__ u, T* __restrict__ v, int t, int tiles_across,
                                                  int row0, int row1, int col0, int col1, long long pitch, T fifth) {
    int i, j;
    if (!tile_point(t, tiles_across, row0, row1, col0, col1, i, j)) return;
    const long long c = static_cast<long long>(i) * pitch + j;
    v[c] = jacobi_point<T>(u, c, pitch, fifth);
}

// The inner points of a step, tile by tile. A grid smaller than the GPU (a few tiles per block) walks them in a
// fixed order: block b takes tiles b, b + gridDim.x, ... A grid that fills the GPU (`from_counter`: the build for
// two blocks per SM) takes each block's next tile from `counter` (zero at the step's start), the order in which
// the hardware hands out the blocks of an ordinary launch: the tiles in flight are neighbours in memory, the
// warps of a block stay on one tile, and no block ends its step long after the others. In the fixed order, at
// n = 8192 on 4 x H100, the blocks' warps drifted apart over the step, the tiles took 500-530 us against the
// no-exchange step's 455 and the slowest block 20-30 us longer than the mean (tune_persistent.py --profile,
// tune-persistent-gpu-4r-20261127T022534Z); from the counter: 448 us, every block within 1.5 us
// (tune-persistent-gpu-4r-20261127T022926Z). The leader asks for the block's next tile while the block updates
// this one, so the atomic's round trip to L2 is hidden; one block barrier per tile hands the answer over.
template <typename T, bool from_counter>
__device__ __forceinline__ void update_tiles(const T* __restrict__ u, T* __restrict__ v, int tiles, int tiles_across,
                                             int row0, int row1, int col0, int col1, long long pitch, T fifth,
                                             unsigned int* counter) {
    if (!from_counter) {
        for (int t = blockIdx.x; t < tiles; t += gridDim.x)
            update_tile_point<T>(u, v, t, tiles_across, row0, row1, col0, col1, pitch, fifth);
        return;
    }
    __shared__ int next[2];
    const bool leader = threadIdx.x == 0 && threadIdx.y == 0;
    if (leader) next[0] = static_cast<int>(atomicAdd(counter, 1u));
    __syncthreads();
    for (int k = 0;; ++k) {
        const int t = next[k & 1];
        if (t >= tiles) break;  // the same value for every thread of the block: all leave together
        const int after = leader ? static_cast<int>(atomicAdd(counter, 1u)) : 0;
        update_tile_point<T>(u, v, t, tiles_across, row0, row1, col0, col1, pitch, fifth);
        if (leader) next[(k + 1) & 1] = after;  // slot k + 1 was last read before the previous barrier
        __syncthreads();
    }
}

// The persistent mode: `steps` steps from step `first + 1` in one cooperative launch. Each step: first the edge
// points whose halo values come in lines (each waits for its values, then sends its own: they travel while the
// rest is computed), then the other points tile by tile (blockDim.y x blockDim.x points); sync grid-wide (a block
// barrier when the grid is one block: small n, where the step is all latency). Neighbours that stores cannot
// reach go as in the nvshmem mode: wait for their signal first, put and signal after the sync. A wait that gives
// up stops every block at the next sync. stop[0] is that flag, stop[1] and stop[2] the tile counters of the
// launch's even and odd steps (all three zeroed before the launch).
template <typename T, bool from_counter>
__device__ void persistent(T* a, T* b, Line<T>* lines, const long long* plan, uint64_t* signals, long long first,
                           int steps, T fifth, unsigned int* stop, unsigned long long limit_ns,
                           volatile long long* error) {
    cg::grid_group grid = cg::this_grid();
    const int n = static_cast<int>(plan[N]);
    const long long pitch = plan[PITCH];
    const bool leader = threadIdx.x == 0 && threadIdx.y == 0;
    __shared__ Remote<T> remote[2];
    __shared__ Edges edges;
    __shared__ bool gave_up;  // a wait of this block gave up: all a one-block grid needs to read after its barrier
    if (leader) {
        remote[0] = remote_fields<T>(b, lines, plan);  // step first + 1 writes b
        remote[1] = remote_fields<T>(a, lines, plan);
        edges = edges_by_line<T>(remote[0], plan);  // which sides come in lines does not depend on the field
        gave_up = false;
    }
    __syncthreads();
    const int row0 = edges.inner[0], row1 = edges.inner[1], col0 = edges.inner[2], col1 = edges.inner[3];
    const int tiles_across = (col1 - col0 + static_cast<int>(blockDim.x) - 1) / static_cast<int>(blockDim.x);
    const int tiles_down = (row1 - row0 + static_cast<int>(blockDim.y) - 1) / static_cast<int>(blockDim.y);
    const int tiles = row1 > row0 && col1 > col0 ? tiles_down * tiles_across : 0;
    // The edge points go a warp's worth to each block in turn, so that no block has both its share of the tiles
    // and a whole edge (the grid's first blocks had all of them: 1.1-1.25x slower at n = 1024).
    const int in_block = threadIdx.y * blockDim.x + threadIdx.x;
    const int threads = gridDim.x * blockDim.y * blockDim.x;  // blocks of whole warps (PERSISTENT_BLOCK)
    const int thread = ((in_block / 32) * gridDim.x + blockIdx.x) * 32 + in_block % 32;
    const int edge_points = edges.points();
    PhaseClock clock;
    clock.start();
    for (int s = 0; s < steps; ++s) {
        const long long step = first + 1 + s;
        const T* u = (s & 1) ? b : a;
        T* v = (s & 1) ? a : b;
        const Remote<T>& r = remote[s & 1];
        if (r.signals) {
            if (leader && !halos_arrived(plan, r, signals, step, limit_ns, error)) {
                atomicExch(stop, 1u);
                gave_up = true;
            }
            __syncthreads();
        }
        for (int p = thread; p < edge_points; p += threads) {
            int i, j;
            edges.point(p, i, j);
            if (!update_taking_lines<T>(u, v, lines, r, plan, i, j, n, pitch, fifth, step, limit_ns, error, stop)) {
                atomicExch(stop, 1u);
                gave_up = true;
            }
        }
        clock.lap(EDGES_NS);
        // The tile counters: this step's, and the next step's, last used two steps ago, zeroed for it here.
        if (from_counter && leader && blockIdx.x == 0) stop[1 + ((s + 1) & 1)] = 0;
        update_tiles<T, from_counter>(u, v, tiles, tiles_across, row0, row1, col0, col1, pitch, fifth,
                                      stop + 1 + (s & 1));  // edges that go by puts: after the sync
        clock.lap(TILES_NS);
        // Every block sees a wait that gave up after the same sync; one block reads its own flag in shared memory,
        // not the global one (a load from L2 on every step's critical path).
        bool stopped;
        if (gridDim.x == 1) {
            __syncthreads();
            stopped = gave_up;
        } else {
            grid.sync();
            stopped = *reinterpret_cast<volatile unsigned int*>(stop) != 0;
        }
        clock.lap(SYNC_NS);
        if (stopped) break;
        if (leader && blockIdx.x == 0 && r.signals) deliver<T>(v, plan, r, signals, static_cast<uint64_t>(step + 1));
    }
}

// The persistent kernel for 1 or 2 resident blocks of 1024 threads per SM (__launch_bounds__): 2 caps the
// registers at 32 per thread, where the kernel takes 64, and a few spill onto the edge points' path. The build for
// 2 fills the GPU and takes its tiles from a counter; the build for 1 runs grids smaller than the GPU, whose steps
// are mostly latency (spills cost them 10-20 %; tiles from a counter 0.4-1 us at n = 64-256). shmem_kernel.py picks
// by the region's points (tune-persistent-gpu-4r-20261127T023006Z).
#define GRIDCOMM_JACOBI_PERSISTENT(T, suffix, blocks)                                                                \
    extern "C" __global__ void __launch_bounds__(1024, blocks) gridcomm_jacobi2d_persistent_##suffix(                \
        T* a, T* b, Line<T>* lines, const long long* plan, uint64_t* signals, long long first, int steps, T fifth,    \
        unsigned int* stop, unsigned long long limit_ns, volatile long long* error) {                                 \
        persistent<T, blocks == 2>(a, b, lines, plan, signals, first, steps, fifth, stop, limit_ns, error);          \
    }

#define GRIDCOMM_JACOBI_SHMEM(T, suffix)                                                                              \
    extern "C" __global__ void gridcomm_jacobi2d_send_edges_##suffix(                                                 \
        T* v, Line<T>* lines, const long long* plan, uint64_t* signals, long long step, unsigned int* finished) {    \
        send_edges<T>(v, lines, plan, signals, step, finished);                                                      \
    }                                                                                                                 \
    extern "C" __global__ void gridcomm_jacobi2d_boundary_##suffix(                                                   \
        const T* u, T* v, const long long* plan, uint64_t* signals, long long step, T fifth, unsigned int* finished,  \
        unsigned long long limit_ns, volatile long long* error) {                                                     \
        boundary_step<T>(u, v, plan, signals, step, fifth, finished, limit_ns, error);                               \
    }                                                                                                                 \
    GRIDCOMM_JACOBI_PERSISTENT(T, suffix, 1)                                                                        \
    GRIDCOMM_JACOBI_PERSISTENT(T, two_##suffix, 2)

GRIDCOMM_JACOBI_SHMEM(double, f64)
GRIDCOMM_JACOBI_SHMEM(float, f32)
