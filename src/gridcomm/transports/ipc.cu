// One CUDA IPC halo exchange in one kernel: every rank writes its halos straight into its peers' fields
// (mapped by CUDA IPC) and its own periodic wrap into itself, with GPU-to-GPU flags and no host round trip.
//
// Each rank owns an int64 flag array, mapped into every peer:
//     flags[CLEAR + r] = the last exchange for which rank r may write into this rank's halos
//     flags[DATA + r]  = the last exchange whose halos rank r has finished writing into this rank, negated
//                        when rank r gave up on it (a wait of its own timed out and its copy was skipped)
// and a device-side exchange counter (`epoch`, so that a replayed CUDA graph counts right). Exchange e:
//   1. every block tells each source "my halos may be written" (CLEAR = e): this kernel runs after the work
//      that read the halos of exchange e - 1, in stream order;
//   2. each block waits until every destination has cleared exchange e, then copies its share of the table;
//   3. the last block to finish (a counter) fences, sets DATA = e at every destination, and waits until
//      every source has set DATA = e here: when the kernel ends, this rank's halos are complete.
// Waits (gpu_waits.cuh) spin with a time limit; a wait that gives up records it in host-mapped memory, and
// its block skips its copy, instead of hanging the GPU.
// The destinations then see the exchange marked abandoned and report it too: no rank goes on with halos
// that were never written without being told.
#include "gpu_waits.cuh"
#include "../packing/runs.cuh"

// Waits until flags[slot] >= value for every (slot, peer) of the list; false after limit_ns, or as soon as
// a peer has marked this exchange (or a later one) abandoned, flags[slot] <= -value.
__device__ bool wait_all(const volatile long long* flags, const int* peers, int npeers, int base, long long value,
                         unsigned long long limit_ns, volatile long long* error, int step) {
    const unsigned long long start = now_ns();
    for (int k = 0; k < npeers; ++k)
        if (!wait_at_least(flags + base + peers[k], value, start, limit_ns, error, peers[k], step)) return false;
    return true;
}

COPY_KERNEL gridcomm_ipc_exchange(
    const long long* __restrict__ table,       // TABLE_WIDTH entries per segment (runs.cuh)
    const int* __restrict__ piece_segment,     // each block's pieces of the table (runs.cuh's copy_pieces);
    const long long* __restrict__ piece_first, // with nothing to copy, the grid's one block only signals
    const long long* __restrict__ piece_last,
    int pieces,
    long long* epoch,                          // exchanges done (device memory)
    unsigned int* finished,                    // [blocks done, a block gave up] in this exchange (device, 0)
    long long* own_flags,                      // CLEAR[size] then DATA[size], written by the peers
    long long* const* peer_flags,              // each rank's flag array mapped here (by rank; unused: 0)
    const int* destinations, int ndest,        // ranks this rank writes into
    const int* sources, int nsrc,              // ranks that write into this rank
    int rank, int size,
    unsigned long long limit_ns,
    volatile long long* error)                 // host-mapped: [failed, peer, exchange, step]
{
    __shared__ bool clear;
    const long long e = *epoch + 1;            // only the last block changes it, after every block read it
    // Every block says it (the same value): no block waits for one that the scheduler has not started yet.
    for (int k = threadIdx.x; k < nsrc; k += blockDim.x) {
        volatile long long* flags = peer_flags[sources[k]];
        flags[rank] = e;                       // CLEAR block: this rank's halos may be written
    }
    if (threadIdx.x == 0) {
        clear = wait_all(own_flags, destinations, ndest, 0, e, limit_ns, error, WAIT_CLEAR);
        if (!clear) atomicExch(&finished[1], 1u);
    }
    __syncthreads();
    if (clear) copy_pieces(table, piece_segment, piece_first, piece_last, pieces);
    __threadfence_system();                    // this block's writes land before the count says so
    __syncthreads();
    if (threadIdx.x != 0 || atomicAdd(finished, 1u) != gridDim.x - 1) return;

    // The last block: every copy of this exchange is done (or skipped) and visible.
    finished[0] = 0;
    const long long mark = atomicExch(&finished[1], 0u) ? -e : e;
    __threadfence_system();
    for (int k = 0; k < ndest; ++k) {
        volatile long long* flags = peer_flags[destinations[k]];
        flags[size + rank] = mark;             // DATA block, negated when a copy was skipped
    }
    wait_all(own_flags, sources, nsrc, size, e, limit_ns, error, WAIT_DATA);
    __threadfence();
    *epoch = e;
}

// The copy-engine variant (IpcTransport(method="copy-engine")): the same flags and epoch, but the data moves by
// cudaMemcpy2DAsync on one stream per destination, issued in the order destination = (rank + i) mod size,
// and these small kernels do the signalling around the copies (one thread each):
//   open   (exchange stream)        CLEAR = e at every source;
//   ready  (the destination's stream) wait until that destination has cleared e; on a timeout mark this
//                                    copy abandoned (the copy engines cannot be told to skip it);
//   sent   (the destination's stream) after the copies: DATA = e there, or -e when abandoned;
//   close  (exchange stream, after every destination's stream has joined it) wait for DATA = e from every
//                                    source, then advance the epoch.
extern "C" __global__ void gridcomm_ipc_open(const long long* epoch, long long* const* peer_flags,
                                             const int* sources, int nsrc, int rank) {
    const long long e = *epoch + 1;
    for (int k = threadIdx.x; k < nsrc; k += blockDim.x) {
        volatile long long* flags = peer_flags[sources[k]];
        flags[rank] = e;
    }
}

extern "C" __global__ void gridcomm_ipc_ready(const long long* epoch, const long long* own_flags, const int* peer,
                                              unsigned int* abandoned, unsigned long long limit_ns,
                                              volatile long long* error) {
    if (!wait_all(own_flags, peer, 1, 0, *epoch + 1, limit_ns, error, WAIT_CLEAR)) *abandoned = 1u;
}

extern "C" __global__ void gridcomm_ipc_sent(const long long* epoch, long long* const* peer_flags, const int* peer,
                                             unsigned int* abandoned, int rank, int size) {
    const long long e = *epoch + 1;
    __threadfence_system();
    volatile long long* flags = peer_flags[*peer];
    flags[size + rank] = *abandoned ? -e : e;
    *abandoned = 0u;
}

extern "C" __global__ void gridcomm_ipc_close(long long* epoch, const long long* own_flags, const int* sources,
                                              int nsrc, int size, unsigned long long limit_ns,
                                              volatile long long* error) {
    const long long e = *epoch + 1;
    wait_all(own_flags, sources, nsrc, size, e, limit_ns, error, WAIT_DATA);
    __threadfence();
    *epoch = e;
}
