"""Trust in the browser: signatures verified and payloads decrypted by WebCrypto (Ed25519,
AES-256-GCM, X25519) and hash-wasm (Argon2id) through apr_core's crypto provider interface,
with the same results as native (issue 7, test 1's signing part, and decryption)."""
import os
import struct
import zlib

import pytest

from apr_core.formats.apr2 import read_apr2
from test_browser_shards import QUERY, describe, native_view

pytestmark = pytest.mark.native
# Cheap Argon2id settings keep the test fast; they are recorded in the file, so any reader
# (native or browser) derives the same key. `apr encrypt` uses seed 003's settings.
ARGON2 = {"m_cost": 1024, "t_cost": 1, "p_cost": 1}


@pytest.fixture(scope="module")
def signed(models_dir):
    """`layers.apr`'s manifest signed natively (it pins every shard's sha256), and a copy
    whose metadata was altered with the footer CRC recomputed, as an attacker would."""
    from apr_core.crypto.keys import generate
    from apr_core.formats.apr2_sign import sign_apr2
    key = generate()
    signed_path = os.path.join(models_dir, "layers-signed.apr")
    sign_apr2(os.path.join(models_dir, "layers.apr"), signed_path, key)
    with open(signed_path, "rb") as handle:
        data = bytearray(handle.read())
    at = data.index(b"SmolLM2 layers 0-1")
    data[at:at + 18] = b"SmolLM2 layers 0-9"
    struct.pack_into("<I", data, len(data) - 16, zlib.crc32(bytes(data[:-16])))
    with open(os.path.join(models_dir, "layers-tampered.apr"), "wb") as handle:
        handle.write(bytes(data))
    return key.public.hex()


@pytest.fixture(scope="module")
def encrypted(models_dir):
    """`layers.apr`'s tensors in one APR file, encrypted for a password and for a recipient."""
    from apr_core.crypto.keys import generate
    from apr_core.formats.apr2_encrypt import encrypt_apr2
    plain = os.path.join(models_dir, "layers-single.apr")
    recipient = generate()
    with read_apr2(plain) as model:
        encrypt_apr2(model, os.path.join(models_dir, "layers-pw.apr"), password="correct horse",
                     argon2=ARGON2)
        encrypt_apr2(model, os.path.join(models_dir, "layers-to.apr"), recipient=recipient.public)
    return recipient.seed.hex()


def test_signed_model_verified_by_webcrypto_and_tampered_copy_rejected(open_page, models_dir,
                                                                        signed):
    metadata, index, digests, _ = native_view(os.path.join(models_dir, "layers.apr"))
    session = open_page(QUERY)
    got = describe(session, "models/layers-signed.apr", trustedKey=signed)
    assert got["signature"] == {"status": "trusted", "public_key": signed,
                                "provider": "webcrypto"}
    assert "SIGNED" in got["flags"]
    assert got["metadata"] == metadata and got["tensors"] == index
    assert got["tensor_sha256"] == digests
    # Another trusted key: refused even though the file itself is intact.
    other = "11" * 32
    with pytest.raises(Exception, match="signed by a different key"):
        describe(session, "models/layers-signed.apr", trustedKey=other)
    # The tampered copy has a valid CRC, so only the signature can catch it.
    with pytest.raises(Exception, match="E006 SIGNATURE: Ed25519 signature does not verify"):
        describe(session, "models/layers-tampered.apr", trustedKey=signed)




def test_encrypted_model_decrypts_in_the_browser_like_native(open_page, models_dir, encrypted):
    digests = native_view(os.path.join(models_dir, "layers.apr"))[2]
    session = open_page(QUERY)
    by_password = describe(session, "models/layers-pw.apr", password="correct horse")
    assert "ENCRYPTED" in by_password["flags"]
    assert by_password["tensor_sha256"] == digests
    by_key = describe(session, "models/layers-to.apr", secretKey=encrypted)
    assert by_key["tensor_sha256"] == digests
    with pytest.raises(Exception, match="E005"):
        describe(session, "models/layers-pw.apr", password="wrong horse")
    with pytest.raises(Exception, match="E005 .*another recipient"):
        describe(session, "models/layers-to.apr", secretKey="22" * 32)
    assert session.call("apr.call('cryptoSelfTest', '33'.repeat(32), '68656c6c6f')")[
        "provider"] == "webcrypto"
