// Pack, unpack and local copies of every selection of every field for every peer, in one launch: each block
// copies its equal share of the descriptor table's units (runs.cuh).
#include "runs.cuh"

COPY_KERNEL gridcomm_copy_runs(
    const long long* __restrict__ table,       // TABLE_WIDTH entries per segment
    const int* __restrict__ piece_segment,     // segment of each piece
    const long long* __restrict__ piece_first, // first unit (within its segment) of each piece
    const long long* __restrict__ piece_last,  // one past its last unit
    int pieces)                                // block b copies pieces b, b + gridDim.x, ...
{
    copy_pieces(table, piece_segment, piece_first, piece_last, pieces);
}
