"""The shell's block kernels over GGUF bytes as stored (web/src/kernels/matmul_k.c, exact, and
matmul_r.c, relaxed SIMD over two int8 activation terms: Q4_0 ... Q6_K), under wasmtime.

Oracles:
* gguf-py's dequantization (llama.cpp's own Python package): the replay's reading of each block
  layout (codes, scales, mins) must give the same weights;
* `kquant_emulation.emulate`: the kernel's float32 steps in numpy; the kernel equals it bit for
  bit on random blocks of every type and on Qwen2.5's real Q5_0 / Q4_K / Q6_K tensors;
* x @ W.T in float64 with gguf-py's weights: the replay stays within a bound derived from the
  activations' residual (the int16 split's, or the relaxed kernel's int16 codes') and float32
  rounding.
Chromium runs the same binary (test_browser_model.py's Qwen case).
"""
import os

import numpy as np
import pytest

from kquant_emulation import (LAYOUT, codes_and_scales, dequantized, emulate, int8_activations,
                              random_blocks)
from kernel_runner import kernels, run_kernel  # noqa: F401  (kernels: a fixture)
from quant_emulation import activations, split_activations

pytestmark = pytest.mark.native
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
U = 2.0 ** -24  # float32 unit roundoff
TYPES = sorted(LAYOUT)
KERNELS = pytest.mark.parametrize("relaxed", [False, True], ids=["exact", "relaxed"])


def gguf_weights(data, name, shape):
    from gguf import GGMLQuantizationType, quants
    return quants.dequantize(np.asarray(data, np.uint8).reshape(shape[0], -1),
                             GGMLQuantizationType[name]).astype(np.float64)


@pytest.mark.oracle
@pytest.mark.parametrize("name", TYPES)
def test_replay_reads_blocks_as_gguf_py_does(name):
    shape = (5, 512)
    data = random_blocks(name, *shape, seed=len(name))
    mine, theirs = dequantized(data, name, shape), gguf_weights(data, name, shape)
    # gguf-py rounds each product to float32 in its own order: a few units of rounding
    codes, scale, mins = codes_and_scales(data, name, shape)
    magnitude = np.abs(mine) + (0 if mins is None else np.repeat(
        np.abs(mins.astype(np.float64)), 32 // mins.shape[-1], axis=-1).reshape(shape))
    assert (np.abs(mine - theirs) <= 4 * U * magnitude + 1e-30).all()


@KERNELS
@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("tokens", [1, 3])
def test_kernel_equals_its_float32_replay(kernels, name, tokens, relaxed):
    shape = (13, 512)  # an odd row count: these kernels need no row groups
    data = random_blocks(name, *shape, seed=tokens + len(name))
    x = activations(tokens, shape[1], seed=tokens)
    got = run_kernel(kernels, data, name, shape, x, relaxed=relaxed)
    want = emulate(data, name, shape, x, relaxed=relaxed)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), np.abs(got - want).max()


# Activations whose codes reach the ends of their ranges: q1 = +-127 (q2 = 0); and, with
# max|x| = 127 (step 1), exact ties x = k + 1/2 that round q1 to even, leaving residuals of
# +-1/2: q2 = -128 and 128 held as 127, c from -32384 to 32512 (the largest sums).
SIGNS = np.where(np.arange(256) % 2 == 0, 1.0, -1.0)
EXTREME_X = [SIGNS, np.where(np.arange(256) % 32 == 0, 127.0,
                             SIGNS * np.where(np.arange(256) % 4 < 2, 126.5, 3.5))]


def test_relaxed_kernel_meets_the_extremes_of_its_operands(kernels):
    """Q8_0 bytes -128 and 127 and activation codes at their ends (the largest pair sums a
    pmaddubsw meets, the largest integer sums), Q6_K codes 0 and 63: still the replay, bit
    for bit."""
    from kquant_emulation import int8_activations
    ends = int8_activations(EXTREME_X[1].astype(np.float32)[None, :])[0]
    assert ends.min() == -126 * 256 - 128 and ends.max() == 127 * 256
    assert {-128, 127} <= set((ends - 256 * np.round(ends / 256)).ravel().tolist())
    for (name, byte), x in [(case, x) for case in (("Q8_0", 0x80), ("Q8_0", 0x7F), ("Q6_K", 0xFF),
                                                   ("Q6_K", 0x00)) for x in EXTREME_X]:
        data = random_blocks(name, 4, 256, seed=byte)
        blocks = data.reshape(4, -1, LAYOUT[name][1])
        codes = slice(2, 34) if name == "Q8_0" else slice(0, 192)
        blocks[..., codes] = byte
        x = x.astype(np.float32)[None, :]
        got = run_kernel(kernels, data, name, (4, 256), x, relaxed=True)
        want = emulate(data, name, (4, 256), x, relaxed=True)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (name, byte)
        # within a whole step d of each column (these x are ties) plus float32 rounding
        w = dequantized(data, name, (4, 256))
        step = np.repeat(int8_activations(x)[1].astype(np.float64), 32, axis=1)
        assert (np.abs(got - x.astype(np.float64) @ w.T)
                <= step @ np.abs(w).T + 1e-5 * np.abs(x.astype(np.float64)) @ np.abs(w).T).all()


@KERNELS
def test_a_row_range_writes_only_its_rows(kernels, relaxed):
    """A thread's share: rows [first, last) are computed, the rest untouched."""
    shape = (16, 256)
    data = random_blocks("Q4_K", *shape, seed=3)
    x = activations(2, shape[1], seed=3)
    got = run_kernel(kernels, data, "Q4_K", shape, x, first=4, last=9, relaxed=relaxed)
    want = emulate(data, "Q4_K", shape, x, relaxed=relaxed)
    assert np.isnan(got[:, :4]).all() and np.isnan(got[:, 9:]).all()
    assert np.array_equal(got[:, 4:9], want[:, 4:9])


def error_bound(data, name, shape, x, relaxed=False):
    """|replay - x W^T| bound `[T, rows]` and the scale sum |w| |x| it is measured against.

    Exact kernel: the int16 split's residual meets the codes (|scale q|) and the exact sums
    meet the mins. Relaxed kernel: codes and mins both meet the rounded x (x W^T becomes
    x^ W^T), so the int16 codes' residual meets the whole weight |w|. Plus float32 rounding
    of (2 nb + 40) sequential steps over sum (|scale q| + |min|) max(|x|, |x^|)."""
    codes, scale, mins = codes_and_scales(data, name, shape)
    rows, nb, _ = codes.shape
    sub = scale.shape[-1]
    scaled = np.abs(codes.reshape(rows, nb, sub, -1) * scale.astype(np.float64)[..., None])
    magnitude = scaled.reshape(shape)
    if mins is not None:
        magnitude = magnitude + np.repeat(np.abs(mins.astype(np.float64)), 32 // sub,
                                          axis=-1).reshape(shape)
    if relaxed:
        qx, dx, _, _ = int8_activations(x)
        approx = dx[..., None] * qx
        meets = np.abs(dequantized(data, name, shape))
    else:
        xh, xl, dx, _ = split_activations(x)
        approx = dx[..., None] * (xh + xl / 32768.0)
        meets = scaled.reshape(shape)
    residual = np.abs(x.reshape(approx.shape) - approx).reshape(x.shape[0], -1)
    absx = np.abs(x.astype(np.float64))
    largest = np.maximum(absx, np.abs(approx.reshape(absx.shape)))
    return (residual @ meets.T + (2 * nb + 40) * U * (largest @ magnitude.T)), absx @ magnitude.T


@pytest.mark.oracle
@KERNELS
@pytest.mark.parametrize("name", TYPES)
def test_replay_stays_within_the_derived_bound(name, relaxed):
    shape = (24, 768)
    data = random_blocks(name, *shape, seed=7 + len(name))
    x = activations(2, shape[1], seed=7)
    bound, scale = error_bound(data, name, shape, x, relaxed)
    error = np.abs(emulate(data, name, shape, x, relaxed) - x.astype(np.float64)
                   @ gguf_weights(data, name, shape).T)
    assert (error <= bound).all(), float((error / bound).max())
    if relaxed:  # each column rounds to at most half of its block's step d = max|x| / 32512
        _, d, _, _ = int8_activations(x)  # (a whole step at exact ties, which these x lack)
        weights = np.abs(dequantized(data, name, shape))
        half_steps = np.repeat(d.astype(np.float64) / 2, 32, axis=1) @ weights.T
        rounding = (2 * (shape[1] // 32) + 40) * 1.01 * U * scale
        assert (bound <= half_steps * (1 + 1e-6) + rounding).all()
    else:  # tight enough to mean something
        assert (bound <= 1e-4 * scale).all()


@pytest.fixture(scope="module")
def qwen_tensors(qwen_path):
    from apr_core.formats.open import open_model
    wanted = {"Q5_0": "blk.0.attn_q.weight", "Q4_K": None, "Q6_K": None}
    found = {}
    with open_model(qwen_path) as gguf:
        for tensor, info in gguf.tensors.items():
            kind = info.dtype.name
            if kind in wanted and kind not in found and wanted[kind] in (None, tensor):
                raw = gguf.read_raw(tensor)
                found[kind] = (np.frombuffer(bytes(raw.data), np.uint8), tuple(raw.shape),
                               tensor)
    assert sorted(found) == ["Q4_K", "Q5_0", "Q6_K"]
    return found


@pytest.mark.real_model
@KERNELS
@pytest.mark.parametrize("name", ["Q5_0", "Q4_K", "Q6_K"])
def test_kernel_on_qwen_tensors_equals_its_replay(kernels, qwen_tensors, name, relaxed):
    data, shape, tensor = qwen_tensors[name]
    x = activations(2, shape[1], seed=11)
    got = run_kernel(kernels, data, name, shape, x, relaxed=relaxed)
    want = emulate(data, name, shape, x, relaxed=relaxed)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), tensor


@KERNELS
def test_every_finite_half_scale_widens_exactly(kernels, relaxed):
    """The kernel's branch-free f16 -> f32 (subnormals, both signs) equals numpy's on every
    finite pattern: Q8_0 rows of one block each, d = the pattern, codes 1, through the
    kernel and its replay."""
    patterns = np.arange(1 << 16, dtype=np.uint32).astype("<u2")
    finite = patterns[np.isfinite(patterns.view("<f2"))]                # [rows]
    blocks = np.zeros((finite.size, 1, 34), np.uint8)
    blocks[:, 0, :2] = finite[:, None].view(np.uint8)
    blocks[:, 0, 2:] = 1
    x = np.ones((1, 32), np.float32)
    got = run_kernel(kernels, blocks.reshape(-1), "Q8_0", (finite.size, 32), x, relaxed=relaxed)
    want = emulate(blocks.reshape(-1), "Q8_0", (finite.size, 32), x, relaxed=relaxed)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    # and the replay's widening is numpy's: y = 32 d up to the float32 steps
    d = finite.view("<f2").astype(np.float64)
    assert (np.abs(got[0] - 32 * d) <= 1e-6 * np.abs(32 * d)).all()


@KERNELS
@pytest.mark.parametrize("name", ["Q4_1", "Q4_K"])
def test_every_half_scale_and_min_widens_exactly(kernels, relaxed, name):
    """Types with mins: matmul_r.c widens a row's d and dmin together (halves2), four rows
    at a time, groups with an infinity or NaN through the general path. Every finite
    pattern as d and as dmin, then a sample of the non-finite ones among finite rows,
    through the kernel and its replay (a NaN where the replay has one)."""
    patterns = np.arange(1 << 16, dtype=np.uint32).astype("<u2")
    finite = patterns[np.isfinite(patterns.view("<f2"))]
    special = patterns[~np.isfinite(patterns.view("<f2"))][::61]
    d = np.concatenate([finite, finite[::-1], special, finite[:special.size]])
    m = np.concatenate([finite[::-1], finite, finite[-special.size:], special])
    width, (d_at, m_at) = {"Q4_1": (20, (0, 2)), "Q4_K": (144, (0, 2))}[name]
    blocks = np.full((d.size, width), 0x21, np.uint8)
    blocks[:, d_at:d_at + 2] = d[:, None].view(np.uint8)
    blocks[:, m_at:m_at + 2] = m[:, None].view(np.uint8)
    cols = 32 if name == "Q4_1" else 256
    x = activations(1, cols, seed=11)
    got = run_kernel(kernels, blocks.reshape(-1), name, (d.size, cols), x, relaxed=relaxed)
    want = emulate(blocks.reshape(-1), name, (d.size, cols), x, relaxed=relaxed)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), np.flatnonzero(~same)[:8]
