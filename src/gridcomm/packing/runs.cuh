// Copying selections between two run grids: the body shared by every gridcomm kernel that moves halos.
//
// The host describes each segment (one selection of one field, to or from one peer) as n0 x n1 runs of
// equal length on each side (gridcomm/packing/geometry.py): run (i0, i1) starts at byte
//     base + i0 * stride0 + j * stride1,   j = index[i1] for row selections, else i1,
// of its side, where a side is a field (local, or a peer's mapped by CUDA IPC) or a message buffer (runs
// back to back). Runs are copied in units of 1, 2, 4, 8 or 16 bytes, the widest that every address of
// both sides is aligned to, so that long runs move as 16-byte vector loads and stores.
#pragma once

// Columns of a segment's row in the descriptor table (kept in step with packing/cuda.py).
enum {
    SRC = 0, SRC_STRIDE0, SRC_STRIDE1, SRC_INDEX, DST, DST_STRIDE0, DST_STRIDE1, DST_INDEX,
    UNIT, UNITS_PER_RUN, N1, UNITS, TABLE_WIDTH
};

// One side of a segment, read from the table once into registers: the stores of a copy could alias the
// table as far as the compiler knows, and would otherwise make it reload every column for every unit.
struct Side {
    char* base;
    long long stride0, stride1;
    const long long* index;  // row ids for row selections, else null

    __device__ __forceinline__ Side(const long long* seg, int column)  // column: SRC or DST
        : base(reinterpret_cast<char*>(seg[column])), stride0(seg[column + 1]), stride1(seg[column + 2]),
          index(reinterpret_cast<const long long*>(seg[column + 3])) {}

    __device__ __forceinline__ char* run(unsigned i0, unsigned i1) const {
        const long long j = index ? __ldg(index + i1) : (long long)i1;
        return base + (long long)i0 * stride0 + j * stride1;
    }
};

// v / d for v < 2^31 without a division instruction: m = (2^32 - 1) / d, computed once per segment, gives
// a quotient at most one too small, which one comparison corrects.
struct Divisor {
    unsigned d, m;

    __device__ __forceinline__ explicit Divisor(unsigned divisor) : d(divisor), m(0xffffffffu / divisor) {}

    __device__ __forceinline__ unsigned quotient(unsigned v) const {
        unsigned q = __umulhi(v, m);
        if (v - q * d >= d) ++q;
        return q;
    }
};

// Every copy kernel's signature: blocks of COPY_THREADS, registers few enough for MIN_BLOCKS of them per SM
// (packing/cuda.py launches at most that many blocks per SM: all of them resident, one wave).
#ifndef COPY_THREADS
#define COPY_THREADS 256
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif
#define COPY_KERNEL extern "C" __global__ void __launch_bounds__(COPY_THREADS, MIN_BLOCKS)

// Units each thread keeps in flight: all loads of a round are issued before its stores, so that a thread
// waits for one memory latency per round, not per unit (set by packing/cuda.py at compile time).
#ifndef UNROLL
#define UNROLL 1
#endif

// Copies units [first, last) of segment `seg` with the threads of this block, in units of T.
template <typename T>
__device__ __forceinline__ void copy_units_as(const long long* seg, long long first, long long last) {
    const Side from(seg, SRC), to(seg, DST);
    const unsigned units_per_run = (unsigned)seg[UNITS_PER_RUN];
    const Divisor per_run(units_per_run), per_row((unsigned)seg[N1]);
    for (long long round = first + threadIdx.x; round < last; round += UNROLL * blockDim.x) {
        T value[UNROLL];
        T* where[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            const long long u = round + (long long)k * blockDim.x;
            where[k] = nullptr;
            if (u < last) {
                // 32-bit arithmetic: the host keeps every segment under 2^31 units.
                const unsigned v = (unsigned)u;
                const unsigned run = per_run.quotient(v);
                const unsigned within = v - run * units_per_run;
                const unsigned i0 = per_row.quotient(run);
                const unsigned i1 = run - i0 * per_row.d;
                const long long at = (long long)within * sizeof(T);
                value[k] = *reinterpret_cast<const T*>(from.run(i0, i1) + at);
                where[k] = reinterpret_cast<T*>(to.run(i0, i1) + at);
            }
        }
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            if (where[k]) *where[k] = value[k];
        }
    }
}

__device__ __forceinline__ void copy_units(const long long* seg, long long first, long long last) {
    switch ((unsigned)seg[UNIT]) {
        case 16: copy_units_as<uint4>(seg, first, last); break;
        case 8: copy_units_as<unsigned long long>(seg, first, last); break;
        case 4: copy_units_as<unsigned int>(seg, first, last); break;
        case 2: copy_units_as<unsigned short>(seg, first, last); break;
        default: copy_units_as<unsigned char>(seg, first, last); break;
    }
}

// Copies this block's pieces: blockIdx.x, + gridDim.x, + 2 gridDim.x, ... of the list, piece p being units
// [piece_first[p], piece_last[p]) of segment piece_segment[p] (empty where first == last). The host deals
// the table's units out so that every block copies the same number (packing/cuda.py, balanced_pieces): no
// block runs on alone at the end while the others idle.
__device__ __forceinline__ void copy_pieces(
    const long long* table, const int* piece_segment, const long long* piece_first, const long long* piece_last,
    int pieces)
{
    for (int p = blockIdx.x; p < pieces; p += gridDim.x)
        copy_units(table + (long long)piece_segment[p] * TABLE_WIDTH, piece_first[p], piece_last[p]);
}
