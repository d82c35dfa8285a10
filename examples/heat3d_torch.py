"""The 3-D heat equation of heat3d.py driving torch tensors: CUDA tensors on a GPU (one rank per GPU), CPU
tensors otherwise, handed straight to gridcomm.HaloExchanger, which views them through DLPack without a copy.

    mpiexec -n 4 python examples/heat3d_torch.py [--quick] [--cpu]

Only the allocation is torch's own: the step, the overlap and the bitwise check against the serial run are
heat3d.py's code, whose slicing and arithmetic work on NumPy, CuPy and torch alike.
"""

from __future__ import annotations

from collections.abc import Callable

import heat3d
import numpy as np
from common import need, usable_cupy

import gridcomm

torch = need("torch")


def torch_arrays(comm: gridcomm.Communicator, cpu: bool) -> heat3d.Arrays:
    """CPU tensors, or with ``cpu`` false and a GPU at hand, CUDA tensors on this rank's GPU."""
    # gridcomm moves GPU memory with CuPy: CUDA tensors need it installed too.
    on_gpu = not cpu and torch.cuda.is_available() and usable_cupy() is not None
    index = gridcomm.use_local_gpu(comm) if on_gpu else None  # CuPy's GPU: gridcomm packs and moves halos there
    device = torch.device("cpu") if index is None else torch.device("cuda", index)

    def to_numpy(t: torch.Tensor) -> np.ndarray:
        return t.cpu().numpy()

    if index is None:
        return heat3d.Arrays("torch float64", "the CPU", zeros(device), torch.from_numpy, to_numpy)
    import cupy

    torch.cuda.set_device(device)
    return heat3d.Arrays(
        "torch float64",
        f"GPU {index}",
        zeros(device),
        lambda a: torch.from_numpy(a).to(device),
        to_numpy,
        torch.cuda.synchronize,
        # torch's current stream as CuPy sees it: each exchange is ordered after the work torch enqueued there.
        lambda: cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream, index),
    )


def zeros(device: torch.device) -> Callable[[tuple[int, ...]], torch.Tensor]:
    return lambda shape: torch.zeros(shape, dtype=torch.float64, device=device)


if __name__ == "__main__":
    heat3d.main(torch_arrays, "heat3d_torch", __doc__)
