"""The text gridcomm hands to NVRTC names every header the source includes, so that CuPy's disk cache of compiled
kernels (keyed by the text) never serves a binary built from an older header (gridcomm.kernel_text)."""

from __future__ import annotations

import re
from pathlib import Path

import gridcomm
from gridcomm.kernel_text import headers_digest, include_folders, included_headers, kernel_text


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    """main.cu includes "a.cuh" (beside it) twice and <cuda_fp16.h>; a.cuh includes "b.cuh", found only in
    the -I folder, and "missing.cuh", found nowhere."""
    src, extra = tmp_path / "src", tmp_path / "include"
    src.mkdir()
    extra.mkdir()
    (src / "main.cu").write_text('#include "a.cuh"\n#include <cuda_fp16.h>\n  # include "a.cuh"\nint main_line;\n')
    (src / "a.cuh").write_text('#pragma once\n#include "b.cuh"\n#include "missing.cuh"\n')
    (extra / "b.cuh").write_text("#define WIDTH 12\n")
    return src / "main.cu", extra


def test_headers_are_found_through_headers_and_include_folders(tmp_path):
    main, extra = _tree(tmp_path)
    assert [h.name for h in included_headers(main, [extra])] == ["a.cuh", "b.cuh"]
    assert [h.name for h in included_headers(main)] == ["a.cuh"]  # b.cuh needs the -I folder
    assert include_folders(["-std=c++17", f"-I{extra}", "-I", "-DX=1"]) == [extra]


def test_a_changed_header_changes_the_text_and_nothing_else_does(tmp_path):
    main, extra = _tree(tmp_path)
    before = kernel_text(main, [extra])
    assert before.startswith(main.read_text())  # the compiler's line numbers are the file's
    assert kernel_text(main, [extra]) == before  # the same headers, the same text: the cache is reused
    (extra / "b.cuh").write_text("#define WIDTH 14\n")  # only a header two levels down changes
    after = kernel_text(main, [extra])
    assert after != before and after.startswith(main.read_text())
    assert headers_digest(main, [extra]) in after


def test_every_gridcomm_source_finds_its_headers():
    """Each quoted include of every CUDA source in the package resolves beside it (they ship together)."""
    root = Path(gridcomm.__file__).parent
    sources = sorted(root.rglob("*.cu"))
    assert sources
    for source in sources:
        wanted = {Path(n).name for n in re.findall(r'#\s*include\s*"([^"]+)"', source.read_text())}
        found = {h.name for h in included_headers(source)}
        assert wanted <= found, (source, wanted - found)
    pack = next(s for s in sources if s.name == "pack.cu")
    assert [h.name for h in included_headers(pack)] == ["runs.cuh"]
