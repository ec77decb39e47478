"""Dequantization against gguf-py (llama.cpp's own numpy port of ggml, the oracle) and exact
expectations for the types gguf-py does not decode.

Bit-identical means identical float32 bit patterns (-0.0 and NaN payloads included): blocks
with finite random f16 scales compare bit for bit; raw random bytes (inf/NaN scales arise)
compare NaN-aware. Types gguf-py lacks get independent oracles: a per-element reference
for Q8_K/Q8_1, exact round-to-nearest-even from Python ints for the integer types, and
FP8 decoded from the OCP bit layout. Real models: every tensor of SmolLM2 (Q4_1/Q8_0/F32)
and Qwen2.5-Coder-0.5B (Q4_K/Q5_0/Q6_K/Q8_0/F32), read by apr's GGUF reader, decoded by
apr and by gguf-py. Where gguf-py is absent (Python 3.8 + numpy 1.17) the direct oracle
tests skip, and a table of gguf-py output digests (re-derived from gguf-py wherever it is
installed) still checks the kernels bit for bit.
"""
from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

from apr_core import dtypes
from apr_core.errors import AprError, ErrorCode
from apr_core.quant.api import reference_kernel
from apr_core.quant import (api, dequantize, dequantize_raw, dequantize_rows, quantize, registry,
                            supported_types)
from apr_core.tensor import RawTensor

try:
    import gguf
    from gguf.quants import dequantize as gguf_dequantize
except ImportError:  # Python 3.8 run: no gguf-py there
    gguf = None

needs_gguf = pytest.mark.skipif(gguf is None, reason="gguf-py (the oracle) is not installed")

# Types this issue must decode; the rest of the table may be UNSUPPORTED.
REQUIRED = ("F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I8", "I16", "I32", "I64", "U8", "F64",
            "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1",
            "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ4_NL", "IQ4_XS")

# Test-side table of each block type's float scale fields (offset, numpy dtype), so that
# "finite" samples can put ordinary numbers there. MXFP4's E8M0 byte is handled apart.
SCALE_FIELDS = {
    "Q4_0": [(0, "<f2")], "Q4_1": [(0, "<f2"), (2, "<f2")], "Q5_0": [(0, "<f2")],
    "Q5_1": [(0, "<f2"), (2, "<f2")], "Q8_0": [(0, "<f2")], "Q8_1": [(0, "<f4"), (4, "<f4")],
    "Q2_K": [(80, "<f2"), (82, "<f2")], "Q3_K": [(108, "<f2")], "Q4_K": [(0, "<f2"), (2, "<f2")],
    "Q5_K": [(0, "<f2"), (2, "<f2")], "Q6_K": [(208, "<f2")], "Q8_K": [(0, "<f4")],
    "IQ4_NL": [(0, "<f2")], "IQ4_XS": [(0, "<f2")], "TQ1_0": [(52, "<f2")],
    "TQ2_0": [(64, "<f2")], "F16": [(0, "<f2")], "BF16": [], "F32": [(0, "<f4")],
    "IQ2_XXS": [(0, "<f2")], "IQ2_XS": [(0, "<f2")], "IQ2_S": [(0, "<f2")],
    "IQ3_XXS": [(0, "<f2")], "IQ3_S": [(0, "<f2")], "IQ1_S": [(0, "<f2")],
}


def _gguf_types():
    """Supported types gguf-py can decode too (probed, not assumed)."""
    if gguf is None:
        return []
    names = []
    for name in supported_types():
        row = dtypes.by_name(name)
        try:
            qtype = gguf.GGMLQuantizationType(row.gguf_id)
            gguf_dequantize(np.zeros((1, row.type_size), np.uint8), qtype)
        except (TypeError, ValueError, NotImplementedError):
            continue
        names.append(name)
    return names


GGUF_TYPES = _gguf_types()


def sample(name, n_blocks, seed, finite=True):
    """`[n_blocks, type_size]` random block bytes; scale fields finite when asked."""
    row = dtypes.by_name(name)
    rng = np.random.RandomState(seed)
    blocks = rng.randint(0, 256, (n_blocks, row.type_size)).astype(np.uint8)
    if not finite:
        return blocks
    if name == "MXFP4":
        blocks[:, 0] %= 250  # E8M0 exponents whose products stay finite
    if name == "IQ1_M":  # its f16 scale is the top nibbles of its 4 u16 words, lowest first
        words = blocks[:, 48:56].copy().view("<u2")
        words &= np.uint16(0x0FFF)
        d = rng.standard_normal(n_blocks).astype("<f2").view("<u2")
        nibbles = (d[:, None] >> np.array([0, 4, 8, 12], np.uint16)) & np.uint16(15)
        words |= nibbles << np.uint16(12)
        blocks[:, 48:56] = words.view(np.uint8)
    for offset, kind in SCALE_FIELDS.get(name, []):
        values = (rng.standard_normal(n_blocks) * 10.0 ** rng.randint(-6, 3, n_blocks))
        values[:4] = [0.0, -0.0, 6e-8, -65504.0][:min(4, n_blocks)]  # zero signs, extremes
        size = np.dtype(kind).itemsize
        raw = values.astype(kind).view(np.uint8).reshape(n_blocks, size)
        blocks[:, offset:offset + size] = raw
    if name == "BF16":  # keep the exponent below all-ones
        blocks[:, 1] &= 0xBF
    return blocks


def oracle(blocks, name, rows):
    """gguf-py's dequantization of `blocks` laid out as `rows` rows."""
    qtype = gguf.GGMLQuantizationType(dtypes.by_name(name).gguf_id)
    with np.errstate(all="ignore"):
        return np.asarray(gguf_dequantize(blocks.reshape(rows, -1), qtype), dtype=np.float32)


def assert_same_bits(ours, ref):
    assert ours.dtype == np.float32 and ours.shape == ref.shape
    assert np.array_equal(np.ascontiguousarray(ours).view(np.uint32),
                          np.ascontiguousarray(ref).view(np.uint32))


def assert_same_values(ours, ref):
    """NaN-aware: NaN in the same places, every other value with identical bits."""
    assert ours.dtype == np.float32 and ours.shape == ref.shape
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(ours), nan)
    assert np.array_equal(ours[~nan].view(np.uint32), ref[~nan].view(np.uint32))


def error_of(fn, *args):
    """The AprError `fn(*args)` raises."""
    with pytest.raises(AprError) as err:
        fn(*args)
    return err.value


def _n_blocks(name, shape):
    row = dtypes.by_name(name)
    return row.nbytes(shape) // row.type_size


# --------------------------------------------------------------------------- oracle: gguf-py

@pytest.mark.oracle
@needs_gguf
@pytest.mark.parametrize("name", GGUF_TYPES)
@pytest.mark.parametrize("shape", [(1, 256), (3, 1280), (7, 40960)])
def test_matches_gguf_py_with_finite_scales(name, shape):
    """The largest shape spans several kernel chunks with a partial last one."""
    blocks = sample(name, _n_blocks(name, shape), seed=shape[0])
    ref = oracle(blocks, name, shape[0])
    assert np.isfinite(ref).all()
    assert_same_bits(dequantize(blocks.tobytes(), name, shape), ref)


@pytest.mark.oracle
@needs_gguf
@pytest.mark.parametrize("name", GGUF_TYPES)
def test_matches_gguf_py_on_raw_random_bytes(name):
    """inf/NaN scales give inf/NaN outputs exactly where ggml's do."""
    blocks = sample(name, _n_blocks(name, (4, 4096)), seed=7, finite=False)
    assert_same_values(dequantize(blocks, name, (4, 4096)), oracle(blocks, name, 4))


# gguf-py's outputs for fixed samples, as sha256 prefixes, so that runs without gguf-py
# (Python 3.8 + numpy 1.17, the browser's numpy) are still checked against the oracle bit
# for bit. The first test below re-derives every digest from gguf-py, so the table cannot
# go stale silently. Digest of (finite-scale, raw random bytes) outputs, seed 21, (3, 4096).
ORACLE_DIGESTS = {
    "BF16": "0c6ae678bfe93914", "F16": "f2c960bf04ef9c46", "F32": "d9ba56afbc5f9446",
    "IQ4_NL": "1991d9cf1558b332", "IQ4_XS": "3467472840a12344", "MXFP4": "19e0f41dbc700de0",
    "Q2_K": "c39aa1a78f82da7b", "Q3_K": "43b9dc4c168b9899", "Q4_0": "d14a37d5e71bee3b",
    "Q4_1": "81d33449b057396a", "Q4_K": "31bbe74b31019c7d", "Q5_0": "e920ff9e1c8e8087",
    "Q5_1": "9e11fb481787e5a0", "Q5_K": "1e87a6f9dbc15c22", "Q6_K": "5188eba4a6d4baf0",
    "Q8_0": "cac87a7fed2c6beb", "TQ1_0": "11a38848a14734f6", "TQ2_0": "8792550f326f6e54",
    "IQ2_XXS": "2c1481e3ad615ada", "IQ2_XS": "94c4e76d6e300775", "IQ2_S": "a1c201d8e31356de",
    "IQ3_XXS": "e7c9d416b7748566", "IQ3_S": "a044480b482cfd86", "IQ1_S": "0d36ae7df69bd98f",
    "IQ1_M": "33bdfc989b497621", "NVFP4": "de319a09731ea2d8",
}


def _digest(arrays):
    """sha256 prefix of the float32 bytes of `arrays` (finite-scale sample, raw sample)."""
    digest = hashlib.sha256()
    for values in arrays:
        digest.update(np.ascontiguousarray(values, dtype=np.float32).tobytes())
    return digest.hexdigest()[:16]


def _digest_sample(name, finite):
    return sample(name, _n_blocks(name, (3, 4096)), seed=21, finite=finite)


@pytest.mark.oracle
@needs_gguf
def test_oracle_digest_table_is_gguf_py():
    assert set(ORACLE_DIGESTS) == set(GGUF_TYPES)  # every type gguf-py decodes is covered
    for name, digest in ORACLE_DIGESTS.items():
        assert _digest([oracle(_digest_sample(name, finite), name, 3)
                        for finite in (True, False)]) == digest, name


@pytest.mark.parametrize("name", sorted(ORACLE_DIGESTS))
def test_matches_gguf_py_digests(name):
    """Runs on every Python/numpy, gguf-py installed or not."""
    assert _digest([dequantize(_digest_sample(name, finite), name, (3, 4096))
                    for finite in (True, False)]) == ORACLE_DIGESTS[name]


# --------------------------------------------------------------------------- other oracles

def _reference_scaled_int8(d, codes):
    """Per-element float32 `d * q` (the definition in ggml's dequantize_row_q8_K)."""
    out = np.empty(codes.shape, np.float32)
    for b in range(codes.shape[0]):
        for i in range(codes.shape[1]):
            out[b, i] = np.float32(d[b]) * np.float32(int(codes[b, i]))
    return out


@pytest.mark.parametrize("name, codes_at", [("Q8_K", 4), ("Q8_1", 8)])
def test_q8_k_and_q8_1_match_per_element_reference(name, codes_at):
    """Both have an f32 `d` first (Q8_1 in the 40-byte layout of the dtype table)."""
    row = dtypes.by_name(name)
    blocks = sample(name, 6, seed=3)
    d = blocks[:, 0:4].copy().view("<f4").reshape(-1)
    codes = blocks[:, codes_at:codes_at + row.block_size].view(np.int8)
    ours = dequantize(blocks.tobytes(), name, (2, 3 * row.block_size))
    assert_same_bits(ours.reshape(6, -1), _reference_scaled_int8(d, codes))


def test_q8_1_kernel_reads_the_36_byte_ggml_layout_too():
    """ggml's current block_q8_1 is f16 d, f16 s, 32 codes; the kernel tells by the width."""
    rng = np.random.RandomState(5)
    blocks = rng.randint(0, 256, (5, 36)).astype(np.uint8)
    blocks[:, 0:2] = np.array([0.5, -3.25, 1e-3, 0.0, 7.0], "<f2").view(np.uint8).reshape(5, 2)
    ours = reference_kernel("dequantize", "Q8_1")(blocks)
    d = blocks[:, 0:2].copy().view("<f2").reshape(-1).astype(np.float32)
    assert_same_bits(ours, _reference_scaled_int8(d, blocks[:, 4:36].view(np.int8)))


def _round_to_f32(value):
    """Exact round-half-to-even of a Python int to float32, by integer arithmetic."""
    if value == 0:
        return np.float32(0.0)
    magnitude = abs(value)
    shift = magnitude.bit_length() - 24
    if shift > 0:
        quotient, rest = divmod(magnitude, 1 << shift)
        half = 1 << (shift - 1)
        if rest > half or (rest == half and quotient & 1):
            quotient += 1
        magnitude = quotient << shift
    return np.float32(math.copysign(float(magnitude), value))


@pytest.mark.parametrize("name, numpy_dtype", [
    ("I8", "i1"), ("I16", "<i2"), ("I32", "<i4"), ("I64", "<i8"), ("U8", "u1"), ("U16", "<u2"),
    ("U32", "<u4"), ("U64", "<u8")])
def test_integers_round_to_nearest_even(name, numpy_dtype):
    info = np.iinfo(numpy_dtype)
    rng = np.random.RandomState(11)
    values = [int(v) for v in rng.randint(0, 256, 64 * info.bits // 8).astype(np.uint8)
              .view(numpy_dtype)]
    values += [info.min, info.max, 0, 1, (1 << 24) + 1, (1 << 25) + 3]
    values = [v for v in values if info.min <= v <= info.max]
    data = np.array(values, dtype=numpy_dtype)
    ours = dequantize(data.tobytes(), name, (len(values),))
    expected = np.array([_round_to_f32(v) for v in values], dtype=np.float32)
    assert_same_bits(ours, expected)


def test_f64_and_bool():
    # the midpoint between FLT_MAX (odd mantissa) and 2**128 rounds to even: inf; just
    # below it: FLT_MAX.
    midpoint = 3.4028235677973366e38
    values = np.array([0.1, -0.0, 1e39, -1e-46, np.inf, midpoint, np.nextafter(midpoint, 0),
                       2.0 ** -149], dtype="<f8")
    ours = dequantize(values.tobytes(), "F64", (values.size,))
    flt_max = np.finfo(np.float32).max
    expected = np.array([np.float32(0.1), -0.0, np.inf, -0.0, np.inf, np.inf, flt_max,
                         np.float32(2.0 ** -149)], dtype=np.float32)
    assert_same_bits(ours, expected)
    assert_same_bits(dequantize(b"\x00\x01\x01\x00", "BOOL", (2, 2)),
                     np.array([[0, 1], [1, 0]], np.float32))


def _fp8_reference(code, exp_bits, finite_only):
    """OCP FP8 decoded from its bits: sign, `exp_bits` exponent, the rest mantissa."""
    man_bits = 7 - exp_bits
    bias = (1 << (exp_bits - 1)) - 1
    sign = -1.0 if code & 0x80 else 1.0
    exponent = (code >> man_bits) & ((1 << exp_bits) - 1)
    mantissa = code & ((1 << man_bits) - 1)
    if finite_only and exponent == (1 << exp_bits) - 1 and mantissa == (1 << man_bits) - 1:
        return math.nan
    if not finite_only and exponent == (1 << exp_bits) - 1:
        return math.nan if mantissa else sign * math.inf
    if exponent == 0:
        return sign * math.ldexp(mantissa, 1 - bias - man_bits)
    return sign * math.ldexp((1 << man_bits) + mantissa, exponent - bias - man_bits)


@pytest.mark.parametrize("name, exp_bits, finite_only", [("F8_E4M3", 4, True),
                                                        ("F8_E5M2", 5, False)])
def test_fp8_every_code(name, exp_bits, finite_only):
    ours = dequantize(bytes(range(256)), name, (16, 16)).reshape(-1)
    expected = np.array([_fp8_reference(c, exp_bits, finite_only) for c in range(256)],
                        dtype=np.float32)
    assert_same_values(ours, expected)  # bits of every non-NaN code, signed zeros included
    if finite_only:
        assert ours[0x7E] == 448.0 and np.isnan(ours[0x7F]) and np.isnan(ours[0xFF])


# --------------------------------------------------------------------------- API contract

def test_required_types_are_supported():
    assert set(REQUIRED) <= set(supported_types())


def test_unimplemented_types_are_unsupported_and_named(monkeypatch):
    supported_types("dequantize")  # loads the kernels before one is taken away
    monkeypatch.delitem(registry._KERNELS, ("dequantize", "IQ2_XXS"))
    missing = [row.name for row in dtypes.ALL if row.name not in supported_types()]
    assert missing == ["IQ2_XXS"]
    for name in missing:
        row = dtypes.by_name(name)
        err = error_of(dequantize, bytes(row.type_size), name, (row.block_size,))
        assert err.code is ErrorCode.UNSUPPORTED and name in str(err)


def test_partial_blocks_are_a_format_error():
    assert error_of(dequantize, bytes(18), "Q4_0", (2, 16)).code is ErrorCode.FORMAT
    assert error_of(dequantize, b"", "Q4_K", ()).code is ErrorCode.FORMAT


@pytest.mark.parametrize("size", [0, 17, 19, 36])
def test_wrong_data_size_is_corrupt(size):
    err = error_of(dequantize, bytes(size), "Q4_0", (1, 32))
    assert err.code is ErrorCode.CORRUPT
    assert err.context["expected"] == 18 and err.context["got"] == size


@pytest.mark.parametrize("shape", [(-32,), (2.5, 32), "abc", None])
def test_bad_shapes_are_argument_errors(shape):
    assert error_of(dequantize, bytes(18), "Q4_0", shape).code is ErrorCode.ARGUMENT


def test_bad_data_and_dtype_arguments():
    assert error_of(dequantize, [1, 2, 3], "U8", (3,)).code is ErrorCode.ARGUMENT
    assert error_of(dequantize, np.array([None]), "U8", (1,)).code is ErrorCode.ARGUMENT
    assert error_of(dequantize, b"\x00", "Q9_Z", (1,)).code is ErrorCode.UNSUPPORTED
    assert error_of(dequantize, b"\x00", 7, (1,)).code is ErrorCode.ARGUMENT


def test_input_forms_agree():
    """bytes, bytearray, memoryview, uint8 arrays (also non-contiguous) and DType rows."""
    blocks = sample("Q5_1", 8, seed=1)
    expected = dequantize(blocks.tobytes(), "Q5_1", (2, 128))
    padded = np.zeros((8, 30), np.uint8)
    padded[:, :24] = blocks
    for data in (bytearray(blocks.tobytes()), memoryview(blocks.tobytes()), blocks,
                 blocks.reshape(-1), padded[:, :24]):
        assert_same_bits(dequantize(data, dtypes.by_name("Q5_1"), (2, 128)), expected)
    raw = RawTensor("w", dtypes.by_name("Q5_1"), (2, 128), blocks.tobytes())
    assert_same_bits(dequantize_raw(raw), expected)
    assert_same_bits(dequantize(blocks, "q5_1", np.array([2, 128])), expected)


def test_f32_is_a_view_and_other_types_are_fresh():
    values = np.arange(12, dtype=np.float32)
    ours = dequantize(values, "F32", (3, 4))
    assert np.shares_memory(ours, values) and np.array_equal(ours.reshape(-1), values)
    blocks = sample("Q8_0", 2, seed=2)
    assert not np.shares_memory(dequantize(blocks, "Q8_0", (64,)), blocks)


@pytest.mark.parametrize("name, shape", [("Q4_0", (0, 32)), ("Q4_K", (3, 0)), ("F16", (0,)),
                                         ("Q6_K", (2, 0, 256))])
def test_empty_tensors(name, shape):
    ours = dequantize(b"", name, shape)
    assert ours.shape == shape and ours.dtype == np.float32


def test_scalar_of_a_plain_type():
    assert dequantize(np.float16(1.5).tobytes(), "F16", ()) == np.float32(1.5)


@pytest.mark.parametrize("name", ["Q4_K", "Q8_0", "IQ4_NL", "F16", "BF16"])
def test_kernels_without_out_support_are_chunked_by_copy(name, monkeypatch):
    """A registered kernel that only has the registry's `kernel(blocks)` form still works."""
    row = dtypes.by_name(name)
    shape = (5, 2 * api.CHUNK_ELEMENTS // 4)
    blocks = sample(name, row.nbytes(shape) // row.type_size, seed=4)
    expected = dequantize(blocks, name, shape)
    kernel = reference_kernel("dequantize", name)
    calls = []

    def plain(chunk):
        calls.append(chunk.shape[0])
        return kernel(chunk)

    monkeypatch.setitem(registry._KERNELS, ("dequantize", name), {"numpy": plain})
    assert_same_bits(dequantize(blocks, name, shape), expected)
    assert len(calls) > 1 and max(calls) * row.block_size <= api.CHUNK_ELEMENTS


# --------------------------------------------------------------------------- dequantize_rows

@pytest.mark.parametrize("name", ["Q4_0", "Q6_K", "IQ4_XS", "F16", "Q5_0"])
def test_rows_equal_the_slice_of_the_whole(name):
    row = dtypes.by_name(name)
    shape = (3, 47, 4 * 256)      # 141 rows; the whole spans several kernel chunks
    data = sample(name, row.nbytes(shape) // row.type_size, seed=9).tobytes()
    whole = dequantize(data, name, shape).reshape(-1, shape[-1])
    for start, stop in [(0, 0), (0, 141), (5, 6), (17, 140), (140, 141), (64, 128)]:
        part = dequantize_rows(memoryview(data), name, shape, start, stop)
        assert part.shape == (stop - start, shape[-1])
        assert_same_bits(part, whole[start:stop])


def test_rows_of_one_dimensional_and_bad_ranges():
    data = sample("Q8_0", 4, seed=1).tobytes()
    assert_same_bits(dequantize_rows(data, "Q8_0", (128,), 0, 1),
                     dequantize(data, "Q8_0", (1, 128)))
    for start, stop in [(1, 0), (0, 2), (-1, 1), (0.5, 1)]:
        err = error_of(dequantize_rows, data, "Q8_0", (128,), start, stop)
        assert err.code is ErrorCode.ARGUMENT
    assert error_of(dequantize_rows, data[:-1], "Q8_0", (128,), 0, 1).code is ErrorCode.CORRUPT


@pytest.mark.parametrize("name", ["Q4_0", "Q6_K", "IQ4_XS", "F16", "Q5_0", "F32"])
def test_rows_into_a_reused_buffer_equal_fresh_rows(name):
    row = dtypes.by_name(name)
    shape = (141, 4 * 256)        # the largest range spans several kernel chunks
    data = sample(name, row.nbytes(shape) // row.type_size, seed=11).tobytes()
    buffer = np.full(141 * shape[-1], np.nan, np.float32)
    for start, stop in [(0, 141), (5, 6), (17, 140), (0, 0)]:
        out = buffer[:(stop - start) * shape[-1]]
        got = dequantize_rows(data, name, shape, start, stop, out=out)
        assert got.shape == (stop - start, shape[-1]) and np.shares_memory(got, buffer) \
            or stop == start
        assert_same_bits(got, dequantize_rows(data, name, shape, start, stop))
    for bad in [np.empty(2 * shape[-1], np.float64), np.empty(3 * shape[-1], np.float32),
                np.empty((2 * shape[-1], 2), np.float32)[:, 0]]:
        with pytest.raises(AprError) as err:
            dequantize_rows(data, name, shape, 0, 2, out=bad)
        assert err.value.code is ErrorCode.ARGUMENT


# --------------------------------------------------------------------------- quantize wrapper

def test_quantize_wrapper_blocks_chunks_and_joins(monkeypatch):
    seen = []

    def fake(values):
        seen.append(values.shape)
        assert values.dtype == np.float32
        # one byte per block: the block's first value, then padding to the type size
        out = np.zeros((values.shape[0], 18), np.uint8)
        out[:, 0] = values[:, 0].astype(np.uint8)
        return out

    monkeypatch.setitem(registry._KERNELS, ("quantize", "Q4_0"), {"numpy": fake})
    n_blocks = 2 * api.CHUNK_ELEMENTS // 32 + 4
    values = np.repeat(np.arange(n_blocks) % 200, 32).astype(np.float64).reshape(-1, 64)
    out = quantize(values, "Q4_0")
    assert len(out) == n_blocks * 18 and len(seen) == 3
    assert all(shape[1] == 32 and shape[0] * 32 <= api.CHUNK_ELEMENTS for shape in seen)
    assert list(np.frombuffer(out, np.uint8)[::18]) == list(np.arange(n_blocks) % 200)
    assert quantize(np.zeros((0, 32)), "Q4_0") == b""


def test_quantize_errors(monkeypatch):
    assert error_of(quantize, np.zeros(48, np.float32), "Q4_0").code is ErrorCode.FORMAT
    err = error_of(quantize, np.zeros(256, np.float32), "IQ2_XXS")
    assert err.code is ErrorCode.UNSUPPORTED and "IQ2_XXS" in str(err)
    monkeypatch.setitem(registry._KERNELS, ("quantize", "Q4_0"),
                        {"numpy": lambda values: np.zeros((1, 5), np.uint8)})
    assert error_of(quantize, np.zeros(64, np.float32), "Q4_0").code is ErrorCode.VALIDATION


# --------------------------------------------------------------------------- real models

ROW_CHUNK_ELEMENTS = 1 << 23   # compare big tensors in bounded slices


def _assert_model_matches_gguf_py(path):
    """Every tensor, read by apr's GGUF reader (its own tests check it against gguf-py's),
    decoded by apr and by gguf-py in bounded row slices; returns the dtypes seen."""
    from apr_core.formats.gguf import read_gguf

    checked = set()
    with read_gguf(path) as model:
        for name, info in model.tensors.items():
            raw = model.read_raw(name)
            qtype = gguf.GGMLQuantizationType(info.dtype.gguf_id)
            n_rows = info.n_elements // info.shape[-1]
            rows = np.frombuffer(raw.data, np.uint8).reshape(n_rows, -1)
            step = max(1, ROW_CHUNK_ELEMENTS // info.shape[-1])
            for start in range(0, n_rows, step):
                stop = min(n_rows, start + step)
                ours = dequantize_rows(raw.data, info.dtype, info.shape, start, stop)
                ref = np.asarray(gguf_dequantize(rows[start:stop], qtype), np.float32)
                assert_same_bits(ours, ref.reshape(ours.shape))
            checked.add(info.dtype.name)
    return checked


@needs_gguf
@pytest.mark.real_model
@pytest.mark.oracle
def test_every_tensor_of_smollm2_matches_gguf_py(smollm2_gguf):
    assert _assert_model_matches_gguf_py(smollm2_gguf) == {"F32", "Q4_1", "Q8_0"}


@needs_gguf
@pytest.mark.real_model
@pytest.mark.oracle
def test_every_tensor_of_qwen_matches_gguf_py(qwen_gguf):
    checked = _assert_model_matches_gguf_py(qwen_gguf)
    assert {"Q4_K", "Q5_0", "Q6_K", "Q8_0", "F32"} <= checked
