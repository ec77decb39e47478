"""KV cache storage types (`--kv-type`): THE table, and the numpy store/load of cache rows.

    kind = kv_types.get("q8_0", head_dim=64)           # AprError for unknown / misfit
    k = kv_types.allocate("q8_0", n_kv, capacity, 64)  # uint8 [n_kv, capacity, 68]
    kv_types.store(k, 64, slots, values)               # values [T, n_kv, hd] float32
    keys = kv_types.load(k, 64, slots)                  # [n_kv, T, hd] float32

Layout: one row per (KV head, position), `[n_kv, slots, row]`: f32 and f16 rows are
`head_dim` floats; q8_0 and q4_0 rows are `head_dim / 32` ggml blocks along the head
dimension (apr_core.dtypes' Q8_0 / Q4_0 layouts). A position's data never shares a
block with another position, so zeroing a rejected speculative row restores the cache
byte for byte, and the paged pool can hand out positions in any block size.
Quantizing and dequantizing go through apr_core.quant (the one copy of each kernel).

Quantized rows are rotated first: each run of 32 values (one ggml block) is multiplied by
the 32 x 32 Walsh-Hadamard matrix H (entries +-1, H H = 32 I; `rotate`), and decoding
multiplies by H / 32 (a power of two: exact). A key with a few large channels (Qwen2.5's
K biases put some near 150) makes one Q8_0 scale coarse for the 31 other values of its
block; rotated, its energy is spread over the block and every value gets a fine step
(measured on Qwen2.5-Coder-0.5B, 4,096 tokens: q8_0 perplexity +1.9% over f16 unrotated,
+0.6% rotated; llama.cpp, unrotated, +2.0%). Attention can work on the rotated rows
directly: q . (H y / 32) = (H q / 32) . y, and a sum of rotated values rotates back once
(the numba kernel rotates q and its output instead of each key, `decode(rotated=True)`
gives the rows as stored).
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

from .. import dtypes
from ..errors import AprError, ErrorCode


class KVType(NamedTuple):
    name: str
    storage: str                    # numpy dtype name of the cache arrays
    block: Optional[str]            # apr_core.dtypes name of a quantized row's blocks


# name -> type; the order gives the numba kernels' kind codes (apr_native kv_rows).
TYPES = {
    "f32": KVType("f32", "float32", None),
    "f16": KVType("f16", "float16", None),
    "q8_0": KVType("q8_0", "uint8", "Q8_0"),
    "q4_0": KVType("q4_0", "uint8", "Q4_0"),
}
NAMES = tuple(TYPES)
ITEM_BYTES = {"float32": 4, "float16": 2, "uint8": 1}   # numpy is imported only to compute
DEFAULT = "f32"          # the library's default (Transformer.new_cache, BlockPool)


def get(name: str, head_dim: int) -> KVType:
    """The type `name`, checked against `head_dim` (quantized rows need whole blocks)."""
    kind = TYPES.get(str(name).lower())
    if kind is None:
        raise AprError(ErrorCode.ARGUMENT, "unknown KV cache type", kv_type=name,
                       choices=", ".join(NAMES))
    if kind.block is not None and head_dim % dtypes.BY_NAME[kind.block].block_size:
        raise AprError(ErrorCode.ARGUMENT, "this KV cache type needs a head dimension that "
                       "is a multiple of its block size", kv_type=kind.name,
                       head_dim=head_dim, block=dtypes.BY_NAME[kind.block].block_size)
    return kind


def row_bytes(name: str, head_dim: int) -> int:
    """Bytes of one stored row (one KV head at one position)."""
    kind = get(name, head_dim)
    if kind.block is None:
        return head_dim * ITEM_BYTES[kind.storage]
    dt = dtypes.BY_NAME[kind.block]
    return head_dim // dt.block_size * dt.type_size


def row_width(name: str, head_dim: int) -> int:
    """Elements of `storage` in one row (the cache arrays' last dimension)."""
    kind = get(name, head_dim)
    return head_dim if kind.block is None else row_bytes(name, head_dim)


def token_bytes(name: str, n_layers: int, n_kv_heads: int, head_dim: int) -> int:
    """KV bytes one position costs: K and V, every layer and KV head."""
    return 2 * n_layers * n_kv_heads * row_bytes(name, head_dim)


def allocate(name: str, n_kv: int, slots: int, head_dim: int) -> Any:
    """Zeroed cache array `[n_kv, slots, row_width]` (virtual until written).

    On an anonymous memory map where there is one: numpy asks the kernel for huge pages on
    large arrays, and the first write to each 2 MiB page of a cache (every head's first
    rows, in every layer) then zeroes, and may first compact, a whole huge page: that
    tripled a short prompt's prefill (SmolLM2: 0.12 -> 0.54 s). Mapped pages are 4 KiB,
    zeroed as positions fill."""
    import numpy as np
    kind = get(name, head_dim)
    shape = (n_kv, slots, row_width(name, head_dim))
    size = n_kv * slots * shape[2] * np.dtype(kind.storage).itemsize
    try:
        import mmap
        memory = mmap.mmap(-1, max(size, 1))
    except (ImportError, OSError, ValueError):     # no mmap (a browser's runtime)
        return np.zeros(shape, kind.storage)
    return np.frombuffer(memory, kind.storage, n_kv * slots * shape[2]).reshape(shape)


def kind_of(cache: Any, head_dim: int) -> str:
    """The type name of a cache array made by `allocate` (from its dtype and row width)."""
    for kind in TYPES.values():
        fits = kind.block is None or head_dim % dtypes.BY_NAME[kind.block].block_size == 0
        if fits and cache.dtype == kind.storage and \
                cache.shape[-1] == row_width(kind.name, head_dim):
            return kind.name
    raise AprError(ErrorCode.ARGUMENT, "not a KV cache array", dtype=str(cache.dtype),
                   shape=tuple(cache.shape), head_dim=head_dim)


ROTATION = 32              # values per rotated run (the quantized types' block size)


def rotate(values: Any) -> Any:
    """float32 `[..., n]` (n a multiple of 32) with each run of 32 multiplied by the
    Walsh-Hadamard matrix H: butterflies of stride h = 1, 2, 4, 8, 16, each pair (a, b)
    at j, j + h becoming (a + b, a - b) in float32 (the numba store does the same
    operations in the same order, so their bytes agree)."""
    import numpy as np
    x = np.ascontiguousarray(values, np.float32)
    y = x.reshape(-1, ROTATION)                                     # [runs, 32]
    h = 1
    while h < ROTATION:
        y = y.reshape(-1, ROTATION // (2 * h), 2, h)                # [runs, groups, 2, h]
        a, b = y[:, :, 0, :], y[:, :, 1, :]
        y = np.stack([a + b, a - b], axis=2)
        h *= 2
    return y.reshape(x.shape)


def encode(name: str, values: Any) -> Any:
    """float32 `[..., hd]` -> stored rows `[..., row_width]` of type `name` (quantized
    types: of the rotated values, module docstring)."""
    hd = values.shape[-1]
    kind = get(name, hd)
    if kind.block is None:
        return values.astype(kind.storage)
    import numpy as np
    from ..quant.api import quantize
    raw = np.frombuffer(quantize(rotate(values), kind.block), np.uint8)
    return raw.reshape(values.shape[:-1] + (row_bytes(name, hd),))


def decode(name: str, rows: Any, head_dim: int, rotated: bool = False) -> Any:
    """Stored rows `[..., row_width]` of type `name` -> float32 `[..., head_dim]`
    (quantized types: rotated back, or as stored with `rotated`)."""
    import numpy as np
    kind = get(name, head_dim)
    if kind.block is None:
        return rows.astype(np.float32)
    from ..quant.api import dequantize
    shape = rows.shape[:-1] + (head_dim,)
    values = np.asarray(dequantize(np.ascontiguousarray(rows), kind.block, shape),
                        np.float32).reshape(shape)
    return values if rotated else rotate(values) * np.float32(1.0 / ROTATION)


def store(cache: Any, head_dim: int, slots, values: Any) -> None:
    """Write `values [T, n_kv, hd]` float32 into `cache` at `slots` (an int array [T] or
    a slice of positions), encoded as the cache's type."""
    name = kind_of(cache, head_dim)
    cache[:, slots] = encode(name, values.transpose(1, 0, 2))    # [n_kv, T, row]


def load(cache: Any, head_dim: int, slots) -> Any:
    """float32 `[n_kv, L, hd]` of the cache rows at `slots` (int array or slice)."""
    return decode(kind_of(cache, head_dim), cache[:, slots], head_dim)


__all__ = ["KVType", "TYPES", "NAMES", "DEFAULT", "ROTATION", "get", "row_bytes",
           "row_width", "token_bytes", "allocate", "kind_of", "rotate", "encode", "decode",
           "store", "load"]
