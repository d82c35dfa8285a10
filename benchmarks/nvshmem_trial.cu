// Kernels for benchmarks/nvshmem_mechanisms.py: the smallest uses of the NVSHMEM device API that gridcomm needs.
#include <cooperative_groups.h>
#include <nvshmem.h>
#include <nvshmemx.h>

// Every PE puts `n` doubles to the next PE (a ring) with a signal, then waits for the previous PE's.
extern "C" __global__ void trial_ring(double* dest, const double* src, unsigned long long n, uint64_t* signal,
                                      uint64_t value) {
    const int me = nvshmem_my_pe(), npes = nvshmem_n_pes();
    nvshmemx_putmem_signal_block(dest, src, n * sizeof(double), signal, value, NVSHMEM_SIGNAL_SET, (me + 1) % npes);
    if (threadIdx.x == 0) nvshmem_signal_wait_until(signal, NVSHMEM_CMP_GE, value);
}

// Ping-pong between PE 0 and PE 1 inside one kernel: `rounds` signal round trips (latency of a signal).
extern "C" __global__ void trial_pingpong(uint64_t* signal, int rounds) {
    const int me = nvshmem_my_pe();
    if (threadIdx.x != 0 || nvshmem_n_pes() < 2 || me > 1) return;
    for (int r = 1; r <= rounds; ++r) {
        if (me == 0) {
            nvshmemx_signal_op(signal, r, NVSHMEM_SIGNAL_SET, 1);
            nvshmem_signal_wait_until(signal, NVSHMEM_CMP_GE, r);
        } else {
            nvshmem_signal_wait_until(signal, NVSHMEM_CMP_GE, r);
            nvshmemx_signal_op(signal, r, NVSHMEM_SIGNAL_SET, 0);
        }
    }
}

// A cooperative kernel: every block adds 1 to a counter `rounds` times, with a grid-wide sync between rounds.
extern "C" __global__ void trial_grid_sync(unsigned int* counter, int rounds) {
    cooperative_groups::grid_group grid = cooperative_groups::this_grid();
    for (int r = 0; r < rounds; ++r) {
        if (threadIdx.x == 0) atomicAdd(counter, 1u);
        grid.sync();
    }
}

// Whether the peer's memory is reachable by plain loads and stores (NVLink / same GPU): nvshmem_ptr != NULL.
extern "C" __global__ void trial_peer_pointer(uint64_t* symmetric, unsigned long long* out) {
    const int npes = nvshmem_n_pes();
    for (int pe = threadIdx.x; pe < npes; pe += blockDim.x) out[pe] = (unsigned long long)nvshmem_ptr(symmetric, pe);
}
