"""Crypto provider interface: Ed25519, AES-256-GCM, Argon2id, X25519 (+ HKDF-SHA256).

`apr_core` never implements a secret-handling primitive itself. Every operation is
dispatched to the first registered *provider* that declares it:

1. providers registered with `register_provider` (most recent first) — e.g. the browser
   shell registers a WebCrypto provider from JavaScript;
2. `native.NativeProvider` — `pynacl` / `cryptography` / `argon2-cffi`, whichever of them
   are importable (CPython);
3. `ed25519_pure.PureVerifier` — a pure-Python Ed25519 *verifier* (public data only).

An operation no provider offers raises `AprError(UNSUPPORTED)`: signing, encryption and
decryption are never silently skipped and never done in pure Python.

What a provider must implement
------------------------------
A provider is any object with a `name` (str), a `capabilities` attribute (a set of the
operation names in `OPERATIONS` it implements) and those methods, all synchronous, all
taking and returning `bytes`:

=========================== ================================================================
`public_key_ed25519(seed)`  32-byte Ed25519 seed (RFC 8032 private key) -> 32-byte public key
`sign_ed25519(seed, msg)`   -> 64-byte signature (pure Ed25519, RFC 8032)
`verify_ed25519(pub, msg,   -> True/False; malformed keys or signatures are False, not errors
sig)`
`encrypt_aes256gcm(key,     32-byte key, 12-byte nonce -> ciphertext || 16-byte tag
nonce, plaintext, aad)`
`decrypt_aes256gcm(key,     -> plaintext; raise `DecryptionError` (or AprError E005) when the
nonce, ciphertext, aad)`    tag does not verify. Never return unauthenticated bytes.
`argon2id(password, salt,   Argon2id v1.3 raw hash; `m_cost` in KiB
m_cost, t_cost, p_cost,
length)`
`public_key_x25519(priv)`   32-byte X25519 private scalar -> 32-byte public key
`x25519(priv, peer_pub)`    -> 32-byte shared secret; raise `DecryptionError` for a low-order
                            peer key (all-zero shared secret)
=========================== ================================================================

Register one with `apr_core.crypto.register_provider(obj)`; a provider may implement any
subset (list only what it implements in `capabilities`). HKDF-SHA256 and random bytes are
provided here (stdlib `hmac`/`os.urandom`, available in Pyodide and WASI too).
"""
from __future__ import annotations

import hashlib
import hmac
import os
from typing import Any, List, Optional

from ..errors import AprError, ErrorCode
from .decryption_error import DecryptionError

OPERATIONS = ("public_key_ed25519", "sign_ed25519", "verify_ed25519", "encrypt_aes256gcm",
              "decrypt_aes256gcm", "argon2id", "public_key_x25519", "x25519")

KEY_SIZE = 32      # AES-256, X25519 and Ed25519 seed sizes
NONCE_SIZE = 12    # AES-GCM nonce
TAG_SIZE = 16      # AES-GCM tag
SIGNATURE_SIZE = 64
PUBLIC_KEY_SIZE = 32

_registered: List[Any] = []
_builtin: Optional[List[Any]] = None


def register_provider(provider: Any) -> None:
    """Put `provider` first in the dispatch order (see the module docstring)."""
    unknown = set(provider.capabilities) - set(OPERATIONS)
    if unknown:
        raise AprError(ErrorCode.ARGUMENT, "provider declares unknown operations",
                       provider=getattr(provider, "name", "?"), unknown=sorted(unknown))
    unregister_provider(provider)
    _registered.insert(0, provider)


def unregister_provider(provider: Any) -> None:
    """Remove a provider registered with `register_provider` (no-op when absent)."""
    _registered[:] = [p for p in _registered if p is not provider]


def providers() -> List[Any]:
    """Every provider in dispatch order (registered ones, then the built-in ones)."""
    global _builtin
    if _builtin is None:
        from .ed25519_pure import PureVerifier
        from .native import load_native
        native = load_native()
        _builtin = ([native] if native is not None else []) + [PureVerifier()]
    return list(_registered) + _builtin


def provider_for(operation: str) -> Any:
    """The provider that will run `operation`, or AprError(UNSUPPORTED) when none can."""
    for provider in providers():
        if operation in provider.capabilities:
            return provider
    raise AprError(ErrorCode.UNSUPPORTED, "no crypto provider offers {}: install pynacl, "
                   "cryptography and argon2-cffi, or register a provider".format(operation),
                   operation=operation)


def available(operation: str) -> bool:
    return any(operation in p.capabilities for p in providers())


def _check_len(value: bytes, size: int, what: str) -> bytes:
    value = bytes(value)
    if len(value) != size:
        raise AprError(ErrorCode.ARGUMENT, "{} must be {} bytes".format(what, size),
                       got=len(value))
    return value


def public_key_ed25519(seed: bytes) -> bytes:
    return provider_for("public_key_ed25519").public_key_ed25519(
        _check_len(seed, KEY_SIZE, "Ed25519 seed"))


def sign_ed25519(seed: bytes, message: bytes) -> bytes:
    return provider_for("sign_ed25519").sign_ed25519(
        _check_len(seed, KEY_SIZE, "Ed25519 seed"), bytes(message))


def verify_ed25519(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """True when `signature` is valid for `message` under `public_key`."""
    if len(public_key) != PUBLIC_KEY_SIZE or len(signature) != SIGNATURE_SIZE:
        return False
    return bool(provider_for("verify_ed25519").verify_ed25519(
        bytes(public_key), bytes(message), bytes(signature)))


def encrypt_aes256gcm(key: bytes, nonce: bytes, plaintext: bytes, aad: bytes = b"") -> bytes:
    return provider_for("encrypt_aes256gcm").encrypt_aes256gcm(
        _check_len(key, KEY_SIZE, "AES key"), _check_len(nonce, NONCE_SIZE, "nonce"),
        bytes(plaintext), bytes(aad))


def decrypt_aes256gcm(key: bytes, nonce: bytes, ciphertext: bytes, aad: bytes = b"",
                      **context: object) -> bytes:
    """Plaintext, or AprError(E005) when the tag does not verify (wrong key or tampering)."""
    provider = provider_for("decrypt_aes256gcm")
    if len(ciphertext) < TAG_SIZE:
        raise AprError(ErrorCode.DECRYPT, "ciphertext shorter than the GCM tag", **context)
    try:
        return provider.decrypt_aes256gcm(_check_len(key, KEY_SIZE, "AES key"),
                                          _check_len(nonce, NONCE_SIZE, "nonce"),
                                          bytes(ciphertext), bytes(aad))
    except DecryptionError:
        raise AprError(ErrorCode.DECRYPT, "authentication failed: wrong key or password, or "
                       "the data was altered", **context) from None


def argon2id(password: bytes, salt: bytes, m_cost: int, t_cost: int, p_cost: int,
             length: int = KEY_SIZE) -> bytes:
    """Argon2id (v1.3) raw output; `m_cost` in KiB."""
    for name, value, low, high in (("m_cost", m_cost, 8 * max(p_cost, 1), 4 * 2 ** 20),
                                   ("t_cost", t_cost, 1, 64), ("p_cost", p_cost, 1, 64)):
        if not isinstance(value, int) or not low <= value <= high:
            raise AprError(ErrorCode.CORRUPT, "Argon2id parameter out of range",
                           parameter=name, value=value, low=low, high=high)
    if len(salt) < 8:
        raise AprError(ErrorCode.CORRUPT, "Argon2id salt shorter than 8 bytes",
                       salt_size=len(salt))
    return provider_for("argon2id").argon2id(bytes(password), bytes(salt), m_cost, t_cost,
                                             p_cost, length)


def public_key_x25519(private_key: bytes) -> bytes:
    return provider_for("public_key_x25519").public_key_x25519(
        _check_len(private_key, KEY_SIZE, "X25519 private key"))


def x25519(private_key: bytes, peer_public: bytes) -> bytes:
    """X25519 shared secret; AprError(E005) for a low-order peer key."""
    try:
        shared = provider_for("x25519").x25519(
            _check_len(private_key, KEY_SIZE, "X25519 private key"),
            _check_len(peer_public, KEY_SIZE, "X25519 public key"))
    except DecryptionError:
        shared = bytes(KEY_SIZE)
    if not any(shared):
        raise AprError(ErrorCode.DECRYPT, "X25519 peer key has low order")
    return shared


def hkdf_sha256(ikm: bytes, info: bytes, length: int = KEY_SIZE,
                salt: Optional[bytes] = None) -> bytes:
    """HKDF-SHA256 (RFC 5869); `salt=None` means 32 zero bytes."""
    prk = hmac.new(salt if salt else bytes(32), ikm, hashlib.sha256).digest()
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        out += block
        counter += 1
    return out[:length]


def random_bytes(n: int) -> bytes:
    """Cryptographically secure random bytes (os.urandom: getRandomValues in Pyodide)."""
    return os.urandom(n)


__all__ = ["OPERATIONS", "KEY_SIZE", "NONCE_SIZE", "TAG_SIZE", "SIGNATURE_SIZE",
           "PUBLIC_KEY_SIZE", "DecryptionError", "register_provider", "unregister_provider",
           "providers", "provider_for", "available", "public_key_ed25519", "sign_ed25519",
           "verify_ed25519", "encrypt_aes256gcm", "decrypt_aes256gcm", "argon2id",
           "public_key_x25519", "x25519", "hkdf_sha256", "random_bytes"]
