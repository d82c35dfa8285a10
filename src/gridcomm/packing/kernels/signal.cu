// GPU-to-GPU completion flags for the CUDA IPC transport: no host round-trip per exchange.
//
// Each rank owns an int64 flag array in device memory, mapped into every peer by CUDA IPC:
//     flags[READY + r]    = the last exchange whose data rank r has finished writing into this rank
//     flags[CONSUMED + r] = the last exchange of this rank's data that rank r has finished unpacking
// and a private counter of its exchanges (`epoch`, on the device so that a captured graph replays right).
// One thread per peer; waits spin on volatile loads with a time limit read from %globaltimer, and record a
// timeout in host-mapped memory (`error`: 1, peer, epoch, step) instead of hanging the GPU.

enum { BEGIN = 0, SIGNAL_READY = 1, WAIT_READY = 2, SIGNAL_CONSUMED = 3 };

__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ bool wait_at_least(const volatile long long* flag, long long value, unsigned long long limit_ns) {
    const unsigned long long start = now_ns();
    while (*flag < value) {
        if (now_ns() - start > limit_ns) return false;
        __nanosleep(100);
    }
    return true;
}

extern "C" __global__ void gridcomm_ipc_signal(
    int step,
    long long* epoch,                  // this rank's exchange counter (device memory)
    long long* own_flags,              // this rank's flag array
    long long* const* peer_flags,      // each peer's flag array, mapped here (by peer slot)
    const int* peers,                  // peer rank of each slot
    int npeers,
    int rank,
    int size,                          // flags: READY block at 0, CONSUMED block at `size`
    unsigned long long limit_ns,
    volatile long long* error)         // host-mapped: [failed, peer, epoch, step]
{
    const int slot = threadIdx.x;
    if (step == BEGIN) {
        // Start exchange e = epoch + 1: the peers must have unpacked exchange e - 1 of this rank's data.
        const long long e = *epoch + 1;
        __syncthreads();
        if (slot < npeers && !wait_at_least(own_flags + size + peers[slot], e - 1, limit_ns)) {
            error[1] = peers[slot]; error[2] = e; error[3] = step; __threadfence_system(); error[0] = 1;
        }
        __syncthreads();
        if (slot == 0) *epoch = e;
        return;
    }
    if (slot >= npeers) return;
    const long long e = *epoch;
    const int peer = peers[slot];
    if (step == SIGNAL_READY || step == SIGNAL_CONSUMED) {
        __threadfence_system();  // the data (or the unpack) is complete before the peer can see the flag
        volatile long long* flags = peer_flags[slot];
        flags[(step == SIGNAL_READY ? 0 : size) + rank] = e;
        __threadfence_system();
    } else if (!wait_at_least(own_flags + peer, e, limit_ns)) {
        error[1] = peer; error[2] = e; error[3] = step; __threadfence_system(); error[0] = 1;
    }
}
