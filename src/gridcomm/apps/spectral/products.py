"""The Legendre half on the GPU: both directions' products on FP64 tensor cores, the moves fused into them.

On the host the Legendre products are NumPy matmuls of stacked, padded tables around moves between the caller's
arrays and the products' operands (``operands.py``). On the GPU one kernel per direction (``products.cu``) does
all of it for every wavenumber at once: it reads the caller's coefficients (batch, ncoef) or Fourier
coefficients (batch, M, 2N) where they lie, multiplies by each wavenumber's own table (no padding to a bucket's
longest beyond a multiple of 16 degrees), and writes the Fourier coefficients of the northern and southern
rows, or the coefficients, straight from the products' accumulators. Per step that saves the four passes over
the products that cuBLAS's strided-batched calls needed around them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...gpu import package_kernel

SOURCE = "products.cu"
#: products.cu's shape: rows (or degrees) per block, stages of the cp.async pipeline, the sum's extent per
#: stage, real columns per block (BN / 2 complex fields).
BM = 64
STAGES = 3
KT = 16
BN = 64
DEFAULT_SHARED_BYTES = 48 * 1024  # dynamic shared memory every launch may use without opting in


def stage_bytes(bm: int = BM) -> int:
    """Shared memory of one pipeline stage [bytes]: both parities' A (KT x (bm + 4)) and B (KT x (BN + 4))."""
    return 2 * KT * ((bm + 4) + (BN + 4)) * 8


@dataclass(frozen=True)
class Shape:
    """The kernels' compile-time shape (``benchmarks/tune_legendre.py`` times others)."""

    bm: int = BM
    stages: int = STAGES
    min_blocks: int = 1  # blocks per SM the kernels' register allocation must allow
    split_mma: bool = False  # m16n8k16 as 8 m8n8k4 products, as on GPUs before Hopper

    def options(self) -> tuple[str, ...]:
        split = ("-DSPLIT_MMA",) if self.split_mma else ()
        return ("-std=c++17", f"-DBM={self.bm}", f"-DSTAGES={self.stages}", f"-DMIN_BLOCKS={self.min_blocks}",
                *split)  # fmt: skip

    @property
    def threads(self) -> int:
        return 64 * (self.bm // 32) * (BN // 32)  # a warp per 32 x 32 part of each parity

    @property
    def shared_bytes(self) -> int:
        return self.stages * stage_bytes(self.bm)


class TensorCoreLegendre:
    """Both Legendre products of the wavenumbers ``ms`` (this object's order) on the GPU.

    Args:
        tables: per wavenumber, its lambda_l^m on the northern rows as (T - m + 1, N) float64 (row l - m).
        weights: (N,) the quadrature weights of the northern rows (2 pi w_k of the Gauss nodes).
        offsets: (count,) where each wavenumber's coefficients start in a field's coefficient array.
        ncoef: coefficients per field.
    Memory on the GPU: each table twice (as is, and weighted and transposed), padded to 16 degrees of each parity.
    """

    def __init__(
        self, tables: list[np.ndarray], weights: np.ndarray, offsets: np.ndarray, ncoef: int, shape: Shape = Shape()
    ) -> None:
        import cupy

        self.shape = shape
        self.n = n = int(weights.shape[0])
        self.ncoef = ncoef
        self.count = len(tables)
        self.n_pitch = -(-n // shape.bm) * shape.bm
        lengths = np.array([t.shape[0] for t in tables], dtype=np.int32)
        depths = (-(-lengths // 2) + KT - 1) // KT * KT  # degrees of one parity, padded to whole stages
        sizes = 2 * depths.astype(np.int64)
        synthesis = np.zeros(int(np.sum(sizes)) * self.n_pitch)
        analysis = np.zeros(int(np.sum(sizes)) * n)
        starts_s = np.concatenate([[0], np.cumsum(sizes * self.n_pitch)[:-1]]).astype(np.int64)
        starts_a = np.concatenate([[0], np.cumsum(sizes * n)[:-1]]).astype(np.int64)
        for i, table in enumerate(tables):
            d = int(depths[i])
            s = synthesis[starts_s[i] : starts_s[i] + 2 * d * self.n_pitch].reshape(2, d, self.n_pitch)
            w = analysis[starts_a[i] : starts_a[i] + 2 * d * n].reshape(2, n, d)
            for parity in (0, 1):
                part = table[parity::2]  # degrees l = m + 2k + parity
                s[parity, : len(part), :n] = part
                w[parity, :, : len(part)] = (part * weights).T
        self.max_depth = int(depths.max()) if self.count else 0
        self._synthesis = cupy.asarray(synthesis)
        self._analysis = cupy.asarray(analysis)
        self._synthesis_starts = cupy.asarray(starts_s)
        self._analysis_starts = cupy.asarray(starts_a)
        self._offsets = cupy.asarray(np.asarray(offsets, dtype=np.int64))
        self._lengths = cupy.asarray(lengths)
        self._depths = cupy.asarray(depths.astype(np.int32))

    def inverse(self, a: Any, out: Any) -> None:
        """out[b, i, r] = F_m(row r) of wavenumber i on every row from the coefficients ``a`` (batch, ncoef),
        both C-contiguous complex128; out (batch, count, 2N)."""
        batch = a.shape[0]
        if not (batch and self.count):
            return
        grid = (self.n_pitch // self.shape.bm, -(-batch // (BN // 2)), self.count)
        self._kernel("gridcomm_legendre_synthesis")(grid, (self.shape.threads,), (
            a, np.int64(self.ncoef), np.int32(batch), self._offsets, self._lengths, self._depths,
            self._synthesis_starts, self._synthesis, np.int32(self.n), np.int32(self.n_pitch), np.int32(self.count),
            out,
        ), shared_mem=self.shape.shared_bytes)  # fmt: skip

    def direct(self, fourier: Any, out: Any) -> None:
        """out (batch, ncoef) = the Gauss quadrature of ``fourier`` (batch, count, 2N), both C-contiguous
        complex128."""
        batch = fourier.shape[0]
        if not (batch and self.count):
            return
        grid = (-(-self.max_depth // self.shape.bm), -(-batch // (BN // 2)), self.count)
        self._kernel("gridcomm_legendre_analysis")(grid, (self.shape.threads,), (
            fourier, np.int32(self.n), np.int32(batch), np.int32(self.count), self._offsets,
            self._lengths, self._depths, self._analysis_starts, self._analysis, np.int64(self.ncoef), out,
        ), shared_mem=self.shape.shared_bytes)  # fmt: skip

    def _kernel(self, name: str) -> Any:
        """Kernel ``name``, allowed the shared memory of its pipeline (an opt-in above 48 KiB)."""
        import cupy

        kernel = package_kernel(__package__, SOURCE, name, self.shape.options())
        need = self.shape.shared_bytes
        if need > DEFAULT_SHARED_BYTES and kernel.max_dynamic_shared_size_bytes < need:
            runtime = cupy.cuda.runtime
            most = runtime.deviceGetAttribute(runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin, runtime.getDevice())
            if need > most:
                raise ValueError(
                    f"the GPU Legendre products stage {need} bytes of shared memory per block, more than this "
                    f"GPU's {most}; use fewer stages (products.Shape) or the host path"
                )
            kernel.max_dynamic_shared_size_bytes = need
        return kernel
