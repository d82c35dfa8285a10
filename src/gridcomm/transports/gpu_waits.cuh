// Waits on the GPU that give up instead of hanging it (ipc.cu, nvshmem.cu; transports/gpu_waits.py reads the
// reports). A wait spins on a volatile 64-bit slot that a peer raises to the exchange number e (or sets to -e when
// it gave up on that exchange), with a time limit read from %globaltimer; a wait that gives up records
// [1, peer, exchange, step] in host-mapped memory.
#pragma once

enum { WAIT_CLEAR = 1, WAIT_DATA = 2, PEER_GAVE_UP = 3 };

__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ inline void report(volatile long long* error, int peer, long long exchange, int step) {
    error[1] = peer; error[2] = exchange; error[3] = step;
    __threadfence_system();
    error[0] = 1;
}

// Waits until *slot >= value; false (reported) once limit_ns have passed since `start`, or as soon as the peer
// marked this exchange (or a later one) abandoned, *slot <= -value.
__device__ inline bool wait_at_least(const volatile long long* slot, long long value, unsigned long long start,
                                     unsigned long long limit_ns, volatile long long* error, int peer, int step) {
    long long seen;
    while ((seen = *slot) < value) {
        if (seen <= -value) {
            report(error, peer, value, PEER_GAVE_UP);
            return false;
        }
        if (now_ns() - start > limit_ns) {
            report(error, peer, value, step);
            return false;
        }
        __nanosleep(64);
    }
    return true;
}
