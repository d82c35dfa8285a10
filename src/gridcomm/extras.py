"""Optional dependencies, imported where they are needed: plots need matplotlib (``gridcomm[plot]``), the GPU
energy counter needs NVML's bindings (``gridcomm[energy]``). A missing one raises MissingDependencyError
naming the extra that installs it."""

from __future__ import annotations

import importlib
import types
from typing import Any

from .errors import MissingDependencyError

#: Each extra and the packages it installs (pyproject.toml's optional dependencies).
EXTRAS = {"plot": ("matplotlib",), "energy": ("nvidia-ml-py",)}


def require(module: str, extra: str, purpose: str) -> types.ModuleType:
    """``module`` imported, or MissingDependencyError saying that ``purpose`` (e.g. "plots") needs the extra
    ``extra`` and how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        packages = " and ".join(EXTRAS.get(extra, (module.split(".")[0],)))
        raise MissingDependencyError(
            f"{purpose}: {packages} is not installed ({error}); install it with: pip install 'gridcomm[{extra}]'"
        ) from error


def figure(**kwargs: Any) -> Any:
    """A matplotlib Figure (no pyplot: no global state, no display needed), ``kwargs`` as for Figure;
    MissingDependencyError naming ``gridcomm[plot]`` when matplotlib is missing."""
    return require("matplotlib.figure", "plot", "plots").Figure(**kwargs)
