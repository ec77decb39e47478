"""APR v2 encryption (ARCHITECTURE §4 "Encryption", seed 003 §5.2/§5.3).

Tensor payloads are encrypted one by one with AES-256-GCM, after compression, so
streaming and random access keep working; header, metadata and index stay readable
(`apr inspect` needs no key). Each stored payload becomes::

    nonce (12, random) | ciphertext | tag (16)

with the tensor's index entry (name, dtype, shape, raw_size, flags; not its offset) as
associated data, so swapping payloads or editing a shape fails authentication. The file
key and how to rebuild it live in the metadata under "encryption"::

    {"cipher": "aes-256-gcm", "kdf": "argon2id", "salt": hex16, "m_cost": 19456,
     "t_cost": 2, "p_cost": 1, "key_check": hex16}                       (password)
    {"cipher": "aes-256-gcm", "kdf": "x25519-hkdf-sha256", "ephemeral_public": hex32,
     "recipient": hex8, "key_check": hex16}                              (recipient)

`key_check` is the GCM tag of an empty message under the file key, so a wrong password
or key is refused (E005) before any tensor is touched. Argon2id parameters are recorded,
so cheaper settings (tests) still decrypt; `apr encrypt` always uses seed 003's.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from .. import crypto
from ..crypto.envelope import password_key, recipient_open, recipient_seal
from ..errors import AprError, ErrorCode
from . import flags as F
from .apr2_layout import pack_entry
from .apr2_writer import WriteResult, rewrite_apr2

KEY = "encryption"
CIPHER = "aes-256-gcm"
KDF_PASSWORD = "argon2id"
KDF_RECIPIENT = "x25519-hkdf-sha256"
HKDF_INFO = b"apr-v2-encrypt"
AAD_DOMAIN = b"APR2-TENSOR\0"
CHECK_AAD = b"APR2-KEY-CHECK"
CHECK_NONCE = bytes(crypto.NONCE_SIZE)
RECIPIENT_ID = 8
OVERHEAD = crypto.NONCE_SIZE + crypto.TAG_SIZE
# seed 003 §5.2
ARGON2 = {"m_cost": 19456, "t_cost": 2, "p_cost": 1}


def tensor_aad(entry: Any) -> bytes:
    return AAD_DOMAIN + pack_entry(entry.name.encode("utf-8"), entry.dtype_id, entry.shape,
                                   0, 0, entry.raw_size, entry.flags)


def _key_check(key: bytes) -> str:
    return crypto.encrypt_aes256gcm(key, CHECK_NONCE, b"", CHECK_AAD).hex()


def new_envelope(password: Optional[Any] = None, recipient: Optional[bytes] = None,
                 argon2: Optional[Dict[str, int]] = None) -> Tuple[bytes, Dict[str, Any]]:
    """(file key, metadata record) for a password or a recipient's Ed25519 public key."""
    if (password is None) == (recipient is None):
        raise AprError(ErrorCode.ARGUMENT, "give exactly one of a password or a recipient")
    record: Dict[str, Any] = {"cipher": CIPHER}
    if password is not None:
        params = dict(ARGON2 if argon2 is None else argon2)
        salt = crypto.random_bytes(16)
        key = password_key(password, salt, params["m_cost"], params["t_cost"],
                           params["p_cost"])
        record.update({"kdf": KDF_PASSWORD, "salt": salt.hex()}, **params)
    else:
        from ..crypto.keys import x25519_public
        x_pub = x25519_public(recipient)
        ephemeral, key = recipient_seal(x_pub, HKDF_INFO)
        record.update({"kdf": KDF_RECIPIENT, "ephemeral_public": ephemeral.hex(),
                       "recipient": x_pub[:RECIPIENT_ID].hex()})
    record["key_check"] = _key_check(key)
    return key, record


def _hex(record: Dict[str, Any], field: str, size: int) -> bytes:
    value = record.get(field)
    try:
        raw = bytes.fromhex(value) if isinstance(value, str) else b""
    except ValueError:
        raw = b""
    if len(raw) != size:
        raise AprError(ErrorCode.CORRUPT, "invalid '{}' in the encryption record".format(field))
    return raw


def _int(record: Dict[str, Any], field: str) -> int:
    value = record.get(field)
    if not isinstance(value, int) or isinstance(value, bool):
        raise AprError(ErrorCode.CORRUPT, "invalid '{}' in the encryption record".format(field))
    return value


def envelope(model: Any) -> Dict[str, Any]:
    """The encryption record of an ENCRYPTED AprFile (E002 when missing or malformed)."""
    record = model.metadata.get(KEY)
    if not isinstance(record, dict) or record.get("cipher") != CIPHER \
            or record.get("kdf") not in (KDF_PASSWORD, KDF_RECIPIENT):
        raise AprError(ErrorCode.CORRUPT, "ENCRYPTED file without a valid encryption record")
    return record


def file_key(model: Any, password: Optional[Any] = None, key: Optional[Any] = None) -> bytes:
    """Rebuild and check the file key; E005 for a wrong password, key or recipient."""
    record = envelope(model)
    check = _hex(record, "key_check", crypto.TAG_SIZE)
    if record["kdf"] == KDF_PASSWORD:
        if password is None:
            raise AprError(ErrorCode.DECRYPT, "this file is password-encrypted: give a password")
        content_key = password_key(password, _hex(record, "salt", 16), _int(record, "m_cost"),
                                   _int(record, "t_cost"), _int(record, "p_cost"))
    else:
        if key is None:
            raise AprError(ErrorCode.DECRYPT, "this file is encrypted for a recipient: give "
                           "the recipient's secret key")
        from ..crypto.keys import x25519_public
        if x25519_public(key.public)[:RECIPIENT_ID] != _hex(record, "recipient", RECIPIENT_ID):
            raise AprError(ErrorCode.DECRYPT, "this file is encrypted for another recipient")
        content_key = recipient_open(key.x25519_private,
                                     _hex(record, "ephemeral_public", 32), HKDF_INFO)
    crypto.decrypt_aes256gcm(content_key, CHECK_NONCE, check, CHECK_AAD)  # E005 if wrong
    return content_key


def encrypt_payload(content_key: bytes, entry: Any, stored: bytes) -> bytes:
    nonce = crypto.random_bytes(crypto.NONCE_SIZE)
    return nonce + crypto.encrypt_aes256gcm(content_key, nonce, stored, tensor_aad(entry))


def decrypt_payload(content_key: bytes, entry: Any, stored: bytes) -> bytes:
    if len(stored) < OVERHEAD:
        raise AprError(ErrorCode.CORRUPT, "encrypted payload shorter than nonce and tag",
                       tensor=entry.name, size=len(stored))
    nonce = stored[:crypto.NONCE_SIZE]
    return crypto.decrypt_aes256gcm(content_key, nonce, stored[crypto.NONCE_SIZE:],
                                    tensor_aad(entry), tensor=entry.name)


def unlock(model: Any, password: Optional[Any] = None, key: Optional[Any] = None) -> None:
    """Install a decrypting `payload_filter` on an ENCRYPTED AprFile (checks the key)."""
    content_key = file_key(model, password, key)
    by_name = {entry.name: entry for entry in model.entries}

    def payload_filter(info: Any, stored: bytes) -> bytes:
        return decrypt_payload(content_key, by_name[info.name], stored)
    model.payload_filter = payload_filter


def encrypt_apr2(model: Any, output: Any, password: Optional[Any] = None,
                 recipient: Optional[bytes] = None, argon2: Optional[Dict[str, int]] = None,
                 overwrite: bool = True) -> WriteResult:
    """Write an encrypted copy of the AprFile `model` (payload bytes otherwise unchanged)."""
    if model.flags & F.ENCRYPTED:
        raise AprError(ErrorCode.ARGUMENT, "file is already encrypted")
    if model.flags & F.SHARDED:
        raise AprError(ErrorCode.UNSUPPORTED, "encrypt the shards of a sharded model one by "
                       "one; the manifest holds no tensor data")
    content_key, record = new_envelope(password, recipient, argon2)
    meta = dict(model.metadata)
    meta[KEY] = record
    return rewrite_apr2(output, model, meta,
                        lambda entry, stored: encrypt_payload(content_key, entry, stored),
                        set_flags=F.ENCRYPTED, overwrite=overwrite)


def decrypt_apr2(model: Any, output: Any, password: Optional[Any] = None,
                 key: Optional[Any] = None, overwrite: bool = True) -> WriteResult:
    """Write the decrypted copy; the key is checked before the output is created, and a
    tampered tensor aborts the write (atomic output: nothing is left behind)."""
    if not model.flags & F.ENCRYPTED:
        raise AprError(ErrorCode.ARGUMENT, "file is not encrypted")
    content_key = file_key(model, password, key)
    meta = dict(model.metadata)
    meta.pop(KEY, None)
    return rewrite_apr2(output, model, meta,
                        lambda entry, stored: decrypt_payload(content_key, entry, stored),
                        clear_flags=F.ENCRYPTED, overwrite=overwrite)


__all__ = ["encrypt_apr2", "decrypt_apr2", "unlock", "file_key", "envelope",
           "new_envelope", "ARGON2", "KEY"]
