// The flags around one exchange of the ``ipc`` transport's kernel method (ipc.cu, and kernels elsewhere that
// write an exchange's blocks themselves, e.g. the spectral dwarf's unfold into the peers): a kernel whose
// parameters end with IPC_EXCHANGE_PARAMS calls ipc_exchange_open first and ipc_exchange_close last, each in
// every thread of every block, and writes into the destinations in between only where open returned true.
//
// Each rank owns an int64 flag array, mapped into every peer:
//     flags[CLEAR + r] = the last exchange for which rank r may write into this rank's destinations
//     flags[DATA + r]  = the last exchange whose blocks rank r has finished writing into this rank, negated
//                        when rank r gave up on it (a wait of its own timed out and its writes were skipped)
// and a device-side exchange counter (`epoch`, so that a replayed CUDA graph counts right). Exchange e:
//   1. every block tells each source "my destinations may be written" (CLEAR = e): the kernel runs after the
//      work that read them in exchange e - 1, in stream order;
//   2. each block waits until every destination has cleared exchange e, then writes its share;
//   3. the last block to finish (a counter) fences, sets DATA = e at every destination, and waits until
//      every source has set DATA = e here: when the kernel ends, this rank's destinations are complete.
// Waits (gpu_waits.cuh) spin with a time limit; a wait that gives up records it in host-mapped memory, and its
// block skips its writes, instead of hanging the GPU. The destinations then see the exchange marked abandoned
// and report it too: no rank goes on with data that were never written without being told.
#pragma once
#include "gpu_waits.cuh"

#define IPC_EXCHANGE_PARAMS                                                                                        \
    long long *epoch,                     /* exchanges done (device memory) */                                    \
    unsigned int *finished,               /* [blocks done, a block gave up] in this exchange (device, 0) */        \
    long long *own_flags,                 /* CLEAR[size] then DATA[size], written by the peers */                  \
    long long *const *peer_flags,         /* each rank's flag array mapped here (by rank; unused: 0) */            \
    const int *destinations, int ndest,   /* ranks this rank writes into */                                        \
    const int *sources, int nsrc,         /* ranks that write into this rank */                                    \
    int rank, int size, unsigned long long limit_ns,                                                               \
    volatile long long *error             /* host-mapped: [failed, peer, exchange, step] */
#define IPC_EXCHANGE_ARGS \
    epoch, finished, own_flags, peer_flags, destinations, ndest, sources, nsrc, rank, size, limit_ns, error

// Waits until flags[slot] >= value for every (slot, peer) of the list; false after limit_ns, or as soon as
// a peer has marked this exchange (or a later one) abandoned, flags[slot] <= -value.
__device__ inline bool wait_all(const volatile long long* flags, const int* peers, int npeers, int base, long long value,
                                unsigned long long limit_ns, volatile long long* error, int step) {
    const unsigned long long start = now_ns();
    for (int k = 0; k < npeers; ++k)
        if (!wait_at_least(flags + base + peers[k], value, start, limit_ns, error, peers[k], step)) return false;
    return true;
}

// This thread's index in its block (blocks of one, two or three dimensions).
__device__ __forceinline__ int block_thread() {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

// Steps 1 and 2: whether this block may write (every destination has cleared this exchange).
__device__ inline bool ipc_exchange_open(IPC_EXCHANGE_PARAMS) {
    __shared__ bool clear;
    const long long e = *epoch + 1;  // only the last block changes it, after every block read it
    const int thread = block_thread();
    // Every block says it (the same value): no block waits for one that the scheduler has not started yet.
    for (int k = thread; k < nsrc; k += blockDim.x * blockDim.y * blockDim.z) {
        volatile long long* flags = peer_flags[sources[k]];
        flags[rank] = e;  // CLEAR block: this rank's destinations may be written
    }
    if (thread == 0) {
        clear = wait_all(own_flags, destinations, ndest, 0, e, limit_ns, error, WAIT_CLEAR);
        if (!clear) atomicExch(&finished[1], 1u);
    }
    __syncthreads();
    return clear;
}

// Step 3, once this block's writes are issued.
__device__ inline void ipc_exchange_close(IPC_EXCHANGE_PARAMS) {
    __threadfence_system();  // this block's writes land before the count says so
    __syncthreads();
    const int thread = block_thread();
    const unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
    if (thread != 0 || atomicAdd(finished, 1u) != blocks - 1) return;

    // The last block: every write of this exchange is done (or skipped) and visible.
    const long long e = *epoch + 1;
    finished[0] = 0;
    const long long mark = atomicExch(&finished[1], 0u) ? -e : e;
    __threadfence_system();
    for (int k = 0; k < ndest; ++k) {
        volatile long long* flags = peer_flags[destinations[k]];
        flags[size + rank] = mark;  // DATA block, negated when a write was skipped
    }
    wait_all(own_flags, sources, nsrc, size, e, limit_ns, error, WAIT_DATA);
    __threadfence();
    *epoch = e;
}
