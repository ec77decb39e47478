"""What one CUDA thread computes, written once and compiled twice: by `cuda.jit(device=True)`
for the GPU kernels of `cuda` and by `numba.njit` for `cuda_emulated`, which runs the same
thread code over the same grid on the CPU (numba's simulator interprets every thread in
Python, minutes per token of a real model; compiled, a whole real model decodes).

The functions here are plain Python; `compile_for(jit)` compiles them callees first and
binds each caller's global names to the compiled callees of the same target.

Arithmetic follows the numpy reference: weights decode exactly to float32 (`d * q (+ m)`,
K-quant `dl * q - ml`) and products accumulate in float32 (a warp shares a row: each lane
sums every 32nd block in order, then the lanes are summed as a tree); attention
scores and softmax run in float64 (as `apr_core.model.layers.attention`), V in float32.
"""
from __future__ import annotations

import math
import types as pytypes
from types import SimpleNamespace
from typing import Callable

import numpy as np
from numba import float32, float64

# 2**(e - 25) for a half's exponent e (subnormals: 2**-24), so a half is mant * _POW2[e]
_POW2 = np.array([2.0 ** -24] + [2.0 ** (e - 25) for e in range(1, 32)], np.float32)


def f16(w, o):
    """The little-endian IEEE half at `w[o:o+2]` as float32 (exact; no inf/nan in scales)."""
    h = np.int32(w[o]) | (np.int32(w[o + 1]) << 8)
    e = (h >> 10) & 31
    mant = h & 1023
    if e:
        mant |= 1024
    v = float32(mant) * float32(_POW2[e])
    return -v if h & 0x8000 else v


def k4(w, o, j):
    """Q4_K/Q5_K: the 6-bit (scale, min) pair of sub-block j from the 12 bytes at `o`."""
    if j < 4:
        return w[o + j] & 63, w[o + j + 4] & 63
    return ((w[o + j + 4] & 15) | ((w[o + j - 4] >> 6) << 4),
            (w[o + j + 4] >> 4) | ((w[o + j] >> 6) << 4))


def row_dot(kind, w, o, nb, x, t, first, step):
    """Blocks `first, first + step, ... < nb` of the weight row at byte `o` (blocks of
    `block_table.BLOCKS` kind `kind`) . the same elements of `x[t]`, float32: one lane's part
    of a row that a warp of `step` lanes shares."""
    acc = float32(0.0)
    if kind <= 3:                                          # Q4_0 Q4_1 Q5_0 Q5_1
        size = (18, 20, 22, 24)[kind]
        has_min = kind == 1 or kind == 3
        five = kind >= 2
        for b in range(first, nb, step):
            p = o + b * size
            d = f16(w, p)
            m = f16(w, p + 2) if has_min else float32(0.0)
            qh_at = p + (4 if has_min else 2)
            qs = qh_at + (4 if five else 0)
            qh = 0
            if five:
                qh = (np.int32(w[qh_at]) | (np.int32(w[qh_at + 1]) << 8)
                      | (np.int32(w[qh_at + 2]) << 16) | (np.int32(w[qh_at + 3]) << 24))
            offset = 0 if has_min else (16 if five else 8)
            for j in range(16):
                lo = np.int32(w[qs + j] & 15)
                hi = np.int32(w[qs + j] >> 4)
                if five:
                    lo |= ((qh >> j) & 1) << 4
                    hi |= ((qh >> (j + 16)) & 1) << 4
                acc += (float32(lo - offset) * d + m) * x[t, b * 32 + j]
                acc += (float32(hi - offset) * d + m) * x[t, b * 32 + 16 + j]
    elif kind == 4:                                        # Q8_0
        for b in range(first, nb, step):
            p = o + b * 34
            d = f16(w, p)
            for j in range(32):
                q = np.int32(w[p + 2 + j])
                q = q - 256 if q > 127 else q
                acc += float32(q) * d * x[t, b * 32 + j]
    elif kind == 5 or kind == 6:                           # Q4_K Q5_K
        size = 144 if kind == 5 else 176
        qs = 16 if kind == 5 else 48
        for b in range(first, nb, step):
            p = o + b * size
            d, dmin = f16(w, p), f16(w, p + 2)
            for j in range(8):
                sc, mn = k4(w, p + 4, j)
                dl, ml = d * float32(sc), dmin * float32(mn)
                q_at, shift = p + qs + 32 * (j >> 1), 4 * (j & 1)
                for l in range(32):
                    q = np.int32((w[q_at + l] >> shift) & 15)
                    if kind == 6:
                        q |= np.int32((w[p + 16 + l] >> j) & 1) << 4
                    acc += (dl * float32(q) - ml) * x[t, b * 256 + 32 * j + l]
    else:                                                  # Q6_K
        for b in range(first, nb, step):
            p = o + b * 210
            d = f16(w, p + 208)
            for g in range(16):
                h, k, half = g >> 3, (g >> 1) & 3, g & 1
                sc = np.int32(w[p + 192 + g])
                sc = sc - 256 if sc > 127 else sc
                dl = d * float32(sc)
                for l in range(16):
                    lo = (w[p + 64 * h + 32 * (k & 1) + 16 * half + l] >> (4 * (k >> 1))) & 15
                    hi = (w[p + 128 + 32 * h + 16 * half + l] >> (2 * k)) & 3
                    q = np.int32(lo | (hi << 4)) - 32
                    acc += dl * float32(q) * x[t, b * 256 + 16 * g + l]
    return acc


def attend(q, k, v, n_keys, q_pos, scale, window, t, h, scores, out):
    """Query head h of token t: `out[t, h] [hd]` = softmax(q . k * scale over the keys the
    query at `q_pos[t]` sees) . v, for `q [T, H, hd]`, `k, v [n_kv, >= n_keys, hd]`; key j
    is visible iff j <= q_pos[t] and (window <= 0 or q_pos[t] - j < window). `scores [T*H,
    n_keys]` float64 is this thread's scratch (row t * H + h)."""
    n_heads, hd = q.shape[1], q.shape[2]
    kv = h // (n_heads // k.shape[0])
    row = t * n_heads + h
    p = q_pos[t]
    # conditionals, not min/max: numba's CUDA target fails to type those builtins
    hi = p if p < n_keys - 1 else n_keys - 1
    lo = 0 if window <= 0 or p - window + 1 < 0 else p - window + 1
    best = -math.inf
    for j in range(lo, hi + 1):
        s = float64(0.0)
        for i in range(hd):
            s += float64(q[t, h, i]) * scale * float64(k[kv, j, i])
        scores[row, j] = s
        if s > best:
            best = s
    total = float64(0.0)
    for j in range(lo, hi + 1):
        scores[row, j] = math.exp(scores[row, j] - best)
        total += scores[row, j]
    for i in range(hd):
        acc = float32(0.0)
        for j in range(lo, hi + 1):
            acc += float32(scores[row, j] / total) * v[kv, j, i]
        out[t, h, i] = acc


WARP = 32


def warp_tree_sum(lanes):
    """What lane 0 holds after `cuda._matmul_kernel`'s tree reduction of a warp's
    `lanes [WARP]` float32 (offsets 16, 8, 4, 2, 1: lane l adds lane l + offset), in that
    order; `lanes` is overwritten. The emulation's stand-in for the kernel's tree."""
    offset = WARP // 2
    while offset > 0:
        for lane in range(offset):
            lanes[lane] += lanes[lane + offset]
        offset //= 2
    return lanes[0]


# callees before their callers
_ORDER = (f16, k4, row_dot, attend, warp_tree_sum)


def compile_for(jit: Callable) -> SimpleNamespace:
    """Every thread function compiled by `jit`, each calling the others' compiled forms:
    `.f16`, `.k4`, `.row_dot`, `.attend`, `.warp_tree_sum`."""
    done = {}
    for fn in _ORDER:
        scope = dict(fn.__globals__)
        scope.update(done)
        rebound = pytypes.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__)
        rebound.__doc__, rebound.__qualname__ = fn.__doc__, fn.__qualname__
        done[fn.__name__] = jit(rebound)
    return SimpleNamespace(**done)


__all__ = ["compile_for", "row_dot", "attend", "warp_tree_sum", "WARP"]
