"""Attention of one query row over a KV cache (numba), shared by the serial kernel of
`cpu_fused` and the `pool` task that splits query rows between threads."""
from __future__ import annotations

import math

import numpy as np
from numba import njit

F32 = np.float32


@njit(fastmath={"reassoc", "contract"}, cache=True)
def attend(q, k_cache, v_cache, n_keys, q_pos, scale, window, t, head, scores, out):
    """One query row: `out [hd]` = softmax(q . k / scale over the visible keys) . v,
    scores and softmax in float64 (`scores [n_keys]` scratch). `reassoc` lets the float64
    dot vectorize; no flag here assumes finite values."""
    hd = q.shape[2]
    kv = head // (q.shape[1] // k_cache.shape[0])
    p = q_pos[t]
    hi = min(p, n_keys - 1)
    lo = 0 if window <= 0 else max(0, p - window + 1)
    best = -np.inf
    for j in range(lo, hi + 1):
        acc = 0.0
        for i in range(hd):
            acc += (float(q[t, head, i]) * scale) * float(k_cache[kv, j, i])
        scores[j] = acc
        best = max(best, acc)
    total = 0.0
    for j in range(lo, hi + 1):
        e = math.exp(scores[j] - best)
        scores[j] = e
        total += e
    for i in range(hd):
        out[i] = F32(0.0)
    for j in range(lo, hi + 1):
        prob = F32(scores[j] / total)
        for i in range(hd):
            out[i] += prob * v_cache[kv, j, i]
