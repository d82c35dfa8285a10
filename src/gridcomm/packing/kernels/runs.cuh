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

template <typename T>
__device__ __forceinline__ void move(char* dst, const char* src) {
    *reinterpret_cast<T*>(dst) = *reinterpret_cast<const T*>(src);
}

__device__ __forceinline__ long long run_offset(const long long* seg, int side, unsigned i0, unsigned i1) {
    // side: SRC or DST; the stride and index columns follow the address column.
    const long long* index = reinterpret_cast<const long long*>(seg[side + 3]);
    const long long j = index ? index[i1] : (long long)i1;
    return (long long)i0 * seg[side + 1] + j * seg[side + 2];
}

// Copies units [first, last) of segment `seg` with the threads of this block.
__device__ __forceinline__ void copy_units(const long long* seg, long long first, long long last) {
    char* src = reinterpret_cast<char*>(seg[SRC]);
    char* dst = reinterpret_cast<char*>(seg[DST]);
    const unsigned unit = (unsigned)seg[UNIT];
    const unsigned units_per_run = (unsigned)seg[UNITS_PER_RUN];
    const unsigned n1 = (unsigned)seg[N1];
    for (long long u = first + threadIdx.x; u < last; u += blockDim.x) {
        // 32-bit arithmetic: the host keeps every segment under 2^31 units.
        const unsigned v = (unsigned)u;
        const unsigned run = units_per_run == 1 ? v : v / units_per_run;
        const unsigned within = v - run * units_per_run;
        const unsigned i0 = n1 == 1 ? run : run / n1;
        const unsigned i1 = run - i0 * n1;
        const long long at = (long long)within * unit;
        char* d = dst + run_offset(seg, DST, i0, i1) + at;
        const char* s = src + run_offset(seg, SRC, i0, i1) + at;
        switch (unit) {
            case 16: move<uint4>(d, s); break;
            case 8: move<unsigned long long>(d, s); break;
            case 4: move<unsigned int>(d, s); break;
            case 2: move<unsigned short>(d, s); break;
            default: move<unsigned char>(d, s); break;
        }
    }
}

// The chunk of the table that block `b` copies: one segment, units [first, last).
__device__ __forceinline__ void copy_block(
    const long long* table, const int* block_segment, const long long* block_first, int units_per_block, int b)
{
    const long long* seg = table + (long long)block_segment[b] * TABLE_WIDTH;
    const long long first = block_first[b];
    copy_units(seg, first, min(first + (long long)units_per_block, seg[UNITS]));
}
