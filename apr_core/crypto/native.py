"""The native crypto provider: `pynacl`, `cryptography` and `argon2-cffi`, whichever import.

Each library contributes the operations it has; `load_native()` returns None when none of
them is importable (Pyodide without them, WASI), so the dispatcher falls through to other
providers. Operation semantics are those of the `apr_core.crypto` module docstring.
"""
from __future__ import annotations

from typing import Any, Optional, Set

from .decryption_error import DecryptionError


def _try_import(name: str) -> Any:
    try:
        return __import__(name, fromlist=["_"])
    except Exception:  # any import failure (missing, broken C extension) means "absent"
        return None


class NativeProvider:
    """Ed25519 and X25519 from pynacl (else cryptography), AES-GCM from cryptography,
    Argon2id from argon2-cffi (else pynacl's libsodium build with p=1)."""

    name = "native"

    def __init__(self) -> None:
        self._nacl_bind = _try_import("nacl.bindings")
        self._nacl_sign = _try_import("nacl.signing")
        self._nacl_exc = _try_import("nacl.exceptions")
        self._nacl_pwhash = _try_import("nacl.pwhash.argon2id")
        self._aead = _try_import("cryptography.hazmat.primitives.ciphers.aead")
        self._c_ed = _try_import("cryptography.hazmat.primitives.asymmetric.ed25519")
        self._c_x = _try_import("cryptography.hazmat.primitives.asymmetric.x25519")
        self._c_exc = _try_import("cryptography.exceptions")
        self._argon2 = _try_import("argon2.low_level")
        caps: Set[str] = set()
        if self._nacl_sign is not None or self._c_ed is not None:
            caps.update(("public_key_ed25519", "sign_ed25519", "verify_ed25519"))
        if self._aead is not None:
            caps.update(("encrypt_aes256gcm", "decrypt_aes256gcm"))
        if self._nacl_bind is not None or self._c_x is not None:
            caps.update(("public_key_x25519", "x25519"))
        if self._argon2 is not None or self._nacl_pwhash is not None:
            caps.add("argon2id")
        self.capabilities = frozenset(caps)

    # Ed25519 ---------------------------------------------------------------------------
    def public_key_ed25519(self, seed: bytes) -> bytes:
        if self._nacl_sign is not None:
            return bytes(self._nacl_sign.SigningKey(seed).verify_key)
        from cryptography.hazmat.primitives import serialization as s
        key = self._c_ed.Ed25519PrivateKey.from_private_bytes(seed).public_key()
        return key.public_bytes(s.Encoding.Raw, s.PublicFormat.Raw)

    def sign_ed25519(self, seed: bytes, message: bytes) -> bytes:
        if self._nacl_sign is not None:
            return self._nacl_sign.SigningKey(seed).sign(message).signature
        return self._c_ed.Ed25519PrivateKey.from_private_bytes(seed).sign(message)

    def verify_ed25519(self, public_key: bytes, message: bytes, signature: bytes) -> bool:
        if self._nacl_sign is not None:
            try:
                self._nacl_sign.VerifyKey(public_key).verify(message, signature)
                return True
            except Exception:  # BadSignatureError, or a malformed key (ValueError etc.)
                return False
        try:
            self._c_ed.Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
            return True
        except Exception:  # InvalidSignature, or a malformed key
            return False

    # AES-256-GCM -----------------------------------------------------------------------
    def encrypt_aes256gcm(self, key: bytes, nonce: bytes, plaintext: bytes,
                          aad: bytes) -> bytes:
        return self._aead.AESGCM(key).encrypt(nonce, plaintext, aad or None)

    def decrypt_aes256gcm(self, key: bytes, nonce: bytes, ciphertext: bytes,
                          aad: bytes) -> bytes:
        try:
            return self._aead.AESGCM(key).decrypt(nonce, ciphertext, aad or None)
        except self._c_exc.InvalidTag:
            raise DecryptionError("GCM tag mismatch") from None

    # Argon2id --------------------------------------------------------------------------
    def argon2id(self, password: bytes, salt: bytes, m_cost: int, t_cost: int,
                 p_cost: int, length: int) -> bytes:
        if self._argon2 is not None:
            return self._argon2.hash_secret_raw(password, salt, time_cost=t_cost,
                                                memory_cost=m_cost, parallelism=p_cost,
                                                hash_len=length, type=self._argon2.Type.ID,
                                                version=19)
        if p_cost != 1 or len(salt) != 16:
            # libsodium fixes parallelism at 1 and the salt at 16 bytes.
            from ..errors import AprError, ErrorCode
            raise AprError(ErrorCode.UNSUPPORTED, "Argon2id with these parameters needs "
                           "argon2-cffi", p_cost=p_cost, salt_size=len(salt))
        return self._nacl_pwhash.kdf(length, password, salt, opslimit=t_cost,
                                     memlimit=m_cost * 1024)

    # X25519 ----------------------------------------------------------------------------
    def public_key_x25519(self, private_key: bytes) -> bytes:
        if self._nacl_bind is not None:
            return self._nacl_bind.crypto_scalarmult_base(private_key)
        from cryptography.hazmat.primitives import serialization as s
        key = self._c_x.X25519PrivateKey.from_private_bytes(private_key).public_key()
        return key.public_bytes(s.Encoding.Raw, s.PublicFormat.Raw)

    def x25519(self, private_key: bytes, peer_public: bytes) -> bytes:
        try:
            if self._nacl_bind is not None:
                return self._nacl_bind.crypto_scalarmult(private_key, peer_public)
            priv = self._c_x.X25519PrivateKey.from_private_bytes(private_key)
            return priv.exchange(self._c_x.X25519PublicKey.from_public_bytes(peer_public))
        except Exception:  # libsodium / OpenSSL refuse low-order points
            raise DecryptionError("low-order X25519 point") from None


def load_native() -> Optional[NativeProvider]:
    """The native provider, or None when no supporting library is importable."""
    provider = NativeProvider()
    return provider if provider.capabilities else None
