"""Every published figure of the seed documents (the publications gridcomm set out to beat) that its benchmarks
and reports use, in one place: each with its source (seed, section, figure or table) and the problem it was
measured on.

Numbers are copied exactly as the seed prints them, in the seed's own units. Where a seed shows a result only as
a plot, nothing is read off the plot: ``PLOT_ONLY`` says which figures those are and what their text states.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: What "seed" means wherever gridcomm says it (the reports, the tables of result files).
SEEDS_DEFINED = (
    "The seeds are the publications gridcomm's dwarfs and benchmarks come from, whose published figures the "
    "measured ones stand beside: seed 000, ESCAPE deliverable D3.4 (the MPDATA and spectral-transform dwarfs on "
    "V100 GPUs), and seed 004, NVIDIA's NVSHMEM case study of a 2-D stencil."
)

SEED_000 = (
    "seed 000, ESCAPE deliverable D3.4, 'Performance report and "
    "optimized implementations of Weather & Climate dwarfs on multi-node systems' (30/05/2018)"
)


@dataclass(frozen=True)
class SeedFigure:
    """One number a seed prints: ``value`` in ``unit``, what it measures, where it is printed, on what problem."""

    value: float
    unit: str
    what: str
    where: str
    problem: str

    def text(self) -> str:
        """The number as the seed prints it, with its unit (e.g. ``0.0214 s``)."""
        return f"{self.value:.15g} {self.unit}"


# -- seed 000, section 3.1.4: the spherical-harmonics (spectral transform) dwarf on 4 V100 GPUs ----------------

#: The seed's TCO639 test case as measured for its Figure 4 (the level and field counts are not stated).
SPECTRAL_PROBLEM = (
    "TCO639 test case, 4 V100 GPUs (the fully NVLink-connected 4-GPU partition of a DGX-1V; the fewest that "
    "hold it), wall-clock time per timestep; level and field counts not stated"
)
_FIGURE_4 = "section 3.1.4.1, Figure 4"

#: Figure 4's three all-to-all methods, left to right, as its text states their time per step.
SPECTRAL_ORIGINAL = SeedFigure(
    1.89, "s", "original code: non CUDA-aware MPI, buffer operations on the CPU", _FIGURE_4, SPECTRAL_PROBLEM
)
SPECTRAL_CUDA_AWARE = SeedFigure(
    0.16, "s", "CUDA-aware MPI (MPI_Alltoallv), buffer packing and unpacking on the GPU", _FIGURE_4, SPECTRAL_PROBLEM
)
SPECTRAL_IPC = SeedFigure(
    0.12, "s", "custom all-to-all: CUDA IPC and CUDA streams, packing on the GPU", _FIGURE_4, SPECTRAL_PROBLEM
)
#: Section 3.1.4.3 (Figure 6): nvidia-smi over 500 timesteps on the 4 GPUs, and the energy the text works out
#: from it (193 W x 0.12 s x 4 GPUs), GPUs only.
SPECTRAL_WATTS_PER_GPU = SeedFigure(
    193, "W", "average power per GPU over the 4 GPUs (the custom all-to-all code)", "section 3.1.4.3, Figure 6",
    SPECTRAL_PROBLEM,
)  # fmt: skip
SPECTRAL_JOULES_PER_STEP = SeedFigure(
    93, "J", "energy per timestep, the 4 GPUs together (193 W x 0.12 s x 4)", "section 3.1.4.3", SPECTRAL_PROBLEM
)

# -- seed 000, section 4.2.3: the MPDATA dwarf on V100 GPUs of a DGX-1V -----------------------------------------

#: The seed's MPDATA "1024 test case"; its section 4.3.1 profiles "the diagonal configuration on the grid O1024".
MPDATA_PROBLEM = (
    "MPDATA 1024 test case (the grid O1024 of section 4.3.1, diagonal configuration; level count not stated), "
    "V100 GPUs of one DGX-1V, time per timestep"
)
MPDATA_GRID = "O1024"
_FIGURE_17 = "section 4.2.3.1, the text beside Figure 17"

MPDATA_NO_EXCHANGE = SeedFigure(0.0214, "s", "1 V100, no halo exchange", _FIGURE_17, MPDATA_PROBLEM)
MPDATA_GPU_EXCHANGE = SeedFigure(
    0.0216, "s", "1 V100, halo exchange on the GPU (the new CUDA-aware mechanism; 'only around 1%')", _FIGURE_17,
    MPDATA_PROBLEM,
)  # fmt: skip
MPDATA_HOST_EXCHANGE = SeedFigure(
    0.0835, "s", "1 V100, halo exchange through the host (the original ATLAS mechanism; '3.9X')", _FIGURE_17,
    MPDATA_PROBLEM,
)  # fmt: skip
#: Section 4.2.3.2 (Figure 19): average power draw per GPU by GPU count, nvidia-smi, the optimized code.
MPDATA_WATTS_PER_GPU: dict[int, SeedFigure] = {
    gpus: SeedFigure(watts, "W", f"average power per GPU on {gpus} V100 GPU(s)", "section 4.2.3.2", MPDATA_PROBLEM)
    for gpus, watts in ((1, 196), (2, 183), (4, 173), (8, 152))
}
#: Section 4.2.3.2 (Figure 19): "All energy values are within the range of 4J to 5J per timestep" on 1 to 8 GPUs.
MPDATA_JOULES_PER_STEP = (
    SeedFigure(4, "J", "energy per timestep, lowest, 1 to 8 V100 GPUs", "section 4.2.3.2, Figure 19", MPDATA_PROBLEM),
    SeedFigure(5, "J", "energy per timestep, highest, 1 to 8 V100 GPUs", "section 4.2.3.2, Figure 19", MPDATA_PROBLEM),
)

#: Figures whose numbers the seed gives only as a plot: what each shows and what its text says in words.
PLOT_ONLY: dict[str, str] = {
    "000 Figure 4": "the three methods are plotted as columns; the times per step above are those its text states",
    "000 Figure 17": (
        "MPDATA time per step on 1 to 8 V100 GPUs, host mechanism against the GPU one: only plotted; the text "
        "states the 1-GPU times alone (its text calls this figure 'Figure 7')"
    ),
    "000 Figure 18": (
        "MPDATA speed-up on 1 to 8 V100 GPUs beside ideal scaling: only plotted; the text says only that the line "
        "shows a 'kink' from 4 to 8 GPUs (its text calls this figure 'Figure 4')"
    ),
    "000 Figure 19": (
        "MPDATA energy per step against time per step on 1 to 8 GPUs: only plotted; the text gives the 4 J to 5 J "
        "range and the power per GPU above (its text calls this figure 'Figure 5')"
    ),
}

#: The seed's MPDATA on one V100 (1024 case): the step without and with its halo exchange, host-staged, and its
#: energy per step on 1 to 8 GPUs (stored as "seed" in `gridcomm bench mpdata --gpu`'s results).
SEED_MPDATA = {
    "no_exchange_s": MPDATA_NO_EXCHANGE.value,
    "exchange_s": MPDATA_GPU_EXCHANGE.value,
    "host_staged_s": MPDATA_HOST_EXCHANGE.value,
    "joules_per_step": tuple(float(f.value) for f in MPDATA_JOULES_PER_STEP),
}

# -- seed 004: NVIDIA's NVSHMEM case study, the 2-D stencil -------------------------------------------------------

#: Where SEED_004_US comes from.
SEED_004_SOURCE = (
    "seed 004, NVIDIA's NVSHMEM case study, 'simplified 2dstencil "
    "example': time per step [µs] against domain size per GPU; 4 processes, 1 process per GPU (4 K40m GPUs on "
    "one Xeon E5-2690 socket, PLX switches), ghost width 1, boundary 16, 512 threads per block, 15 blocks"
)
#: Domain size per GPU -> (traditional, persistent kernel), time per step in µs, as printed in seed 004's table.
SEED_004_US: dict[int, tuple[float, float]] = {
    64: (195.33, 13.88),
    128: (193.7, 21.32),
    256: (193.18, 39.77),
    512: (220.28, 132.61),
    1024: (375.8, 389.65),
    2048: (1319.74, 1312.59),
    4096: (5299.23, 4776.31),
    8192: (21480.32, 18394.88),
}
SEED_004_GPUS = 4


def seed_reference() -> list[dict[str, Any]]:
    """The seed's table as rows: n, traditional_us, persistent_kernel_us."""
    return [{"n": n, "traditional_us": t, "persistent_kernel_us": p} for n, (t, p) in sorted(SEED_004_US.items())]
