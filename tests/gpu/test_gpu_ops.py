"""The WGSL kernels without weight blocks against their numpy definitions
(apr_core.model.layers / fused): norms, RoPE + KV store, paged attention, the gated
MLP's activations, argmax, row gather.

Bounds (u = 2^-24): a norm output is x * r * w with r = 1/sqrt(mean(x^2) + eps) from a
float32 sum of n squares (relative error <= (n + 4) u in the mean, half that in r after
the square root, plus the two products): |dy| <= ((n + 8) u) |y|. RoPE is two products
and one sum of the same float32 inputs: |dy| <= 3u (|a c| + |b s|). Attention (float32
here, float64 in the reference): the scores carry (hd + 2) u sum |q k| scale of absolute
error, which moves the softmax weights by at most that much relatively, so the output
differs by at most (2 e + L u) max|v| with e the largest score error and L the keys.
Activations use exp/tanh, which WebGPU implementations evaluate to 2^-11 relative error
at worst (WGSL's accuracy table): 1e-3 relative there.
"""
import numpy as np
import pytest

from apr_core.model.config import RopeScaling
from apr_core.model.fused import attention_paged, rope_store_paged
from apr_core.model.layers import ACTIVATION_FNS, Rope, layer_norm, rms_norm
from apr_core.gpu.wgsl_kernels import ACTS

from gpu_harness import device, run_kernel, step_words

pytestmark = pytest.mark.native

U = 2.0 ** -24


@pytest.fixture(scope="module")
def dev():
    return device()


def norm_values(n, eps, layer=0, heads=1, row_stride=0, col_off=0, add=0, bias=0, in_place=0):
    return {"n": n, "eps": float(eps), "layer": layer, "rows_src": 0, "heads": heads,
            "row_stride": row_stride or n, "col_off": col_off, "has_add": add,
            "has_bias": bias, "in_place": in_place}


def test_rms_norm_with_residual_add(dev):
    rng = np.random.RandomState(0)
    t, d = 5, 576
    x, a = rng.standard_normal((2, t, d)).astype(np.float32) * 3
    w = rng.standard_normal(d).astype(np.float32)
    out = run_kernel(dev, "norm", "norm", norm_values(d, 1e-5, add=1),
                     {"x": x, "a": a, "w": w, "b": np.zeros(1, np.float32),
                      "h": np.zeros_like(x)}, ["step", "x", "a", "w", "b", "h"],
                     (t, 1, 1), step_words(t))
    assert np.array_equal(out["x"], x + a)                     # the residual sum, exact
    ref = rms_norm(x + a, w, 1e-5)
    assert np.all(np.abs(out["h"] - ref) <= (d + 8) * U * np.abs(ref) + 1e-30)


def test_layer_norm_with_bias(dev):
    rng = np.random.RandomState(1)
    t, d = 3, 100
    x = (rng.standard_normal((t, d)) + 5).astype(np.float32)
    w, b = rng.standard_normal((2, d)).astype(np.float32)
    out = run_kernel(dev, "norm", "norm", norm_values(d, 1e-6, layer=1, bias=1),
                     {"x": x, "a": np.zeros(1, np.float32), "w": w, "b": b,
                      "h": np.zeros_like(x)}, ["step", "x", "a", "w", "b", "h"],
                     (t, 1, 1), step_words(t))
    ref = layer_norm(x, w, b, 1e-6)
    # the centred values lose what the mean's rounding moved: (n + 8) u of |x| each
    scale = (d + 8) * U * (np.abs(x).max(axis=1, keepdims=True) / x.std(axis=1, keepdims=True))
    assert np.all(np.abs(out["h"] - ref) <= scale * (np.abs(w) + np.abs(ref)) + 1e-6)


def test_per_head_rms_norm_in_place(dev):
    """Q/K norms: heads of one row of the qkv buffer, normalised in place."""
    rng = np.random.RandomState(2)
    t, heads, hd, width = 4, 3, 64, 3 * 64 + 40
    qkv = rng.standard_normal((t, width)).astype(np.float32)
    w = rng.standard_normal(hd).astype(np.float32)
    out = run_kernel(dev, "norm", "norm",
                     norm_values(hd, 1e-6, heads=heads, row_stride=width, col_off=8,
                                 in_place=1),
                     {"x": qkv, "a": np.zeros(1, np.float32), "w": w,
                      "b": np.zeros(1, np.float32)}, ["step", "x", "a", "w", "b", "dummy"],
                     (t * heads, 1, 1), step_words(t))["x"]
    ref = qkv.copy()
    ref[:, 8:8 + heads * hd] = rms_norm(qkv[:, 8:8 + heads * hd].reshape(t, heads, hd), w,
                                        1e-6).reshape(t, -1)
    assert np.all(np.abs(out - ref) <= (hd + 8) * U * np.abs(ref) + 1e-30)


@pytest.mark.parametrize("style, dim", [("neox", 64), ("interleaved", 64), ("neox", 32)])
def test_rope_store_rotates_q_and_stores_k_v_at_slots(dev, style, dim):
    rng = np.random.RandomState(3)
    t, h, n_kv, hd = 5, 4, 2, 64
    q, k, v = (rng.standard_normal((t, n, hd)).astype(np.float32)
               for n in (h, n_kv, n_kv))
    positions = np.array([7, 8, 9, 30, 31])
    slots = np.array([3, 4, 5, 12, 13])
    rope = Rope(dim, 10000.0, style, RopeScaling("linear", factor=2.0))
    cos, sin = rope.tables(positions)
    qkv = np.concatenate([q.reshape(t, -1), k.reshape(t, -1), v.reshape(t, -1)], axis=1)
    kc = np.zeros((16, n_kv, hd), np.float32)
    out = run_kernel(dev, "rope_store", "rope_store", {
        "n_heads": h, "n_kv": n_kv, "hd": hd, "dim": dim, "neox": int(style == "neox"),
        "table": 1, "stride": qkv.shape[1], "q_off": 0, "k_off": h * hd,
        "v_off": (h + n_kv) * hd}, {"qkv": qkv, "k": kc, "v": kc.copy()},
        ["step", "qkv", "k", "v"], (t, 1, 1),
        step_words(t, positions, slots, ropes=(None, (cos, sin))))
    k_pool, v_pool = np.zeros((2, n_kv, 16, hd), np.float32)
    q_ref = rope_store_paged(q, k, v, cos, sin, dim, style == "neox", k_pool, v_pool, slots)
    bound = 3 * U * (np.abs(q) + np.abs(np.roll(q, 1, axis=2)) + np.abs(q).max())
    assert np.all(np.abs(out["qkv"][:, :h * hd].reshape(t, h, hd) - q_ref) <= bound)
    got_k = out["k"].transpose(1, 0, 2)                            # [n_kv, slots, hd]
    assert np.all(np.abs(got_k - k_pool) <= 3 * U * 2 * np.abs(k).max())
    assert np.array_equal(out["v"].transpose(1, 0, 2), v_pool)
    assert np.array_equal(out["qkv"][:, h * hd:], qkv[:, h * hd:])   # k, v rows untouched


@pytest.mark.parametrize("window", [0, 5])
def test_paged_attention_matches_reference(dev, window):
    """Two sequences in one step (a decode row and a 3-row prefill chunk), GQA 6/2,
    blocks of 4 slots scattered through the pool, over 70 keys (two key tiles)."""
    rng = np.random.RandomState(4)
    h, n_kv, hd, bs, n_slots = 6, 2, 64, 4, 96
    k_pool, v_pool = rng.standard_normal((2, n_kv, n_slots, hd)).astype(np.float32)
    table_a = rng.permutation(n_slots // bs)[:18]                 # 72 positions
    table_b = rng.permutation(n_slots // bs)[:3]
    tables = np.zeros((4, 18), np.int32)
    tables[0] = table_a
    tables[1:, :3] = table_b
    positions = np.array([69, 8, 9, 10])
    q = rng.standard_normal((4, h, hd)).astype(np.float32)
    scale = hd ** -0.5
    ref = attention_paged(q, k_pool, v_pool, tables, bs, positions, scale, window)
    qkv = q.reshape(4, -1)
    out = run_kernel(dev, "attention", "attention", {
        "n_heads": h, "n_kv": n_kv, "hd": hd, "scale": float(scale), "window": window,
        "stride": h * hd, "q_off": 0, "out_stride": h * hd},
        {"qkv": qkv, "k": k_pool.transpose(1, 0, 2).copy(),
         "v": v_pool.transpose(1, 0, 2).copy(), "o": np.zeros((4, h * hd), np.float32)},
        ["step", "qkv", "k", "v", "o"], (h, 4, 1),
        step_words(4, positions, np.zeros(4, np.int64), tables, bs))["o"]
    score_err = (hd + 2) * U * scale * np.abs(q).max() * np.abs(k_pool).max() * hd
    bound = (2 * score_err + 80 * U) * np.abs(v_pool).max() * 4
    assert np.all(np.abs(out - ref) <= bound), np.abs(out - ref).max() / bound


@pytest.mark.parametrize("act", sorted(ACTS))
@pytest.mark.parametrize("gated", [1, 0])
def test_glu_activations(dev, act, gated):
    rng = np.random.RandomState(5)
    t, n = 3, 300
    g = (rng.standard_normal((t, n)) * 6).astype(np.float32)
    g[0, :4] = [-100.0, 100.0, 0.0, -20.0]                         # exp overflow, limits
    u = rng.standard_normal((t, n)).astype(np.float32)
    out = run_kernel(dev, "glu", "glu", {"n": n, "gated": gated, "act": ACTS[act]},
                     {"g": g, "u": u}, ["step", "g", "u"], (-(-t * n // 256), 1, 1),
                     step_words(t))["g"]
    ref = ACTIVATION_FNS[act](g) * (u if gated else 1.0)
    assert np.all(np.isfinite(out))
    assert np.all(np.abs(out - ref) <= 1e-3 * np.abs(ref) + 1e-6 * np.abs(g))


def test_argmax_takes_the_first_of_equal_maxima_and_gather_picks_rows(dev):
    rng = np.random.RandomState(6)
    logits = rng.standard_normal((3, 1000)).astype(np.float32)
    logits[1, [10, 500, 900]] = 50.0                               # a three-way tie
    logits[2, 999] = 60.0
    words = step_words(3, out_rows=[0, 1, 2])
    out = run_kernel(dev, "argmax", "argmax", {"n": 1000},
                     {"l": logits, "ids": np.zeros(3, np.uint32)}, ["step", "l", "ids"],
                     (3, 1, 1), words)["ids"]
    assert out.tolist() == [int(logits[0].argmax()), 10, 999]
    x = rng.standard_normal((5, 40)).astype(np.float32)
    words = step_words(5, out_rows=[4, 1])
    xr = run_kernel(dev, "gather", "gather", {"n": 40},
                    {"x": x, "xr": np.zeros((2, 40), np.float32)}, ["step", "x", "xr"],
                    (2, 1, 1), words)["xr"]
    assert np.array_equal(xr, x[[4, 1]])
