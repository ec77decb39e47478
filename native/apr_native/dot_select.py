"""Which activation codes the matvecs take, per weight type: the numba backend's kernels
that post dots to `kernels.pool` ("matmul", "matmul_group", "matmul_glu",
"decoder_block") are registered wrapped here, and each wrapper sets the pool's `ACT8` word
before the call to `isa.int8_dots` of the weight types the call reads: int8 codes for
Q4_K/Q6_K at the AVX2 level, the exact int16 codes (and, for a prompt, float products of
exactly dequantized rows) for everything else, $APR_DOTS forcing either. The kernels
themselves are untouched: they read `ACT8` per task. It holds for any number of tokens,
so a prompt, a speculative verification pass and a batch of streams give each token the
bits one-token decoding gives it (`kernels/blocks/kquant_token_rows`).

One pool task takes one kind of codes, so the choice is per call: a layer's one-call
step (`decoder_block`) takes int8 codes when every projection of the layer is of an int8
type (the Qwen2 1.5B and 7B shapes, all Q4_K/Q6_K), else exact ones (Qwen2.5-0.5B
Q4_K_M, whose layers mix Q5_0/Q8_0 with a Q4_K or Q6_K ffn_down); a model whose layers
run op by op gets the choice per projection.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, Tuple

import numpy as np

from . import isa
from .kernels import pool


def _names(linears: Any) -> Tuple[str, ...]:
    return tuple(getattr(getattr(l, "dtype", None), "name", "") for l in linears
                 if l is not None)


# block -> the weight types of its projections; forgotten with the block.
_layer_types: "weakref.WeakKeyDictionary[Any, Tuple[str, ...]]" = weakref.WeakKeyDictionary()


def layer_types(block: Any) -> Tuple[str, ...]:
    """The weight types of `block`'s projections (its `linears`)."""
    types = _layer_types.get(block)
    if types is None:
        types = _layer_types[block] = _names(block.linears.values())
    return types


def _choosing(kernel: Callable[..., Any],
              types_of: Callable[..., Tuple[str, ...]]) -> Callable[..., Any]:
    """`kernel`, with the pool's ACT8 word set before the call from `types_of(*args)`."""
    def chosen(*args: Any) -> Any:
        pool.get().task[pool.ACT8] = isa.int8_dots(types_of(*args))
        return kernel(*args)
    chosen.__wrapped__ = kernel                 # type: ignore[attr-defined]
    return chosen


def matmul(kernel: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """Kind "matmul": `kernel(data, dtype, shape, x, scratch_elements)`."""
    return _choosing(kernel, lambda data, dtype, *rest: (dtype.name,))


def matmul_group(kernel: Callable[..., Any]) -> Callable[..., Any]:
    """Kind "matmul_group": `kernel(linears, x)`."""
    return _choosing(kernel, lambda linears, x: _names(linears))


def matmul_glu(kernel: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """Kind "matmul_glu": `kernel(gate, up, x, act)`."""
    return _choosing(kernel, lambda gate, up, *rest: _names((gate, up)))


def decoder_block(kernel: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """Kind "decoder_block": `kernel(model, block, x, positions, cache, tables)`."""
    return _choosing(kernel, lambda model, block, *rest: layer_types(block))


WRAPPERS = {"matmul": matmul, "matmul_group": matmul_group, "matmul_glu": matmul_glu,
            "decoder_block": decoder_block}

__all__ = ["WRAPPERS", "layer_types"]
