"""CUDA sources as gridcomm hands them to a compiler: a file's text that names every header it includes.

CuPy caches the binaries NVRTC builds on disk, keyed by the source text and the options alone: the headers a
source includes are not part of the key. After an upgrade that changed only a header (say the width of the
descriptor table in ``packing/runs.cuh``), a process would load the binary built from the old header
and run it on tables of the new layout: a misaligned address at best, wrong halos at worst. So every source
gridcomm compiles ends with a comment holding a digest of the headers it includes, directly or through others:
a changed header is a changed text, hence a new cache entry. ``shmem.build_cubin`` keys its own cache on the
same digest.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

_QUOTED_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.MULTILINE)


def included_headers(source: Path, folders: Sequence[Path] = ()) -> list[Path]:
    """The headers ``source`` includes with quotes, directly or through other headers, each once, in the order
    first met: each looked for beside the file that includes it, then in ``folders`` (the compiler's ``-I``).
    One found in neither is left to the compiler, which reports it."""
    found: list[Path] = []
    seen: set[Path] = set()  # resolved: "a.cuh" and "../x/a.cuh" may be one file
    pending = [Path(source)]
    while pending:
        including = pending.pop(0)
        for name in _QUOTED_INCLUDE.findall(including.read_text()):
            candidates = (including.parent / name, *(Path(f) / name for f in folders))
            where = next((c for c in candidates if c.is_file()), None)
            if where is not None and where.resolve() not in seen:
                seen.add(where.resolve())
                found.append(where)
                pending.append(where)
    return found


def headers_digest(source: Path, folders: Sequence[Path] = ()) -> str:
    """A digest of the names and contents of every header ``source`` includes (``included_headers``)."""
    digest = hashlib.sha256()
    for header in included_headers(source, folders):
        digest.update(header.name.encode() + b"\0" + header.read_bytes() + b"\0")
    return digest.hexdigest()[:24]


def kernel_text(source: Path, folders: Sequence[Path] = ()) -> str:
    """The text of ``source`` with a last line naming the digest of its headers (at the end, so that the
    compiler's line numbers stay those of the file)."""
    return f"{Path(source).read_text()}\n// gridcomm: included headers {headers_digest(source, folders)}\n"


def include_folders(options: Sequence[str]) -> list[Path]:
    """The folders of the ``-I`` options among a compiler's ``options``."""
    return [Path(o[2:]) for o in options if o.startswith("-I") and len(o) > 2]


__all__ = ["headers_digest", "include_folders", "included_headers", "kernel_text"]
