"""A model's quantized weights placed straight into the SIMD kernels' memory (the browser's
"hold it once" path): each weight's GGUF blocks go from the IndexedDB cache (or the network)
to their final address in the kernels' WebAssembly memory in chunks, never through Python
bytes or numpy arrays, and the Transformer is built over `ResidentBlocks` stand-ins for them.
Only the small tensors (norms, biases) and the header are read into Python.

    placed = await place_weights(model, kernel)     # {tensor name: ResidentBlocks}
    transformer_source = PlacedModel(model, placed)   # read_raw gives the stand-ins

A model whose placed weights cannot fit one wasm32 memory is refused up front (E008, naming
both sizes) before a byte is placed.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from apr_core.errors import AprError, ErrorCode
from apr_core.tensor import RawTensor

CHUNK = 4 << 20                  # bytes per read while placing a weight: the shard cache's
                                 # chunk size, reads aligned to it (each one chunk, no copy)
MEMORY_LIMIT = 1 << 32           # one wasm32 memory (simd_kernel.js MEMORY_LIMIT)
HEADROOM = 64 << 20              # the kernels' scratch (x, its split, outputs) beside weights


class ResidentBlocks:
    """A weight's GGUF blocks in the kernels' memory at `handle` (`nbytes` long)."""

    resident = True

    def __init__(self, kernel: Any, handle: int, nbytes: int) -> None:
        self._kernel = kernel
        self.handle = handle
        self.nbytes = nbytes

    def rows(self, ids: Any, row_bytes: int) -> Any:
        """Rows `ids` as uint8 `[n, row_bytes]` (an embedding lookup's blocks)."""
        import numpy as np
        from apr_websource import _bytes
        ids = [int(i) for i in ids]
        got = self._kernel.readRows(self.handle, int(row_bytes), ",".join(map(str, ids)))
        return np.frombuffer(_bytes(got), np.uint8).reshape(len(ids), row_bytes)

    def all_bytes(self, row_bytes: int) -> Any:
        """Every row, uint8 `[rows, row_bytes]` (a float32 copy for the f32 kernel's checks)."""
        return self.rows(range(self.nbytes // row_bytes), row_bytes)


class PlacedModel:
    """An open ModelFile whose placed tensors read as their `ResidentBlocks`."""

    def __init__(self, model: Any, placed: Dict[str, ResidentBlocks]) -> None:
        self._model = model
        self._placed = placed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def read_raw(self, name: str) -> RawTensor:
        if name in self._placed:
            info = self._model.info(name)
            return RawTensor(info.name, info.dtype, info.shape, self._placed[name])
        return self._model.read_raw(name)


def placeable(model: Any) -> List[Tuple[str, int, int]]:
    """`(name, offset, nbytes)` of the tensors the kernels read in place: 2-D weights of a
    quantized kind stored plainly in one file (a GGUF's data section)."""
    from apr_core.formats.gguf import GGUFFile
    from apr_webkernel import BLOCK, QUANTIZED
    if not isinstance(model, GGUFFile):
        return []
    return [(name, int(info.offset), int(info.size)) for name, info in model.tensors.items()
            if info.dtype.name in QUANTIZED and len(info.shape) == 2
            and int(info.shape[1]) % BLOCK == 0]


def check_fits(needed: int, held: int) -> None:
    """E008 when `needed` more bytes cannot join the `held` ones in one wasm32 memory."""
    if held + needed + HEADROOM > MEMORY_LIMIT:
        raise AprError(ErrorCode.MEMORY, "the model's weights do not fit the browser's kernel "
                       "memory (one wasm32 memory of 4 GiB)", needed_bytes=needed,
                       held_bytes=held, limit_bytes=MEMORY_LIMIT)


async def place_weights(model: Any, kernel: Any) -> Dict[str, ResidentBlocks]:
    """Place every `placeable` tensor of `model` in `kernel`'s memory; read the remaining
    tensors' bytes into the source (small: norms, biases, unsupported types)."""
    tensors = placeable(model)
    check_fits(sum(size for _, _, size in tensors), int(kernel.bytesHeld()))
    source = model.source
    if tensors and hasattr(source, "ensure_cached"):
        await source.ensure_cached()   # one download into the cache, then range reads of it
    placed: Dict[str, ResidentBlocks] = {}
    for name, offset, size in tensors:
        handle = int(kernel.reserve(size))
        start = offset
        while start < offset + size:
            end = min((start // CHUNK + 1) * CHUNK, offset + size)   # the next chunk boundary
            kernel.write(handle + start - offset, await source.read_js(start, end - start))
            start = end
        placed[name] = ResidentBlocks(kernel, handle, size)
    for name, info in model.tensors.items():   # the rest, each read once into Python
        if name not in placed:
            await source.fill_exact(int(info.offset), int(info.size))
    return placed


__all__ = ["ResidentBlocks", "PlacedModel", "placeable", "place_weights", "check_fits",
           "MEMORY_LIMIT"]
