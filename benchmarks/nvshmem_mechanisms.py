"""Which ways of calling NVSHMEM from Python kernels work on this machine (run under mpirun, one rank per GPU,
or two ranks sharing one GPU). Writes one JSON file of findings to --out.

    mpirun -np 2 python3 benchmarks/nvshmem_mechanisms.py --out DIR

Trials, each recorded as {"ok": bool, "detail": ...}:
  versions      nvshmem4py, libnvshmem, cuda.core, numba-cuda
  init          gridcomm.shmem.initialise: NVSHMEM started with a unique id broadcast over MPI
  nvcc          nvcc -rdc=true -cubin + nvlink with libnvshmem_device.a, loaded by CuPy, nvshmemx_cumodule_init,
                a ring of put-with-signal checked, a signal ping-pong timed, a cooperative grid sync
  nvrtc         NVRTC (-rdc, and -dlto) linked by nvJitLink with libnvshmem_device.a / the .bc library
  numba         nvshmem4py's numba-cuda device bindings compiling a kernel that calls my_pe
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "nvshmem_trial.cu"


def trial(findings: dict, name: str, work) -> None:
    start = time.perf_counter()
    try:
        findings[name] = {"ok": True, "detail": work()}
    except Exception as error:  # a trial that fails is a finding
        trace = traceback.format_exc()[-2000:]
        findings[name] = {"ok": False, "detail": f"{type(error).__name__}: {error}", "trace": trace}
    findings[name]["seconds"] = round(time.perf_counter() - start, 3)


def versions() -> dict:
    out = {}
    for module in ("nvshmem", "cuda.core", "numba_cuda", "cupy"):
        try:
            imported = __import__(module, fromlist=["__version__"])
            out[module] = getattr(imported, "__version__", "?")
        except Exception as error:
            out[module] = f"missing ({error})"
    import nvshmem.core

    out["libnvshmem"] = nvshmem.core.get_version().libnvshmem_version
    return out


def nvcc_trial(comm) -> dict:
    import cupy

    from gridcomm import shmem

    module = shmem.load_module(SOURCE, comm)
    n = 1024
    dest = shmem.symmetric_array(n * 8 + 64, comm)
    data = dest[: n * 8].view(np.float64)
    signal = dest[n * 8 : n * 8 + 8].view(np.uint64)
    src = cupy.arange(n, dtype=np.float64) + 1000 * comm.rank
    module.get_function("trial_ring")((1,), (256,), (data, src, np.uint64(n), signal, np.uint64(1)))
    cupy.cuda.Device().synchronize()
    expected = np.arange(n) + 1000 * ((comm.rank - 1) % comm.size)
    ring_ok = bool((cupy.asnumpy(data) == expected).all())
    comm.mpi.Barrier()
    out = {"ring_put_signal_correct": ring_ok}
    # peer pointers: can a kernel store straight into each PE's memory?
    pointers = cupy.zeros(comm.size, dtype=np.uint64)
    module.get_function("trial_peer_pointer")((1,), (32,), (signal, pointers))
    out["peer_pointer_nonnull"] = [bool(p) for p in cupy.asnumpy(pointers)]
    # signal round trips in one kernel
    if comm.size >= 2:
        ping = shmem.symmetric_array(8, comm).view(np.uint64)
        rounds = 2000
        comm.mpi.Barrier()
        start = time.perf_counter()
        module.get_function("trial_pingpong")((1,), (32,), (ping, np.int32(rounds)))
        cupy.cuda.Device().synchronize()
        out["signal_round_trip_us"] = (time.perf_counter() - start) / rounds * 1e6
        shmem.free_symmetric(ping)
    # a cooperative launch from the same module
    counter = cupy.zeros(1, dtype=np.uint32)
    sync = module.get_function("trial_grid_sync")
    blocks = cupy.cuda.Device().attributes["MultiProcessorCount"]
    sync((blocks,), (128,), (counter, np.int32(10)), enable_cooperative_groups=True)
    cupy.cuda.Device().synchronize()
    out["grid_sync_counter"] = int(counter.get()[0])
    out["grid_sync_expected"] = blocks * 10
    shmem.free_symmetric(dest)
    return out


def nvrtc_trial() -> dict:
    from cuda.bindings import nvjitlink, nvrtc

    from gridcomm import shmem

    home = shmem.nvshmem_home()
    include = [home / "include"]
    try:
        import nvidia.cu13 as cu13

        include += [Path(p) / "include" for p in cu13.__path__] + [Path(p) / "include" / "cccl" for p in cu13.__path__]
    except ImportError:
        pass
    include += [Path("/usr/local/cuda/include"), Path("/usr/local/cuda/include/cccl")]
    out = {}
    for flavour, extra in (("cubin", []), ("ltoir", [b"-dlto"])):
        _err, prog = nvrtc.nvrtcCreateProgram(SOURCE.read_bytes(), b"trial.cu", 0, [], [])
        options = [b"-arch=sm_90", b"-rdc=true", b"-std=c++17", *extra] + [f"-I{p}".encode() for p in include]
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            out[flavour] = f"NVRTC failed: {log.decode(errors='replace')[-600:]}"
            continue
        if flavour == "cubin":
            _, size = nvrtc.nvrtcGetCUBINSize(prog)
            code = b" " * size
            nvrtc.nvrtcGetCUBIN(prog, code)
            library = home / "lib" / "libnvshmem_device.a"
            kind, libraries = nvjitlink.InputType.CUBIN, [(nvjitlink.InputType.LIBRARY, library)]
            link_options = ["-arch=sm_90"]
        else:
            _, size = nvrtc.nvrtcGetLTOIRSize(prog)
            code = b" " * size
            nvrtc.nvrtcGetLTOIR(prog, code)
            bitcode = sorted((home / "lib").glob("libnvshmem_device*.bc")) + sorted((home / "lib").glob("*.ltoir*"))
            kind, libraries = nvjitlink.InputType.LTOIR, [(nvjitlink.InputType.ANY, b) for b in bitcode[:1]]
            link_options = ["-arch=sm_90", "-lto"]
        handle = nvjitlink.create(len(link_options), link_options)
        try:
            nvjitlink.add_data(handle, kind, code, len(code), "trial")
            for library_kind, path in libraries:
                nvjitlink.add_file(handle, library_kind, str(path))
            nvjitlink.complete(handle)
            out[flavour] = f"linked ({nvjitlink.get_linked_cubin_size(handle)} bytes)"
        except Exception as error:
            size = nvjitlink.get_error_log_size(handle)
            log = bytearray(size)
            nvjitlink.get_error_log(handle, log)
            out[flavour] = f"nvJitLink failed: {error}: {log.decode(errors='replace')[-600:]}"
    if not any(v.startswith("linked") for v in out.values()):
        raise RuntimeError(json.dumps(out))
    return out


def numba_trial() -> dict:
    import nvshmem.core.device.numba as device
    from numba import cuda

    @cuda.jit
    def my_pe(out):
        out[0] = device.my_pe()

    import cupy

    out = cupy.zeros(1, dtype=np.int32)
    my_pe[1, 1](out)
    cupy.cuda.Device().synchronize()
    return {"my_pe": int(out.get()[0])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    from gridcomm import Communicator, shmem, use_local_gpu

    comm = Communicator()
    use_local_gpu(comm)
    findings: dict = {"ranks": comm.size, "env": {k: v for k, v in os.environ.items() if k.startswith("NVSHMEM")}}
    trial(findings, "versions", versions)
    trial(findings, "init", lambda: shmem.initialise(comm) or "started")
    if findings["init"]["ok"]:
        trial(findings, "nvcc", lambda: nvcc_trial(comm))
    trial(findings, "nvrtc", nvrtc_trial)
    if comm.rank == 0:
        trial(findings, "numba", numba_trial)
    everyone = comm.mpi.gather(findings, root=0)
    if comm.rank == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"nvshmem-mechanisms-{comm.size}r.json"
        path.write_text(json.dumps(everyone, indent=1, default=str))
        for name in ("versions", "init", "nvcc", "nvrtc", "numba"):
            if name in findings:
                print(name, "ok" if findings[name]["ok"] else "FAILED", str(findings[name]["detail"])[:600])
        print("written", path)


if __name__ == "__main__":
    main()
