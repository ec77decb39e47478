"""The scale searches behind ggml's K-quant reference quantizers, vectorized over sub-blocks.

`make_qkx2_quants` (Q2_K, Q4_K, Q5_K), `make_qx_quants` (Q6_K) and `make_q3_quants` (Q3_K)
reproduce ggml-quants.c bit for bit. Every array here is laid out element-major,
x: float32 [n, M] = n elements of each of M sub-blocks, so that the C loops' running sums
(`sum += ...` in element order) are a Python loop of n contiguous vector adds: numpy's own
`sum` adds pairwise and would round differently. Each search step updates only the
sub-blocks whose C loop would have taken the branch (`np.where` on a per-sub-block mask).
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from .quantize_floats import NEAREST_INT_MAGIC, F32, nearest_int

GROUP_MAX_EPS = F32(1e-15)


def seq_sum(terms: np.ndarray, start_with_first: bool = False) -> np.ndarray:
    """[n, M] -> [M]: `s = 0; for i: s += terms[i]` in float32, in element order.

    `start_with_first` mirrors C that initialises with the first term (`s = t[0]`), which
    differs from `0 + t[0]` only in the sign of a zero.
    """
    acc = terms[0].copy() if start_with_first else F32(0) + terms[0]
    for row in terms[1:]:
        acc += row
    return acc


def _c_min_max(x: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """`min = max = x[0]; for i >= 1: if (x[i] < min) ...; if (x[i] > max) ...` over [n, M].

    NaNs after x[0] are skipped (comparisons are false); a NaN x[0] sticks.
    """
    first_nan = np.isnan(x[0])
    lo = np.where(first_nan, F32(np.nan), np.fmin.reduce(x, axis=0))
    hi = np.where(first_nan, F32(np.nan), np.fmax.reduce(x, axis=0))
    return lo.astype(F32), hi.astype(F32)


def absmax_over_rows(x: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """`signed_absmax(x, axis=0)` for [n, M] as the C loop itself: n vector steps of
    `if (amax < |v|) { amax = |v|; max = v; }` (faster than argmax down a short axis)."""
    amax = np.zeros(x.shape[1], dtype=F32)
    vmax = np.zeros(x.shape[1], dtype=F32)
    for row in x:
        a = np.abs(row)
        take = a > amax  # strict: the first of equal magnitudes wins; NaN never does
        amax = np.where(take, a, amax)
        vmax = np.where(take, row, vmax)
    return amax, vmax


def _levels(x: np.ndarray, the_min: Optional[np.ndarray], iscale: np.ndarray, lo: int, hi: int,
            scratch: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out = clamp(nearest_int(iscale * (x - the_min)), lo, hi) as float32, in place.

    x, scratch, out: float32 [n, M]; the_min (None: no offset) and iscale: [M]. The
    nearest_int bit trick runs in `scratch` (float32, then reinterpreted as int32), so a
    search step allocates nothing.
    """
    if the_min is None:
        np.multiply(x, iscale, out=scratch)
    else:
        np.subtract(x, the_min, out=scratch)
        scratch *= iscale
    scratch += NEAREST_INT_MAGIC
    bits = scratch.view(np.int32)
    bits &= np.int32(0x007FFFFF)
    bits -= np.int32(0x00400000)
    np.clip(bits, lo, hi, out=bits)
    out[...] = bits
    return out


def _weighted_error(scale: np.ndarray, L: np.ndarray, the_min: np.ndarray, x: np.ndarray,
                    w: np.ndarray, use_mad: bool, scratch: np.ndarray) -> np.ndarray:
    """sum_i w*err(scale*L + min - x) in C order; err is |.| (use_mad) or its square."""
    diff = np.multiply(L, scale, out=scratch)
    diff += the_min
    diff -= x
    if use_mad:
        np.abs(diff, out=diff)
    else:
        diff *= diff
    diff *= w
    return seq_sum(diff)


def make_qkx2_quants(x: np.ndarray, w: np.ndarray, nmax: int, rmin: float, rdelta: float,
                     nstep: int, use_mad: bool) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Affine (scale, min) search of ggml's `make_qkx2_quants`.

    x, w: float32 [n, M]. Returns (scale [M], the_min [M] (= -min, as C's out-parameter),
    L uint8 [n, M] in 0..nmax).
    """
    n, m = x.shape
    lo, hi = _c_min_max(x)
    sum_w = seq_sum(w, start_with_first=True)
    sum_x = seq_sum(w * x, start_with_first=True)
    lo = np.where(lo > F32(0), F32(0), lo)
    flat = hi == lo  # C returns early: L = 0, scale = 0
    fnmax = F32(nmax)
    scratch = np.empty_like(x)
    L = np.empty_like(x)
    terms = np.empty((n, 3, m), dtype=F32)  # w*l, w*l*l, w*l*x: summed in one pass

    the_min = lo
    iscale = fnmax / (hi - the_min)
    scale = F32(1) / iscale
    _levels(x, the_min, iscale, 0, nmax, scratch, L)
    best_error = _weighted_error(scale, L, the_min, x, w, use_mad, scratch)
    # L is rebuilt at the end from the (iscale, min) of the winning step, which is cheaper
    # than copying the candidate quants every time a sub-block improves.
    best_iscale, best_offset = iscale, the_min

    for step in range(nstep + 1):
        # C recomputes (max - min) and (x - min) with the *current* min, which the search
        # itself moves whenever a step wins; so does this.
        iscale = ((F32(rmin) + F32(rdelta) * F32(step)) + fnmax) / (hi - the_min)
        _levels(x, the_min, iscale, 0, nmax, scratch, L)
        wl = np.multiply(w, L, out=terms[:, 0])
        np.multiply(wl, L, out=terms[:, 1])
        np.multiply(wl, x, out=terms[:, 2])
        sum_l, sum_l2, sum_xl = seq_sum(terms)
        D = sum_w * sum_l2 - sum_l * sum_l
        this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
        this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
        positive = this_min > F32(0)
        this_min = np.where(positive, F32(0), this_min)
        this_scale = np.where(positive, sum_xl / sum_l2, this_scale)
        cur_error = _weighted_error(this_scale, L, this_min, x, w, use_mad, scratch)
        better = (D > F32(0)) & (cur_error < best_error) & ~flat
        best_iscale = np.where(better, iscale, best_iscale)
        best_offset = np.where(better, the_min, best_offset)
        best_error = np.where(better, cur_error, best_error)
        scale = np.where(better, this_scale, scale)
        the_min = np.where(better, this_min, the_min)

    _levels(x, best_offset, best_iscale, 0, nmax, scratch, L)
    scale = np.where(flat, F32(0), scale)
    L[:, flat] = 0
    return scale, -the_min, L.astype(np.uint8)


def make_qx_quants(x: np.ndarray, nmax: int) -> Tuple[np.ndarray, np.ndarray]:
    """Symmetric scale search of ggml's `make_qx_quants` with rmse_type 1 and no weights.

    x: float32 [n, M]. Returns (scale [M], L uint8 [n, M] in 0..2*nmax-1).
    """
    n, m = x.shape
    amax, vmax = absmax_over_rows(x)
    zero = amax < GROUP_MAX_EPS
    w = x * x
    wx = w * x
    scratch = np.empty_like(x)
    L = np.empty_like(x)
    terms = np.empty((n, 2, m), dtype=F32)  # w*x*l, w*l*l: summed in one pass

    def attempt(iscale: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        _levels(x, None, iscale, -nmax, nmax - 1, scratch, L)
        np.multiply(wx, L, out=terms[:, 0])
        wl = np.multiply(w, L, out=terms[:, 1])
        wl *= L
        sumlx, suml2 = seq_sum(terms)
        return sumlx, suml2

    iscale = F32(-nmax) / vmax
    sumlx, suml2 = attempt(iscale)
    best_iscale = iscale
    scale = np.where(suml2 != F32(0), sumlx / suml2, F32(0))
    best = scale * sumlx
    for step in range(-9, 10):
        if step == 0:
            continue
        iscale = -(F32(nmax) + F32(0.1) * F32(step)) / vmax
        sumlx, suml2 = attempt(iscale)
        better = (suml2 > F32(0)) & (sumlx * sumlx > best * suml2)
        best_iscale = np.where(better, iscale, best_iscale)
        scale = np.where(better, sumlx / suml2, scale)
        best = np.where(better, scale * sumlx, best)

    _levels(x, None, best_iscale, -nmax, nmax - 1, scratch, L)
    L += F32(nmax)
    scale = np.where(zero, F32(0), scale)
    L[:, zero] = 0
    return scale, L.astype(np.uint8)


def _descent_pass(x: np.ndarray, w: np.ndarray, wx: np.ndarray, L: np.ndarray,
                  sumlx: np.ndarray, suml2: np.ndarray, nmax: int
                  ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One `make_q3_quants` pass over the elements of [n, M] sub-blocks; updates L in place.

    Each element's update uses the sums as left by the element before it, so the loop is
    sequential over elements (and vectorized over sub-blocks).
    Returns (sumlx [M], suml2 [M], changed [M] bool).
    """
    changed = np.zeros(x.shape[1], dtype=bool)
    for i in range(x.shape[0]):
        wi, wxi, Li = w[i], wx[i], L[i]
        slx = sumlx - wxi * Li
        sl2 = suml2 - (wi * Li) * Li
        new_l = np.clip(nearest_int((x[i] * sl2) / slx), -nmax, nmax - 1).astype(F32)
        tried = (slx > F32(0)) & (new_l != Li)
        slx = slx + wxi * new_l
        sl2 = sl2 + (wi * new_l) * new_l
        take = tried & (sl2 > F32(0)) & ((slx * slx) * suml2 > (sumlx * sumlx) * sl2)
        L[i] = np.where(take, new_l, Li)
        sumlx = np.where(take, slx, sumlx)
        suml2 = np.where(take, sl2, suml2)
        changed |= take
    return sumlx, suml2, changed


def make_q3_quants(x: np.ndarray, nmax: int) -> Tuple[np.ndarray, np.ndarray]:
    """ggml's `make_q3_quants` with do_rmse: a first guess, then up to five passes of
    element-by-element coordinate descent on the weighted (w = x^2) least-squares scale.

    x: float32 [n, M]. Returns (scale [M], L uint8 [n, M] in 0..2*nmax-1).
    """
    amax, vmax = absmax_over_rows(x)
    zero = amax < GROUP_MAX_EPS
    w = x * x
    wx = w * x
    L = _levels(x, None, F32(-nmax) / vmax, -nmax, nmax - 1, np.empty_like(x),
                np.empty_like(x))
    sumlx = seq_sum(wx * L)
    suml2 = seq_sum((w * L) * L)

    # A pass that changes nothing in a sub-block leaves its state as it was, so every later
    # pass would change nothing either (the C `break`): after each pass only the sub-blocks
    # that moved are carried on, gathered into smaller arrays.
    sumlx, suml2, changed = _descent_pass(x, w, wx, L, sumlx, suml2, nmax)
    active = np.nonzero(changed)[0]
    for _ in range(4):
        if not active.size:
            break
        La = L[:, active]
        sa, s2a, changed = _descent_pass(x[:, active], w[:, active], wx[:, active], La,
                                         sumlx[active], suml2[active], nmax)
        L[:, active] = La
        sumlx[active] = sa
        suml2[active] = s2a
        active = active[changed]

    scale = np.where(suml2 > F32(0), sumlx / suml2, F32(0))
    scale = np.where(zero, F32(0), scale)
    L += F32(nmax)
    L[:, zero] = 0
    return scale, L.astype(np.uint8)
