"""Pure-Python Ed25519 *verification* (RFC 8032 §5.1.7) and public-key conversions.

Only public data passes through here, so a slow, non-constant-time big-int implementation
is acceptable: it lets Pyodide/WASI builds without a native library still check
signatures. Signing and decryption are deliberately absent (see `apr_core.crypto`).

Checks match libsodium's `crypto_sign_verify_detached`: `s < L`, canonical point
encodings, `A` and `R` not of small order, cofactorless equation `[s]B == R + [k]A`.
"""
from __future__ import annotations

import hashlib
from typing import Optional, Tuple

P = 2 ** 255 - 19
L = 2 ** 252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)

Point = Tuple[int, int, int, int]  # extended coordinates (X, Y, Z, T), x = X/Z, y = Y/Z

_BY = 4 * pow(5, P - 2, P) % P


def _add(p: Point, q: Point) -> Point:
    a = (p[1] - p[0]) * (q[1] - q[0]) % P
    b = (p[1] + p[0]) * (q[1] + q[0]) % P
    c = 2 * p[3] * q[3] * D % P
    d = 2 * p[2] * q[2] % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _mul(scalar: int, point: Point) -> Point:
    result: Point = (0, 1, 1, 0)
    while scalar:
        if scalar & 1:
            result = _add(result, point)
        point = _add(point, point)
        scalar >>= 1
    return result


def _recover_x(y: int, sign: int) -> Optional[int]:
    if y >= P:
        return None
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P) % P
    if x2 == 0:
        return None if sign else 0
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P:
        x = x * SQRT_M1 % P
    if (x * x - x2) % P:
        return None
    if x & 1 != sign:
        x = P - x
    return x


def decode_point(data: bytes) -> Optional[Point]:
    """The point a canonical 32-byte encoding names, or None."""
    if len(data) != 32:
        return None
    y = int.from_bytes(data, "little")
    sign = y >> 255
    y &= (1 << 255) - 1
    x = _recover_x(y, sign)
    if x is None:
        return None
    return (x, y, 1, x * y % P)


def encode_point(point: Point) -> bytes:
    zinv = pow(point[2], P - 2, P)
    x, y = point[0] * zinv % P, point[1] * zinv % P
    return (y | (x & 1) << 255).to_bytes(32, "little")


def _is_small_order(point: Point) -> bool:
    eight = _mul(8, point)
    return eight[0] % P == 0 and (eight[1] - eight[2]) % P == 0


_B: Point = (_recover_x(_BY, 0) or 0, _BY, 1, (_recover_x(_BY, 0) or 0) * _BY % P)


def verify(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """True iff `signature` (64 bytes) is a valid Ed25519 signature of `message`."""
    if len(public_key) != 32 or len(signature) != 64:
        return False
    a = decode_point(public_key)
    r = decode_point(signature[:32])
    s = int.from_bytes(signature[32:], "little")
    if a is None or r is None or s >= L or _is_small_order(a) or _is_small_order(r):
        return False
    k = int.from_bytes(hashlib.sha512(signature[:32] + public_key + message).digest(),
                       "little") % L
    # [s]B - [k]A must encode exactly to R.
    neg_a: Point = ((-a[0]) % P, a[1], a[2], (-a[3]) % P)
    check = _add(_mul(s, _B), _mul(k, neg_a))
    return encode_point(check) == bytes(signature[:32])


def ed25519_to_x25519_public(public_key: bytes) -> Optional[bytes]:
    """The X25519 (Montgomery u) form of an Ed25519 public key: u = (1 + y) / (1 - y)."""
    point = decode_point(public_key)
    if point is None or _is_small_order(point):
        return None
    y = point[1]
    u = (1 + y) * pow((1 - y) % P, P - 2, P) % P
    return u.to_bytes(32, "little")


def ed25519_seed_to_x25519_private(seed: bytes) -> bytes:
    """The X25519 private scalar of an Ed25519 seed: clamped SHA-512(seed)[:32] (as
    libsodium's `crypto_sign_ed25519_sk_to_curve25519`)."""
    h = bytearray(hashlib.sha512(bytes(seed)).digest()[:32])
    h[0] &= 248
    h[31] &= 127
    h[31] |= 64
    return bytes(h)


class PureVerifier:
    """The verification-only fallback provider."""

    name = "pure-python-ed25519-verify"
    capabilities = frozenset(["verify_ed25519"])

    def verify_ed25519(self, public_key: bytes, message: bytes, signature: bytes) -> bool:
        return verify(public_key, message, signature)
