#!/usr/bin/env bash
# A CUDA-aware MPI for the `mpi` transport on device memory (issue #35, item 4): Open MPI 4.1.4 from Debian's
# sources, configured --with-cuda (its smcuda BTL moves device buffers between the GPUs of a node through CUDA
# IPC; the pml picks it for device memory), installed under a prefix that a GPU session carries.
#
#   bash benchmarks/build_cuda_mpi.sh [PREFIX]      # default .whl/cuda-mpi/openmpi-4.1.4-cuda
#
# Cached: an install whose ompi_info says it was built with CUDA support is kept. The sources come from
# Debian (`apt-get source openmpi`, deb-src of bookworm) where apt can reach them, else from the tarballs
# already in $SOURCES (default .whl/cuda-mpi/src), so a machine without a network builds from what was carried.
# Needs a C compiler, make, perl and the CUDA toolkit's headers (CUDA_HOME, default /usr/local/cuda); no nvcc:
# Open MPI loads libcuda at run time.
#
# Use it: LD_LIBRARY_PATH=$PREFIX/lib, launch with $PREFIX/bin/mpiexec, MPI4PY_LIBMPI=$PREFIX/lib/libmpi.so
# (mpi4py's wheel then loads its Open MPI build); `gridcomm info` says "CUDA-aware: yes".
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$(realpath -m "${1:-.whl/cuda-mpi/openmpi-4.1.4-cuda}")
sources=$(realpath -m "${SOURCES:-.whl/cuda-mpi/src}")
cuda=${CUDA_HOME:-/usr/local/cuda}
version=4.1.4

# A carried install lives elsewhere than where it was built: Open MPI finds itself through OPAL_PREFIX.
export OPAL_PREFIX="$prefix" LD_LIBRARY_PATH="$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ -x "$prefix/bin/ompi_info" ] &&
  "$prefix/bin/ompi_info" --parsable --all 2>/dev/null | grep -q "mpi_built_with_cuda_support:value:true"; then
  echo "build_cuda_mpi: $prefix has a CUDA-aware Open MPI $version already"
  exit 0
fi
[ -f "$cuda/include/cuda.h" ] || { echo "build_cuda_mpi: no $cuda/include/cuda.h (set CUDA_HOME)" >&2; exit 1; }

mkdir -p "$sources"
tarball="$sources/openmpi_$version.orig.tar.xz"
if [ ! -f "$tarball" ]; then
  if ! (cd "$sources" && apt-get source --download-only "openmpi=$version-3" >/dev/null 2>&1); then
    echo "build_cuda_mpi: no $tarball, and apt-get source openmpi failed (add a deb-src line for bookworm," \
      "or copy the tarball there from a machine that can fetch it)" >&2
    exit 1
  fi
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xJf "$tarball" -C "$work"
cd "$work/openmpi-$version"
# Internal hwloc, libevent and PMIx: the install needs nothing from the system but libc (and libcuda at run
# time). No Fortran, no OpenSHMEM, no verbs or UCX: one node's GPUs, through CUDA IPC.
./configure --prefix="$prefix" --with-cuda="$cuda" --enable-shared --disable-static \
  --disable-mpi-fortran --disable-oshmem --without-verbs --without-ucx --without-ofi \
  --with-hwloc=internal --with-libevent=internal --with-pmix=internal \
  >"$work/configure.log" 2>&1 || { tail -40 "$work/configure.log"; exit 1; }
make -j"$(nproc)" >"$work/make.log" 2>&1 || { tail -60 "$work/make.log"; exit 1; }
make install >"$work/install.log" 2>&1 || { tail -40 "$work/install.log"; exit 1; }
"$prefix/bin/ompi_info" --parsable --all | grep -q "mpi_built_with_cuda_support:value:true" || {
  echo "build_cuda_mpi: built, but ompi_info does not report CUDA support" >&2
  exit 1
}
echo "build_cuda_mpi: Open MPI $version with CUDA support in $prefix ($(du -sh "$prefix" | cut -f1))"
