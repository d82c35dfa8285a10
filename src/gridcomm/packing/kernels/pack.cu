// Pack, unpack and local copies of every selection of every field for every peer, in one launch: the blocks
// copy the chunks of the descriptor table (runs.cuh).
#include "runs.cuh"

extern "C" __global__ void gridcomm_copy_runs(
    const long long* __restrict__ table,       // TABLE_WIDTH entries per segment
    const int* __restrict__ chunk_segment,     // segment of each chunk
    const long long* __restrict__ chunk_first, // first unit (within its segment) of each chunk
    int units_per_chunk,
    int chunks)
{
    copy_chunks(table, chunk_segment, chunk_first, units_per_chunk, chunks);
}
