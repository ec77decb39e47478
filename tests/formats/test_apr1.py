"""APR v1 (`APRN`, seed 003): files built byte by byte from the seed's layout with
independent libraries (zstandard, lz4, cryptography, argon2-cffi, pynacl) read back;
files this project writes read back and match the hand-built bytes; every refusal has
its code; open_model / convert / inspect / validate handle v1."""
import json
import os
import zlib

import pytest

from apr_core import crypto
from apr_core.codecs import zstd
from apr_core.crypto import keys
from apr_core.errors import AprError, ErrorCode
from apr_core.formats.apr1 import read_apr1, sign_apr1_bytes, write_apr1, write_apr1_bytes
from apr_core.formats.open import open_model

NATIVE = crypto.available("sign_ed25519") and crypto.available("encrypt_aes256gcm")
needs_native = pytest.mark.skipif(not NATIVE, reason="needs a native crypto provider")
PAYLOAD = b"\x01\x02\x03\x04hello, aprender" * 20
# MessagePack by hand: fixmap(2) {"name": "fixture", "version": "1.0"}
CARD = b"\x82\xa4name\xa7fixture\xa7version\xa31.0"


def _u16(n):
    return n.to_bytes(2, "little")


def _u32(n):
    return n.to_bytes(4, "little")


def hand_made(region, uncompressed, compression=0, flags=0, model_type=0x0003, trailer=b""):
    """Seed 003 §3 header, field by field, then metadata, payload region, trailer, CRC."""
    header = (b"APRN" + bytes([1, 0]) + _u16(model_type) + _u32(len(CARD)) + _u32(len(region))
              + _u32(uncompressed) + bytes([compression, flags]) + bytes(10))
    assert len(header) == 32
    body = header + CARD + region
    body += trailer(body) if callable(trailer) else trailer
    return body + _u32(zlib.crc32(body))


def test_hand_made_plain_file_reads_and_matches_our_writer():
    data = hand_made(PAYLOAD, len(PAYLOAD))
    model = read_apr1(data)
    assert model.payload() == PAYLOAD
    assert model.model_type == "DECISION_TREE"
    assert model.card == {"name": "fixture", "version": "1.0"}
    assert model.metadata["apr1"]["compression"] == "none"
    assert write_apr1_bytes(PAYLOAD, "DECISION_TREE", {"name": "fixture", "version": "1.0"}) \
        == data


def test_hand_made_zstd_and_lz4_files():
    zstandard = pytest.importorskip("zstandard")
    lz4_block = pytest.importorskip("lz4.block")
    for level, comp in ((3, 1), (19, 2)):
        region = zstandard.ZstdCompressor(level=level).compress(PAYLOAD)
        assert read_apr1(hand_made(region, len(PAYLOAD), comp)).payload() == PAYLOAD
    # lz4_flex's compress_prepend_size: u32 LE size, then one block (lz4.block's store_size)
    region = lz4_block.compress(PAYLOAD, store_size=True)
    assert read_apr1(hand_made(region, len(PAYLOAD), 3)).payload() == PAYLOAD


def test_hand_made_password_encrypted_file():
    aead = pytest.importorskip("cryptography.hazmat.primitives.ciphers.aead")
    low = pytest.importorskip("argon2.low_level")
    salt, nonce = bytes(range(16)), bytes(range(100, 112))
    key = low.hash_secret_raw(b"hunter2", salt, time_cost=2, memory_cost=19456, parallelism=1,
                              hash_len=32, type=low.Type.ID)
    region = salt + nonce + aead.AESGCM(key).encrypt(nonce, PAYLOAD, None)
    data = hand_made(region, len(PAYLOAD), flags=0x01)
    assert read_apr1(data, password="hunter2").payload() == PAYLOAD
    with pytest.raises(AprError) as info:
        read_apr1(data, password="hunter3").payload()
    assert info.value.code is ErrorCode.DECRYPT
    with pytest.raises(AprError) as info:
        read_apr1(data).payload()
    assert info.value.code is ErrorCode.UNSUPPORTED


def test_hand_made_recipient_encrypted_file():
    aead = pytest.importorskip("cryptography.hazmat.primitives.ciphers.aead")
    bindings = pytest.importorskip("nacl.bindings")
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
    pair = keys.generate()
    recipient = bindings.crypto_sign_ed25519_pk_to_curve25519(pair.public)
    ephemeral = os.urandom(32)
    shared = bindings.crypto_scalarmult(ephemeral, recipient)
    key = HKDF(hashes.SHA256(), 32, None, b"apr-v1-encrypt").derive(shared)
    nonce = os.urandom(12)
    region = (bindings.crypto_scalarmult_base(ephemeral) + recipient[:8] + nonce
              + aead.AESGCM(key).encrypt(nonce, PAYLOAD, None))
    data = hand_made(region, len(PAYLOAD), flags=0x01)
    assert read_apr1(data, key=pair).payload() == PAYLOAD
    with pytest.raises(AprError) as info:
        read_apr1(data, key=keys.generate()).payload()
    assert info.value.code is ErrorCode.DECRYPT


def test_hand_made_signed_file():
    signing = pytest.importorskip("nacl.signing")
    sk = signing.SigningKey(bytes(range(32)))
    trailer = lambda body: sk.sign(body).signature + bytes(sk.verify_key)  # noqa: E731
    data = hand_made(PAYLOAD, len(PAYLOAD), flags=0x02, trailer=trailer)
    model = read_apr1(data, trusted_key=bytes(sk.verify_key))
    assert model.signature_status == "trusted" and model.payload() == PAYLOAD
    assert read_apr1(data).signature_status == "integrity only, provenance unknown"
    assert sign_apr1_bytes(hand_made(PAYLOAD, len(PAYLOAD)), keys.from_seed(bytes(range(32)))) \
        == data


@pytest.mark.parametrize("compression", ["none", "zstd-l3", "zstd-l19", "lz4"])
@pytest.mark.parametrize("mode", ["plain", "password", "recipient", "signed"])
def test_written_files_read_back(tmp_path, compression, mode):
    if mode != "plain" and not NATIVE:
        pytest.skip("needs a native crypto provider")
    if compression.startswith("zstd") and not zstd.available():
        pytest.skip("no zstd back end")
    pair = keys.generate() if mode != "plain" else None
    card = {"name": "m", "version": "2", "metrics": {"acc": 0.95}, "intended_users": ["a"],
            "hyperparameters": {"lr": 0.1, "layers": [3, 4]}, "created_at": "2025-11-26"}
    kwargs = {"password": lambda: {"password": "pw"},
              "recipient": lambda: {"recipient": pair.public},
              "signed": lambda: {"signing_key": pair}, "plain": dict}[mode]()
    path = tmp_path / "m.apr"
    write_apr1(path, PAYLOAD, "NGRAM_LM", card, compression, **kwargs)
    model = read_apr1(str(path), password="pw" if mode == "password" else None,
                      key=pair if mode == "recipient" else None,
                      trusted_key=pair.public if mode == "signed" else None)
    assert model.payload() == PAYLOAD
    assert model.card == card and model.model_type == "NGRAM_LM"
    model.close()


def _patch(data, offset, raw):
    body = data[:offset] + raw + data[offset + len(raw):-4]
    return body + _u32(zlib.crc32(body))


@pytest.mark.parametrize("offset, raw, code", [
    (0, b"APRX", ErrorCode.FORMAT),
    (4, b"\x02", ErrorCode.VERSION),
    (6, b"\x99\x00", ErrorCode.UNSUPPORTED),           # model type not in the catalog
    (20, b"\x07", ErrorCode.UNSUPPORTED),              # compression id
    (8, _u32(10 ** 6), ErrorCode.CORRUPT),             # metadata_size beyond the file
    (12, _u32(1), ErrorCode.CORRUPT),                  # payload_size disagrees
    (16, _u32(5), ErrorCode.CORRUPT),                  # uncompressed_size (stored raw)
    (32, b"\xc1", ErrorCode.FORMAT),                   # reserved MessagePack byte
    (32, b"\x93", ErrorCode.FORMAT),                   # metadata not a map
])
def test_damage_has_precise_codes(offset, raw, code):
    data = hand_made(PAYLOAD, len(PAYLOAD))
    with pytest.raises(AprError) as info:
        read_apr1(_patch(data, offset, raw)).payload()
    assert info.value.code is code


def test_crc_and_truncation():
    data = hand_made(PAYLOAD, len(PAYLOAD))
    bad = bytearray(data)
    bad[100] ^= 1
    with pytest.raises(AprError) as info:
        read_apr1(bytes(bad))
    assert info.value.code is ErrorCode.CHECKSUM
    assert read_apr1(bytes(bad), verify=False).card["name"] == "fixture"  # inspect path
    for cut in (0, 10, 35, len(data) - 1):
        with pytest.raises(AprError) as info:
            read_apr1(data[:cut])
        assert info.value.code in (ErrorCode.CORRUPT, ErrorCode.FORMAT)


@needs_native
def test_flip_every_byte_of_signed_v1_is_e006():
    pair = keys.from_seed(bytes(range(32)))
    data = write_apr1_bytes(PAYLOAD[:40], "KNN", {"name": "s"}, signing_key=pair)
    for i in range(len(data)):
        bad = bytearray(data)
        bad[i] ^= 0x01
        with pytest.raises(AprError) as info:
            open_model(bytes(bad), trusted_key=pair.public)
        assert info.value.code is ErrorCode.SIGNATURE, i


def test_open_model_and_convert_to_v2_carry_metadata(tmp_path):
    from apr_core.formats.apr2 import read_apr2
    from apr_core.conversion.convert import convert
    card = {"name": "tiny", "version": "1.0", "license": "MIT", "metrics": {"acc": 0.5}}
    src = tmp_path / "v1.apr"
    write_apr1(src, PAYLOAD, "RANDOM_FOREST", card, "lz4")
    with open_model(str(src)) as model:
        assert model.format == "apr1"
        assert model.read_raw("payload").data == PAYLOAD
    out = tmp_path / "v2.apr"
    convert(str(src), str(out))
    v2 = read_apr2(str(out))
    for key, value in card.items():
        assert v2.metadata[key] == value
    assert v2.metadata["apr1"]["model_type"] == "RANDOM_FOREST"
    assert v2.read_raw("payload").data == PAYLOAD
    v2.close()


@pytest.mark.native
def test_cli_inspect_validate_convert_v1(tmp_path):
    from apr_native.cli.main import main
    src = tmp_path / "v1.apr"
    write_apr1(src, PAYLOAD, "SVM", {"name": "cli"}, "lz4")
    assert main(["inspect", str(src)]) == 0
    assert main(["validate", str(src)]) == 0
    assert main(["convert", str(src), "-o", str(tmp_path / "o.apr")]) == 0
    bad = bytearray(src.read_bytes())
    bad[40] ^= 1
    (tmp_path / "bad.apr").write_bytes(bytes(bad))
    assert main(["validate", str(tmp_path / "bad.apr")]) == 5


def test_metadata_json_safe_view():
    from apr_core.formats.msgpack_codec import ExtType, packb
    card = {"name": "x", 1: b"\x00\xff", "e": ExtType(5, b"ab"), "f": float("nan")}
    region = PAYLOAD
    header = (b"APRN\x01\x00" + _u16(0xFF) + _u32(len(packb(card))) + _u32(len(region))
              + _u32(len(region)) + bytes(12))
    body = header + packb(card) + region
    model = read_apr1(body + _u32(zlib.crc32(body)))
    json.dumps(model.metadata, allow_nan=False)   # JSON-safe for inspect and convert
    assert model.metadata["1"] == "00ff" and model.metadata["e"] == {"ext": 5, "data": "6162"}
