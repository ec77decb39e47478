"""Hypothesis fuzzing of the APR v1 reader and the signature/encryption paths of APR v2
(runs in a few seconds).

Random bytes and mutations of valid v1 files (plain, zstd, lz4, signed, encrypted for a
recipient) may only ever raise AprError, through parsing, verifying, decrypting and
reading the payload; mutations are tried with the CRC left stale and recomputed. Under a
trusted key, any mutation at all of a signed file (v1 or v2) must be E006.
"""
from __future__ import annotations

import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apr_core import crypto
from apr_core.crypto import keys
from apr_core.errors import AprError, ErrorCode
from apr_core.formats.apr1 import read_apr1, write_apr1_bytes
from apr_core.formats.open import open_model

FUZZ = settings(max_examples=250, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
NATIVE = crypto.available("sign_ed25519") and crypto.available("x25519")
KEY = keys.from_seed(bytes(range(32))) if NATIVE else None
CARD = {"name": "fuzz", "version": "1", "metrics": {"acc": 0.5}, "tags": ["a", "é"]}
PAYLOAD = bytes(range(200)) * 3


def _seeds():
    seeds = [write_apr1_bytes(PAYLOAD, "LINEAR_REGRESSION", CARD),
             write_apr1_bytes(PAYLOAD, "KMEANS", CARD, "zstd-l3"),
             write_apr1_bytes(PAYLOAD, "CUSTOM", CARD, "lz4")]
    if NATIVE:
        seeds += [write_apr1_bytes(PAYLOAD, "PCA", CARD, "lz4", signing_key=KEY),
                  write_apr1_bytes(PAYLOAD, "SVM", CARD, "zstd-l3", recipient=KEY.public)]
    return seeds


SEEDS = _seeds()


def _exercise(data: bytes) -> None:
    for kwargs in ({"verify": True}, {"verify": False, "key": KEY if NATIVE else None}):
        try:
            model = read_apr1(data, **kwargs)
            assert len(model.payload()) == model.tensors["payload"].shape[0]
        except AprError:
            pass


def _recrc(data: bytes) -> bytes:
    body = data[:-4]
    return body + zlib.crc32(body).to_bytes(4, "little")


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes(data):
    _exercise(data)
    _exercise(b"APRN\x01\x00" + data)


@FUZZ
@given(st.sampled_from(range(len(SEEDS))), st.lists(
    st.tuples(st.integers(0, 2000), st.integers(0, 255)), min_size=1, max_size=4),
    st.booleans())
def test_mutated_files(which, edits, recrc):
    data = bytearray(SEEDS[which])
    for pos, value in edits:
        data[pos % len(data)] = value
    data = bytes(data)
    _exercise(_recrc(data) if recrc else data)


@FUZZ
@given(st.integers(0, 10 ** 6), st.integers(0, 255), st.integers(0, 63))
def test_truncation_and_header_fields(cut, value, field):
    data = bytearray(SEEDS[1])
    if field < 32:
        data[field] = value
    _exercise(bytes(data[:cut % (len(data) + 1)]))


@pytest.mark.skipif(not NATIVE, reason="needs a native crypto provider")
@FUZZ
@given(st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(1, 255)), min_size=1,
                max_size=3), st.booleans())
def test_any_change_to_signed_files_is_e006(edits, v2):
    if v2:
        data = bytearray(_signed_v2())
    else:
        data = bytearray(SEEDS[3])
    original = bytes(data)
    for pos, xor in edits:
        data[pos % len(data)] ^= xor
    if bytes(data) == original:     # two edits cancelled out: the file is unchanged
        assert open_model(original, trusted_key=KEY.public) is not None
        return
    with pytest.raises(AprError) as info:
        open_model(bytes(data), trusted_key=KEY.public)
    assert info.value.code is ErrorCode.SIGNATURE


_V2 = []


def _signed_v2() -> bytes:
    if not _V2:
        import os
        import tempfile
        from apr_core import dtypes
        from apr_core.formats.apr2 import write_apr2
        from apr_core.formats.apr2_sign import sign_apr2
        from apr_core.tensor import RawTensor
        with tempfile.TemporaryDirectory() as tmp:
            plain, signed = os.path.join(tmp, "p.apr"), os.path.join(tmp, "s.apr")
            write_apr2(plain, [RawTensor("w", dtypes.BY_NAME["F32"], (4,), bytes(16))],
                       {"n": 1}, compression="lz4")
            sign_apr2(plain, signed, KEY)
            with open(signed, "rb") as handle:
                _V2.append(handle.read())
    return _V2[0]
