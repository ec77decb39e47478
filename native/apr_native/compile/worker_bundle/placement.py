"""A model object streamed from the R2-style binding straight into the SIMD kernels' memory.

The whole model never sits in Python's heap (a WebAssembly memory that never shrinks, on a
platform with 128 MB per isolate): the header is parsed from ranged reads (apr_core's
`run_async` over a `SparseSource`), then the object is read once in CHUNK-sized ranges,
each hashed (sha256, checked against the build before the model is used), its spans of
the weights the kernels read in place (apr_webplace.placeable: GGUF blocks as stored)
copied into the kernels' memory, and the few other tensors (norms, ...) kept in the
source. Python's heap peaks at about one chunk above its resting size.

    model_file, placed = await stream_placed(reader, expect, kernel)

This file is apr_native/compile/worker_bundle/placement.py; in the bundle it is
`apr_worker/placement.py`.
"""
from __future__ import annotations

import hashlib
from typing import Any, Dict, List, Tuple

from apr_core.errors import AprError, ErrorCode

CHUNK = 4 << 20                  # bytes per ranged read while streaming the model


def check_size(reader: Any, expect: Dict[str, Any]) -> int:
    size = int(expect.get("size", reader.size))
    if reader.size != size:
        raise AprError(ErrorCode.CHECKSUM, "the model object's size differs from the build",
                       source=reader.name, expected=size, got=reader.size)
    return size


def check_digest(reader: Any, expect: Dict[str, Any], digest: Any) -> None:
    if expect.get("sha256") and digest.hexdigest() != expect["sha256"]:
        raise AprError(ErrorCode.CHECKSUM, "the model object's sha256 differs from the build",
                       source=reader.name, expected=expect["sha256"], got=digest.hexdigest())


async def open_header(reader: Any) -> Any:
    """The model file over a sparse source holding only what its header parse read."""
    from apr_core.formats.open import open_model
    from apr_core.io import run_async
    return await run_async(reader, lambda source: open_model(source, verify=False))


def _overlap(start: int, length: int, offset: int, count: int) -> Tuple[int, int]:
    return max(start, offset), min(start + length, offset + count)


async def stream_placed(reader: Any, expect: Dict[str, Any], model_file: Any,
                        targets: List[Tuple[str, int, int]], kernel: Any) -> Dict[str, Any]:
    """Stream the object: `targets` (placeable `(name, offset, nbytes)`) into `kernel`'s
    memory, every other tensor into `model_file`'s sparse source; {name: ResidentBlocks}."""
    import js  # type: ignore[import-not-found]
    import numpy as np
    from apr_webkernel import _address
    from apr_webplace import ResidentBlocks, check_fits
    size = check_size(reader, expect)
    check_fits(sum(n for _, _, n in targets), int(kernel.bytesHeld()))
    placed = {name: (offset, nbytes, int(kernel.reserve(nbytes)))
              for name, offset, nbytes in targets}
    rest = {name: (int(info.offset), int(info.size)) for name, info in
            model_file.tensors.items() if name not in placed}
    kept = {name: bytearray(nbytes) for name, (_, nbytes) in rest.items()}
    digest = hashlib.sha256()
    for offset in range(0, size, CHUNK):
        chunk = await reader.read(offset, min(CHUNK, size - offset))
        digest.update(chunk)
        base = _address(np.frombuffer(chunk, np.uint8))
        for start, nbytes, handle in placed.values():
            lo, hi = _overlap(start, nbytes, offset, len(chunk))
            if lo < hi:   # the kernels' memory <- this span, by address in Python's heap
                js.aprKernelWrite(handle + lo - start, base + lo - offset, hi - lo)
        for name, (start, nbytes) in rest.items():
            lo, hi = _overlap(start, nbytes, offset, len(chunk))
            if lo < hi:
                kept[name][lo - start:hi - start] = chunk[lo - offset:hi - offset]
    check_digest(reader, expect, digest)
    for name, (start, _) in rest.items():
        model_file.source.add(start, bytes(kept.pop(name)))
    return {name: ResidentBlocks(kernel, handle, nbytes)
            for name, (_, nbytes, handle) in placed.items()}


__all__ = ["stream_placed", "open_header", "check_size", "check_digest", "CHUNK"]
