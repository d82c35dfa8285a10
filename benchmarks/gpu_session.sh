#!/usr/bin/env bash
# One call on a GPU machine: what is there, the GPU tests, the GPU benchmarks. Everything lands in $OUT.
#
#   bash benchmarks/gpu_session.sh [env] [tests] [tune] [bench-p2p] [bench-alltoall] [bench-halo] [bench-stencil2d]
#                                  [faults] [hygiene] [soak] [profile-eager] ... [gpus=2,3:faults] ... [wait]
#
# Runs from the repository root with the machine's python3 and packages (PYTHONPATH=src, nothing installed);
# one rank per GPU. Logs and result files are written under $OUT/session and packed into $OUT/session.tgz
# (the tool brings back few files); the last lines printed are a summary.
#
# A word gpus=LIST:STAGE+STAGE... runs those stages in the background on the GPUs of LIST alone
# (CUDA_VISIBLE_DEVICES), logged under $OUT/session/gpus-LIST, while the next words go on; `wait` waits for
# every such group. Only stages that time nothing and look at no other GPU may share the machine so: the
# correctness suites, hygiene (it reads the device memory of its own GPUs), soak, faults.
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # NVLink multicast stays off
export PYTHONPATH="$PWD/src:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gridcomm-session}
dir="$OUT/session"
mkdir -p "$dir/results"
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then  # a group of its own: the GPUs it was given
  ngpu=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .)
else
  ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
fi
py=python3
summary=()
groups=()
# MPI's own waits, ended at their timeout by cancelling receives or by an alarm (gridcomm.mpi_waits), in-process and
# on 2 ranks with one silent
host_waits_tests=($py -m pytest -q -rs -p no:cacheprovider tests/test_mpi_waits.py tests/test_mpi.py -k "timeout or wait")

stage() {  # stage NAME TIMEOUT_S COMMAND...: run, log, note the status
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  echo "=== $name: $*"
  timeout --signal=INT --kill-after=20 "$limit" "$@" >"$dir/$name.log" 2>&1
  local rc=$?
  summary+=("$name: exit $rc in $((SECONDS - start)) s")
  tail -n 40 "$dir/$name.log" | cat -v
  return $rc
}

for what in "${@:-env tests}"; do
  for step in $what; do
    case $step in
      gpus=*:*)  # a background group: these stages on these GPUs alone
        list=${step#gpus=}; list=${list%%:*}; stages=${step#*:}
        echo "=== group on GPUs $list: ${stages//+/ }"
        # Folders named without commas (the device tool brings back no file whose name holds one), and numbered:
        # a later group on the same GPUs must not overwrite an earlier one's logs.
        group_count=$((${group_count:-0} + 1))
        name="gpus-${list//,/-}-$group_count"
        CUDA_VISIBLE_DEVICES=$list OUT="$dir/$name" GRIDCOMM_SESSION_GROUP=1 \
          bash "$0" "${stages//+/ }" >"$dir/$name.log" 2>&1 &
        groups+=("$!:$list:$name")
        ;;
      wait)
        for entry in "${groups[@]}"; do
          wait "${entry%%:*}"
          rest=${entry#*:}
          summary+=("group on GPUs ${rest%%:*}:" "$(sed -n '/^--- summary/,$p' "$dir/${rest#*:}.log" | tail -n +2)")
        done
        groups=()
        ;;
      nvshmem-setup)  # nvshmem4py from the carried wheels (.whl), into /tmp/site; cuda.core too where too old
        stage nvshmem-setup 120 bash -c "$py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
--upgrade --target /tmp/site .whl/*.whl && PYTHONPATH=/tmp/site:\$PYTHONPATH $py -c 'import nvshmem.core' \
|| $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
.whl/optional/*.whl; $py -m pip list 2>/dev/null | grep -i -E 'cuda|nvshmem|numba'; \
PYTHONPATH=/tmp/site:\$PYTHONPATH $py -c 'import nvshmem.core, cuda.core; print(nvshmem.__version__, \
cuda.core.__version__, nvshmem.core.get_version())'"
        export PYTHONPATH="/tmp/site:$PYTHONPATH"
        ;;
      nvshmem-trials)  # which ways of building NVSHMEM kernels work (docs/nvshmem.md), 1 rank, then 2 ranks
        stage nvshmem-trials1 120 $py benchmarks/nvshmem_mechanisms.py --out "$dir/results"
        stage nvshmem-trials2 120 mpirun --allow-run-as-root --oversubscribe -np 2 -x PYTHONPATH \
          -x NVSHMEM_DISABLE_NVLS $py benchmarks/nvshmem_mechanisms.py --out "$dir/results"
        ;;
      tests-nvshmem)  # the nvshmem transport and the GPU-initiated stencil modes (after nvshmem-setup)
        stage tests-nvshmem 560 $py -m pytest -m gpu -q -rs --timeout=500 --durations=10 -p no:cacheprovider \
          tests/test_gpu.py tests/test_stencil2d.py -k "nvshmem or persistent or gpu_initiated or gpu_side"
        ;;
      stencil-shmem4)  # the nvshmem and persistent stencil modes on 4 ranks (2 x 2: every side and corner), bitwise
        stage stencil-shmem4 240 $py -c "import sys; from gridcomm.launch import run_under_mpiexec; \
sys.exit(run_under_mpiexec(4, [sys.executable, 'tests/mpi_programs/stencil2d_ranks.py', '--gpu', '--modes', \
'nvshmem,persistent']))"
        ;;
      bench-stencil2d-shmem1)  # one GPU: the GPU-initiated modes beside traditional and graph, every size
        stage bench-stencil2d-shmem1 300 $py -m gridcomm bench stencil2d --np 1 --samples 5 \
          --modes traditional,graph,nvshmem,persistent --out "$dir/results"
        ;;
      bench-stencil2d-shmem)  # every GPU: the GPU-initiated modes beside overlapped and graph, every size
        stage bench-stencil2d-shmem 300 $py -m gridcomm bench stencil2d --np "$ngpu" --samples 5 \
          --modes overlapped,graph,nvshmem,persistent --out "$dir/results"
        ;;
      tune-persistent)  # every GPU: the persistent stencil kernel's builds and block shapes (after nvshmem-setup);
        # TUNE_PERSISTENT: tune_persistent.py's options instead of its defaults (--profile: where a step goes)
        stage tune-persistent 400 $py -c "import sys; from gridcomm.launch import run_under_mpiexec; \
sys.exit(run_under_mpiexec($ngpu, [sys.executable, 'benchmarks/tune_persistent.py', '--out', '$dir/results', \
*'${TUNE_PERSISTENT:-}'.split()]))"
        ;;
      probe-spectral-overlap)  # where the pipelined spectral transform's overlap goes: TCo639 on every GPU with its
        # transpositions, its Legendre stages or both skipped (benchmarks/probe_spectral_overlap.py)
        stage probe-spectral-overlap 200 $py -c "import sys; from gridcomm.launch import run_under_mpiexec; \
sys.exit(run_under_mpiexec($ngpu, [sys.executable, 'benchmarks/probe_spectral_overlap.py', '--out', '$dir/results']))"
        ;;
      probe-spectral-timeline)  # when each stream of the pipelined spectral transform runs what, TCo639 on every
        # GPU, a few variants (PROBE_VARIANTS: TRANSPORT:PIPELINE[:OPTION=VALUE...],...; PROBE_ARGS: more options, e.g.
        # --profile 30; benchmarks/probe_spectral_timeline.py)
        stage probe-spectral-timeline "${SPECTRAL_SECONDS:-300}" $py -c "import sys; from gridcomm.launch import \
run_under_mpiexec; sys.exit(run_under_mpiexec($ngpu, [sys.executable, 'benchmarks/probe_spectral_timeline.py', \
'--out', '$dir/results'] + (['--variants', '${PROBE_VARIANTS:-}'] if '${PROBE_VARIANTS:-}' else []) \
+ '${PROBE_ARGS:-}'.split()))"
        ;;
      probe-mpi-waits)  # a small host transposition completed by one blocking MPI call, by MPI's wait, by gridcomm's
        # poll and by a spin, HOST_RANKS ranks (default 16) on the host CPU (benchmarks/probe_mpi_waits.py)
        stage probe-mpi-waits 200 $py -c "import sys; from gridcomm.launch import run_under_mpiexec; \
sys.exit(run_under_mpiexec(${HOST_RANKS:-16}, [sys.executable, 'benchmarks/probe_mpi_waits.py', '--out', '$dir/results']))"
        ;;
      probe-waits)  # host waits before and after NVSHMEM starts, 2 ranks: Open MPI's default binding, then gridcomm's launch
        stage probe-waits-bound 120 mpirun --allow-run-as-root --oversubscribe -np 2 -x PYTHONPATH -x NVSHMEM_DISABLE_NVLS \
          $py benchmarks/probe_host_waits.py --label openmpi-default --out "$dir/results"
        stage probe-waits-launcher 120 $py -c "import sys; from gridcomm.launch import run_under_mpiexec; \
sys.exit(run_under_mpiexec(2, [sys.executable, 'benchmarks/probe_host_waits.py', '--label', 'gridcomm-launch', \
'--out', '$dir/results']))"
        stage probe-waits-1rank 120 $py benchmarks/probe_host_waits.py --label one-rank --out "$dir/results"
        ;;
      peers-setup)  # the benchmarks' peer libraries from the carried wheels (.whl/peers: ducc0, nanobind, GHEX for
        # the GPU from build_ghex_gpu.sh), into /tmp/site, then the sdists there built against this machine's MPI
        # and CUDA (mpi4jax; JAX is installed). GHEX runs on the GPU beside a CUDA-aware MPI: then `cuda-mpi`
        stage peers-setup 300 bash -c "$py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
--upgrade --target /tmp/site .whl/peers/*.whl && for sdist in .whl/peers/*.tar.gz; do [ -e \"\$sdist\" ] || \
continue; PYTHONPATH=/tmp/site:\$PYTHONPATH $py -m pip install -q --no-index --no-deps --no-build-isolation \
--no-compile --no-cache-dir --target /tmp/site \"\$sdist\" || exit; done; PYTHONPATH=/tmp/site:\$PYTHONPATH \
$py -c 'import importlib.util as u; print(*(m for m in (\"ghex\", \"mpi4py_fft\", \"ducc0\", \"mpi4jax\") \
if u.find_spec(m)), sep=\", \")'"
        export PYTHONPATH="/tmp/site:$PYTHONPATH"
        ;;
      cuda-mpi)  # the CUDA-aware Open MPI built by benchmarks/build_cuda_mpi.sh (carried in .whl/cuda-mpi, built
        # here from the carried sources if absent): the mpi transport on device memory, its suites and benches
        # (CUDA_MPI_TESTS_K: which GPU tests, pytest -k, or none; unset: the quick tests of the mpi transport on
        # device memory, about 5 s; "suite or mpi" adds the MPI suites, over 4 minutes on 4 GPUs.
        # CUDA_MPI_BENCHES: which of p2p, alltoall, halo, halo-cpu, transpose-cpu, probe-mpi-waits; TRANSPOSE_ALSO:
        # transport labels transpose-cpu times beside its variants, e.g. shm/direct_bytes=0)
        cmpi="$PWD/.whl/cuda-mpi/openmpi-4.1.4-cuda"
        stage cuda-mpi-build 500 bash benchmarks/build_cuda_mpi.sh "$cmpi"
        (
          summary=()  # this subshell's stages, added to the session's below
          # GHEX's GPU build (peers-setup) also needs CUDA's runtime and libnuma (carried in .whl/peers/lib).
          cudart=$(dirname "$(find /usr/local/cuda/lib64/ /usr/local/lib/python3*/dist-packages/nvidia/ \
            /usr/lib/python3/dist-packages/nvidia/ -maxdepth 3 -name 'libcudart.so.13*' 2>/dev/null | head -n 1)")
          export OPAL_PREFIX="$cmpi" \
            LD_LIBRARY_PATH="$cmpi/lib:$PWD/.whl/peers/lib:$cudart${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
            MPI4PY_LIBMPI="$cmpi/lib/libmpi.so" GRIDCOMM_MPIEXEC="$cmpi/bin/mpiexec" \
            OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PATH="$cmpi/bin:$PATH"
          stage cuda-mpi-info 60 bash -c "$py -m gridcomm info; ompi_info --parsable --all | grep built_with_cuda; \
$py -c 'import ghex; print(\"ghex\", ghex.__config__)'"
          # The suites run every GPU transport in one process: Open MPI's smcuda maps the peers' buffers it moved
          # by CUDA IPC and keeps them mapped, and CUDA then refuses ipc a second mapping (cudaErrorAlreadyMapped,
          # 2 x H100, 2026-11-26). Its IPC off for the suites (MPI then copies through the host: still right).
          [ "${CUDA_MPI_TESTS_K:-}" = none ] || OMPI_MCA_btl_smcuda_use_cuda_ipc=0 \
            stage cuda-mpi-tests 420 $py -m pytest -m gpu -q -rs --timeout=300 --durations=10 -p no:cacheprovider \
            tests/test_gpu.py -k "${CUDA_MPI_TESTS_K:-mpi and not suite and not property and not declared}"
          [ "${CUDA_MPI_HOST_WAITS:-}" != 1 ] || stage cuda-mpi-host-waits 200 "${host_waits_tests[@]}"
          benches=" ${CUDA_MPI_BENCHES:-p2p alltoall halo} "
          [[ $benches != *" p2p "* ]] || stage cuda-mpi-p2p 200 $py -m gridcomm bench p2p --np 2 --out "$dir/results"
          [[ $benches != *" alltoall "* ]] ||
            stage cuda-mpi-alltoall 300 $py -m gridcomm bench alltoall --np "$ngpu" --out "$dir/results"
          # Open MPI keeps the peers' allocations it moved through CUDA IPC mapped, and CUDA refuses a second
          # mapping of one (cudaErrorAlreadyMapped): where the ipc transport meets one, again with MPI's IPC off.
          [[ $benches != *" halo "* ]] ||
            stage cuda-mpi-halo 200 $py -m gridcomm bench halo --gpu --np "$ngpu" --out "$dir/results" ||
            OMPI_MCA_btl_smcuda_use_cuda_ipc=0 stage cuda-mpi-halo-no-mpi-ipc 200 $py -m gridcomm bench halo --gpu \
              --np "$ngpu" --out "$dir/results"
          # The host's CPU against the CPU peers (GHEX, built against this MPI; mpi4py-fft where carried), fields
          # on the host, for each rank count of HOST_RANKS (default 16: a core each; e.g. "4 8 16").
          for ranks in ${HOST_RANKS:-16}; do
            [[ $benches != *" halo-cpu "* ]] || stage "cuda-mpi-halo-cpu-${ranks}r" 300 $py -m gridcomm bench halo \
              --cpu --np "$ranks" --out "$dir/results"
            [[ $benches != *" transpose-cpu "* ]] ||
              stage "cuda-mpi-transpose-cpu-${ranks}r" 240 $py -m gridcomm bench transpose --np "$ranks" \
                ${TRANSPOSE_ALSO:+--also "$TRANSPOSE_ALSO"} --out "$dir/results"
            [[ $benches != *" probe-mpi-waits "* ]] || stage "cuda-mpi-probe-mpi-waits-${ranks}r" 200 $py -c \
"import sys; from gridcomm.launch import run_under_mpiexec; sys.exit(run_under_mpiexec($ranks, [sys.executable, \
'benchmarks/probe_mpi_waits.py', '--profile', '--out', '$dir/results']))"
          done
          printf '%s\n' "${summary[@]}" >"$dir/cuda-mpi.summary"
        )
        summary+=("$(cat "$dir/cuda-mpi.summary" 2>/dev/null)")
        ;;
      env)
        stage env 60 bash -c "nvidia-smi; nvidia-smi topo -m; $py -c 'import cupy, mpi4py, numpy; \
print(\"cupy\", cupy.__version__, \"mpi4py\", mpi4py.__version__, \"numpy\", numpy.__version__); \
from mpi4py import MPI; print(MPI.Get_library_version())'; which mpirun mpiexec; nvcc --version | tail -2; \
$py -m gridcomm info; mpirun --allow-run-as-root --oversubscribe -np $ngpu $py -m gridcomm info; \
[ $ngpu -lt 2 ] || GRIDCOMM_RANKS_PER_NODE=$((ngpu / 2)) mpirun --allow-run-as-root --oversubscribe -np $ngpu \
-x GRIDCOMM_RANKS_PER_NODE $py -m gridcomm info"
        ;;
      tests-host-waits)  # the host waits' timeouts on this machine's MPI (in cuda-mpi: CUDA_MPI_HOST_WAITS=1)
        stage tests-host-waits 200 "${host_waits_tests[@]}"
        ;;
      tests-transpose)  # the Transposer's suites on the GPU only
        stage tests-transpose 400 $py -m pytest -m gpu -q -rs --timeout=300 --durations=10 -p no:cacheprovider \
          tests/test_gpu.py -k transpose
        ;;
      tests-exchange)  # the exchanger and transposer GPU suites (test_gpu.py) but those on declared nodes: with
        # them and the dwarfs' suites, `tests` took over 480 s on 4 x H100
        stage tests-exchange 540 $py -m pytest -m gpu -q -rs --timeout=300 --durations=15 --maxfail=30 \
          -p no:cacheprovider tests/test_gpu.py -k "not declared_nodes"
        ;;
      tests-nodes)  # the GPU suites on declared nodes of 2 (about 110 s on 4 x H100): with tests-dwarfs, one call
        stage tests-nodes 300 $py -m pytest -m gpu -q -rs --timeout=280 --durations=5 -p no:cacheprovider \
          tests/test_gpu.py -k declared_nodes
        ;;
      tests-dwarfs)  # the dwarfs' GPU suites: stencil2d, spectral, MPDATA
        # shellcheck disable=SC2046  # the existing files, one word each
        stage tests-dwarfs 400 $py -m pytest -m gpu -q -rs --timeout=300 --durations=10 --maxfail=30 \
          -p no:cacheprovider $(ls tests/test_stencil2d.py tests/test_spectral_gpu.py tests/test_mpdata_gpu.py 2>/dev/null)
        ;;
      tests-spectral)  # the spectral transform's GPU suite only
        stage tests-spectral 300 $py -m pytest -m gpu -q -rs --timeout=280 -p no:cacheprovider tests/test_spectral_gpu.py
        ;;
      tests-select)  # the GPU tests whose names match TESTS_K (pytest -k), e.g. a rerun of what failed
        # shellcheck disable=SC2046  # the existing files, one word each
        stage tests-select 400 $py -m pytest -m gpu -q -rs --timeout=300 --durations=10 -p no:cacheprovider \
          $(ls tests/test_gpu.py tests/test_stencil2d.py tests/test_spectral_gpu.py tests/test_mpdata_gpu.py 2>/dev/null) \
          -k "${TESTS_K:?set TESTS_K to the tests to run}"
        ;;
      tests-quick)  # everything but the MPI correctness suites (run by `tests`)
        stage tests-quick 200 $py -m pytest -m gpu -q -rs --timeout=180 -p no:cacheprovider -k "not suite and not property" \
          tests/test_gpu.py tests/test_stencil2d.py
        ;;
      tests)  # every GPU suite: 447 s on 4 x H200, over 480 s on 4 x H100; there, tests-exchange, then
        # tests-nodes and tests-dwarfs
        # shellcheck disable=SC2046  # the existing files, one word each
        stage tests 560 $py -m pytest -m gpu -q -rs --timeout=300 --durations=15 --maxfail=30 -p no:cacheprovider \
          $(ls tests/test_gpu.py tests/test_stencil2d.py tests/test_spectral_gpu.py tests/test_mpdata_gpu.py 2>/dev/null)
        ;;
      examples)  # every example on the GPU(s), one rank per GPU, checked against its serial reference
        stage examples 300 $py -m pytest -m gpu -q -rs --timeout=280 -p no:cacheprovider tests/test_examples.py
        ;;
      report-quick)  # the one-command report, quick suite, on every GPU
        stage report-quick 200 $py -m gridcomm report --quick --gpu --np "$ngpu" --out "$dir/report-quick"
        ;;
      report-full)  # the one-command report, full suite (under 10 minutes on 2 GPUs: a call of its own)
        stage report-full 590 $py -m gridcomm report --gpu --np "$ngpu" --out "$dir/report-full"
        ;;
      tests-mpdata)  # MPDATA's GPU suite only
        stage tests-mpdata 400 $py -m pytest -m gpu -q -rs --timeout=380 -p no:cacheprovider tests/test_mpdata_gpu.py
        ;;
      tune-mpdata)  # each kernel in every shape, then the step: tune_mpdata.py's options in TUNE_MPDATA
        stage tune-mpdata 540 $py benchmarks/tune_mpdata.py --grid O1280 --levels 32 ${TUNE_MPDATA:-} \
          --out "$dir/results" ;;
      profile-mpdata)  # the five kernels of one step under Nsight Compute (clocks left alone), O640 x 32 levels
        stage profile-mpdata 300 ncu --clock-control none --kernel-name regex:gridcomm_mpdata --launch-skip 5 \
          --launch-count 5 --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
          --section LaunchStats --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
          --section InstructionStats --print-details all \
          --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,l1tex__t_sector_hit_rate.pct \
          $py benchmarks/profile_mpdata.py O640 32
        ;;
      bench-mpdata1)  # one GPU: the seed's Figures 16-19 cases, every transport beside no exchange
        stage bench-mpdata1 420 $py -m gridcomm bench mpdata --gpu --np 1 --grids O640,O1024,O1280 --out "$dir/results"
        ;;
      bench-mpdata1-o1280)  # one GPU, O1280 only: the 1-GPU point that bench-mpdata draws its scaling against
        stage bench-mpdata1-o1280 240 $py -m gridcomm bench mpdata --gpu --np 1 --grids O1280 --out "$dir/results"
        ;;
      bench-mpdata)  # every GPU: O1280 over the GPU transports, drawn beside the 1-GPU run when one is there
        stage bench-mpdata 420 $py -m gridcomm bench mpdata --gpu --np "$ngpu" --grids O1280 \
          $(ls "$dir"/results/mpdata-gpu-1r-*.json 2>/dev/null | head -1 | sed 's/^/--with /') --out "$dir/results"
        ;;
      run-mpdata)  # the dwarf's own command on the GPU: a full revolution at O96, 4 levels, graphs, every GPU
        stage run-mpdata 200 $py -m gridcomm run mpdata --grid O96 --alpha 0.785 --levels 4 --gpu --graphs \
          --transport auto --np "$ngpu" --plot "$dir/results/mpdata-run-gpu.png"
        ;;
      tune-fft) stage tune-fft 300 $py benchmarks/tune_fft.py --out "$dir/results" ${TUNE_FFT:-} ;;  # TUNE_FFT: e.g. --per-length --batches 412
      tune-buckets) stage tune-buckets 200 $py benchmarks/tune_buckets.py --out "$dir/results" ${TUNE_BUCKETS_ARGS:-} ;;
      tune-buckets-all)  # the same on every GPU at once, each round trip started together (TUNE_BUCKETS_ARGS)
        stage tune-buckets-all 200 $py -c "import sys; from gridcomm.launch import run_under_mpiexec; \
sys.exit(run_under_mpiexec($ngpu, [sys.executable, 'benchmarks/tune_buckets.py', '--out', '$dir/results'] \
+ '${TUNE_BUCKETS_ARGS:-}'.split()))"
        ;;
      tune-pipeline) stage tune-pipeline 300 $py benchmarks/tune_pipeline.py --out "$dir/results" ${TUNE_PIPELINE:-} ;;
      tune) stage tune 240 $py benchmarks/tune_copy.py --out "$dir/results" ;;
      tune-pack)  # the pack and unpack launches alone, 2 ranks (sharing the GPU where there is one), each timed alone;
        # TUNE_COPY: tune_copy.py's options instead of these
        stage tune-pack 300 $py benchmarks/tune_copy.py --halos-only \
          ${TUNE_COPY:---unroll 1 --blocks-per-sm 6,7 --piece-units 1024,4096} --out "$dir/results" ;;
      profile-eager)  # host time inside start() and wait(), enqueued and replayed, and a cProfile: every GPU
        stage profile-eager 150 $py -c "import sys; from gridcomm.launch import run_under_mpiexec; \
sys.exit(run_under_mpiexec($ngpu, [sys.executable, 'benchmarks/profile_eager.py', '--out', '$dir/results']))"
        ;;
      bench-p2p) stage bench-p2p 200 $py -m gridcomm bench p2p --np 2 --out "$dir/results" ${P2P_ARGS:-} ;;  # P2P_ARGS: more options
      bench-alltoall)  # ALLTOALL_ARGS: more options (e.g. --largest 134217728 --samples 5)
        stage bench-alltoall 300 $py -m gridcomm bench alltoall --np "$ngpu" ${ALLTOALL_ARGS:-} --out "$dir/results" ;;
      bench-halo) stage bench-halo 200 $py -m gridcomm bench halo --gpu --np "$ngpu" --out "$dir/results" ;;
      bench-halo-mixed)  # u, v, p of their own halos and faces in one exchange, against three and the same bytes
        stage bench-halo-mixed 200 $py -m gridcomm bench halo --gpu --mixed --np "$ngpu" --out "$dir/results" ;;
      bench-spectral)  # the seed's Figure 4 on every GPU: one step per transport, and TCo639 as the seed ran it
        stage bench-spectral 300 $py -m gridcomm bench spectral --gpu --np "$ngpu" --grids O160,O320,O640 \
          --transports staged,nccl,ipc --out "$dir/results"
        stage bench-tco639 200 $py -m gridcomm bench spectral --gpu --np "$ngpu" --grids O640 --levels 137 \
          --fields 3 --steps 3 --transports auto --out "$dir/results"
        ;;
      bench-spectral-pipeline)  # TCo639 on every GPU, the transpositions overlapped with the compute or not;
        # SPECTRAL_TRANSPORTS and SPECTRAL_PIPELINE: other labels (e.g. ipc/blocks=16) and pipelines (8, 8x2, auto);
        # SPECTRAL_ARGS: more options (e.g. --fft-streams 8); SPECTRAL_SECONDS: the stage's limit
        stage bench-spectral-pipeline "${SPECTRAL_SECONDS:-300}" $py -m gridcomm bench spectral --gpu --np "$ngpu" \
          --grids O640 --levels 137 --fields 3 --steps 3 --transports "${SPECTRAL_TRANSPORTS:-ipc,nccl}" \
          --pipeline "${SPECTRAL_PIPELINE:-1,auto}" --no-peer ${SPECTRAL_ARGS:-} --out "$dir/results"
        ;;
      spectral-probe)  # where TCo639's pipelined run on every GPU stopped (2026-11-26: ranks 1-3 timed out in the
        # first Transposer() while rank 0 never came): a small grid first, then TCo639 with a long timeout, every
        # rank's stack printed (SIGUSR1) after 75 s, then the same without the exchangers' own graphs
        stage spectral-probe-small 150 $py -m gridcomm bench spectral --gpu --np "$ngpu" --grids O160 --levels 10 \
          --steps 3 --transports ipc --pipeline 1,4 --no-peer --out "$dir/results"
        for replay in 1 0; do
          # the Python processes only: `timeout` and the launcher would die of a SIGUSR1 of their own
          ( sleep 75; pkill -USR1 -f "^[^ ]*python[0-9.]* -m gridcomm bench spectral" ) &
          probe=$!
          GRIDCOMM_TIMEOUT=150 GRIDCOMM_REPLAY=$replay stage "spectral-probe-replay$replay" 190 $py -m gridcomm \
            bench spectral --gpu --np "$ngpu" --grids O640 --levels 137 --fields 3 --steps 3 --transports ipc \
            --pipeline 1 --no-peer --out "$dir/results"
          kill "$probe" 2>/dev/null
        done
        ;;
      tune-transposition-kernel)  # TCo639 pipelined, ipc's copy kernel in several shapes (TUNE_SHAPES), every GPU
        stage tune-transposition-kernel 400 $py -c "import sys; from gridcomm.launch import run_under_mpiexec; \
sys.exit(run_under_mpiexec($ngpu, [sys.executable, 'benchmarks/tune_transposition_kernel.py', '--out', \
'$dir/results'] + (['--shapes', '${TUNE_SHAPES:-}'] if '${TUNE_SHAPES:-}' else [])))"
        ;;
      transposition-shape)  # TCo639's transposition against contiguous blocks of the same bytes, every GPU
        stage transposition-shape 200 $py -c "import sys; from gridcomm.launch import run_under_mpiexec; \
sys.exit(run_under_mpiexec($ngpu, [sys.executable, 'benchmarks/transposition_shape.py', '--out', '$dir/results']))"
        ;;
      bench-spectral1)  # one GPU: the seed's grids, and TCo639 as the seed ran it
        stage bench-spectral1 200 $py -m gridcomm bench spectral --gpu --np 1 --grids O160,O320,O640 --out "$dir/results"
        stage bench-tco639-1 200 $py -m gridcomm bench spectral --gpu --np 1 --grids O640 --levels 137 --fields 3 \
          --steps 20 --out "$dir/results"  # 20 steps: 1.6 s, long enough for the energy counter
        ;;
      bench-tco639-1)  # one GPU: TCo639 alone, the 1-GPU point a multi-GPU TCo639 run is scaled against
        stage bench-tco639-1 200 $py -m gridcomm bench spectral --gpu --np 1 --grids O640 --levels 137 --fields 3 \
          --steps 20 --out "$dir/results"
        ;;
      bench-halo1) stage bench-halo1 120 $py -m gridcomm bench halo --gpu --np 1 --out "$dir/results" ;;
      bench-stencil2d)  # STENCIL_ARGS: more options (e.g. --sizes 64,1024 --modes traditional,graph)
        stage bench-stencil2d 150 $py -m gridcomm bench stencil2d --np "$ngpu" ${STENCIL_ARGS:-} --out "$dir/results" ;;
      bench-stencil2d1) stage bench-stencil2d1 100 $py -m gridcomm bench stencil2d --np 1 --out "$dir/results" ;;
      faults)  # a rank killed or silent mid-run on 2 GPUs, over nccl, ipc and staged: the job must end
        stage faults 300 $py -m pytest -m gpu -q -rs --timeout=280 -p no:cacheprovider tests/test_reliability.py
        ;;
      hygiene)  # 1,000 exchangers and transposers made and closed on 2 GPUs: device memory, IPC, streams, events
        stage hygiene 300 $py -m pytest -m gpu -q -rs --timeout=280 -p no:cacheprovider tests/test_hygiene.py
        ;;
      hygiene-holders)  # the holders' check over 60 cycles instead of 20: does GPU memory grow with the cycles?
        stage hygiene-holders 200 env GRIDCOMM_HYGIENE_SMALL_CYCLES=60 $py -m pytest -m gpu -q -rs --timeout=180 \
          -p no:cacheprovider tests/test_hygiene.py -k leak_no_device
        ;;
      soak)  # 100,000 exchanges per transport, checked bitwise every 1,000: one rank per GPU, or on the one GPU lent
        # (1 rank, periodic: every halo is the rank's own wrap; 2 processes time-sharing one GPU take ms per step)
        transports="ipc nccl" np=$ngpu
        [ "$ngpu" -lt 2 ] && transports="ipc nccl staged" np=1
        for transport in $transports; do
          stage "soak-$transport" 280 $py -m gridcomm bench soak --gpu --np $np --transport "$transport" --out "$dir/results"
        done
        ;;
      *) summary+=("$step: unknown stage") ;;
    esac
  done
done
[ ${#groups[@]} -gt 0 ] && summary+=("groups still running at the end: ${groups[*]} (add a 'wait' word)")
[ -z "${GRIDCOMM_SESSION_GROUP:-}" ] && tar -czf "$OUT/session.tgz" -C "$OUT" session
printf '%s\n' "--- summary (${ngpu} GPU(s))" "${summary[@]}"
