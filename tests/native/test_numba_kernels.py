"""numba CPU kernels against the numpy reference (apr_core.quant.api.dequantize, itself
bit-exact to gguf-py), on synthetic blocks of every supported type and on real tensors of
both real models.

- Dequantizing rows is exact: the same float32 operations in the same order.
- The fused matvec quantizes activations to int16 per run of 32 (scale amax/32767), so
  its error is bounded: each activation moves by at most half a step, d_b / 2 with
  d_b = amax_b / 32767, so |y - x.W| <= sum_b d_b / 2 * sum_{i in b} |w_i| per output,
  plus float32 rounding (1e-5 of sum |w| |x|). The test checks that bound element by
  element.
- More than DOT_MAX_TOKENS tokens use exact rows and float32 activations: within float32
  summation error (1e-6 of sum |w| |x|) of the float64 product.
"""
import numpy as np
import pytest

pytest.importorskip("numba")

from apr_core import dtypes                                      # noqa: E402
from apr_core.formats.open import open_model                     # noqa: E402
from apr_core.quant.api import dequantize, quantize              # noqa: E402
from apr_native.kernels import cpu
from apr_native.kernels.blocks import block_rows  # noqa: E402

pytestmark = pytest.mark.native

TYPES = cpu.SUPPORTED


def activation_error_bound(w, x):
    """Per-output bound on |numba matvec - x @ w.T| from 16-bit activations: `w [out, in]`,
    `x [T, in]` -> `[T, out]`."""
    t, n = x.shape
    step = np.abs(x).reshape(t, n // 32, 32).max(axis=2).astype(np.float64) / 32767.0  # [T, nb]
    w_abs = np.abs(w).astype(np.float64).reshape(w.shape[0], n // 32, 32).sum(axis=2)   # [out, nb]
    rounding = 1e-5 * (np.abs(x).astype(np.float64) @ np.abs(w).T.astype(np.float64))
    return 0.5 * step @ w_abs.T + rounding + 1e-6


def check_matvec(data, dtype, shape, rng, tokens=2):
    w = dequantize(data, dtype, shape)                                # [out, in]
    x = rng.standard_normal((tokens, shape[1])).astype(np.float32)
    x[0, :32] *= 40.0        # one loud run: its neighbours' steps must stay independent
    got = cpu.numba_matmul(np.frombuffer(data, np.uint8), dtype, shape, x, 1 << 20)
    exact = x.astype(np.float64) @ w.T.astype(np.float64)
    err = np.abs(got - exact)
    bound = activation_error_bound(w, x)
    assert (err <= bound).all(), "worst excess {} at {}".format(
        (err - bound).max(), np.unravel_index((err - bound).argmax(), err.shape))
    # and the bound is not vacuous: the error is small next to the values
    assert err.max() < 1e-3 * np.abs(exact).max() + 1e-5


def synthetic(name, shape, seed=0):
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(shape).astype(np.float32)
    values[0, :8] = 0.0                        # zero runs: scale 0 paths
    values[-1] *= 1e-3                         # tiny scales (f16 subnormals in K mins)
    dtype = dtypes.BY_NAME[name]
    return dtype, quantize(values, dtype)


@pytest.mark.parametrize("name", TYPES)
def test_dequantize_rows_bit_exact_synthetic(name):
    shape = (7, 512)
    dtype, data = synthetic(name, shape)
    ref = dequantize(data, dtype, shape)
    got = cpu.dequantize(np.frombuffer(data, np.uint8), name, shape)
    assert got.dtype == np.float32 and got.shape == shape
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))
    part = cpu.dequantize(np.frombuffer(data, np.uint8), name, shape, 2, 5)
    assert np.array_equal(part, ref[2:5])


@pytest.mark.parametrize("name", TYPES)
def test_matvec_within_activation_quantization_bound(name, pool_threads):
    shape = (9, 768)
    dtype, data = synthetic(name, shape, seed=1)
    check_matvec(data, dtype, shape, np.random.default_rng(2), tokens=cpu.DOT_MAX_TOKENS)


# (40, 512): one pass over the input; (9, 2560): passes of K_CHUNK columns, the last partial
@pytest.mark.parametrize("shape", [(40, 512), (9, 2 * block_rows.K_CHUNK + 512)])
@pytest.mark.parametrize("name", TYPES)
def test_many_tokens_match_float_reference(name, shape, pool_threads):
    """Prefill: exact weights, float32 activations: only summation order differs."""
    dtype, data = synthetic(name, shape, seed=3)
    x = np.random.default_rng(4).standard_normal((cpu.DOT_MAX_TOKENS + 3, shape[1])).astype(
        np.float32)
    got = cpu.numba_matmul(np.frombuffer(data, np.uint8), dtype, shape, x, 1 << 20)
    w = dequantize(data, dtype, shape).astype(np.float64)
    exact = x.astype(np.float64) @ w.T
    scale = np.abs(x).astype(np.float64) @ np.abs(w).T
    assert (np.abs(got - exact) <= 1e-6 * scale).all(), np.abs(got - exact).max()


def test_activation_quantizer():
    """Codes are x / (amax / 32767) rounded half away from zero, per run of 32."""
    x = np.random.default_rng(5).standard_normal((3, 256)).astype(np.float32)
    x[1, 32:64] = 0.0
    x[2, :32] = np.float32(2.5) * (np.arange(32) % 3 == 0)       # halves and zeros
    xq, xd, xs = cpu.quantized_x(x)
    runs = x.reshape(3, 8, 32)
    d = np.abs(runs).max(axis=2) / np.float32(32767.0)              # [3, 8] f32
    assert np.array_equal(xd, d)
    inv = np.where(d > 0, np.float32(1.0) / np.where(d > 0, d, 1), 0).astype(np.float32)
    v = runs * inv[:, :, None]
    codes = (np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))).astype(np.int16)
    assert xq.dtype == np.int16 and np.array_equal(xq.reshape(3, 8, 32), codes)
    assert np.abs(xq).max() == 32767
    assert xs.dtype == np.float32
    assert np.array_equal(xs, d * codes.astype(np.int32).sum(axis=2).astype(np.float32))


def real_tensors(path, rows=48):
    """First `rows` rows of one 2-D tensor per supported type in the file."""
    picked = {}
    with open_model(path) as model_file:
        for name, info in model_file.tensors.items():
            if len(info.shape) == 2 and info.dtype.name in TYPES \
                    and info.dtype.name not in picked:
                raw = model_file.read_raw(name)
                n = min(rows, info.shape[0])
                row_bytes = info.dtype.nbytes((info.shape[1],))
                picked[info.dtype.name] = (name, info.dtype, (n, info.shape[1]),
                                           raw.data[:n * row_bytes])
    return picked


@pytest.mark.real_model
@pytest.mark.parametrize("model", ["smollm2_gguf", "qwen_gguf"])
def test_real_tensors(model, request):
    path = request.getfixturevalue(model)
    picked = real_tensors(path)
    expected = {"smollm2_gguf": {"Q4_1", "Q8_0"},
                "qwen_gguf": {"Q5_0", "Q8_0", "Q4_K", "Q6_K"}}[model]
    assert expected <= set(picked)
    rng = np.random.default_rng(6)
    for name, dtype, shape, data in picked.values():
        ref = dequantize(data, dtype, shape)
        got = cpu.dequantize(np.frombuffer(data, np.uint8), dtype.name, shape)
        assert np.array_equal(got, ref), name
        check_matvec(data, dtype, shape, rng)


@pytest.mark.parametrize("names", [("Q4_1", "Q4_1", "Q8_0"), ("Q5_0", "Q4_K", "Q6_K")])
@pytest.mark.parametrize("tokens", [2, cpu.DOT_MAX_TOKENS + 3])
def test_group_equals_one_by_one(names, tokens, pool_threads):
    """A group (one pool task, chunks cut across weights of unequal rows and types)
    gives each weight exactly its own matmul's result: the same row dots (decode) or
    row products (prefill), whether a worker takes chunks or the caller does them all."""
    from apr_core.model.weights import Linear
    shapes = [(37, 512), (5, 512), (70, 512)]
    parts = [synthetic(name, shape, seed=i) for i, (name, shape) in
             enumerate(zip(names, shapes))]
    linears = [Linear(dtype.name, np.frombuffer(data, np.uint8), dtype, shape)
               for (dtype, data), shape in zip(parts, shapes)]
    x = np.random.default_rng(7).standard_normal((tokens, 512)).astype(np.float32)
    assert cpu.weight_table(linears) is not None    # the fused path is the one tested
    grouped = cpu.numba_matmul_group(linears, x)
    for linear, got in zip(linears, grouped):
        want = cpu.numba_matmul(linear.data, linear.dtype, linear.shape, x, 0)
        assert np.array_equal(got, want), linear.name
