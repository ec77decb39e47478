"""numba kernels for Whisper natively: the parts of the network numpy runs as many passes
over memory, each fused into one loop that LLVM vectorizes (`speech_native` plugs them
into `WhisperNet`'s seams; the browser keeps its own).

    softmax_rows(scores, sums)            # scores [R, S] -> exp(s - max) in place; sums [R]
    encoder_head(q, k, v)                 # one head of the encoder's attention (BLAS + softmax_rows)
    cross_attention(q, keys_t, values)    # a decoder step's cross-attention, every head
    gelu(x)                               # exact-erf GELU (A&S 7.1.26 erf, as whisper_math)

exp is Cephes' expf in straight-line float32 (<= 1 ulp; `kernels.vector.fastexp`'s
formula, kept here so this module's numba cache depends on this file alone): numba's own
`math.exp` is a libm call per element (no SVML in PyPI's llvmlite) and numpy's passes
(max, subtract, exp, sum) each read and write the whole [rows, 1500] score block.
Reductions use `fastmath` reassociation (8-lane partial sums), so sums differ from numpy's
pairwise ones in the last bits: the tests hold each kernel to numpy within float32
tolerance, and the transcripts to faster-whisper's words.

The functions release the GIL (`nogil`): the encoder's heads run two at a time on the
thread pool of `speech_native`.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

F32 = np.float32
EXP_LO, EXP_HI = F32(-87.0), F32(88.0)
LOG2E = F32(1.44269504088896341)
LN2_HI, LN2_LO = F32(0.693359375), F32(-2.12194440e-4)
ROUND = F32(12582912.0)          # + then - 1.5 * 2**23: round to an integer, vectorized
P0, P1, P2 = F32(1.9875691500e-4), F32(1.3981999507e-3), F32(8.3334519073e-3)
P3, P4, P5 = F32(4.1665795894e-2), F32(1.6666665459e-1), F32(5.0000001201e-1)
# erf, Abramowitz & Stegun 7.1.26 (as apr_core.speech.whisper_math)
AS_P = F32(0.3275911)
A1, A2, A3 = F32(0.254829592), F32(-0.284496736), F32(1.421413741)
A4, A5 = F32(-1.453152027), F32(1.061405429)
SQRT_HALF = F32(0.7071067811865476)
FAST = {"reassoc", "nsz", "contract"}     # no nnan / ninf: masked scores are -inf
# Query rows per block of an encoder head's scores (128 x 1500 float32 = 750 KiB, near L2
# through the softmax and the product with V). Measured per head, one thread, load 6:
# 64 rows 13.7 ms, 128 12.1, 192 11.1, 256 11.9, 384 13.6 (best of 4; medians 14.3-15.9,
# within the noise); numpy's four passes over 256-row blocks took 22-28 ms.
HEAD_ROWS = 128


@intrinsic
def _f32_from_bits(typingctx, bits):
    """The float32 whose IEEE bits are the int32 `bits`."""
    if bits != types.int32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


@intrinsic
def _widen(typingctx, x):
    """float32 of `x`: a float32 as it is, a uint16 as the IEEE half its bits are
    (F16C's vcvtph2ps once LLVM vectorizes the loop)."""
    if x == types.float32:
        def same(context, builder, signature, args):
            return args[0]
        return types.float32(x), same
    if x == types.uint16:
        def half(context, builder, signature, args):
            return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())
        return types.float32(x), half
    return None


def as_half(x: np.ndarray) -> np.ndarray:
    """A float32 array rounded to float16, as the uint16 bits `cross_attention` reads."""
    return np.ascontiguousarray(x, dtype=np.float16).view(np.uint16)


@njit(cache=True, nogil=True, fastmath={"contract"})
def exp_f32(x):
    """e**x for float32 `x` (clamped to [-87, 88]), float32. Compiled on its own, without
    reassociation (which would fold the rounding `(t + ROUND) - ROUND` to `t` and the
    two-part range reduction to one); LLVM inlines it into the loops that call it with
    these instructions' own flags."""
    v = x
    if v > EXP_HI:
        v = EXP_HI
    if v < EXP_LO:
        v = EXP_LO
    n = (v * LOG2E + ROUND) - ROUND
    r = v - n * LN2_HI
    r = r - n * LN2_LO
    p = ((((P0 * r + P1) * r + P2) * r + P3) * r + P4) * r + P5
    p = p * (r * r) + r + F32(1.0)
    return p * _f32_from_bits(np.int32((np.int32(n) + np.int32(127)) << np.int32(23)))


@njit(cache=True, nogil=True, fastmath=FAST, error_model="numpy")
def softmax_rows(scores, sums):
    """Each row of `scores [R, S]` (float32, C order) -> exp(row - max(row)) in place;
    `sums [R]` <- the row sums (the caller divides its product with V by them)."""
    for r in range(scores.shape[0]):
        row = scores[r]
        top = row[0]
        for s in range(1, row.shape[0]):
            top = max(top, row[s])
        total = F32(0.0)
        for s in range(row.shape[0]):
            e = exp_f32(row[s] - top)
            row[s] = e
            total += e
        sums[r] = total


def encoder_head(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """One head of the encoder's attention: q [T, dh] (already scaled), k, v [S, dh] ->
    [T, dh]; `HEAD_ROWS` query rows at a time (BLAS products, the softmax in one pass)."""
    n = q.shape[0]
    keys = k.T                                                  # [dh, S] view
    out = np.empty((n, v.shape[1]), np.float32)
    scores = np.empty((min(n, HEAD_ROWS), k.shape[0]), np.float32)
    sums = np.empty(scores.shape[0], np.float32)
    for a in range(0, n, HEAD_ROWS):
        b = min(n, a + HEAD_ROWS)
        block = scores[:b - a]
        np.dot(q[a:b], keys, out=block)                         # [rows, S]
        softmax_rows(block, sums)
        np.dot(block, v, out=out[a:b])                          # [rows, dh]
        out[a:b] /= sums[:b - a, None]
    return out


@njit(cache=True, nogil=True, fastmath=FAST, error_model="numpy")
def _cross(q, keys_t, values, scale, scores, out):
    """q [R, H, dh] over keys_t [H, dh, S], values [H, S, dh] (float32, or float16 bits
    as uint16: `as_half`) -> out [R, H * dh]; `scores [R, S]` scratch. Per head, each key /
    value row is read once for all R rows."""
    rows, heads, dh = q.shape
    width = keys_t.shape[2]
    for h in range(heads):
        scores[:, :] = F32(0.0)
        for d in range(dh):
            kt = keys_t[h, d]
            for r in range(rows):
                qd = q[r, h, d] * scale
                sr = scores[r]
                for s in range(width):
                    sr[s] += qd * _widen(kt[s])
        for r in range(rows):
            sr = scores[r]
            top = sr[0]
            for s in range(1, width):
                top = max(top, sr[s])
            total = F32(0.0)
            for s in range(width):
                e = exp_f32(sr[s] - top)
                sr[s] = e
                total += e
            o = out[r, h * dh:(h + 1) * dh]
            o[:] = F32(0.0)
            for s in range(width):
                p = sr[s]
                vs = values[h, s]
                for d in range(dh):
                    o[d] += p * _widen(vs[d])
            inverse = F32(1.0) / total
            for d in range(dh):
                o[d] *= inverse


def cross_attention(q: np.ndarray, keys_t: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`whisper_net._cross_attention`'s contract: q [B, n, H, dh] over one window's cross
    K^T [H, dh, S] and V [H, S, dh] -> [B, n, H * dh]. K^T and V may be float16 bits
    (`half_cross`: half the bytes a step reads)."""
    b, n, heads, dh = q.shape
    rows = np.ascontiguousarray(q.reshape(b * n, heads, dh), dtype=np.float32)
    out = np.empty((b * n, heads * dh), np.float32)
    scores = np.empty((b * n, keys_t.shape[2]), np.float32)
    _cross(rows, keys_t, values, F32(1.0 / np.sqrt(dh)), scores, out)
    return out.reshape(b, n, heads * dh)


@njit(cache=True, nogil=True, fastmath=FAST, error_model="numpy")
def _half_dots(w, x, y, start, stop):
    """y[:, start:stop] = x @ w[start:stop]^T: `w [out, in]` float16 bits (uint16), `x [N,
    in]`, `y [N, out]` float32. Each weight row is widened once for all N rows."""
    for o in range(start, stop):
        row = w[o]
        for n in range(x.shape[0]):
            xn = x[n]
            total = F32(0.0)
            for i in range(row.shape[0]):
                total += _widen(row[i]) * xn[i]
            y[n, o] = total


class HalfLinear:
    """A decoder projection over its float16 weight, read by `_half_dots` (F16 files: half
    the bytes a step reads of the float32 copy numpy's BLAS would take). The interface
    `WhisperNet` uses of `apr_core.model.weights.Linear`: `matmul(x [N, in]) -> [N, out]`
    (bias added), `rows(ids)`, `shape`, `bias`. `map_fn` / `pieces`: weights of at least
    `SPLIT_WEIGHTS` elements (the logits' embedding) are split into `pieces` row ranges
    claimed by the threads (speech_native.ClaimingMap)."""

    SPLIT_WEIGHTS = 1 << 22

    def __init__(self, name: str, half: np.ndarray, bias: "np.ndarray | None" = None,
                 map_fn: Any = None, pieces: int = 1) -> None:
        self.name = name
        self.half = np.ascontiguousarray(half).view(np.uint16)          # [out, in]
        self.shape = self.half.shape
        self.bias = bias
        self.map_fn = map_fn
        self.pieces = pieces if map_fn is not None and self.half.size >= self.SPLIT_WEIGHTS \
            else 1

    def matmul(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, np.float32).reshape(-1, self.shape[1])
        y = np.empty((x.shape[0], self.shape[0]), np.float32)
        if self.pieces > 1:
            out = self.shape[0]
            edges = [out * i // self.pieces for i in range(self.pieces + 1)]
            self.map_fn(lambda span: _half_dots(self.half, x, y, span[0], span[1]),
                        list(zip(edges, edges[1:])))
        else:
            _half_dots(self.half, x, y, 0, self.shape[0])
        if self.bias is not None:
            y += self.bias
        return y

    def rows(self, ids: np.ndarray) -> np.ndarray:
        return self.half[np.asarray(ids).reshape(-1)].view(np.float16).astype(np.float32)


def half_cross(keys_t: np.ndarray, values: np.ndarray) -> tuple:
    """WhisperNet's `cross_layout`: a window's cross K^T / V kept as float16 bits."""
    return as_half(keys_t), as_half(values)


@njit(cache=True, nogil=True, fastmath=FAST, error_model="numpy")
def _gelu(x, out):
    """out = 0.5 x (1 + erf(x / sqrt 2)), flat float32 arrays."""
    for i in range(x.shape[0]):
        xi = x[i]
        z = xi * SQRT_HALF
        a = abs(z)
        t = F32(1.0) / (AS_P * a + F32(1.0))
        poly = ((((A5 * t + A4) * t + A3) * t + A2) * t + A1) * t
        e = F32(1.0) - poly * exp_f32(-(a * a))
        if z < 0:
            e = -e
        out[i] = F32(0.5) * xi * (F32(1.0) + e)


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact-erf GELU of a float32 array (any shape) -> a new float32 array."""
    x = np.ascontiguousarray(x, np.float32)
    out = np.empty_like(x)
    _gelu(x.reshape(-1), out.reshape(-1))
    return out


__all__ = ["HalfLinear", "softmax_rows", "encoder_head", "cross_attention", "gelu", "exp_f32", "as_half",
           "half_cross",
           "HEAD_ROWS"]
