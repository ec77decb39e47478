"""The shell's quantized WebAssembly SIMD matmuls (web/src/kernels/matmul_k.c, and matmul_r.c on
relaxed SIMD) on real SmolLM2 tensors (Q4_1 projections, the Q8_0 tied embedding/LM head).

Oracles, both computed from the GGUF bytes:
* `emulate` (kquant_emulation): the kernel's arithmetic in numpy, operation for operation in
  float32 (the activation split, exact integer dots, then the same float32 multiplies and
  adds in the same order; WebAssembly has no FMA). The kernel must equal it bit for bit, under wasmtime
  and in Chromium.
* apr_core's bit-exact dequantization times x in float64: the emulation stays within a
  bound derived from the activation split's residual and float32 rounding.
The whole model in Chromium with these kernels (greedy tokens, logits) is
test_browser_model.py's "simd" case.
"""
import base64
import os
import sys

import numpy as np
import pytest


pytestmark = pytest.mark.native
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "web", "src"))

import apr_webkernel  # noqa: E402  (the shell's Python side; `js` is imported lazily)
from quant_emulation import activations, split_activations  # noqa: E402
from kquant_emulation import codes_and_scales, emulate  # noqa: E402  (the kernel's replay)
from kernel_runner import kernels, run_kernel  # noqa: E402,F401  (kernels: a fixture)

# (tensor, tokens): both quantized types, square/tall/wide shapes, prefill and decode.
CASES = [("blk.0.attn_q.weight", 1), ("blk.0.attn_k.weight", 3), ("blk.7.ffn_down.weight", 2),
         ("blk.29.ffn_gate.weight", 1), ("token_embd.weight", 1)]
U = 2.0 ** -24  # float32 unit roundoff


def gguf_tensor(path, name):
    from apr_core.formats.open import open_model
    with open_model(path) as gguf:
        raw = gguf.read_raw(name)
        return np.frombuffer(bytes(raw.data), np.uint8), raw.dtype, tuple(raw.shape)


def error_bound(data, dtype, shape, x):
    """|emulate - W x| bound `[T, rows]`: the split's residual times |W - m| plus float32
    rounding of (nb + 36) sequential steps over sum |w x|."""
    from apr_core.quant.api import dequantize
    w = dequantize(data, dtype, shape).astype(np.float64)           # [rows, cols]
    q, d, _ = codes_and_scales(data, dtype.name, shape)              # d: [rows, nb, 1]
    xh, xl, dx, _ = split_activations(x)
    residual = np.abs(x.reshape(xh.shape) - dx[..., None] * (xh + xl / 32768.0))  # [T, nb, 32]
    dq = np.abs(d.astype(np.float64) * q).reshape(shape)             # |d q| = |w - m|
    nb = shape[1] // 32
    return (residual.reshape(x.shape[0], -1) @ dq.T
            + (nb + 36) * U * (np.abs(x.astype(np.float64)) @ np.abs(w).T)), w


@pytest.mark.real_model
@pytest.mark.parametrize("relaxed", [False, True], ids=["exact", "relaxed"])
@pytest.mark.parametrize("name, tokens", CASES)
def test_quant_kernel_equals_its_float32_emulation(kernels, smollm2_path, name, tokens, relaxed):
    data, dtype, shape = gguf_tensor(smollm2_path, name)
    x = activations(tokens, shape[1], seed=len(name) + tokens)
    got = run_kernel(kernels, data, dtype.name, shape, x, relaxed=relaxed)
    want = emulate(data, dtype.name, shape, x, relaxed=relaxed)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), \
        np.abs(got - want).max()


@pytest.mark.real_model
@pytest.mark.parametrize("name, tokens", CASES[:3] + CASES[4:])
def test_emulation_stays_within_the_derived_bound(smollm2_path, name, tokens):
    data, dtype, shape = gguf_tensor(smollm2_path, name)
    x = activations(tokens, shape[1], seed=len(name) + tokens)
    bound, w = error_bound(data, dtype, shape, x)
    error = np.abs(emulate(data, dtype.name, shape, x) - x.astype(np.float64) @ w.T)
    assert (error <= bound).all(), float((error / bound).max())
    # The bound is tight enough to mean something: relative to |W||x|, about float32's.
    scale = np.abs(x.astype(np.float64)) @ np.abs(w).T
    assert (bound <= 1e-5 * scale).all()


@pytest.fixture(scope="module")
def kernel_page(browser, site):
    """One Chromium page (Pyodide 0.17, the exact quantized SIMD kernels) with SmolLM2's
    GGUF loaded, shared by the Chromium tests below."""
    from conftest import PageSession
    session = PageSession(browser, site, "pyodide=017&numpy=1&kernels=simd-exact")
    info = session.call("apr.load('models/smollm2.gguf')")
    assert info["kernels"] == "wasm-simd"
    yield session
    session.close()


@pytest.fixture(scope="module")
def relaxed_page(browser, site):
    """The same with the default kernels, which are the relaxed-SIMD ones in Chromium."""
    from conftest import PageSession
    session = PageSession(browser, site, "pyodide=017&numpy=1&kernels=simd")
    assert session.call("apr.boot({})")["precision"] == "relaxed"
    session.call("apr.load('models/smollm2.gguf')")
    yield session
    session.close()


def kernel_in_chromium(session, name, x, quantized=True):
    got = session.call("([n, x, q]) => apr.call('kernelCheck', 'kernel_check', n, x, q)",
                       [name, base64.b64encode(x.tobytes()).decode("ascii"), quantized])
    return got["kind"], np.frombuffer(base64.b64decode(got["y"]), "<f4").reshape(x.shape[0], -1)


@pytest.mark.real_model
@pytest.mark.parametrize("relaxed", [False, True], ids=["exact", "relaxed"])
@pytest.mark.parametrize("name, tokens", CASES)
def test_chromium_kernel_equals_its_float32_emulation(request, smollm2_path, name, tokens,
                                                      relaxed):
    """What the model runs in Chromium: the registered kernel on the model's own weight."""
    page = request.getfixturevalue("relaxed_page" if relaxed else "kernel_page")
    data, dtype, shape = gguf_tensor(smollm2_path, name)
    x = activations(tokens, shape[1], seed=len(name) + tokens)
    kind, got = kernel_in_chromium(page, name, x)
    assert kind == apr_webkernel.QUANTIZED[dtype.name]  # the quantized path, not float32
    want = emulate(data, dtype.name, shape, x, relaxed=relaxed)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), \
        np.abs(got - want).max()


@pytest.mark.real_model
@pytest.mark.parametrize("tokens", [1, 2, 7])
def test_chromium_float32_kernel_by_address(kernel_page, smollm2_path, tokens):
    """Types without a quantized kernel take the float32 one, through the same calls (on
    the helper threads too: one token's rows, else the tokens, split between them)."""
    from apr_core.quant.api import dequantize
    data, dtype, shape = gguf_tensor(smollm2_path, "blk.3.attn_output.weight")
    x = activations(tokens, shape[1], seed=5)
    kind, got = kernel_in_chromium(kernel_page, "blk.3.attn_output.weight", x, quantized=False)
    assert kind == apr_webkernel.KIND_F32
    w = dequantize(data, dtype, shape).astype(np.float64)
    # float32 sums of `cols` products in another order than float64's
    bound = shape[1] * U * (np.abs(x.astype(np.float64)) @ np.abs(w).T)
    assert (np.abs(got - x.astype(np.float64) @ w.T) <= bound).all()


# output -> allowed max |diff| in units of U * scale (see apr_webrun.fused_check), from
# the arithmetic of each pair: exact float32 steps where both round alike; sums of squares
# in float64 vs numpy's float32 pairwise mean (log2 576 + a few roundings); attention's
# float32 V sums over 20 keys in numpy vs float64 here; SiLU in float64 vs float32 exp;
# GELU-tanh: the same float32 steps, tanh rounded once in both (numpy's float32 tanh is
# within an ulp or two of the rounded float64 one).
# The "_f16" entries: float16 caches (the f16 KV type), stored and read in place by the
# shell (Float16Array rounds as numpy's cast does, so the stored bytes are equal).
FUSED_ULPS = {"norm_s": 0, "norm_s_none": 0, "norm_h": 16, "norm_h_none": 16, "norm_heads": 16,
              "glu": 8, "glu_gelu_tanh": 8}
for _suffix in ("", "_f16"):
    FUSED_ULPS.update({"rope_q_neox" + _suffix: 0, "rope_k_neox" + _suffix: 0,
                       "rope_v_neox" + _suffix: 0, "rope_q_gptj" + _suffix: 0,
                       "rope_k_gptj" + _suffix: 0, "rope_v_gptj" + _suffix: 0,
                       "attention_w0" + _suffix: 24, "attention_w5" + _suffix: 24})
# the whole layer in one call runs the same steps as the kind-by-kind layer: equal bit for bit
for _tag in ("layer_f32_T1", "layer_f32_T3", "layer_f16_T1", "layer_f16_T3"):
    FUSED_ULPS.update({_tag: 0, _tag + "_k": 0, _tag + "_v": 0})


@pytest.mark.real_model
@pytest.mark.parametrize("seed", [1, 2])
def test_chromium_fused_kinds_match_numpy_references(kernel_page, seed):
    """The shell's fused per-layer kinds against apr_core.model.fused's references."""
    pytest.importorskip("apr_core.model.fused")  # the kinds arrived with issue 8
    got = kernel_page.call("(s) => apr.call('kernelCheck', 'fused_check', s)", seed)
    # this Chromium has Float16Array: the f16 caches ran on the shell, not numpy's path
    assert got.pop("half_caches") is True
    # the layers ran as one shell call each (kernels/fused.js decoderLayer)
    assert got.pop("layer_in_shell") is True
    assert sorted(got) == sorted(FUSED_ULPS)
    for name, (diff, scale) in got.items():
        assert scale > 0, name
        assert diff <= FUSED_ULPS[name] * U * scale, (name, diff, scale)
