"""numpy replay of the int8-activation decode dots (`block_rows.dot_rows` over int8 codes
from `block_table.quantize_x8`): the same integer lane sums and the same float32 steps in
the same order, so the kernel's output equals it bit for bit.

Lane sums of a 32-element run: lane j holds elements 4j..4j+3 (pmaddubsw pairs, then
pmaddwd by ones); a Q6_K run's lanes 0-3 are its first 16-element group, 4-7 its second.
Legacy types: each run adds fma(float32(lane sums), scale, acc) to an 8-lane float32
accumulator. Q4_K/Q6_K (activations with one scale per 256 elements): a block's runs'
lane sums times their integer weight scales are summed as integers, then one
fma(float32(sums), d * xd, acc) per block. The accumulator is summed pairwise once per
row ((0+4)+(2+6)) + ((1+5)+(3+7)).
"""
import numpy as np

F32 = np.float32
BYTES = {"Q4_0": 18, "Q4_1": 20, "Q8_0": 34, "Q4_K": 144, "Q6_K": 210}
BLOCK = {"Q4_0": 32, "Q4_1": 32, "Q8_0": 32, "Q4_K": 256, "Q6_K": 256}
KQUANTS = ("Q4_K", "Q6_K")           # their codes share one scale per 256 elements


def quantize8(x, run=32):
    """`x [n]` f32 -> (codes int8 [n], scales f32 [n/32], run sums f32 [n/32]): one scale
    per `run` elements (32, or 256 for K-quant rows), repeated for each 32 it covers."""
    runs = x.astype(F32).reshape(-1, run)
    amax = np.abs(runs).max(axis=1)
    d = (amax / F32(127.0)).astype(F32)
    inv = np.where(d > 0, F32(1.0) / np.where(d > 0, d, F32(1.0)), F32(0.0)).astype(F32)
    v = (runs * inv[:, None]).astype(F32)
    q = np.where(v >= 0, np.trunc(v + F32(0.5)), -np.trunc(F32(0.5) - v)).astype(np.int32)
    d = np.repeat(d, run // 32)
    return (q.reshape(-1).astype(np.int8), d,
            (d * q.reshape(-1, 32).sum(axis=1).astype(F32)).astype(F32))


def _fma(a, b, c):
    """float32 a * b + c, rounded once (the product is exact in float64)."""
    return (a.astype(np.float64) * np.float64(b) + c.astype(np.float64)).astype(F32)


def _f16(block, o):
    return F32(block[o:o + 2].copy().view(np.float16)[0])


def _lanes(codes, x):
    """Lane sums of a 32-element run: lane j = elements 4j..4j+3."""
    return (codes.astype(np.int32) * x.astype(np.int32)).reshape(8, 4).sum(axis=1)


def _nib16(qs):
    return np.concatenate([qs & 15, qs >> 4]).astype(np.int32)


def _k4_scale_min(s, j):
    if j < 4:
        return s[j] & 63, s[j + 4] & 63
    return (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)


def _hsum8(v):
    v = (v[:4] + v[4:]).astype(F32)
    v = (v[:2] + v[2:]).astype(F32)
    return F32(v[0] + v[1])


def dot_row(name, row, xq, xd, xs):
    """One weight row (its bytes) . int8 activations -> float32."""
    size, block = BYTES[name], BLOCK[name]
    acc = np.zeros(8, F32)
    mins = F32(0.0)
    mins8 = np.zeros(8, F32)
    for b in range(len(row) // size):
        blk = row[b * size:(b + 1) * size]
        x = xq[b * block:(b + 1) * block]
        if name in ("Q4_0", "Q4_1", "Q8_0"):
            d = _f16(blk, 0)
            if name == "Q8_0":
                codes = blk[2:34].view(np.int8).astype(np.int32)
            elif name == "Q4_0":
                codes = _nib16(blk[2:18]) - 8
            else:
                codes = _nib16(blk[4:20])
                mins = F32(mins + F32(_f16(blk, 2) * xs[b]))
            acc = _fma(_lanes(codes, x).astype(F32), F32(xd[b] * d), acc)
        elif name == "Q4_K":
            d, dmin = _f16(blk, 0), _f16(blk, 2)
            sc = [_k4_scale_min(blk[4:16], j) for j in range(8)]
            mins8 = (mins8 + np.array([F32(F32(dmin * F32(mn)) * xs[b * 8 + j])
                                       for j, (_, mn) in enumerate(sc)], F32)).astype(F32)
            isum = np.zeros(8, np.int64)
            for j in range(8):
                q = blk[16 + 32 * (j >> 1):48 + 32 * (j >> 1)]
                codes = ((q >> (4 * (j & 1))) & 15).astype(np.int32)
                isum += int(sc[j][0]) * _lanes(codes, x[32 * j:32 * j + 32])
            acc = _fma(isum.astype(F32), F32(d * xd[b * 8]), acc)
        else:                                                         # Q6_K
            d = _f16(blk, 208)
            group = blk[192:208].view(np.int8).astype(np.int64)
            isum = np.zeros(8, np.int64)
            for h in range(2):
                for k in range(4):
                    ql = blk[64 * h + 32 * (k & 1):64 * h + 32 * (k & 1) + 32]
                    qh = blk[128 + 32 * h:160 + 32 * h]
                    codes = (((ql >> (4 * (k >> 1))) & 15) |
                             (((qh >> (2 * k)) & 3) << 4)).astype(np.int32) - 32
                    g = 8 * h + 2 * k
                    e = 128 * h + 32 * k
                    isum += np.repeat(group[g:g + 2], 4) * _lanes(codes, x[e:e + 32])
            acc = _fma(isum.astype(F32), F32(d * xd[b * 8]), acc)
    if name == "Q4_K":
        mins = -_hsum8(mins8)
    return F32(_hsum8(acc) + mins)


def matvec(name, data, rows, x):
    """`data` (a `[rows, in]` weight's bytes) . one token `x [in]` f32 -> `[rows]` f32."""
    xq, xd, xs = quantize8(x, BLOCK[name] if name in KQUANTS else 32)
    row_bytes = len(data) // rows
    return np.array([dot_row(name, data[r * row_bytes:(r + 1) * row_bytes], xq, xd, xs)
                     for r in range(rows)], F32)
