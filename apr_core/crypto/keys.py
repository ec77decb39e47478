"""Key files and the one key pair that both signs (Ed25519) and receives (X25519).

`apr keygen` writes a 32-byte Ed25519 seed; its X25519 form (for recipient encryption)
is derived the way libsodium does (`ed25519_pure.ed25519_seed_to_x25519_private` and
`ed25519_to_x25519_public`), so `KEY.pub` serves both `--trusted-key` and `--recipient`.

File format (one line of text, so keys survive copy/paste)::

    apr-ed25519-secret:<64 hex digits>      KEY       (mode 0600)
    apr-ed25519-public:<64 hex digits>      KEY.pub
"""
from __future__ import annotations

import binascii
from typing import NamedTuple

from ..errors import AprError, ErrorCode
from . import public_key_ed25519, random_bytes
from .ed25519_pure import ed25519_seed_to_x25519_private, ed25519_to_x25519_public

SECRET_PREFIX = "apr-ed25519-secret:"
PUBLIC_PREFIX = "apr-ed25519-public:"


class KeyPair(NamedTuple):
    """An Ed25519 seed and its public key."""

    seed: bytes
    public: bytes

    @property
    def x25519_private(self) -> bytes:
        return ed25519_seed_to_x25519_private(self.seed)

    def __repr__(self) -> str:  # never print the secret
        return "KeyPair(public={}..., seed=<redacted>)".format(self.public[:4].hex())


def generate() -> KeyPair:
    seed = random_bytes(32)
    return KeyPair(seed, public_key_ed25519(seed))


def from_seed(seed: bytes) -> KeyPair:
    return KeyPair(bytes(seed), public_key_ed25519(seed))


def x25519_public(ed25519_public: bytes) -> bytes:
    """The recipient (X25519) form of an Ed25519 public key; E011 for an invalid key."""
    converted = ed25519_to_x25519_public(bytes(ed25519_public))
    if converted is None:
        raise AprError(ErrorCode.ARGUMENT, "not a valid Ed25519 public key")
    return converted


def format_secret(pair: KeyPair) -> str:
    return SECRET_PREFIX + pair.seed.hex() + "\n"


def format_public(public: bytes) -> str:
    return PUBLIC_PREFIX + bytes(public).hex() + "\n"


def _parse(text: str, prefix: str, what: str) -> bytes:
    line = text.strip()
    if not line.startswith(prefix):
        raise AprError(ErrorCode.ARGUMENT, "not an apr {} key file (expected '{}...')".format(
            what, prefix))
    try:
        raw = binascii.unhexlify(line[len(prefix):])
    except (binascii.Error, ValueError):
        raise AprError(ErrorCode.ARGUMENT, "{} key is not hex".format(what)) from None
    if len(raw) != 32:
        raise AprError(ErrorCode.ARGUMENT, "{} key must be 32 bytes".format(what),
                       got=len(raw))
    return raw


def parse_secret(text: str) -> KeyPair:
    return from_seed(_parse(text, SECRET_PREFIX, "secret"))


def parse_public(text: str) -> bytes:
    return _parse(text, PUBLIC_PREFIX, "public")


__all__ = ["KeyPair", "generate", "from_seed", "x25519_public", "format_secret",
           "format_public", "parse_secret", "parse_public", "SECRET_PREFIX", "PUBLIC_PREFIX"]
