"""Quantizers against ggml's C reference (`ggml_quantize_chunk`, no importance matrix).

Three layers of oracle, so every platform checks something real:
1. `ggml_oracle` (llama-cpp-python's libggml-base through ctypes): byte-for-byte equality on
   300 rows per type, including Inf/NaN rows. Skipped when llama-cpp-python is absent.
2. `DIGESTS`: sha256 of ggml's bytes for the 240 finite rows per type. The test that apr
   matches them runs everywhere (Python 3.8 + numpy 1.17 included); another test re-derives
   them from ggml wherever it is installed, so the table cannot go stale.
3. gguf-py (where installed): its dequantizer decodes apr's bytes exactly like apr does,
   the round-trip error stays within each type's bound, and its own numpy quantizers
   (F16, BF16 and the 32-block types) agree with apr on finite data (signed zeros aside).
Inputs come from `np.random.RandomState` (a frozen stream, identical in numpy 1.17 and 2.x).
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ggml_oracle
from apr_core import dtypes
from apr_core.errors import AprError, ErrorCode
from apr_core.quant import dequantize, quantize
from apr_core.quant.kernels.quantize_floats import (c_roundf, f32_to_f16_bits, nearest_int,
                                                    quantize_f16)

try:
    import gguf
    from gguf.quants import dequantize as gguf_dequantize
    from gguf.quants import quantize as gguf_quantize
except ImportError:  # the Python 3.8 run has no gguf-py
    gguf = None

TYPES = ("F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
         "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
QUANT_TYPES = TYPES[2:]
ROW = 512  # whole blocks of 32 and of 256
ROWS_PER_KIND = 20
FINITE_KINDS = ("normal", "uniform", "heavy_tailed", "zeros", "constant", "huge", "tiny",
                "outlier", "halves", "signed_zeros", "subnormal", "mixed_scales")
SPECIAL_KINDS = ("inf", "nan", "nan_and_inf")

needs_ggml = pytest.mark.skipif(not ggml_oracle.available(),
                                reason="ggml oracle unavailable: {}".format(
                                    ggml_oracle.unavailable_reason()))
needs_gguf = pytest.mark.skipif(gguf is None, reason="gguf-py is not installed")


def make_rows(kind: str) -> np.ndarray:
    """float32 [ROWS_PER_KIND, ROW] of one distribution, from a frozen RandomState stream."""
    kinds = FINITE_KINDS + SPECIAL_KINDS
    rng = np.random.RandomState(1000 + kinds.index(kind))
    shape = (ROWS_PER_KIND, ROW)
    normal = rng.standard_normal(shape)
    rows = np.arange(ROWS_PER_KIND)
    if kind == "normal":
        x = normal
    elif kind == "uniform":
        x = rng.uniform(-1.0, 3.0, shape)
    elif kind == "heavy_tailed":
        x = rng.standard_cauchy(shape)
    elif kind == "zeros":
        x = np.zeros(shape)
    elif kind == "constant":
        x = np.ones(shape) * rng.standard_normal((ROWS_PER_KIND, 1))
    elif kind == "huge":
        x = normal * 1e30
    elif kind == "tiny":
        x = normal * 1e-30
    elif kind == "outlier":
        x = normal * 0.01
        x[rows, rng.randint(0, ROW, ROWS_PER_KIND)] = 100.0 * rng.standard_normal(ROWS_PER_KIND)
    elif kind == "halves":  # exact .5 values: every rounding tie in the book
        x = rng.randint(-16, 17, shape) * 0.5
    elif kind == "signed_zeros":
        x = np.where(rng.rand(*shape) < 0.5, -0.0, 0.0)
        x[::2] += np.where(rng.rand(ROWS_PER_KIND // 2, ROW) < 0.1, normal[::2], 0.0)
    elif kind == "subnormal":
        x = normal * 1e-40
    elif kind == "mixed_scales":  # each 16-element run at its own scale
        x = normal * 10.0 ** rng.randint(-6, 7, (ROWS_PER_KIND, ROW // 16)).repeat(16, axis=1)
    else:
        x = normal.copy()
        for value in {"inf": (np.inf, -np.inf), "nan": (np.nan,),
                      "nan_and_inf": (np.nan, np.inf, -np.inf)}[kind]:
            spots = rng.rand(*shape) < 0.02
            spots[rows, rng.randint(0, ROW, ROWS_PER_KIND)] = True
            x[spots] = value
        x[0] = np.nan if kind != "inf" else np.inf  # one whole-row special
    return x.astype(np.float32)


def finite_rows() -> np.ndarray:
    return np.concatenate([make_rows(kind) for kind in FINITE_KINDS])  # [240, ROW]


def special_rows() -> np.ndarray:
    return np.concatenate([make_rows(kind) for kind in SPECIAL_KINDS])  # [60, ROW]


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# sha256 of ggml_quantize_chunk(finite_rows()) per type (re-derived by test_digests_match_ggml).
DIGESTS = {
    "F16": "4539705957e6c38fd2453805c5a9a643d00ffd1eeb25f997a863e710ac6c5c0e",
    "BF16": "1b1b697158c782fff02628eddbd44fe2599c467fda8dddc01fa82fa115de3cb4",
    "Q8_0": "ace8b78c9a5403c65962b39b42455c7965385d08bdae0bfbda7fdc18d3cf47ef",
    "Q4_0": "b7a7f80d0e600ab4c7f1b7b01ab28e7f2c6458c2764547e14234f0d05983a27b",
    "Q4_1": "3e03a7013bd8ed89fee92face134ca8c1053a3945d61ef0ee10957400faa87bf",
    "Q5_0": "c2b138dd4b6a0b2e4a82cc48d44df8f4f06b4db9a479e106e44797b9a7ede649",
    "Q5_1": "1ed08dd7b773aaf596dd3738fb3a0cc653f812840efd305b1a1755f18f0b3e28",
    "Q2_K": "2def83891824014fc5576c7a35657df328d3e4167561ce85d438b8bc72e41ecc",
    "Q3_K": "5a46e554dede4a6222a07c52ebac80f24664887230ce5e4d57d0691593de9eca",
    "Q4_K": "34667babcdee320014201f7cf095035e5501bb48d0caf5c2ce4aabaa7ef1549b",
    "Q5_K": "03fff036a398c4a9e1910b7f65ac7c8b9b6d28cb1231369d2f0c4ef462517c55",
    "Q6_K": "9ffc898c75787bab7863fd353e70e4f857c410cc9cc0a06985d1d740f3072ce6",
}


def _mismatch_report(ours: bytes, ref: bytes, name: str, n_rows: int, labels) -> str:
    a = np.frombuffer(ours, np.uint8).reshape(n_rows, -1)
    b = np.frombuffer(ref, np.uint8).reshape(n_rows, -1)
    bad = np.nonzero((a != b).any(axis=1))[0]
    if not len(bad):
        return ""
    first = int(bad[0])
    return "{}: {} of {} rows differ; first row {} ({}), bytes {}".format(
        name, len(bad), n_rows, first, labels[first],
        np.nonzero(a[first] != b[first])[0][:8].tolist())


@needs_ggml
@pytest.mark.oracle
@pytest.mark.parametrize("name", TYPES)
def test_byte_identical_to_ggml(name):
    kinds = FINITE_KINDS + SPECIAL_KINDS
    x = np.concatenate([make_rows(kind) for kind in kinds])  # [300, ROW]
    labels = [kind for kind in kinds for _ in range(ROWS_PER_KIND)]
    ours = quantize(x, name)
    ref = ggml_oracle.ggml_quantize(x, name)
    assert len(ours) == len(ref) == dtypes.by_name(name).nbytes(x.shape)
    assert ours == ref, _mismatch_report(ours, ref, name, x.shape[0], labels)


@needs_ggml
@pytest.mark.oracle
@pytest.mark.parametrize("name", TYPES)
def test_digests_match_ggml(name):
    assert _digest(ggml_oracle.ggml_quantize(finite_rows(), name)) == DIGESTS[name]


@pytest.mark.parametrize("name", TYPES)
def test_digests(name):
    """Runs everywhere, numpy 1.17 included: apr's bytes are ggml's (via the table)."""
    assert _digest(quantize(finite_rows(), name)) == DIGESTS[name]


@needs_ggml
@pytest.mark.oracle
def test_rows_of_several_blocks_and_odd_counts():
    """A single block, many blocks per row, and several (partial) chunks of the public API."""
    rng = np.random.RandomState(7)
    for name in QUANT_TYPES:
        block = dtypes.by_name(name).block_size
        for shape in ((1, block), (3, 5 * 256), (5, 1 << 17)):
            x = rng.standard_normal(shape).astype(np.float32)
            assert quantize(x, name) == ggml_oracle.ggml_quantize(x, name), (name, shape)


@needs_ggml
@pytest.mark.oracle
@settings(max_examples=150, deadline=None, derandomize=True)
@given(name=st.sampled_from(TYPES), data=st.data())
def test_any_float32_matches_ggml(name, data):
    """Arbitrary float32 blocks (subnormals, +-FLT_MAX, Inf, NaN, repeats) stay exact.

    NaNs are made canonical (sign kept): where two NaNs meet, x86 returns the first
    operand's payload, and which operand is first in ggml's build is the compiler's choice,
    so NaN payloads other than the default one are outside what apr reproduces.
    """
    pool = data.draw(st.lists(st.floats(width=32), min_size=1, max_size=8), label="pool")
    elements = st.one_of(st.sampled_from(pool), st.floats(width=32))
    x = data.draw(hnp.arrays(np.float32, (2, 256), elements=elements), label="x")
    x = np.where(np.isnan(x), np.copysign(np.float32(np.nan), x), x).astype(np.float32)
    assert quantize(x, name) == ggml_oracle.ggml_quantize(x, name)


# Round-trip error bound per type: RMS error / RMS value on normal data (measured, ~1.3x).
RMS_BOUND = {"F16": 2.7e-4, "BF16": 2.2e-3, "Q8_0": 7e-3, "Q6_K": 2.3e-2, "Q5_0": 5.5e-2,
             "Q5_1": 5e-2, "Q5_K": 4.7e-2, "Q4_0": 0.11, "Q4_1": 0.1, "Q4_K": 0.092,
             "Q3_K": 0.2, "Q2_K": 0.38}


@pytest.mark.parametrize("name", TYPES)
def test_round_trip_error(name):
    x = np.random.RandomState(3).standard_normal((64, ROW)).astype(np.float32)
    back = dequantize(quantize(x, name), name, x.shape)
    rel = np.sqrt(np.mean((back - x) ** 2) / np.mean(x ** 2))
    assert rel < RMS_BOUND[name], rel


@needs_gguf
@pytest.mark.oracle
@pytest.mark.parametrize("name", TYPES)
def test_gguf_py_decodes_our_bytes(name):
    x = finite_rows()
    data = np.frombuffer(quantize(x, name), np.uint8).reshape(x.shape[0], -1)
    qtype = gguf.GGMLQuantizationType[name]
    with np.errstate(all="ignore"):
        theirs = np.asarray(gguf_dequantize(data, qtype), np.float32).reshape(x.shape)
    ours = dequantize(data.tobytes(), name, x.shape)
    np.testing.assert_array_equal(ours, theirs)
    finite = np.isfinite(x).all(axis=1) & (np.abs(x).max(axis=1) < 1e4)
    rel = np.abs(theirs[finite] - x[finite]).max() / np.abs(x[finite]).max()
    assert rel < 4 * RMS_BOUND[name] + 0.05


@needs_gguf
@pytest.mark.oracle
@pytest.mark.parametrize("name", ("F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"))
def test_agrees_with_gguf_py_quantizers(name):
    """gguf-py's numpy quantizers port the same C; they part from ggml only on signed zeros
    (numpy's min/max/argmax pick either zero) and on NaN/Inf, which are left out here."""
    kinds = [kind for kind in FINITE_KINDS if kind != "signed_zeros"]
    x = np.concatenate([make_rows(kind) for kind in kinds])
    qtype = gguf.GGMLQuantizationType[name]
    with np.errstate(all="ignore"):
        theirs = np.asarray(gguf_quantize(x, qtype)).tobytes()
    assert quantize(x, name) == theirs


def test_f16_matches_numpy_round_to_nearest_even():
    """Every finite float32 bit pattern class: normals, subnormals, overflow to inf."""
    rng = np.random.RandomState(5)
    bits = rng.randint(0, 1 << 32, 1 << 16, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    x = x[np.isfinite(x)]
    with np.errstate(all="ignore"):
        expected = x.astype(np.float16)
        got = f32_to_f16_bits(x)
    np.testing.assert_array_equal(got, expected.view(np.uint16))
    nan = np.array([np.nan, -np.nan], np.float32)
    assert f32_to_f16_bits(nan).tolist() == [0x7E00, 0xFE00]


def test_helpers_follow_c():
    halves = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997], np.float32)
    assert nearest_int(halves).tolist() == [0, 2, 2, 0, -2, 0]  # ties to even
    assert c_roundf(halves).tolist() == [1, 2, 3, -1, -3, 0]  # ties away from zero


@pytest.mark.parametrize("name", QUANT_TYPES)
def test_partial_block_is_format_error(name):
    block = dtypes.by_name(name).block_size
    with pytest.raises(AprError) as info:
        quantize(np.zeros((2, block + 1), np.float32), name)
    assert info.value.code is ErrorCode.FORMAT


def test_kernel_rejects_wrong_block_width():
    with pytest.raises(AprError) as info:
        quantize_f16(np.zeros((4, 2), np.float32))
    assert info.value.code is ErrorCode.FORMAT
