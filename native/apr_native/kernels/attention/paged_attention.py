"""Blocked (flash-style) attention over a paged KV cache (numba): the kernel behind the
fused kinds "attention" and "attention_paged" and the one-call decoder layer.

Key position j of a query row's sequence sits in slot `table[j // block] * block +
j % block` of the layer's caches `[n_kv, slots, row]` (bytes; `kv_rows` decodes the
stored type); a contiguous one-sequence cache is `table = [0]`, `block = capacity`.

Work is cut into items, each one (KV head, row tile, key range):
- a row tile is up to R_TILE consecutive query rows of one sequence (one block table);
  with every query head of the KV head's GQA group it makes M = rows x group query
  vectors, which share each decoded K/V block (`attention_tiles`: a key block of KB keys is
  decoded to float32 once, then multiplies all M vectors);
- keys are walked in blocks of KB with an online softmax (running max and sum per query
  vector), so memory does not grow with the square of the context, and each row sees
  keys `max(0, p - window + 1) .. min(p, n_keys - 1)` (causal, sliding window);
- when there are too few (head, tile) pairs to keep every thread busy (decode: one row),
  the keys are split (split-K): each part keeps its max, sum and unnormalized output in
  `parts`, and `merge_parts` combines them (weights e^(max_part - max)).
Items are the chunks of one `pool` task (`pool.attention`), or run on the caller.

Precision: scores are float32 (FMA chains over head_dim, q pre-scaled in float32),
probabilities and sums float32 -- the reference (apr_core.model.layers.attention) keeps
scores in float64; the bound between the two is derived in tests/native/test_attention_
blocked.py and holds for the parity tests of both real models.
"""
from __future__ import annotations

import math

import numpy as np
from numba import carray, njit

from ..vector.atomics import f32_at, i32_at, i64_at, u8_at
from .attention_tiles import (mask_block, scores_2v, scores_packed, softmax_block, values_2v,
                              values_packed)
from .kv_rows import decode_row

F32 = np.float32
R_TILE = 32            # query rows per tile
KB = 64                # keys per block (a multiple of 8)
SPLIT_KEYS = 512       # keys per split-K part at least
# item columns: KV head, rows t0 .. t1-1, keys k0 .. k1-1, its `parts` row (-1: none)
IT_KV, IT_T0, IT_T1, IT_K0, IT_K1, IT_PART = range(6)
ITEM_COLS = 6
# descriptor words of a pool task (int64): array addresses, then sizes
(D_Q, D_K, D_V, D_OUT, D_POS, D_TABLES, D_ITEMS, D_PARTS, D_T, D_H, D_HD, D_NKV, D_SLOTS,
 D_ROWB, D_KIND, D_TCOLS, D_BLOCK, D_NKEYS, D_WINDOW, D_NITEMS, D_MP, D_NPARTS) = range(22)
D_WORDS = 22


@njit(cache=True)
def lanes(group, rows):
    """MP, the padded query vectors of a tile: 16, or a multiple of 32 above it."""
    m = group * rows
    return 16 if m <= 16 else (m + 31) // 32 * 32


@njit(inline="always", cache=True)
def row_keys(q_pos, n_keys, window, t):
    """(lo, hi): the keys row t sees."""
    p = q_pos[t]
    return (0 if window <= 0 else max(0, p - window + 1)), min(p, n_keys - 1)


@njit(cache=True)
def _same_table(tables, a, b):
    for c in range(tables.shape[1]):
        if tables[a, c] != tables[b, c]:
            return False
    return True


@njit(cache=True)
def plan(q_pos, tables, n_kv, n_keys, window, want):
    """(items [n, ITEM_COLS] int64, parts needed): row tiles x KV heads, each tile's keys
    split in parts when fewer than `want` (head, tile) pairs exist."""
    t_count = q_pos.shape[0]
    starts = np.empty(t_count + 1, np.int64)
    n_tiles, t = 0, 0
    while t < t_count:
        t1 = t + 1
        while t1 < t_count and t1 - t < R_TILE and _same_table(tables, t, t1):
            t1 += 1
        starts[n_tiles] = t
        n_tiles += 1
        t = t1
    starts[n_tiles] = t_count
    split = 1 if n_tiles * n_kv >= want else -(-want // (n_tiles * n_kv))
    items = np.empty((n_tiles * n_kv * split, ITEM_COLS), np.int64)
    n, n_parts = 0, 0
    for tile in range(n_tiles):
        t0, t1 = starts[tile], starts[tile + 1]
        k0, k1 = n_keys, 0
        for r in range(t0, t1):
            lo, hi = row_keys(q_pos, n_keys, window, r)
            k0, k1 = min(k0, lo), max(k1, hi + 1)
        parts = max(1, min(split, (k1 - k0) // SPLIT_KEYS))
        per_part = -(-(k1 - k0) // parts)                  # ceil
        step = -(-per_part // KB) * KB                      # whole key blocks
        for kv in range(n_kv):
            for s in range(parts):
                items[n, IT_KV], items[n, IT_T0], items[n, IT_T1] = kv, t0, t1
                items[n, IT_K0] = k0 + s * step
                items[n, IT_K1] = min(k1, k0 + (s + 1) * step)
                items[n, IT_PART] = -1 if parts == 1 else n_parts
                n_parts += parts > 1
                n += 1
    return items[:n], n_parts


@njit(cache=True)
def packing(mp, m_real, hd):
    """r, the features of one query vector side by side in a tile's lanes: with MP == 16
    lanes and at most 4 (8) query vectors, lanes (m, x) = m r + x hold feature x mod 4 (2)
    of vector m, so a decode row of a small GQA group fills the lanes (`attention_tiles`)."""
    if mp != 16:
        return 1
    if m_real <= 4 and hd % 32 == 0:
        return 4
    if m_real <= 8 and hd % 16 == 0:
        return 2
    return 1


@njit(cache=True)
def call_lanes(items, group):
    """MP of a call, from its largest tile (not from all its rows):
    - only one-row tiles (decoding, alone or a batch step of many sequences): a lone
      decode row's lanes (16, packed), so each row gets the bits it gets alone (16
      one-row tiles of Qwen2.5, 7 query vectors each, had been padded to 16 rows' 128
      lanes: 40x one tile's time);
    - a tile of several rows (a prompt chunk, a speculative verification): unpacked
      lanes, at least 32, for every tile of the call. Their per-vector arithmetic is the
      same at any MP, so such rows get the same bits however they are cut into tiles,
      calls and batches (a decoding row beside a prompt chunk takes them too: float32
      within the bound, not its lone bits)."""
    rows = 1
    for it in range(items.shape[0]):
        rows = max(rows, items[it, IT_T1] - items[it, IT_T0])
    return lanes(group, 1) if rows == 1 else max(32, lanes(group, rows))


@njit(cache=True)
def run_item(q, k_bytes, v_bytes, kind, out, q_pos, tables, block, n_keys, window, scale,
             items, it, parts, mp):
    """Item `it` of `items` (module docstring): into `out [T, H, hd]`, or its `parts` row
    (`call_lanes` MP)."""
    heads, hd = q.shape[1], q.shape[2]
    n_kv, n_slots, row_b = k_bytes.shape
    group = heads // n_kv
    kv, t0, t1 = items[it, IT_KV], items[it, IT_T0], items[it, IT_T1]
    m_real = (t1 - t0) * group
    r = packing(mp, m_real, hd)
    rows = hd // r                                  # scratch rows: lane m r + x of row c
    qt = np.zeros(rows * mp, F32)                   # [hd / r, MP] holds feature c r + x
    s = np.empty(KB * mp, F32)                      # [KB, MP]
    ot = np.zeros(rows * mp, F32)                   # [hd / r, MP]
    kb = np.zeros(KB * hd, F32)                     # [KB, hd]
    vb = np.zeros(KB * hd, F32)
    mx = np.full(mp, -np.inf, F32)
    total = np.zeros(mp, F32)
    alpha = np.empty(mp, F32)
    lo = np.ones(mp, np.int64)                      # padding lanes see nothing
    hi = np.zeros(mp, np.int64)
    first, last = 0, n_keys          # keys every vector sees: first .. last
    k_min, k_max = n_keys, -1        # keys some vector sees
    for t in range(t1 - t0):
        a, b = row_keys(q_pos, n_keys, window, t0 + t)
        first, last = max(first, a), min(last, b)
        k_min, k_max = min(k_min, a), max(k_max, b)
        for g in range(group):
            m = t * group + g
            for x in range(r):
                lo[m * r + x], hi[m * r + x] = a, b
            for i in range(hd):
                qt[(i // r) * mp + m * r + i % r] = q[t0 + t, kv * group + g, i] * scale
    j0 = max(k_min, items[it, IT_K0])
    j_end = min(k_max + 1, items[it, IT_K1])
    while j0 < j_end:
        nb = min(KB, j_end - j0)
        for b in range(nb):
            j = j0 + b
            wo = (kv * n_slots + tables[t0, j // block] * block + j % block) * row_b
            decode_row(kind, k_bytes, wo, hd, kb, b * hd)
            decode_row(kind, v_bytes, wo, hd, vb, b * hd)
        if mp == 16:
            scores_packed(qt, kb, s, hd, nb, r)
        else:
            scores_2v(qt, kb, s, mp, hd, nb)
        if j0 < first or j0 + nb - 1 > last:
            mask_block(s, mp, nb, j0, lo, hi)
        softmax_block(s, mp, nb, rows, mx, total, alpha, ot)
        if mp == 16:
            values_packed(vb, s, ot, hd, nb, r)
        else:
            values_2v(vb, s, ot, mp, hd, nb)
        j0 += nb
    part = items[it, IT_PART]
    for m in range(m_real):
        lane = m * r
        if part >= 0:           # unnormalized, unpacked: [hd, MP] column m, max, sum
            for d in range(hd):
                parts[part, d * mp + m] = ot[(d // r) * mp + lane + d % r]
            parts[part, hd * mp + m] = mx[lane]
            parts[part, hd * mp + mp + m] = total[lane]
            continue
        t, h = t0 + m // group, kv * group + m % group
        inv = F32(1.0) / total[lane]
        for d in range(hd):
            out[t, h, d] = ot[(d // r) * mp + lane + d % r] * inv


@njit(cache=True)
def run_items(q, k_bytes, v_bytes, kind, out, q_pos, tables, block, n_keys, window, scale,
              items, parts, mp, a, b):
    """Items `a .. b-1` on the calling thread."""
    for it in range(a, b):
        run_item(q, k_bytes, v_bytes, kind, out, q_pos, tables, block, n_keys, window,
                 scale, items, it, parts, mp)


@njit(cache=True)
def merge_parts(items, parts, out, group, mp):
    """Combine the split-K parts of each (KV head, tile) into `out [T, H, hd]`: weights
    e^(max_part - max) in float64."""
    hd = out.shape[2]
    n = items.shape[0]
    acc = np.zeros(hd, np.float64)
    i = 0
    while i < n:
        if items[i, IT_PART] < 0:
            i += 1
            continue
        j = i + 1
        while j < n and items[j, IT_PART] >= 0 and items[j, IT_KV] == items[i, IT_KV] and \
                items[j, IT_T0] == items[i, IT_T0]:
            j += 1
        kv, t0, t1 = items[i, IT_KV], items[i, IT_T0], items[i, IT_T1]
        for m in range((t1 - t0) * group):
            big = -np.inf
            for c in range(i, j):
                big = max(big, float(parts[items[c, IT_PART], hd * mp + m]))
            den = 0.0
            acc[:] = 0.0
            for c in range(i, j):
                row = parts[items[c, IT_PART]]
                if row[hd * mp + m] == -np.inf:
                    continue                               # no key of this part visible
                w = math.exp(float(row[hd * mp + m]) - big)
                den += w * float(row[hd * mp + mp + m])
                for d in range(hd):
                    acc[d] += w * float(row[d * mp + m])
            t, h = t0 + m // group, kv * group + m % group
            for d in range(hd):
                out[t, h, d] = F32(acc[d] / den)
        i = j


@njit(cache=True)
def describe(q, k_bytes, v_bytes, kind, out, q_pos, tables, block, n_keys, window, items,
             parts, mp):
    """The descriptor (D_* words) of a pool task running `items` (`run_described`)."""
    d = np.empty(D_WORDS, np.int64)
    d[D_Q], d[D_K], d[D_V] = q.ctypes.data, k_bytes.ctypes.data, v_bytes.ctypes.data
    d[D_OUT], d[D_POS], d[D_TABLES] = out.ctypes.data, q_pos.ctypes.data, tables.ctypes.data
    d[D_ITEMS], d[D_PARTS] = items.ctypes.data, parts.ctypes.data
    d[D_T], d[D_H], d[D_HD] = q.shape[0], q.shape[1], q.shape[2]
    d[D_NKV], d[D_SLOTS], d[D_ROWB] = k_bytes.shape[0], k_bytes.shape[1], k_bytes.shape[2]
    d[D_KIND], d[D_TCOLS], d[D_BLOCK] = kind, tables.shape[1], block
    d[D_NKEYS], d[D_WINDOW], d[D_NITEMS] = n_keys, window, items.shape[0]
    d[D_MP], d[D_NPARTS] = mp, parts.shape[0]
    return d


@njit(cache=True)
def run_described(address, scale, a, b):
    """Items `a .. b-1` of the task whose descriptor is at `address` (a pool chunk)."""
    d = carray(i64_at(address), D_WORDS)
    t, heads, hd, n_kv, n_slots = d[D_T], d[D_H], d[D_HD], d[D_NKV], d[D_SLOTS]
    mp = d[D_MP]
    q = carray(f32_at(d[D_Q]), (t, heads, hd))
    k_bytes = carray(u8_at(d[D_K]), (n_kv, n_slots, d[D_ROWB]))
    v_bytes = carray(u8_at(d[D_V]), (n_kv, n_slots, d[D_ROWB]))
    out = carray(f32_at(d[D_OUT]), (t, heads, hd))
    q_pos = carray(i64_at(d[D_POS]), t)
    tables = carray(i32_at(d[D_TABLES]), (t, d[D_TCOLS]))
    items = carray(i64_at(d[D_ITEMS]), (d[D_NITEMS], ITEM_COLS))
    parts = carray(f32_at(d[D_PARTS]), (d[D_NPARTS], (hd + 2) * mp))
    run_items(q, k_bytes, v_bytes, d[D_KIND], out, q_pos, tables, d[D_BLOCK], d[D_NKEYS],
              d[D_WINDOW], F32(scale), items, parts, mp, a, b)


def contiguous_tables(rows: int) -> np.ndarray:
    """`[rows, 1]` int32 zeros: every row's sequence in block 0 of size `capacity`."""
    return np.zeros((rows, 1), np.int32)


__all__ = ["plan", "call_lanes", "run_item", "run_items", "merge_parts", "describe",
           "run_described", "lanes", "contiguous_tables", "R_TILE", "KB", "SPLIT_KEYS",
           "ITEM_COLS"]
