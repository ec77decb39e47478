"""Whisper's elementwise float32 math: erf, the exact-erf GELU and LayerNorm, computed
in cache-sized blocks with few temporaries (the encoder runs them over [1500, 2048])."""
from __future__ import annotations

from typing import Callable

import numpy as np

LN_EPS = 1e-5
# Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7, below float32 resolution of GELU's range):
# numpy has no erf, and the exact-erf GELU is what Whisper uses.
_AS_P = 0.3275911
_AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
# Elements per block of the elementwise passes (erf, GELU): a block's temporaries stay in
# cache instead of each pass writing a fresh [1500, 2048] array to memory.
ELEMENT_BLOCK = 1 << 15


def _erf_block(z: np.ndarray) -> np.ndarray:
    """erf(z) of a float32 block (A&S 7.1.26), with few temporaries."""
    a = np.abs(z)
    t = _AS_P * a
    t += 1.0
    np.reciprocal(t, out=t)                                     # 1 / (1 + p|z|)
    poly = t * _AS_A[4]
    for coeff in (_AS_A[3], _AS_A[2], _AS_A[1], _AS_A[0]):
        poly += coeff
        poly *= t
    np.multiply(a, a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)                                            # exp(-z^2)
    poly *= a
    np.subtract(1.0, poly, out=poly)
    return np.copysign(poly, z, out=poly)


def _blockwise(fn: Callable[[np.ndarray, np.ndarray], None], x: np.ndarray) -> np.ndarray:
    """fn(block of x, out block) over `ELEMENT_BLOCK`-element blocks -> float32 like x."""
    x = np.ascontiguousarray(x, np.float32)
    out = np.empty_like(x)
    flat, flat_out = x.reshape(-1), out.reshape(-1)
    for a in range(0, flat.size, ELEMENT_BLOCK):
        fn(flat[a:a + ELEMENT_BLOCK], flat_out[a:a + ELEMENT_BLOCK])
    return out


def erf(x: np.ndarray) -> np.ndarray:
    """Elementwise erf in float32 (A&S 7.1.26)."""
    def block(z: np.ndarray, out: np.ndarray) -> None:
        out[...] = _erf_block(z)
    return _blockwise(block, x)


def _gelu_block(x: np.ndarray, out: np.ndarray) -> None:
    e = _erf_block(x * np.float32(0.7071067811865476))
    e += 1.0
    e *= x
    np.multiply(e, np.float32(0.5), out=out)                    # 0.5 x (1 + erf(x/sqrt2))


def gelu(x: np.ndarray) -> np.ndarray:
    return _blockwise(_gelu_block, x)


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """LayerNorm over the last axis (float32 in, float32 out)."""
    width = x.shape[-1]             # sums / width: what `mean` computes, without its wrapper
    centred = x - np.add.reduce(x, axis=-1, keepdims=True) / width
    var = np.add.reduce(np.square(centred), axis=-1, keepdims=True) / width
    var += LN_EPS
    centred /= np.sqrt(var)
    centred *= gamma
    centred += beta
    return centred.astype(np.float32, copy=False)


__all__ = ["erf", "gelu", "layer_norm", "LN_EPS"]
