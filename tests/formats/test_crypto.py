"""The crypto provider interface: dispatch, the pure-Python Ed25519 verifier and the
native provider, against published test vectors and independent implementations
(libsodium via pynacl, OpenSSL via cryptography, argon2-cffi vs libsodium's Argon2id)."""
import os

import pytest

from apr_core import crypto
from apr_core.crypto import ed25519_pure, keys
from apr_core.errors import AprError, ErrorCode

# RFC 8032 §7.1 tests 1 and 2: (secret seed, public key, message, signature)
RFC8032 = [
    ("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
     "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
     "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e"
     "39701cf9b46bd25bf5f0595bbe24655141438e7a100b"),
    ("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
     "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
     "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f"
     "3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"),
]

needs_native = pytest.mark.skipif(not crypto.available("sign_ed25519"),
                                   reason="no native crypto provider (pynacl/cryptography)")


@pytest.mark.parametrize("seed, public, message, signature", RFC8032)
def test_pure_verifier_rfc8032(seed, public, message, signature):
    pub, msg, sig = (bytes.fromhex(x) for x in (public, message, signature))
    assert ed25519_pure.verify(pub, msg, sig)
    assert not ed25519_pure.verify(pub, msg + b"x", sig)
    for i in (0, 31, 32, 63):
        bad = bytearray(sig)
        bad[i] ^= 0x10
        assert not ed25519_pure.verify(pub, msg, bytes(bad))


@needs_native
@pytest.mark.parametrize("seed, public, message, signature", RFC8032)
def test_native_signing_rfc8032(seed, public, message, signature):
    seed_b = bytes.fromhex(seed)
    assert crypto.public_key_ed25519(seed_b).hex() == public
    assert crypto.sign_ed25519(seed_b, bytes.fromhex(message)).hex() == signature


def test_pure_verifier_agrees_with_libsodium():
    signing = pytest.importorskip("nacl.signing")
    for i in range(40):
        sk = signing.SigningKey(os.urandom(32))
        msg = os.urandom(i * 13)
        sig, pub = sk.sign(msg).signature, bytes(sk.verify_key)
        assert ed25519_pure.verify(pub, msg, sig)
        bad = bytearray(sig)
        bad[i % 64] ^= 1 << (i % 8)
        assert ed25519_pure.verify(pub, msg, bytes(bad)) is False
        # s >= L (malleated signature) is refused, as libsodium does
        s = int.from_bytes(sig[32:], "little") + ed25519_pure.L
        if s < 2 ** 256:
            malleated = sig[:32] + s.to_bytes(32, "little")
            assert not ed25519_pure.verify(pub, msg, malleated)


def test_pure_verifier_rejects_malformed_keys():
    sig = bytes.fromhex(RFC8032[0][3])
    assert not ed25519_pure.verify(bytes(32), b"", sig)          # small order (identity)
    assert not ed25519_pure.verify(b"\xff" * 32, b"", sig)       # y >= p, not canonical
    assert not ed25519_pure.verify(b"\x01" * 31, b"", sig)        # wrong length
    assert not crypto.verify_ed25519(b"\x01" * 31, b"", sig)


def test_key_conversion_matches_libsodium():
    bindings = pytest.importorskip("nacl.bindings")
    for _ in range(10):
        pair = keys.from_seed(os.urandom(32))
        assert keys.x25519_public(pair.public) == \
            bindings.crypto_sign_ed25519_pk_to_curve25519(pair.public)
        assert pair.x25519_private == \
            bindings.crypto_sign_ed25519_sk_to_curve25519(pair.seed + pair.public)
        # the converted pair agrees: X25519 public of the private == converted public
        assert crypto.public_key_x25519(pair.x25519_private) == keys.x25519_public(pair.public)


@needs_native
def test_aes_gcm_vector_and_tamper():
    # McGrew & Viega, GCM spec test case 14: AES-256, zero key/IV, one zero block
    key, nonce = bytes(32), bytes(12)
    out = crypto.encrypt_aes256gcm(key, nonce, bytes(16))
    assert out.hex() == "cea7403d4d606b6e074ec5d3baf39d18d0d1c8a799996bf0265b98b5d48ab919"
    assert crypto.decrypt_aes256gcm(key, nonce, out) == bytes(16)
    for i in range(len(out)):
        bad = bytearray(out)
        bad[i] ^= 0x80
        with pytest.raises(AprError) as info:
            crypto.decrypt_aes256gcm(key, nonce, bytes(bad))
        assert info.value.code is ErrorCode.DECRYPT
    with pytest.raises(AprError) as info:
        crypto.decrypt_aes256gcm(key, nonce, out, b"other aad")
    assert info.value.code is ErrorCode.DECRYPT


def test_hkdf_rfc5869_case1():
    okm = crypto.hkdf_sha256(bytes([0x0b] * 22), bytes(range(0xf0, 0xfa)), 42,
                             salt=bytes(range(13)))
    assert okm.hex() == ("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf"
                         "34007208d5b887185865")


@needs_native
def test_x25519_rfc7748_and_low_order():
    scalar = bytes.fromhex("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4")
    u = bytes.fromhex("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c")
    assert crypto.x25519(scalar, u).hex() == \
        "c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552"
    with pytest.raises(AprError) as info:
        crypto.x25519(scalar, bytes(32))     # the zero point has low order
    assert info.value.code is ErrorCode.DECRYPT


def test_argon2id_matches_libsodium():
    pwhash = pytest.importorskip("nacl.pwhash.argon2id")
    if not crypto.available("argon2id"):
        pytest.skip("no Argon2id provider")
    salt = bytes(range(16))
    # seed 003 §5.2 parameters, and a cheap setting
    for m_cost, t_cost in ((19456, 2), (64, 1)):
        ours = crypto.argon2id(b"password", salt, m_cost, t_cost, 1, 32)
        assert ours == pwhash.kdf(32, b"password", salt, opslimit=t_cost,
                                  memlimit=m_cost * 1024)
    with pytest.raises(AprError) as info:
        crypto.argon2id(b"p", salt, 1 << 30, 2, 1)   # absurd memory from a hostile file
    assert info.value.code is ErrorCode.CORRUPT


class _VerifyOnly:
    name = "test-verify-only"
    capabilities = frozenset(["verify_ed25519"])

    def __init__(self):
        self.calls = 0

    def verify_ed25519(self, public_key, message, signature):
        self.calls += 1
        return ed25519_pure.verify(public_key, message, signature)


def test_registered_provider_comes_first_and_unregisters():
    provider = _VerifyOnly()
    seed, public, message, signature = (bytes.fromhex(x) for x in RFC8032[1])
    crypto.register_provider(provider)
    try:
        assert crypto.providers()[0] is provider
        assert crypto.provider_for("verify_ed25519") is provider
        assert crypto.verify_ed25519(public, message, signature)
        assert provider.calls == 1
    finally:
        crypto.unregister_provider(provider)
    assert provider not in crypto.providers()
    bad = _VerifyOnly()
    bad.capabilities = frozenset(["make_coffee"])
    with pytest.raises(AprError):
        crypto.register_provider(bad)


def test_without_native_provider_verification_works_and_secrets_refuse(monkeypatch):
    monkeypatch.setattr(crypto, "_builtin", [ed25519_pure.PureVerifier()])
    seed, public, message, signature = (bytes.fromhex(x) for x in RFC8032[1])
    assert crypto.verify_ed25519(public, message, signature)
    for call in (lambda: crypto.sign_ed25519(seed, b"m"),
                 lambda: crypto.decrypt_aes256gcm(bytes(32), bytes(12), bytes(32)),
                 lambda: crypto.encrypt_aes256gcm(bytes(32), bytes(12), b""),
                 lambda: crypto.argon2id(b"p", bytes(16), 64, 1, 1),
                 lambda: crypto.x25519(bytes(32), bytes(32))):
        with pytest.raises(AprError) as info:
            call()
        assert info.value.code is ErrorCode.UNSUPPORTED


@needs_native
def test_key_files_round_trip_and_reject_garbage():
    pair = keys.generate()
    assert keys.parse_secret(keys.format_secret(pair)) == pair
    assert keys.parse_public(keys.format_public(pair.public)) == pair.public
    assert pair.seed.hex() not in repr(pair)
    for text in ("", "apr-ed25519-public:zz", keys.format_public(pair.public),
                 "apr-ed25519-secret:abcd"):
        with pytest.raises(AprError) as info:
            keys.parse_secret(text)
        assert info.value.code is ErrorCode.ARGUMENT
