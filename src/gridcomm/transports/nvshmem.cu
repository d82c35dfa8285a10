// One NVSHMEM halo exchange (or all-to-all) in one kernel: the packed message for each destination is put into
// that destination's symmetric receive buffer, with a signal, and the GPU waits for every source's signal; no
// host round trip, so the exchange can be captured in a CUDA graph. Built by nvcc against libnvshmem_device
// (gridcomm/shmem.py), not by NVRTC.
//
// Each rank owns a symmetric int64 signal array, indexed by the peer's rank:
//     signals[CLEAR + r] = the last exchange for which rank r may write into this rank's receive buffer
//     signals[DATA + r]  = the last exchange whose message rank r has put here, -e when rank r gave up on it
// and a device-side exchange counter (`epoch`, so that a replayed CUDA graph counts right). Exchange e:
//   1. every block tells each source "my receive buffer may be written" (CLEAR = e): this kernel runs after the
//      unpack of exchange e - 1, in stream order;
//   2. block k < ndest waits until destination k has cleared e, then puts its message with DATA = e (or, when
//      the wait gave up, only DATA = -e so that the destination stops waiting too);
//   3. the last block to finish (a counter) waits until every source has set DATA = e here.
#include <nvshmem.h>
#include <nvshmemx.h>

#include "gpu_waits.cuh"

// Columns of a destination's row of the table (transports/nvshmem.py).
enum { SEND_OFFSET, RECV_OFFSET, NBYTES, PE, RANK, ROW };

extern "C" __global__ void gridcomm_nvshmem_exchange(
    const unsigned char* send,             // packed messages (device memory)
    unsigned char* recv,                   // the symmetric receive buffer (the same offset on every PE)
    const long long* table, int ndest,     // ROW entries per destination
    const int* source_pes, const int* source_ranks, int nsrc,
    long long* signals,                    // symmetric: CLEAR[size] then DATA[size]
    int rank, int size,
    long long* epoch,                      // exchanges done (device memory)
    unsigned int* finished,                // blocks done in this exchange (device, 0)
    unsigned long long limit_ns,
    volatile long long* error)             // host-mapped: [failed, peer, exchange, step]
{
    __shared__ bool clear;
    const long long e = *epoch + 1;        // only the last block changes it, after every block has read it
    for (int k = threadIdx.x; k < nsrc; k += blockDim.x)
        nvshmemx_signal_op((uint64_t*)(signals + rank), (uint64_t)e, NVSHMEM_SIGNAL_SET, source_pes[k]);
    if (blockIdx.x < ndest) {
        const long long* row = table + ROW * blockIdx.x;
        const int pe = (int)row[PE], peer = (int)row[RANK];
        if (threadIdx.x == 0) clear = wait_at_least(signals + peer, e, now_ns(), limit_ns, error, peer, WAIT_CLEAR);
        __syncthreads();
        uint64_t* data = (uint64_t*)(signals + size + rank);
        if (clear)  // returns when `send` may be reused: the next pack cannot overwrite a message in flight
            nvshmemx_putmem_signal_block(recv + row[RECV_OFFSET], send + row[SEND_OFFSET], (size_t)row[NBYTES], data,
                                         (uint64_t)e, NVSHMEM_SIGNAL_SET, pe);
        else if (threadIdx.x == 0)
            nvshmemx_signal_op(data, (uint64_t)(-e), NVSHMEM_SIGNAL_SET, pe);
    }
    __syncthreads();
    if (threadIdx.x != 0 || atomicAdd(finished, 1u) != gridDim.x - 1) return;

    // The last block: wait for every source's message.
    *finished = 0;
    const unsigned long long start = now_ns();
    for (int k = 0; k < nsrc; ++k)
        if (!wait_at_least(signals + size + source_ranks[k], e, start, limit_ns, error, source_ranks[k], WAIT_DATA))
            break;
    __threadfence();
    *epoch = e;
}
