#!/usr/bin/env bash
# GHEX 0.9.0 built for the GPU (issue #36: the peer of `bench halo --gpu`), as a wheel for the GPU machines'
# Python 3.12, into .whl/peers where `peers-setup` (benchmarks/gpu_session.sh) installs it from.
#
#   bash benchmarks/build_ghex_gpu.sh [PYTHON]      # default python3.12
#
# GHEX's MPI backend hands device buffers to MPI, so GHEX runs on the GPU only beside a CUDA-aware MPI: it is
# compiled against the Open MPI that benchmarks/build_cuda_mpi.sh installs (.whl/cuda-mpi; libmpi.so.40, which
# the `cuda-mpi` stage loads), for sm_90 only. Needs the CUDA toolkit (CUDA_HOME, default /usr/local/cuda), NUMA
# headers (Debian: libnuma-dev) and the package index for the build tools (a virtual environment of PYTHON under
# $BUILD, default /tmp/ghex-gpu-build). About 15 minutes on 2 cores. Cached: an existing wheel is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-python3.12}
cuda=${CUDA_HOME:-/usr/local/cuda}
build=${BUILD:-/tmp/ghex-gpu-build}
ompi=$PWD/.whl/cuda-mpi/openmpi-4.1.4-cuda
out=$PWD/.whl/peers
if ls "$out"/ghex-0.9.0-cp312-*.whl >/dev/null 2>&1; then
  echo "build_ghex_gpu: $(ls "$out"/ghex-0.9.0-cp312-*.whl) is there already"
  exit 0
fi
[ -x "$ompi/bin/mpicc" ] || { echo "build_ghex_gpu: no $ompi (run benchmarks/build_cuda_mpi.sh)" >&2; exit 1; }
[ -x "$cuda/bin/nvcc" ] || { echo "build_ghex_gpu: no $cuda/bin/nvcc (set CUDA_HOME)" >&2; exit 1; }
"$python" -m venv "$build/venv"
"$build/venv/bin/pip" install -q scikit-build-core nanobind cmake ninja boost-headers "mpi4py==4.1.*" numpy
boost=$("$build/venv/bin/python" -c 'import boost_headers; print(boost_headers.get_include())')
export OPAL_PREFIX="$ompi" GHEX_USE_GPU=ON GHEX_GPU_TYPE=NVIDIA GHEX_GPU_ARCH=90 \
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
  CMAKE_ARGS="-DBoost_INCLUDE_DIR=$boost -DMPI_C_COMPILER=$ompi/bin/mpicc -DMPI_CXX_COMPILER=$ompi/bin/mpicxx \
-DCMAKE_CUDA_COMPILER=$cuda/bin/nvcc" PATH="$build/venv/bin:$cuda/bin:$PATH"
"$build/venv/bin/pip" wheel --no-build-isolation --no-deps -w "$out" ghex==0.9.0
echo "build_ghex_gpu: $(ls "$out"/ghex-0.9.0-cp312-*.whl)"
