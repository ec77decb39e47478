"""apr_native.speech_kernels (the numba kernels native Whisper plugs into WhisperNet's
seams) against float64 references and apr_core's numpy path they replace."""
from __future__ import annotations

import numpy as np
import pytest

from apr_core.speech import whisper_math, whisper_net

pytestmark = pytest.mark.native

numba = pytest.importorskip("numba")


@pytest.fixture(scope="module")
def kernels():
    from apr_native import speech_kernels
    return speech_kernels


def _reference_attention(q, k, v):
    """float64 softmax(q k^T) v of one head, q already scaled."""
    scores = q.astype(np.float64) @ k.astype(np.float64).T
    scores -= scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights @ v.astype(np.float64)


def test_exp_within_an_ulp_or_two_of_float64(kernels):
    from numba import njit
    exp = kernels.exp_f32

    @njit
    def run(x, out):
        for i in range(x.shape[0]):
            out[i] = exp(x[i])
    x = np.linspace(-80.0, 80.0, 200001).astype(np.float32)
    out = np.empty_like(x)
    run(x, out)
    want = np.exp(x.astype(np.float64))
    assert np.all(np.abs(out - want) <= 2.5e-7 * want)


def test_softmax_rows_is_the_softmax(kernels):
    rng = np.random.default_rng(1)
    scores = (rng.standard_normal((70, 1500)) * 4).astype(np.float32)
    scores[3, 7] = -np.inf            # a masked score: exp clamps at -87, 1.6e-38 (not 0)
    # float64 exp of the float32 differences (what float32 softmax can get right: the
    # difference itself rounds to ~|x - max| * 6e-8)
    want = np.exp((scores - scores.max(axis=-1, keepdims=True)).astype(np.float64))
    sums = np.empty(70, np.float32)
    kernels.softmax_rows(scores, sums)
    assert 0.0 <= scores[3, 7] < 2e-38
    np.testing.assert_allclose(scores, want, rtol=3e-7, atol=1e-30)
    np.testing.assert_allclose(sums, want.sum(axis=-1), rtol=1e-5)


@pytest.mark.parametrize("rows", [1, 63, 64, 200, 1500])
def test_encoder_head_equals_attention(kernels, rows):
    rng = np.random.default_rng(rows)
    q = (rng.standard_normal((rows, 64)) * 0.4).astype(np.float32)
    k = (rng.standard_normal((1500, 64)) * 3).astype(np.float32)
    v = rng.standard_normal((1500, 64)).astype(np.float32)
    got = kernels.encoder_head(q, k, v)
    np.testing.assert_allclose(got, _reference_attention(q, k, v), atol=2e-5)
    # the numpy head it replaces (WhisperNet.attention on one head, unscaled q)
    numpy_path = whisper_net.attention(q[None] * 8, k[None], v[None])[0]
    np.testing.assert_allclose(got, numpy_path, atol=2e-5)


def test_encoder_head_through_the_attention_seam(kernels):
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, 8, 1500, 64)).astype(np.float32) for _ in range(3))
    plain = whisper_net.attention(q, k, v)
    seamed = whisper_net.attention(q, k, v, head_fn=kernels.encoder_head)
    np.testing.assert_allclose(seamed, plain, atol=3e-5)


@pytest.mark.parametrize("beams,tokens", [(1, 1), (5, 1), (1, 7)])
def test_cross_attention_equals_float64_and_numpy(kernels, beams, tokens):
    rng = np.random.default_rng(beams * 10 + tokens)
    heads, dh, frames = 8, 64, 1500
    q = rng.standard_normal((beams, tokens, heads, dh)).astype(np.float32)
    keys_t = (rng.standard_normal((heads, dh, frames)) * 2).astype(np.float32)
    values = rng.standard_normal((heads, frames, dh)).astype(np.float32)
    got = kernels.cross_attention(q, keys_t, values)
    assert got.shape == (beams, tokens, heads * dh) and got.dtype == np.float32
    rows = q.reshape(-1, heads, dh) / 8.0
    want = np.stack([np.concatenate([_reference_attention(r[h:h + 1], keys_t[h].T, values[h])[0]
                                     for h in range(heads)]) for r in rows])
    np.testing.assert_allclose(got.reshape(-1, heads * dh), want, atol=2e-6)
    np.testing.assert_allclose(got, whisper_net._cross_attention(q, keys_t, values), atol=1e-3)


def test_cross_attention_reads_float16_keys_and_values(kernels):
    """K^T / V held as float16 bits (`half_cross`) give the float32 kernel's result on the
    float16-rounded K / V exactly as computed in float64, and stay near the float32 one."""
    rng = np.random.default_rng(11)
    heads, dh, frames = 8, 64, 1500
    q = rng.standard_normal((5, 1, heads, dh)).astype(np.float32)
    keys_t = (rng.standard_normal((heads, dh, frames)) * 2).astype(np.float32)
    values = rng.standard_normal((heads, frames, dh)).astype(np.float32)
    half_k, half_v = kernels.half_cross(keys_t, values)
    assert half_k.dtype == np.uint16 and half_k.shape == keys_t.shape
    got = kernels.cross_attention(q, half_k, half_v)
    rounded = kernels.cross_attention(q, half_k.view(np.float16).astype(np.float32),
                                      half_v.view(np.float16).astype(np.float32))
    np.testing.assert_allclose(got, rounded, atol=1e-6)
    np.testing.assert_allclose(got, kernels.cross_attention(q, keys_t, values), atol=5e-3)


def test_gelu_equals_whisper_math(kernels):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((300, 2048)) * 4).astype(np.float32)
    x[0, :4] = (0.0, -0.0, 30.0, -30.0)
    got = kernels.gelu(x)
    assert got.shape == x.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, whisper_math.gelu(x), atol=1e-6, rtol=1e-6)
    from math import erf
    exact = np.array([0.5 * v * (1 + erf(v / 2 ** 0.5)) for v in x[:2].reshape(-1).tolist()])
    np.testing.assert_allclose(got[:2].reshape(-1), exact, atol=2e-6, rtol=1e-6)


def test_claiming_map_keeps_order_and_raises():
    """speech_native.ClaimingMap: results in item order whoever ran them, errors re-raised
    in the caller, and a map of one item or none runs on the caller alone."""
    import threading
    from apr_native.speech_native import ClaimingMap
    claiming = ClaimingMap(1)
    try:
        seen = set()

        def square(i):
            seen.add(threading.get_ident())
            return i * i
        assert claiming(square, range(50)) == [i * i for i in range(50)]
        assert claiming(square, []) == [] and claiming(square, [3]) == [9]

        def fail(i):
            if i == 7:
                raise ValueError("seven")
            return i
        with pytest.raises(ValueError, match="seven"):
            claiming(fail, range(20))
        assert claiming(square, range(5)) == [0, 1, 4, 9, 16]      # still usable
    finally:
        claiming.shutdown()


@pytest.mark.parametrize("rows", [1, 5])
def test_half_linear_equals_float32_product(kernels, rows):
    """HalfLinear (an F16 file's decoder projection read as float16) against numpy's float32
    product of the same float16 values, split over a claiming map or not."""
    from apr_native.speech_native import ClaimingMap
    rng = np.random.default_rng(rows)
    weight = (rng.standard_normal((4099, 512)) * 0.05).astype(np.float16)
    bias = rng.standard_normal(4099).astype(np.float32)
    x = rng.standard_normal((rows, 512)).astype(np.float32)
    want = x.astype(np.float64) @ weight.astype(np.float64).T + bias
    claiming = ClaimingMap(1)
    try:
        for linear in (kernels.HalfLinear("w", weight, bias),
                       kernels.HalfLinear("w", weight, bias, claiming, 7)):
            linear.SPLIT_WEIGHTS = 1             # split even this small weight
            linear.pieces = 7 if linear.map_fn is not None else 1
            got = linear.matmul(x)
            assert got.shape == (rows, 4099) and got.dtype == np.float32
            np.testing.assert_allclose(got, want, atol=2e-5)
    finally:
        claiming.shutdown()
    rows_back = kernels.HalfLinear("w", weight).rows(np.array([[3, 0]]))
    np.testing.assert_array_equal(rows_back, weight[[3, 0]].astype(np.float32))


def test_half_decoder_takes_only_float16_valued_decoder_weights():
    from types import SimpleNamespace
    from apr_native.speech_native import half_decoder
    rng = np.random.default_rng(2)
    f16 = rng.standard_normal((8, 4)).astype(np.float16).astype(np.float32)
    f32 = rng.standard_normal((8, 4)).astype(np.float32)        # not float16 values
    net = SimpleNamespace(linears={}, w={
        "decoder.blocks.0.mlp.fc1.weight": f16, "decoder.blocks.0.mlp.fc1.bias": f32[:, 0],
        "decoder.blocks.0.mlp.fc2.weight": f32,
        "decoder.token_embedding.weight": f16,
        "decoder.positional_embedding": f16,
        "encoder.blocks.0.mlp.fc1.weight": f16,
        "decoder.blocks.0.cross_attn.kv.weight": f16})
    done = half_decoder(net, None, 1)
    assert done == ["decoder.blocks.0.mlp.fc1", "decoder.token_embedding"]
    assert "decoder.blocks.0.mlp.fc1.weight" not in net.w
    assert "decoder.blocks.0.mlp.fc2.weight" in net.w                # F32 values stay
    assert "encoder.blocks.0.mlp.fc1.weight" in net.w                # BLAS over 1500 rows
    assert "decoder.blocks.0.cross_attn.kv.weight" in net.w
    x = rng.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(net.linears["decoder.blocks.0.mlp.fc1"].matmul(x),
                               x @ f16.T + f32[:, 0], atol=1e-5)
