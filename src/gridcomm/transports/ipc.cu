// One CUDA IPC halo exchange in one kernel: every rank writes its halos straight into its peers' fields
// (mapped by CUDA IPC) and its own periodic wrap into itself, with GPU-to-GPU flags and no host round trip:
// the flags and the exchange counter of ipc_exchange.cuh around the copies of the descriptor table (runs.cuh).
#include "ipc_exchange.cuh"
#include "../packing/runs.cuh"

COPY_KERNEL gridcomm_ipc_exchange(
    const long long* __restrict__ table,       // TABLE_WIDTH entries per segment (runs.cuh)
    const int* __restrict__ piece_segment,     // each block's pieces of the table (runs.cuh's copy_pieces);
    const long long* __restrict__ piece_first, // with nothing to copy, the grid's one block only signals
    const long long* __restrict__ piece_last,
    int pieces,
    IPC_EXCHANGE_PARAMS)
{
    if (ipc_exchange_open(IPC_EXCHANGE_ARGS)) copy_pieces(table, piece_segment, piece_first, piece_last, pieces);
    ipc_exchange_close(IPC_EXCHANGE_ARGS);
}

// The copy-engine variant (IpcTransport(method="copy-engine")): the same flags and epoch, but the data moves by
// cudaMemcpy2DAsync on one stream per destination, issued in the order destination = (rank + i) mod size,
// and these small kernels do the signalling around the copies (one thread each):
//   open   CLEAR = e at every source;
//   ready  wait until the lane's destination has cleared e; on a timeout mark this copy abandoned (the copy
//          engines cannot be told to skip it);
//   sent   after the lane's copies: DATA = e at its destination, or -e when abandoned;
//   close  (after every lane has joined) wait for DATA = e from every source, then advance the epoch.
// The first destination's copies run on the exchange stream itself, its ready and sent merged with open and close
// (gridcomm_ipc_open_ready, gridcomm_ipc_sent_close): with one peer an exchange is two kernels and the copies, no
// stream fork or join (each kernel boundary and event hop is a few µs of a 128 MiB exchange's ~350). The other
// destinations' lanes run gridcomm_ipc_ready and gridcomm_ipc_sent on streams of their own. `npeer` 0: no
// destination (open or close alone).
__device__ __forceinline__ void open_sources(long long e, long long* const* peer_flags, const int* sources, int nsrc,
                                             int rank) {
    for (int k = 0; k < nsrc; ++k) {
        volatile long long* flags = peer_flags[sources[k]];
        flags[rank] = e;
    }
}

__device__ __forceinline__ void wait_ready(long long e, const long long* own_flags, const int* peer,
                                           unsigned int* abandoned, unsigned long long limit_ns,
                                           volatile long long* error) {
    if (!wait_all(own_flags, peer, 1, 0, e, limit_ns, error, WAIT_CLEAR)) *abandoned = 1u;
}

__device__ __forceinline__ void mark_sent(long long e, long long* const* peer_flags, const int* peer,
                                          unsigned int* abandoned, int rank, int size) {
    __threadfence_system();
    volatile long long* flags = peer_flags[*peer];
    flags[size + rank] = *abandoned ? -e : e;
    *abandoned = 0u;
}

extern "C" __global__ void gridcomm_ipc_open_ready(const long long* epoch, long long* const* peer_flags,
                                                   const int* sources, int nsrc, int rank,
                                                   const long long* own_flags, const int* peer, int npeer,
                                                   unsigned int* abandoned, unsigned long long limit_ns,
                                                   volatile long long* error) {
    const long long e = *epoch + 1;
    open_sources(e, peer_flags, sources, nsrc, rank);
    if (npeer) wait_ready(e, own_flags, peer, abandoned, limit_ns, error);
}

extern "C" __global__ void gridcomm_ipc_ready(const long long* epoch, const long long* own_flags, const int* peer,
                                              unsigned int* abandoned, unsigned long long limit_ns,
                                              volatile long long* error) {
    wait_ready(*epoch + 1, own_flags, peer, abandoned, limit_ns, error);
}

extern "C" __global__ void gridcomm_ipc_sent(const long long* epoch, long long* const* peer_flags, const int* peer,
                                             unsigned int* abandoned, int rank, int size) {
    mark_sent(*epoch + 1, peer_flags, peer, abandoned, rank, size);
}

extern "C" __global__ void gridcomm_ipc_sent_close(long long* epoch, long long* const* peer_flags, const int* peer,
                                                   int npeer, unsigned int* abandoned, const long long* own_flags,
                                                   const int* sources, int nsrc, int rank, int size,
                                                   unsigned long long limit_ns, volatile long long* error) {
    const long long e = *epoch + 1;
    if (npeer) mark_sent(e, peer_flags, peer, abandoned, rank, size);
    wait_all(own_flags, sources, nsrc, size, e, limit_ns, error, WAIT_DATA);
    __threadfence();
    *epoch = e;
}

// The one-way protocol for small exchanges (IpcTransport(one_way_bytes)): one trip over NVLink instead of two.
// Each rank owns a landing area of two halves, mapped into its sources; every source's message has its place in
// each half, as lines of 16 bytes: 8 bytes of data, each 4 beside a 4-byte flag, the exchange number e (NCCL's
// LL protocol): a line whose two flags read e has arrived whole, so no fence and no "data" flag are needed.
// Exchange e writes into half e mod 2, which held exchange e - 2: the destination says when it has read each
// exchange (flags[CLEAR + r] = e, a credit written back into the source r) and a source waits for the credit of
// e - 2, normally long there. The destination copies from its own landing area into its fields, in stream
// order, so nothing tells a source when the fields may be written: the "clear" trip of the kernel above goes.
// Block b sends message b (pack into a local scratch buffer, then lines into the destination) and then receives
// message b (lines into a local scratch buffer, then unpack into the fields); one more block copies what this
// rank sends itself. flags[DATA + r] only tells this rank that source r gave up on an exchange (-e).
enum { PEER_RANK = 0, ROW_FIRST, ROW_LAST, SCRATCH, LINES, LANDING, HALF, PEER_WIDTH };

__device__ __forceinline__ void copy_rows(const long long* table, long long first, long long last) {
    for (long long s = first; s < last; ++s) {
        const long long* seg = table + s * TABLE_WIDTH;
        copy_units(seg, 0, seg[UNITS]);
    }
}

__device__ __forceinline__ void store_line(char* at, uint2 data, unsigned flag) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};"
                 :: "l"(at), "r"(data.x), "r"(flag), "r"(data.y), "r"(flag) : "memory");
}

__device__ __forceinline__ uint4 load_line(const char* at) {
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(at) : "memory");
    return v;
}

// A block of ONE_WAY_THREADS (ipc.py launches as many): one block moves a whole message, and every thread waits
// for the latency of each of its loads (lines, runs) in turn, so the more threads, the fewer waits in a row.
#define ONE_WAY_THREADS 1024

extern "C" __global__ void __launch_bounds__(ONE_WAY_THREADS, 1) gridcomm_ipc_one_way(
    const long long* pack,                     // rows: fields -> send scratch, message by message, then own copies
    const long long* unpack,                   // rows: receive scratch -> fields, message by message
    const long long* sends, int ndest,         // PEER_WIDTH columns per destination (LANDING: its half 0, mapped)
    const long long* recvs, int nsrc,          // PEER_WIDTH columns per source (LANDING: offset here; HALF unused)
    long long local_first, long long local_last, // rows of `pack` this rank copies into itself (the last block)
    const char* send_scratch, char* recv_scratch,
    const char* landing, long long half,       // this rank's landing area, and the bytes of one half
    long long* epoch,                          // exchanges done (device memory)
    unsigned int* finished,                    // blocks done in this exchange (device, 0)
    long long* own_flags,                      // CLEAR[size] (credits) then DATA[size] (give-ups)
    long long* const* peer_flags,              // each rank's flag array mapped here (by rank; unused: 0)
    int rank, int size,
    unsigned long long limit_ns,
    volatile long long* error)                 // host-mapped: [failed, peer, exchange, step]
{
    __shared__ int stop;                       // this block's send, then its receive, gave up
    const long long e = *epoch + 1;            // only the last block changes it, after every block read it
    const unsigned flag = (unsigned)e;         // lines of e - 2 (or e - 4, ...) differ from it in both halves
    const volatile int* stopped = &stop;
    if (threadIdx.x == 0) stop = 0;
    __syncthreads();
    if (blockIdx.x < ndest) {
        const long long* to = sends + (long long)blockIdx.x * PEER_WIDTH;
        const int peer = (int)to[PEER_RANK];
        copy_rows(pack, to[ROW_FIRST], to[ROW_LAST]);
        if (threadIdx.x == 0
            && !wait_at_least(own_flags + peer, e - 2, now_ns(), limit_ns, error, peer, WAIT_CLEAR)) {
            stop = 1;
            volatile long long* flags = peer_flags[peer];
            flags[size + rank] = -e;           // the destination, waiting for these lines, is told
        }
        __syncthreads();
        if (!*stopped) {
            const uint2* data = reinterpret_cast<const uint2*>(send_scratch + to[SCRATCH]);
            char* there = reinterpret_cast<char*>(to[LANDING]) + (e & 1) * to[HALF];
            for (long long i = threadIdx.x; i < to[LINES]; i += blockDim.x) store_line(there + 16 * i, data[i], flag);
        }
        __syncthreads();
        if (threadIdx.x == 0) stop = 0;
        __syncthreads();
    }
    if (blockIdx.x < nsrc) {
        const long long* from = recvs + (long long)blockIdx.x * PEER_WIDTH;
        const int peer = (int)from[PEER_RANK];
        const char* here = landing + (e & 1) * half + from[LANDING];
        uint2* out = reinterpret_cast<uint2*>(recv_scratch + from[SCRATCH]);
        const volatile long long* gave_up = own_flags + size + peer;
        const unsigned long long start = now_ns();
        for (long long i = threadIdx.x; i < from[LINES] && !*stopped; i += blockDim.x) {
            uint4 line = load_line(here + 16 * i);
            while (line.y != flag || line.w != flag) {
                if (*stopped) break;
                const int step = *gave_up <= -e ? PEER_GAVE_UP : now_ns() - start > limit_ns ? WAIT_DATA : 0;
                if (step) {
                    if (atomicCAS(&stop, 0, 1) == 0) report(error, peer, e, step);
                    break;
                }
                line = load_line(here + 16 * i);
            }
            if (*stopped) break;
            out[i] = make_uint2(line.x, line.z);
        }
        __syncthreads();
        if (!*stopped) copy_rows(unpack, from[ROW_FIRST], from[ROW_LAST]);
        if (threadIdx.x == 0) {                // read (or given up): the source may write this half again
            volatile long long* flags = peer_flags[peer];
            flags[rank] = e;
        }
    }
    if (blockIdx.x == gridDim.x - 1 && local_first < local_last) copy_rows(pack, local_first, local_last);
    __syncthreads();
    if (threadIdx.x != 0 || atomicAdd(finished, 1u) != gridDim.x - 1) return;
    finished[0] = 0;
    __threadfence();
    *epoch = e;
}
