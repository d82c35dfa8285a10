// Pack, unpack and local copies of every selection of every field for every peer, in one launch: each
// block copies one chunk of one segment of the descriptor table (runs.cuh).
#include "runs.cuh"

extern "C" __global__ void gridcomm_copy_runs(
    const long long* __restrict__ table,       // TABLE_WIDTH entries per segment
    const int* __restrict__ block_segment,     // segment of each block
    const long long* __restrict__ block_first, // first unit (within its segment) of each block
    int units_per_block)
{
    copy_block(table, block_segment, block_first, units_per_block, blockIdx.x);
}
