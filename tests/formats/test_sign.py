"""APR v2 signatures: sign -> verify, every single-byte alteration of a signed file is
E006 under a trusted key, the embedded key alone only proves integrity, sharded models
are covered through their manifest, and verification needs no native library."""
import os

import pytest

from apr_core import crypto, dtypes
from apr_core.crypto import ed25519_pure, keys
from apr_core.errors import AprError, ErrorCode
from apr_core.formats.apr2 import read_apr2, write_apr2
from apr_core.formats.apr2_sign import INTEGRITY_ONLY, TRUSTED, sign_apr2, verify_apr2
from apr_core.formats.open import open_model
from apr_core.io import BytesSource, CountingSource
from apr_core.tensor import RawTensor

pytestmark = pytest.mark.skipif(not crypto.available("sign_ed25519"),
                                reason="signing needs a native crypto provider")
_NATIVE = crypto.available("sign_ed25519")
# Built only when a provider can derive public keys (the Python 3.8 run has none).
KEY = keys.from_seed(bytes(range(32))) if _NATIVE else None
OTHER = keys.from_seed(bytes(range(1, 33))) if _NATIVE else None


def _tensors():
    by = dtypes.BY_NAME
    return [RawTensor("a", by["F32"], (2, 2), bytes(range(16))),
            RawTensor("b", by["U8"], (5,), b"\x01\x02\x03\x04\x05")]


@pytest.fixture
def signed(tmp_path):
    plain = tmp_path / "plain.apr"
    write_apr2(plain, _tensors(), {"name": "s"})
    out = tmp_path / "signed.apr"
    sign_apr2(str(plain), str(out), KEY)
    return plain, out


def test_sign_then_verify(signed):
    plain, out = signed
    assert verify_apr2(str(out), KEY.public) == {"status": TRUSTED,
                                                 "public_key": KEY.public.hex()}
    assert verify_apr2(str(out))["status"] == INTEGRITY_ONLY
    model = open_model(str(out), trusted_key=KEY.public)
    assert model.read_raw("a").data == bytes(range(16))
    model.close()
    # the signed file is a normal APR v2 file too: same tensors, CRC valid
    with read_apr2(str(out)) as again, read_apr2(str(plain)) as orig:
        assert [again.read_raw(n) for n in again.tensors] == [orig.read_raw(n)
                                                              for n in orig.tensors]
        assert again.signature_range[1] == 96


def test_every_single_byte_flip_is_e006(signed):
    _, out = signed
    data = out.read_bytes()
    for i in range(len(data)):
        bad = bytearray(data)
        bad[i] ^= 0x01
        with pytest.raises(AprError) as info:
            open_model(bytes(bad), trusted_key=KEY.public)
        assert info.value.code is ErrorCode.SIGNATURE, i
        with pytest.raises(AprError) as info:
            verify_apr2(bytes(bad), KEY.public)
        assert info.value.code is ErrorCode.SIGNATURE, i


def test_truncation_appending_and_resigning(signed, tmp_path):
    plain, out = signed
    data = out.read_bytes()
    for bad in (data[:-1], data + b"\x00", data[:200]):
        with pytest.raises(AprError) as info:
            verify_apr2(bad, KEY.public)
        assert info.value.code is ErrorCode.SIGNATURE
    # re-signing replaces the block; the result verifies only under the new key
    again = tmp_path / "again.apr"
    sign_apr2(str(out), str(again), OTHER)
    assert again.stat().st_size == out.stat().st_size
    assert verify_apr2(str(again), OTHER.public)["status"] == TRUSTED
    with pytest.raises(AprError) as info:
        verify_apr2(str(again), KEY.public)
    assert info.value.code is ErrorCode.SIGNATURE


def test_unsigned_or_other_format_with_trusted_key_is_e006(signed, tmp_path):
    plain, _ = signed
    for target in (str(plain), b"GGUF" + bytes(200)):
        with pytest.raises(AprError) as info:
            open_model(target, trusted_key=KEY.public)
        assert info.value.code is ErrorCode.SIGNATURE


def test_verification_happens_before_any_tensor_is_read(signed):
    """Counted reads: the ranges a tensor read makes on the good file never occur when a
    tampered copy is opened under a trusted key, and the only reads of the data region are
    the signature check's hash stream (contiguous chunks from byte 0)."""
    _, out = signed
    good = CountingSource(BytesSource(out.read_bytes()))
    tensor_reads = set()
    with open_model(good) as model:
        data_offset = model.data_offset
        for name in model.tensors:
            before = len(good.ranges)
            model.read_raw(name)
            tensor_reads.update(good.ranges[before:])
    assert tensor_reads and all(start >= data_offset for start, _ in tensor_reads)
    data = bytearray(out.read_bytes())
    data[-200] ^= 0xFF                      # a tensor byte
    source = CountingSource(BytesSource(bytes(data)))
    with pytest.raises(AprError) as info:
        open_model(source, trusted_key=KEY.public)
    assert info.value.code is ErrorCode.SIGNATURE
    assert not tensor_reads & set(source.ranges), source.ranges
    block_start = len(data) - 16 - 96       # footer, signature block
    stream = [(start, length) for start, length in source.ranges
              if start < block_start and start + length > data_offset]
    position = 0
    for start, length in sorted(stream):
        assert start <= position, (start, position)       # no read jumps into the data
        position = max(position, start + length)
    assert position == block_start


def test_sign_refuses_a_damaged_input(signed, tmp_path):
    plain, _ = signed
    data = bytearray(plain.read_bytes())
    data[-18] ^= 1                          # a payload byte of tensor "b"
    bad = tmp_path / "bad.apr"
    bad.write_bytes(bytes(data))
    with pytest.raises(AprError) as info:
        sign_apr2(str(bad), str(tmp_path / "o.apr"), KEY)
    assert info.value.code is ErrorCode.CHECKSUM
    assert not (tmp_path / "o.apr").exists()


def test_pure_python_verifier_checks_signed_files(signed, monkeypatch):
    _, out = signed
    monkeypatch.setattr(crypto, "_builtin", [ed25519_pure.PureVerifier()])
    assert verify_apr2(str(out), KEY.public)["status"] == TRUSTED
    data = bytearray(out.read_bytes())
    data[33] ^= 4
    with pytest.raises(AprError) as info:
        verify_apr2(bytes(data), KEY.public)
    assert info.value.code is ErrorCode.SIGNATURE
    with pytest.raises(AprError) as info:     # signing is never done in pure Python
        sign_apr2(str(out), str(out) + ".2", KEY)
    assert info.value.code is ErrorCode.UNSUPPORTED


def test_sharded_manifest_signature_pins_shards(tmp_path):
    from apr_core.formats.shards import write_sharded
    by = dtypes.BY_NAME
    tensors = [RawTensor("t{}".format(i), by["U8"], (300,), bytes([i]) * 300)
               for i in range(4)]
    manifest = tmp_path / "m.apr"
    result = write_sharded(manifest, tensors, {"name": "sh"}, max_shard_size=700)
    assert len(result.files) > 1
    signed_manifest = tmp_path / "m-signed.apr"
    sign_apr2(str(manifest), str(signed_manifest), KEY)
    report = verify_apr2(str(signed_manifest), KEY.public)
    assert report["status"] == TRUSTED and report["shards"] == len(result.files)
    model = open_model(str(signed_manifest), trusted_key=KEY.public)
    assert model.read_raw("t2").data == bytes([2]) * 300
    model.close()
    shard = result.files[1]
    data = bytearray(open(shard, "rb").read())
    data[-30] ^= 1
    with open(shard, "wb") as handle:
        handle.write(bytes(data))
    for check in (lambda: verify_apr2(str(signed_manifest), KEY.public),
                  lambda: open_model(str(signed_manifest), trusted_key=KEY.public)):
        with pytest.raises(AprError) as info:
            check()
        assert info.value.code is ErrorCode.SIGNATURE
    os.remove(shard)
    with pytest.raises(AprError) as info:
        verify_apr2(str(signed_manifest), KEY.public)
    assert info.value.code is ErrorCode.SIGNATURE


def test_configured_trusted_key_applies_to_every_open(signed, tmp_path, monkeypatch):
    plain, out = signed
    pub = tmp_path / "k.pub"
    pub.write_text(keys.format_public(KEY.public))
    monkeypatch.setenv("APR_TRUSTED_KEY", str(pub))
    with open_model(str(out)) as model:            # signed by the configured key
        assert model.read_raw("b").data == b"\x01\x02\x03\x04\x05"
    with pytest.raises(AprError) as info:           # unsigned: refused
        open_model(str(plain))
    assert info.value.code is ErrorCode.SIGNATURE
    pub.write_text(keys.format_public(OTHER.public))
    with pytest.raises(AprError) as info:           # signed by someone else: refused
        open_model(str(out))
    assert info.value.code is ErrorCode.SIGNATURE


def test_trusted_key_refuses_unsignable_targets(tmp_path):
    with pytest.raises(AprError) as info:
        open_model(str(tmp_path), trusted_key=KEY.public)
    assert info.value.code is ErrorCode.SIGNATURE
