"""The CTranslate2 model.bin reader: round trip of the layout CTranslate2 writes, coded
errors on every truncation and on corrupt fields, and hypothesis fuzzing (random and
mutated input may only raise AprError). The real Whisper base model.bin, truncated and
corrupted, is in test_whisper_real.py."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apr_core.errors import AprError, ErrorCode
from apr_core.formats.ctranslate2 import read_ctranslate2, write_ctranslate2_bytes

FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

WEIGHT = np.arange(12, dtype=np.float16).reshape(3, 4)
VARIABLES = [("encoder/num_heads", "I16", (), struct.pack("<h", 8)),
             ("decoder/embeddings/weight", "F16", (3, 4), WEIGHT.tobytes()),
             ("decoder/scale", "F32", (3,), np.array([1, 2, 3], np.float32).tobytes()),
             ("flag", "I8", (), b"\x01")]
SEED = write_ctranslate2_bytes("WhisperSpec", 3, VARIABLES,
                               {"decoder/projection/weight": "decoder/embeddings/weight"})


def test_round_trip_of_the_written_layout():
    model = read_ctranslate2(SEED)
    assert model.metadata["spec"] == "WhisperSpec"
    assert model.metadata["spec_revision"] == 3
    assert model.metadata["binary_version"] == 6
    assert list(model.tensors) == [v[0] for v in VARIABLES]
    weight = model.read_raw("decoder/embeddings/weight")
    assert weight.shape == (3, 4) and weight.dtype.name == "F16"
    assert np.array_equal(np.frombuffer(weight.data, np.float16).reshape(3, 4), WEIGHT)
    assert model.resolve("decoder/projection/weight").name == "decoder/embeddings/weight"
    assert model.scalars() == {"encoder/num_heads": 8, "flag": 1}
    assert model.metadata["trailing_bytes"] == 0


def test_every_truncation_is_a_coded_error():
    for end in range(len(SEED)):
        with pytest.raises(AprError) as info:
            model = read_ctranslate2(SEED[:end])
            # a cut inside the alias table still fails; a cut nowhere would be a bug
            raise AssertionError("accepted a file cut at {}: {}".format(end, model.tensors))
        assert info.value.code in (ErrorCode.CORRUPT, ErrorCode.FORMAT), (end, info.value)


def _patched(offset: int, fmt: str, value) -> bytes:
    data = bytearray(SEED)
    struct.pack_into("<" + fmt, data, offset, value)
    return bytes(data)


def _offset_after_name(name: str) -> int:
    raw = name.encode() + b"\0"
    return SEED.index(struct.pack("<H", len(raw)) + raw) + 2 + len(raw)


@pytest.mark.parametrize("patch, code", [
    ((0, "I", 99), ErrorCode.VERSION),                                   # binary version
    (("decoder/embeddings/weight", 1 + 8, "B", 9), ErrorCode.UNSUPPORTED),   # dtype id
    (("decoder/embeddings/weight", 1 + 8 + 1, "I", 25), ErrorCode.FORMAT),   # payload size
    (("decoder/embeddings/weight", 0, "B", 9), ErrorCode.FORMAT),            # rank 9
    (("decoder/embeddings/weight", 1, "I", 1 << 30), ErrorCode.FORMAT),      # absurd dim
    (("count", 0, "I", 0xFFFFFFFF), ErrorCode.CORRUPT),                      # absurd count
])
def test_corrupt_fields_are_coded_errors(patch, code):
    if patch[0] == 0:
        data = _patched(0, patch[1], patch[2])
    elif patch[0] == "count":
        spec = b"WhisperSpec\0"
        data = _patched(4 + 2 + len(spec) + 4, patch[2], patch[3])
    else:
        data = _patched(_offset_after_name(patch[0]) + patch[1], patch[2], patch[3])
    with pytest.raises(AprError) as info:
        read_ctranslate2(data)
    assert info.value.code is code, info.value


def test_bad_strings_and_aliases_are_coded_errors():
    no_nul = SEED.replace(b"WhisperSpec\0", b"WhisperSpecX")
    with pytest.raises(AprError) as info:
        read_ctranslate2(no_nul)
    assert info.value.code is ErrorCode.FORMAT
    dangling = write_ctranslate2_bytes("WhisperSpec", 3, VARIABLES, {"a": "missing"})
    with pytest.raises(AprError) as info:
        read_ctranslate2(dangling)
    assert info.value.code is ErrorCode.FORMAT
    twice = write_ctranslate2_bytes("WhisperSpec", 3, VARIABLES + VARIABLES[:1])
    with pytest.raises(AprError) as info:
        read_ctranslate2(twice)
    assert info.value.code is ErrorCode.FORMAT


def _exercise(data: bytes) -> None:
    """Parse and read every variable; only AprError may escape."""
    try:
        model = read_ctranslate2(data)
        for name in model.tensors:
            assert len(model.read_raw(name).data) == model.tensors[name].nbytes
        model.scalars()
    except AprError:
        return


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes(data):
    _exercise(data)
    _exercise(struct.pack("<I", 6) + data)


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(SEED) - 1), st.integers(0, 255)), max_size=8))
def test_mutated_seed(edits):
    data = bytearray(SEED)
    for offset, value in edits:
        data[offset] = value
    _exercise(bytes(data))


@FUZZ
@given(st.integers(0, len(SEED) - 4), st.sampled_from([0, 1, 2 ** 16 - 1, 2 ** 31,
                                                         2 ** 32 - 1]))
def test_interesting_u32_anywhere(offset, value):
    _exercise(_patched(offset, "I", value))
