#!/usr/bin/env python3
"""Regenerate apr_core/data/iq_grids.bin, the i-quant codebooks, from gguf-py (the oracle).

The grid-based i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) decode
through fixed codebooks defined by ggml (ggml-common.h: iq2xxs_grid, iq2xs_grid, iq2s_grid,
iq3xxs_grid, iq3s_grid, iq1s_grid, ksigns_iq2xs; MIT license, (c) the ggml authors). They
are format data, not code: this script reads them from the installed gguf-py package
(llama.cpp's Python port, which carries them hex-packed) and writes them as raw bytes,
one byte per grid value as ggml stores it, in the order and sizes of
`apr_core.quant.kernels.iquants_grid.GRID_TABLES` (the file layout is documented there).

    python scripts/gen_iq_grids.py            # write the file (needs `pip install gguf`)
    python scripts/gen_iq_grids.py --check    # exit 1 if the packaged file is stale
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from apr_core.quant.kernels.iquants_grid import GRID_FILE, GRID_TABLES  # noqa: E402

OUT_PATH = os.path.join(ROOT, "apr_core", *GRID_FILE.split("/"))

# table name -> the gguf-py quant class that carries it
_SOURCES = {"iq2xxs": "IQ2_XXS", "iq2xs": "IQ2_XS", "iq2s": "IQ2_S", "iq3xxs": "IQ3_XXS",
            "iq3s": "IQ3_S", "iq1s": "IQ1_S"}


def render() -> bytes:
    """The file's bytes, read from gguf-py's quant classes."""
    import numpy as np
    from gguf import quants

    parts = []
    for name, rows, width in GRID_TABLES:
        if name == "ksigns":
            table = np.frombuffer(quants.IQ2_XXS.ksigns, np.uint8)
        else:
            cls = getattr(quants, _SOURCES[name])
            cls.init_grid()  # decodes the hex codebook into float32 grid values
            # float32 grid values (-1..62, integers) -> the bytes ggml stores
            table = cls.grid.reshape(cls.grid_shape).astype(np.int8).view(np.uint8)
        if table.size != rows * width:
            raise SystemExit("gguf-py's {} has {} values, expected {}".format(
                name, table.size, rows * width))
        parts.append(np.ascontiguousarray(table).tobytes())
    return b"".join(parts)


def main(argv: list) -> int:
    data = render()
    if "--check" in argv:
        try:
            with open(OUT_PATH, "rb") as handle:
                current = handle.read()
        except OSError:
            current = b""
        if current != data:
            print("apr_core/{} is stale: run scripts/gen_iq_grids.py".format(GRID_FILE))
            return 1
        return 0
    with open(OUT_PATH, "wb") as handle:
        handle.write(data)
    print("wrote", os.path.relpath(OUT_PATH, ROOT), len(data), "bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
