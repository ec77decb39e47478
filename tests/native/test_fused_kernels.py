"""The fused per-layer kinds (apr_core.model.fused): numba versions against the numpy
references on random inputs of the real models' shapes, the GQA and sliding-window
cases, the fallbacks, and whole tiny models of every family block shape under the numba
backend against numpy.

Tolerances (derived in apr_native/kernels/fused_layers.py's docstring):
- rope_store: the same float32 operations in the same order: exact.
- rms_norm_add: the residual sum is exact; the norm differs by the mean of squares'
  summation (float64 vs float32): a few ulp of each output.
- attention: the blocked kernel, tested with its derived bound in
  test_attention_blocked.py.
- matmul_glu: the int16-activation matvec bound of test_numba_kernels through SiLU and the
  product (|SiLU'| <= 1.1).
"""
import numpy as np
import pytest

pytest.importorskip("numba")

from apr_core import dtypes                                      # noqa: E402
from apr_core.model import Transformer, fused                    # noqa: E402
from apr_core.model.layers import silu                           # noqa: E402
from apr_core.model.weights import Linear                        # noqa: E402
from apr_core.quant.api import dequantize, quantize              # noqa: E402
from apr_native import backends                                  # noqa: E402
from apr_native.kernels import cpu
from apr_native.kernels.layer import fused_layers  # noqa: E402
from synthetic_models import write_gguf_model, write_hf_model    # noqa: E402
from test_numba_kernels import activation_error_bound            # noqa: E402

pytestmark = pytest.mark.native

U = 2.0 ** -24
# (d_model, heads, kv heads, head_dim, d_ff) of SmolLM2-135M and Qwen2.5-0.5B
SHAPES = {"smollm2": (576, 9, 3, 64, 1536), "qwen2.5": (896, 14, 2, 64, 4864)}


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("tokens", [1, 7])
@pytest.mark.parametrize("residual", [True, False])
def test_rms_norm_add(shape, tokens, residual):
    d = SHAPES[shape][0]
    rng = np.random.default_rng(tokens)
    x = rng.standard_normal((tokens, d)).astype(np.float32) * 3
    a = rng.standard_normal((tokens, d)).astype(np.float32) if residual else None
    w = rng.standard_normal(d).astype(np.float32)
    s_ref, h_ref = fused.rms_norm_add(x, a, w, 1e-5)
    s, h = fused_layers.rms_norm_add(x, a, w, 1e-5)
    np.testing.assert_array_equal(s, s_ref)
    # the inverse rms differs by ~1 ulp, each product rounds once more
    assert (np.abs(h - h_ref) <= 4 * U * np.abs(h_ref) + 1e-30).all()


def rope_case(rng, tokens, n_heads, n_kv, hd, dim, cap=40, start=5):
    q = rng.standard_normal((tokens, n_heads, hd)).astype(np.float32)
    k = rng.standard_normal((tokens, n_kv, hd)).astype(np.float32)
    v = rng.standard_normal((tokens, n_kv, hd)).astype(np.float32)
    ang = (start + np.arange(tokens))[:, None] * rng.random(dim // 2)[None, :]
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    caches = rng.standard_normal((2, n_kv, cap, hd)).astype(np.float32)
    return q, k, v, cos, sin, caches


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("dim", [64, 32])          # full and partial rotary dims
@pytest.mark.parametrize("tokens", [1, 6])
def test_rope_store_exact(shape, neox, dim, tokens):
    _, n_heads, n_kv, hd, _ = SHAPES[shape]
    q, k, v, cos, sin, caches = rope_case(np.random.default_rng(dim), tokens, n_heads, n_kv,
                                          hd, dim)
    ref_caches, our_caches = caches.copy(), caches.copy()
    q_ref = fused.rope_store(q, k, v, cos, sin, dim, neox, ref_caches[0], ref_caches[1], 5)
    q_out = fused_layers.rope_store(q, k, v, cos, sin, dim, neox, our_caches[0],
                                    our_caches[1], 5)
    np.testing.assert_array_equal(q_out, q_ref)
    np.testing.assert_array_equal(our_caches, ref_caches)   # other positions untouched too
    assert not np.array_equal(q_out, q)


def test_rope_store_without_rotation_stores_as_is():
    q, k, v, _, _, caches = rope_case(np.random.default_rng(1), 3, 4, 2, 16, 16)
    ours = caches.copy()
    q_out = fused_layers.rope_store(q, k, v, None, None, 0, False, ours[0], ours[1], 2)
    np.testing.assert_array_equal(q_out, q)
    np.testing.assert_array_equal(ours[0][:, 2:5], k.transpose(1, 0, 2))
    np.testing.assert_array_equal(ours[1][:, 2:5], v.transpose(1, 0, 2))


def quantized_linear(rng, name, shape, bias=None):
    dtype = dtypes.BY_NAME[name]
    values = rng.standard_normal(shape).astype(np.float32)
    data = np.frombuffer(quantize(values, dtype), np.uint8)
    return Linear(name, data, dtype, shape, bias), dequantize(data, dtype, shape)


@pytest.mark.parametrize("d,d_ff,name", [(576, 1536, "Q4_1"),      # SmolLM2's gate/up
                                         (896, 4864, "Q5_0"),      # Qwen2.5's
                                         (512, 1024, "Q4_K"), (512, 1024, "Q6_K")])
@pytest.mark.parametrize("tokens", [1, cpu.DOT_MAX_TOKENS + 2])
def test_matmul_glu_within_activation_bound(d, d_ff, name, tokens, pool_threads):
    rng = np.random.default_rng(3)
    gate, wg = quantized_linear(rng, name, (d_ff, d))
    up, wu = quantized_linear(rng, name, (d_ff, d))
    x = rng.standard_normal((tokens, d)).astype(np.float32) * 0.1
    got = fused_layers.matmul_glu(gate, up, x, "silu").astype(np.float64)
    g = x.astype(np.float64) @ wg.T.astype(np.float64)
    u = x.astype(np.float64) @ wu.T.astype(np.float64)
    exact = g / (1.0 + np.exp(-g)) * u
    bg, bu = activation_error_bound(wg, x), activation_error_bound(wu, x)
    if tokens > cpu.DOT_MAX_TOKENS:   # float32 rows: float32 summation error only
        bg = bu = 1e-6 * (np.abs(x).astype(np.float64) @ np.abs(wg).T) + 1e-6
    silu_g = np.abs(g / (1.0 + np.exp(-g)))
    bound = 1.1 * bg * (np.abs(u) + bu) + silu_g * bu + 4 * U * np.abs(exact) + 1e-6
    err = np.abs(got - exact)
    assert (err <= bound).all(), (err - bound).max()
    assert err.max() < 1e-2 * np.abs(exact).max()


def test_matmul_glu_falls_back_for_other_activations_and_biases():
    rng = np.random.default_rng(5)
    gate, _ = quantized_linear(rng, "Q4_1", (64, 64))
    up, _ = quantized_linear(rng, "Q4_1", (64, 64), bias=rng.standard_normal(64))
    x = rng.standard_normal((1, 64)).astype(np.float32)
    np.testing.assert_array_equal(fused_layers.matmul_glu(gate, up, x, "gelu"),
                                  fused.matmul_glu(gate, up, x, "gelu"))
    # a biased up projection runs the projections one by one, then the fused SiLU
    want = silu(gate.matmul(x)) * up.matmul(x)
    assert np.abs(fused_layers.matmul_glu(gate, up, x, "silu") - want).max() <= \
        4 * U * np.abs(want).max()


PROMPT = [1, 5, 9, 2, 7, 3, 11, 4]


def tiny_model(kind, tmp_path):
    if kind.startswith("gguf"):
        path = tmp_path / "m.gguf"
        write_gguf_model(path, quant=kind[5:])
        return str(path)
    extra = {}
    if kind == "hf_gemma3":        # sliding windows, Q/K norms, sandwich norms, tanh GELU
        extra = dict(sliding_window=4, head_dim=32, num_hidden_layers=6,
                     hidden_activation="gelu_pytorch_tanh")
    if kind == "hf_gpt2":          # LayerNorm, GELU, learned positions, no gate
        extra = {"hidden_act": "gelu_new"}
    write_hf_model(tmp_path, kind[3:], **extra)
    return str(tmp_path)


@pytest.mark.parametrize("kind", ["gguf_Q4_1", "gguf_Q8_0", "hf_llama", "hf_qwen2",
                                  "hf_gpt2", "hf_gemma3"])
def test_models_match_numpy_under_numba(kind, tmp_path):
    """Prefill then cached decode steps under numba equal numpy's logits: dense (HF)
    weights isolate the fused kinds (float32 rounding), quantized GGUF ones add the
    int16 activations (1e-3 of the logit scale, as test_numba_parity)."""
    path = tiny_model(kind, tmp_path)
    ref = Transformer.from_path(path).forward(PROMPT)
    model = Transformer.from_path(path, kernels=backends.select("numba"))
    cache = model.new_cache(len(PROMPT))
    got = np.concatenate([model.forward(PROMPT[:5], cache)] +
                         [model.forward([t], cache) for t in PROMPT[5:]])
    scale = max(1.0, np.abs(ref).max())
    tol = 1e-5 if kind.startswith("hf") else 1e-3
    assert np.abs(got - ref).max() <= tol * scale
