"""Pieces every numba CPU kernel shares: the block-type table, f16 decoding, and the
activation quantizer of the fused matvec kernels.

Block types are identified inside jitted code by a small integer (`KIND`), so one compiled
driver serves every type (one branch per row, invisible next to a row's work) and a single
`cache=True` compile covers them all.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from apr_core import dtypes

from ..vector.block_ir import load_f16

# The block types these kernels implement, in kind-code order (the code is the index).
KINDS = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K")
FIRST_K = KINDS.index("Q4_K")       # kinds from here on are K-quants (256-element blocks)
# dtype name -> (kind code, elements per block, bytes per block), from apr_core.dtypes.
BLOCKS = {name: (kind, dtypes.BY_NAME[name].block_size, dtypes.BY_NAME[name].type_size)
          for kind, name in enumerate(KINDS)}
# Bytes per block of the K-quants, for the jitted row decoders (compile-time constants).
Q4_K_BYTES = dtypes.BY_NAME["Q4_K"].type_size
Q5_K_BYTES = dtypes.BY_NAME["Q5_K"].type_size
Q6_K_BYTES = dtypes.BY_NAME["Q6_K"].type_size

# Activations are quantized in runs of 32 (every block type's sub-blocks are 32 or 16
# elements, so each weight sub-block sees one activation scale).
QBLOCK = 32

@njit(inline="always", cache=True)
def f16(w, o):
    """The little-endian IEEE half at `w[o:o+2]` as float32 (exact)."""
    return load_f16(w, o)


# Activation codes are int16: the integer dot multiplies int16 pairs (vpmaddwd) whether
# the activations were 8 or 16 bits, so 16 bits cost only their loads and make the
# activation error ~1e-5 relative (8 bits, as llama.cpp does, flip near-tied greedy
# tokens). Overflow: |code| <= 128 times 32767 times 32 per run stays below 2**31.
XMAX = 32767.0


# Int8 activation codes (`quantize_x8`): one token's matvecs on AVX2 hosts, where a byte
# dot (pmaddubsw, 32 pairs per instruction) reads half the activation bytes of the int16
# one (`isa.int8_dots`). |code| <= 127, so pmaddubsw's int16 pair sums never saturate.
XMAX8 = 127.0
# Int8 codes that meet K-quant rows share one scale per 256 elements (llama.cpp's Q8_K):
# the Q4_K/Q6_K byte dots then scale a whole block's integer sum at once
# (`vector.kquant_bytes`); legacy rows alone take a scale per 32 (its Q8_0).
KRUN = 256


@njit(cache=True)
def quantize_activations(x, xq, xd, xs):
    """`quantize_runs` with int16 codes (scale amax / 32767, runs of 32)."""
    quantize_runs(x, xq, xd, xs, np.float32(XMAX), QBLOCK)


@njit(cache=True)
def quantize_runs(x, xq, xd, xs, xmax, run):
    """`x [T, n]` f32 -> codes `xq [T, n]`, scales `xd [T, n/32]` f32 and run sums
    `xs [T, n/32]` f32 (the scale times the sum of the 32-element run's codes: what a
    block's min or offset term multiplies, computed once here instead of in every weight
    row), so that x ~= xd * xq: one scale amax / xmax per `run` elements (32, or `KRUN`),
    written to each of its 32-element runs; round half away from zero."""
    t_count, n = x.shape
    for t in range(t_count):
        for base in range(0, n, run):
            amax = np.float32(0.0)
            for j in range(run):
                a = abs(x[t, base + j])
                if a > amax:
                    amax = a
            d = amax / xmax
            inv = np.float32(1.0) / d if d > 0 else np.float32(0.0)
            for b in range(base // QBLOCK, (base + run) // QBLOCK):
                total = 0
                for j in range(b * QBLOCK, b * QBLOCK + QBLOCK):
                    v = x[t, j] * inv
                    q = np.int32(v + np.float32(0.5)) if v >= 0 else -np.int32(np.float32(0.5) - v)
                    xq[t, j] = q
                    total += q
                xd[t, b] = d
                xs[t, b] = d * np.float32(total)


@njit(cache=True)
def quantize_x(x):
    """`x [T, n]` f32 -> new (codes int16 [T, n], scales f32 [T, n/32], run sums f32
    [T, n/32]) by `quantize_activations`; called inside the pool's task entries, to save
    a dispatch and three allocations from Python per call."""
    t_count, n = x.shape
    xq = np.empty((t_count, n), np.int16)
    xd = np.empty((t_count, n // QBLOCK), np.float32)
    xs = np.empty((t_count, n // QBLOCK), np.float32)
    quantize_activations(x, xq, xd, xs)
    return xq, xd, xs


@njit(cache=True)
def quantize_x8(x, run):
    """`quantize_x` with int8 codes (scale amax / 127, `XMAX8`), one scale per `run`
    elements: QBLOCK, or KRUN where the codes meet K-quant rows."""
    t_count, n = x.shape
    xq = np.empty((t_count, n), np.int8)
    xd = np.empty((t_count, n // QBLOCK), np.float32)
    xs = np.empty((t_count, n // QBLOCK), np.float32)
    quantize_runs(x, xq, xd, xs, np.float32(XMAX8), run)
    return xq, xd, xs
