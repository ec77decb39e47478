"""Key derivation shared by APR v1 and v2 encryption (seed 003 §5.2, §5.3).

Password mode: key = Argon2id(password, salt, m_cost, t_cost, p_cost) -> 32 bytes.
Recipient mode: an ephemeral X25519 key pair per file; key = HKDF-SHA256(X25519(ephemeral,
recipient), info) with no salt (seed 003: `HKDF-SHA256(shared_secret, "apr-v1-encrypt")`).
"""
from __future__ import annotations

from typing import Tuple, Union

from . import KEY_SIZE, argon2id, hkdf_sha256, public_key_x25519, random_bytes, x25519

Password = Union[str, bytes]


def password_bytes(password: Password) -> bytes:
    return password.encode("utf-8") if isinstance(password, str) else bytes(password)


def password_key(password: Password, salt: bytes, m_cost: int, t_cost: int,
                 p_cost: int) -> bytes:
    return argon2id(password_bytes(password), salt, m_cost, t_cost, p_cost, KEY_SIZE)


def recipient_seal(recipient_public: bytes, info: bytes) -> Tuple[bytes, bytes]:
    """(ephemeral public key to store, content key) for a recipient's X25519 key."""
    ephemeral = random_bytes(KEY_SIZE)
    key = hkdf_sha256(x25519(ephemeral, recipient_public), info)
    return public_key_x25519(ephemeral), key


def recipient_open(private_key: bytes, ephemeral_public: bytes, info: bytes) -> bytes:
    """The content key a recipient derives from the stored ephemeral public key."""
    return hkdf_sha256(x25519(private_key, ephemeral_public), info)
