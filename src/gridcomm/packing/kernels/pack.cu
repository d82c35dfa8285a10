// Pack and unpack of every selection of every field for every peer, in one launch.
//
// The host describes each segment (one selection of one field in one message) as a grid of equally long
// contiguous runs (gridcomm/packing/geometry.py): run (i0, i1) starts at byte
//     start + i0 * stride0 + j * stride1,   j = index[i1] for row selections, else i1,
// of the field, and runs follow each other in the message, i1 fastest. Each run is copied in units of
// 1, 2, 4, 8 or 16 bytes, the widest that every address of the segment is aligned to, so that long runs
// move as 16-byte vector loads and stores. Each block copies one chunk of one segment.

#include <cstdint>

// Columns of a segment's row in the descriptor table (kept in step with cuda.py).
enum {
    FIELD = 0, BUFFER, START, STRIDE0, STRIDE1, INDEX, UNIT, UNITS_PER_RUN, N1, UNITS, TABLE_WIDTH
};

template <typename T>
__device__ __forceinline__ void move(char* dst, const char* src) {
    *reinterpret_cast<T*>(dst) = *reinterpret_cast<const T*>(src);
}

extern "C" __global__ void gridcomm_copy_segments(
    const long long* __restrict__ table,       // TABLE_WIDTH entries per segment
    const int* __restrict__ block_segment,     // segment of each block
    const long long* __restrict__ block_first, // first unit (within its segment) of each block
    int units_per_block,
    int unpack)                                // 0: field -> message, 1: message -> field
{
    const long long* seg = table + (long long)block_segment[blockIdx.x] * TABLE_WIDTH;
    char* field = reinterpret_cast<char*>(seg[FIELD]);
    char* message = reinterpret_cast<char*>(seg[BUFFER]);
    const long long* index = reinterpret_cast<const long long*>(seg[INDEX]);
    const long long start = seg[START], stride0 = seg[STRIDE0], stride1 = seg[STRIDE1];
    const unsigned unit = (unsigned)seg[UNIT];
    const unsigned units_per_run = (unsigned)seg[UNITS_PER_RUN];
    const unsigned n1 = (unsigned)seg[N1];
    const long long first = block_first[blockIdx.x];
    const long long last = min(first + (long long)units_per_block, seg[UNITS]);

    for (long long u = first + threadIdx.x; u < last; u += blockDim.x) {
        // 32-bit arithmetic: the host keeps every segment under 2^31 units.
        const unsigned v = (unsigned)u;
        const unsigned run = units_per_run == 1 ? v : v / units_per_run;
        const unsigned within = v - run * units_per_run;
        const unsigned i0 = n1 == 1 ? run : run / n1;
        const unsigned i1 = run - i0 * n1;
        const long long j = index ? index[i1] : (long long)i1;
        char* f = field + start + (long long)i0 * stride0 + j * stride1 + (long long)within * unit;
        char* m = message + u * unit;
        char* dst = unpack ? f : m;
        const char* src = unpack ? m : f;
        switch (unit) {
            case 16: move<uint4>(dst, src); break;
            case 8: move<unsigned long long>(dst, src); break;
            case 4: move<unsigned int>(dst, src); break;
            case 2: move<unsigned short>(dst, src); break;
            default: move<unsigned char>(dst, src); break;
        }
    }
}
