"""Checks of the arguments of gridcomm's public constructors. Each returns the value in the form the code uses, or
raises ``ArgumentTypeError`` (a wrong type: a float, a string or a bool where a whole number belongs) or
``ArgumentError`` (a value out of range), naming the argument, what it was given and what it takes. Nothing is
converted silently: 5.5 is not taken for 5, nor "5" for 5, nor True for 1."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import ArgumentError, ArgumentTypeError


def is_whole_number(value: Any) -> bool:
    """A Python or NumPy integer, not a bool."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def whole_number(
    value: Any,
    what: str,
    least: int | None = None,
    most: int | None = None,
    *,
    meaning: str = "",
    error: type[Exception] | None = None,
) -> int:
    """``value`` as an int within [least, most] (either bound may be None). ``meaning`` (what the number is)
    is added to the message; ``error``, the caller's own error class (e.g. StencilError), is raised for both a
    wrong type and a value out of range instead of ArgumentTypeError and ArgumentError."""
    why = f" ({meaning})" if meaning else ""
    if not is_whole_number(value):
        raise (error or ArgumentTypeError)(f"{what}={value!r} ({type(value).__name__}): give a whole number (int){why}")
    n = int(value)
    if (least is not None and n < least) or (most is not None and n > most):
        bounds = f"between {least} and {most}" if least is not None and most is not None else (
            f"at least {least}" if least is not None else f"at most {most}"
        )  # fmt: skip
        raise (error or ArgumentError)(f"{what}={n}: must be {bounds}{why}")
    return n


def real_number(value: Any, what: str, positive: bool = False) -> float:
    """``value`` (a Python or NumPy integer or float, not a bool) as a finite float; above 0 where ``positive``."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
        raise ArgumentTypeError(f"{what}={value!r} ({type(value).__name__}): give a number")
    x = float(value)
    if not math.isfinite(x) or (positive and x <= 0):
        raise ArgumentError(f"{what}={value!r}: give a {'positive' if positive else 'finite'} number")
    return x


def flag(value: Any, what: str, *, error: type[Exception] | None = None) -> bool:
    """``value`` (a Python or NumPy bool) as a bool: a truthy string or number is not taken for True.
    ``error``: the caller's own error class, raised instead of ArgumentTypeError."""
    if not isinstance(value, bool | np.bool_):
        raise (error or ArgumentTypeError)(f"{what}={value!r} ({type(value).__name__}): give True or False")
    return bool(value)


def environment_flag(name: str, default: bool, meaning: str) -> bool:
    """The environment variable ``name`` as a bool (1/true/yes/on or 0/false/no/off; unset or empty:
    ``default``); anything else raises ArgumentError saying what 1 means (``meaning``)."""
    setting = os.environ.get(name, "").strip().lower()
    if setting not in ("", *_TRUE, *_FALSE):
        raise ArgumentError(f"{name}={setting!r}: use 1 ({meaning}) or 0")
    return default if not setting else setting in _TRUE


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def entries(value: Any, what: str, hint: str) -> list[Any]:
    """The entries of argument ``what``: a sequence or an array (its first axis); ArgumentTypeError with ``hint``
    for anything else (a scalar, a string, a mapping, a set, a 0-d array)."""
    if isinstance(value, np.ndarray) and value.ndim >= 1:
        return list(value)
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return list(value)
    raise ArgumentTypeError(f"{what}={value!r} ({type(value).__name__}) is not a sequence; {hint}")


def index_set(values: Sequence[int] | np.ndarray | None, what: str, n: int, allowed: str) -> np.ndarray:
    """``values``, a sequence or 1-D array of distinct whole numbers within [0, n) (``allowed`` says what they
    index), as an int64 array; None gives all of them, 0 .. n - 1. Empty is allowed."""
    if values is None:
        return np.arange(n, dtype=np.int64)
    if isinstance(values, np.ndarray) and values.ndim == 1 and values.dtype.kind in "iu":
        # Whole numbers by their dtype, checked as one array (the transforms pass one every step).
        given = values
        low, high = (int(values.min()), int(values.max())) if values.size else (0, -1)
    else:
        given = entries(values, what, f"give a sequence of {allowed}")
        for v in given:  # a 2-D array's entries are rows: no whole numbers either
            if not is_whole_number(v):
                raise ArgumentTypeError(f"{what} holds {v!r} ({type(v).__name__}): give whole numbers, {allowed}")
        low, high = (int(min(given)), int(max(given))) if given else (0, -1)
    if low < 0 or high >= n:  # Python ints, before any cast: no overflow on the way
        raise ArgumentError(f"{what} {low}..{high} lie outside {allowed}")
    out = np.array(given, dtype=np.int64).reshape(-1)
    if len(np.unique(out)) != out.size:
        raise ArgumentError(f"{what} repeat a value: each may appear once")
    return out


__all__ = ["entries", "flag", "index_set", "is_whole_number", "real_number", "whole_number"]
