"""gridcomm: halo exchanges and all-to-all transpositions for distributed grid codes on CPUs and GPUs."""

from . import log as log  # first: the "gridcomm" logger, silent unless GRIDCOMM_LOG or logging configures it
from ._version import __version__
from .comm import Communicator
from .decomp import CartesianDecomposition, CartesianField, UnstructuredDecomposition
from .errors import (
    ArgumentError,
    ArgumentTypeError,
    DecompositionError,
    DeviceError,
    FieldError,
    GridcommError,
    GridcommTimeout,
    MissingDependencyError,
    OversubscriptionWarning,
    PatternError,
    TransportError,
    ValidationError,
)
from .exchange import CapturedExchange, ExchangeHandle, HaloExchanger
from .gpu import use_local_gpu
from .pattern import Box, Pattern, PeerPlan, Rows
from .sharing import shared_zeros
from .slabs import pencil, slab
from .transpose import Transposer

__all__ = [
    "ArgumentError",
    "ArgumentTypeError",
    "Box",
    "CapturedExchange",
    "CartesianDecomposition",
    "CartesianField",
    "Communicator",
    "DecompositionError",
    "DeviceError",
    "ExchangeHandle",
    "FieldError",
    "GridcommError",
    "GridcommTimeout",
    "HaloExchanger",
    "MissingDependencyError",
    "OversubscriptionWarning",
    "Pattern",
    "PatternError",
    "PeerPlan",
    "Rows",
    "TransportError",
    "Transposer",
    "UnstructuredDecomposition",
    "ValidationError",
    "__version__",
    "pencil",
    "shared_zeros",
    "slab",
    "use_local_gpu",
]
