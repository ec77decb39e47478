"""The stdlib MessagePack codec (APR v1 metadata) against the `msgpack` package as oracle:
identical bytes when encoding, identical values when decoding, and refusals (never a raw
exception) where the oracle also refuses."""
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apr_core.errors import AprError
from apr_core.formats.msgpack_codec import ExtType, packb, unpackb

msgpack = pytest.importorskip("msgpack")

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-2 ** 63, 2 ** 64 - 1),
    st.floats(allow_nan=False), st.text(max_size=40), st.binary(max_size=40),
    st.sampled_from(["", "x" * 31, "x" * 32, "y" * 255, "z" * 256, "é" * 300]),
    st.sampled_from([127, 128, 255, 256, 65535, 65536, 2 ** 32 - 1, 2 ** 32, -32, -33,
                     -128, -129, -32768, -32769, -2 ** 31, -2 ** 31 - 1]))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=20), st.dictionaries(st.text(max_size=10), inner, max_size=20)),
    max_leaves=60)


def _oracle_unpack(data):
    return msgpack.unpackb(data, raw=False, strict_map_key=False,
                           ext_hook=lambda code, data: ExtType(code, data))


@settings(SETTINGS, max_examples=120)
@given(values)
def test_encoding_is_byte_identical_to_msgpack(value):
    assert packb(value) == msgpack.packb(value)
    assert unpackb(msgpack.packb(value)) == value


@SETTINGS
@given(st.integers(0, 127), st.binary(max_size=300))
def test_ext_types(code, data):
    ext = ExtType(code, data)
    assert packb(ext) == msgpack.packb(msgpack.ExtType(code, data))
    assert unpackb(packb(ext)) == ext


def test_long_containers_and_strings():
    for value in (list(range(70000)), {str(i): i for i in range(70000)}, "s" * 70000,
                  b"b" * 70000, float("inf"), -0.0):
        assert packb(value) == msgpack.packb(value)
        back = unpackb(packb(value))
        assert back == value and (not isinstance(value, float) or
                                  math.copysign(1, back) == math.copysign(1, value))
    assert unpackb(b"\xca\x3f\xc0\x00\x00") == 1.5   # float32 as written by rmp-serde


@SETTINGS
@given(st.binary(max_size=200))
def test_arbitrary_bytes_agree_with_oracle(data):
    try:
        expected = _oracle_unpack(data)
    except Exception:  # the oracle refuses: so must we, with an AprError
        with pytest.raises(AprError):
            unpackb(data)
        return
    try:
        ours = unpackb(data)
    except AprError:
        # we refuse more strictly only for nesting deeper than MAX_DEPTH
        return
    if not _has_nan(expected):
        assert ours == expected


def _has_nan(value):
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, dict):
        return any(_has_nan(k) or _has_nan(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_has_nan(v) for v in value)
    return False


def test_hostile_lengths_allocate_nothing():
    for data in (b"\xdd\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff", b"\xdb\xff\xff\xff\xff",
                 b"\xc6\xff\xff\xff\xff", b"\x91" * 100 + b"\xc0", b"\xc1", b"\xc0\xc0"):
        with pytest.raises(AprError):
            unpackb(data)
