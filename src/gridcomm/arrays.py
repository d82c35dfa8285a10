"""Array-module helpers: one code path for NumPy (host) and CuPy (GPU) arrays.

Anything that speaks DLPack or the CUDA array interface (torch, JAX, Numba), and anything with Python's buffer
protocol (memoryview, bytearray, array.array, ctypes arrays), is viewed without a copy as a NumPy or CuPy
array, so the rest of gridcomm only ever sees those two.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any

import numpy as np

from .device import cupy_or_none, gpu_count
from .errors import ArgumentError, ArgumentTypeError, FieldError

# DLPack device types (dlpack.h): CPU, CUDA, CUDA pinned host memory, CUDA managed memory.
_DLPACK_CPU, _DLPACK_CUDA, _DLPACK_CUDA_HOST, _DLPACK_CUDA_MANAGED = 1, 2, 3, 13

SUPPORTED_DTYPES: tuple[np.dtype, ...] = tuple(
    np.dtype(t)
    for t in (
        "bool",
        "int8",
        "uint8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    )
)


def is_device_array(obj: Any) -> bool:
    """True when ``obj`` lives in GPU memory (CUDA array interface or a CUDA DLPack device)."""
    if hasattr(obj, "__cuda_array_interface__"):
        return True
    dlpack_device = getattr(obj, "__dlpack_device__", None)
    if dlpack_device is not None and not isinstance(obj, np.ndarray):
        try:
            kind = int(dlpack_device()[0])
        except Exception:
            return False
        return kind in (_DLPACK_CUDA, _DLPACK_CUDA_MANAGED)
    return False


def as_array(obj: Any, what: str) -> Any:
    """View ``obj`` as a NumPy or CuPy array without copying.

    Args:
        obj: a NumPy or CuPy array, any DLPack / CUDA-array-interface object (torch, JAX, ...), or any object
            with the buffer protocol (memoryview, bytearray, array.array; shape and dtype from its format).
        what: how to name the object in an error, e.g. ``"field 2"``.
    """
    if isinstance(obj, np.ndarray):
        return obj
    if is_device_array(obj):
        cupy = cupy_or_none()
        if cupy is None:
            raise FieldError(
                f"{what} lives in GPU memory but CuPy is not installed; install the GPU extra "
                "(pip install 'gridcomm[gpu]') or pass a NumPy array"
            )
        if isinstance(obj, cupy.ndarray):
            return obj
        if hasattr(obj, "__dlpack__"):
            return cupy.from_dlpack(obj)
        return cupy.asarray(obj)  # CUDA array interface: cupy views it without a copy
    if hasattr(obj, "__dlpack__"):
        return np.from_dlpack(obj)
    try:
        buffer = memoryview(obj)
    except TypeError:
        raise FieldError(
            f"{what} is a {type(obj).__name__}, not an array; pass a NumPy or CuPy array (or anything with "
            "__dlpack__, e.g. a torch tensor or a JAX array, or with the buffer protocol, e.g. a memoryview)"
        ) from None
    try:
        return np.asarray(buffer)  # a view: NumPy reads the buffer's shape, strides and format
    except (TypeError, ValueError) as error:
        raise FieldError(
            f"{what} is a {type(obj).__name__} whose buffer format {buffer.format!r} NumPy cannot read ({error}); "
            "pass a NumPy array, or a buffer of plain numbers (e.g. array.array('d', ...), memoryview(...).cast('d'))"
        ) from None


def view_buffer(obj: Any, what: str) -> Any:
    """``obj`` viewed as a NumPy array (see :func:`as_array`) when it is a plain buffer (a memoryview, bytearray,
    array.array), which cannot be indexed like an array; any array itself, so that a torch tensor stays one."""
    if isinstance(obj, np.ndarray) or hasattr(obj, "__dlpack__") or hasattr(obj, "__cuda_array_interface__"):
        return obj
    return as_array(obj, what)


def array_module(a: Any) -> types.ModuleType:
    """numpy for host arrays, cupy for device arrays."""
    if isinstance(a, np.ndarray):
        return np
    cupy = cupy_or_none()
    if cupy is not None and isinstance(a, cupy.ndarray):
        return cupy
    raise ArgumentTypeError(f"expected a NumPy or CuPy array, got a {type(a).__name__}; view it with as_array first")


def memory_order(a: Any, what: str) -> str:
    """'C' or 'F' for a contiguous array; a FieldError naming ``what`` for a strided view."""
    flags = a.flags
    if flags.c_contiguous:
        return "C"
    if flags.f_contiguous:
        return "F"
    raise FieldError(
        f"{what} is not contiguous (strides {a.strides}, e.g. a slice or a transposed view); pass the whole "
        "array as allocated, e.g. decomposition.empty(dtype), or np.ascontiguousarray(...) it first"
    )


def check_order(order: Any) -> str:
    """``order`` if it is ``"C"`` or ``"F"`` (the memory order of a new array), else ArgumentError."""
    if not (isinstance(order, str) and order in ("C", "F")):
        raise ArgumentError(f"order={order!r}: use 'C' (last axis fastest) or 'F' (first axis fastest)")
    return order


def check_dtype(dtype: Any, what: str) -> np.dtype:
    """Return ``dtype`` as np.dtype if gridcomm can move it, else raise a FieldError listing what can."""
    dt = np.dtype(dtype)
    if dt.newbyteorder("=") not in SUPPORTED_DTYPES or not dt.isnative:
        names = ", ".join(str(d) for d in SUPPORTED_DTYPES)
        raise FieldError(f"{what} has dtype {dt}, which gridcomm cannot exchange; use one of: {names}")
    return dt


def check_writable(obj: Any, a: Any, what: str, written: str) -> None:
    """FieldError unless ``a`` (``obj`` as viewed by :func:`as_array`) may be written: NumPy's read-only flag,
    and JAX arrays, which are immutable although DLPack hands out views of their memory (CuPy's views of
    them have no read-only flag). ``written`` says what gridcomm would write, e.g. ``"received halos"``."""
    if type(obj).__module__.split(".")[0] in ("jax", "jaxlib"):
        raise FieldError(
            f"{what} is a JAX array, which is immutable, but {written} are written into it; exchange a NumPy or "
            "CuPy buffer of your own and view it in JAX with jax.dlpack.from_dlpack (see examples/jax_step.py)"
        )
    if not getattr(a.flags, "writeable", True):  # CuPy arrays have no such flag: always writable
        why = "flags.writeable is False" if isinstance(obj, np.ndarray) else f"a read-only {type(obj).__name__}"
        raise FieldError(
            f"{what} is read-only ({why}), but {written} are written into it; pass a writable array or buffer "
            "(e.g. a copy, or a bytearray instead of bytes)"
        )


def to_host(a: Any, what: str = "the array") -> np.ndarray:
    """A NumPy copy (or the array itself) of a NumPy or CuPy array, or of anything :func:`as_array` views
    (a torch tensor, a JAX array, a buffer); ``what`` names it in an error."""
    a = as_array(a, what)
    if isinstance(a, np.ndarray):
        return a
    return a.get()


def resolve_array_module(xp: Any, error: type[Exception] = ValueError) -> types.ModuleType:
    """The array module for ``xp``: numpy or cupy (the module or its name); None means cupy when a GPU is
    usable. Raises ``error`` saying what is wrong: another module, CuPy missing, or no GPU visible."""
    if xp is None:
        return resolve_array_module("cupy" if gpu_count() else "numpy", error)
    name = xp if isinstance(xp, str) else xp.__name__ if isinstance(xp, types.ModuleType) else None
    if name not in ("numpy", "cupy"):
        raise error(
            f"xp={xp!r}: pass the array module, numpy (CPU) or cupy (GPU); arrays of torch or JAX are made with "
            "those libraries (shape: the decomposition's local_shape) and handed to gridcomm as they are"
        )
    if name == "numpy":
        return np
    cupy = cupy_or_none()
    if cupy is None:
        raise error("xp=cupy but CuPy is not installed (pip install 'gridcomm[gpu]'); or run on the CPU")
    if not gpu_count():
        raise error("xp=cupy but no CUDA GPU is visible to this rank; run on the CPU (xp=numpy, --cpu)")
    return cupy


def array_list(arrays: Any, what: str) -> list[Any]:
    """``arrays`` (one array, or a list or tuple of arrays) as a list; FieldError naming the argument ``what``
    for a generator or another iterator, which would otherwise be taken for one array ("field 0 is a
    generator") and, once read, be empty on a second look."""
    if isinstance(arrays, list | tuple):
        return list(arrays)
    if isinstance(arrays, Iterator):
        raise FieldError(
            f"{what} is a {type(arrays).__name__}, not an array or a list of arrays; pass a list or a tuple "
            "(e.g. [a for ...] instead of (a for ...))"
        )
    return [arrays]
