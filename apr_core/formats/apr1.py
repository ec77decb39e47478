"""APR v1 (`APRN`, seed 003) reader and writer; layout in `apr1_layout`.

`read_apr1(source, verify=True, password=None, key=None, trusted_key=None)` checks, in
order: header (magic E001, major version E003, model type / compression id E009, sizes
that must add up to the file size E002), MessagePack metadata (E001), then with `verify`
the CRC32 (E004) and the signature (E006). With `trusted_key` the signature is checked
first, over the raw bytes, and any alteration of the file is E006. The payload is exposed
as one U8 tensor named `payload` (seed 003 payloads are opaque, e.g. aprender's bincode);
reading it decrypts (E005 on a wrong password/key) and decompresses.

`write_apr1(path, payload, model_type, metadata, compression, password=, recipient=,
signing_key=)` writes the same layout atomically; `write_apr1_bytes` returns the bytes.
"""
from __future__ import annotations

import zlib
from typing import Any, Dict, List, Optional, Tuple

from .. import crypto
from ..atomic import atomic_output
from ..dtypes import BY_NAME
from ..errors import AprError, ErrorCode
from ..io import ByteSource, open_source
from ..tensor import ModelFile, TensorInfo
from . import apr1_layout as L
from .msgpack_codec import packb, to_json_safe, unpackb

PAYLOAD = "payload"
# Header bits that describe the payload rather than the file's own layout.
CARRIED_FLAGS = L.STREAMING | L.LICENSED | L.TRUENO_NATIVE | L.QUANTIZED | L.HAS_MODEL_CARD
DEFAULT_MAX_METADATA = 64 * 2 ** 20


class Apr1File(ModelFile):
    """A parsed APR v1 file: `model_type`, `card` (decoded MessagePack metadata),
    `metadata` (JSON-safe card plus an `apr1` summary) and one tensor, `payload`."""

    format = "apr1"

    def __init__(self, source: ByteSource, header: L.Header, card: Any,
                 warnings: List[str]) -> None:
        super().__init__()
        self.source = source
        self.apr1_header = header
        self.card = card
        self.warnings = warnings
        # Not `header`/`flags`: generic tools read those as APR v2 fields.
        self.apr1_flags = header.flags
        self.version = "{}.{}".format(header.major, header.minor)
        self.model_type = L.MODEL_TYPES[header.model_type]
        self.compression = L.COMPRESSIONS[header.compression][0]
        self.signature_status: Optional[str] = None
        self._password: Optional[Any] = None
        self._key: Optional[Any] = None
        self.payload_offset = L.HEADER_SIZE + header.metadata_size
        meta = to_json_safe(card) if isinstance(card, dict) else {"card": to_json_safe(card)}
        meta["apr1"] = {"model_type": self.model_type, "model_type_id": header.model_type,
                        "format_version": self.version, "compression": self.compression,
                        "flags": L.flag_names(header.flags),
                        "uncompressed_size": header.uncompressed_size}
        self.metadata = meta
        self.tensors[PAYLOAD] = TensorInfo(PAYLOAD, BY_NAME["U8"],
                                           (header.uncompressed_size,), self.payload_offset,
                                           header.payload_size, header.uncompressed_size,
                                           header.compression)

    @property
    def encrypted(self) -> bool:
        return bool(self.apr1_flags & L.ENCRYPTED)

    def unlock(self, password: Optional[Any] = None, key: Optional[Any] = None) -> None:
        """Remember the password or `crypto.keys.KeyPair` used to decrypt the payload."""
        self._password, self._key = password, key

    def payload(self) -> bytes:
        """The decrypted, decompressed payload."""
        return self.read_raw(PAYLOAD).data

    def _read_payload(self, info: TensorInfo) -> bytes:
        stored = self.source.read(info.offset, info.size)
        if self.encrypted:
            stored = _decrypt(stored, self._password, self._key)
        return _decompress(stored, self.apr1_header)

    def verify(self, trusted_key: Optional[bytes] = None) -> None:
        """CRC32 (E004) and, when SIGNED, the signature (E006); see the module docstring."""
        data = self.source.read(0, self.source.size)
        if trusted_key is not None:
            _check_trusted(data, trusted_key)
            self.signature_status = "trusted"
            return
        crc = zlib.crc32(data[:-L.CRC_SIZE])
        stored = int.from_bytes(data[-L.CRC_SIZE:], "little")
        if crc != stored:
            raise AprError(ErrorCode.CHECKSUM, "CRC32 mismatch: the file is corrupted",
                           stored="{:08x}".format(stored), computed="{:08x}".format(crc))
        if self.apr1_flags & L.SIGNED:
            _check_signature(data, None)
            self.signature_status = "integrity only, provenance unknown"


def read_apr1(source: Any, verify: bool = True, password: Optional[Any] = None,
              key: Optional[Any] = None, trusted_key: Optional[bytes] = None,
              max_metadata: int = DEFAULT_MAX_METADATA) -> Apr1File:
    """Open an APR v1 file from a path, bytes or ByteSource (see the module docstring)."""
    src = open_source(source)
    owns = src is not source
    try:
        if trusted_key is not None:
            # Before any parsing: with a trusted key every damaged byte is a signature error.
            _check_trusted(src.read(0, src.size), trusted_key)
        model = _parse(src, max_metadata)
        model.owns_source = owns
        model.unlock(password, key)
        if trusted_key is not None:
            model.signature_status = "trusted"
        elif verify:
            model.verify()
        return model
    except BaseException:
        if owns:
            src.close()
        raise


def _parse(src: ByteSource, max_metadata: int) -> Apr1File:
    size = src.size
    if size < L.HEADER_SIZE + L.CRC_SIZE:
        raise AprError(ErrorCode.CORRUPT, "file too short for an APR v1 header and CRC",
                       size=size)
    header = L.Header(*L.HEADER.unpack(src.read(0, L.HEADER_SIZE)))
    if header.magic != L.MAGIC:
        raise AprError(ErrorCode.FORMAT, "not an APR v1 file (bad magic)", magic=header.magic)
    if header.major != L.VERSION[0]:
        raise AprError(ErrorCode.VERSION, "unsupported APR v1 major version",
                       version="{}.{}".format(header.major, header.minor))
    if header.model_type not in L.MODEL_TYPES:
        raise AprError(ErrorCode.UNSUPPORTED, "unknown APR v1 model type",
                       model_type="0x{:04x}".format(header.model_type))
    if header.compression not in L.COMPRESSIONS:
        raise AprError(ErrorCode.UNSUPPORTED, "unknown APR v1 compression id",
                       compression=header.compression)
    expected = (L.HEADER_SIZE + header.metadata_size + header.payload_size
                + L.trailer_size(header.flags))
    if expected != size:
        raise AprError(ErrorCode.CORRUPT, "APR v1 section sizes do not add up to the file "
                       "size", expected=expected, file_size=size)
    if header.metadata_size > max_metadata:
        raise AprError(ErrorCode.MEMORY, "metadata section exceeds the size limit",
                       metadata_size=header.metadata_size, limit=max_metadata)
    if header.uncompressed_size > L.MAX_UNCOMPRESSED:
        raise AprError(ErrorCode.MEMORY, "payload larger than an APR v1 reader accepts",
                       uncompressed_size=header.uncompressed_size, limit=L.MAX_UNCOMPRESSED)
    _check_payload_sizes(header)
    warnings = []
    if header.minor > L.VERSION[1]:
        warnings.append("newer minor version 1.{}".format(header.minor))
    if header.flags & 0x80:
        warnings.append("reserved flag bit 7 is set")
    if header.flags & L.STREAMING:
        warnings.append("STREAMING flag ignored: payload read in one piece")
    if any(header.reserved[1:]):
        warnings.append("reserved header bytes are not zero")
    card = unpackb(src.read(L.HEADER_SIZE, header.metadata_size))
    if not isinstance(card, dict):
        raise AprError(ErrorCode.FORMAT, "APR v1 metadata must be a MessagePack map",
                       type=type(card).__name__)
    return Apr1File(src, header, card, warnings)


def _check_payload_sizes(header: L.Header) -> None:
    overhead = 0
    if header.flags & L.ENCRYPTED:
        overhead = L.PASSWORD_PREFIX + L.TAG_SIZE
        if header.payload_size < overhead:
            raise AprError(ErrorCode.CORRUPT, "encrypted payload shorter than its salt, "
                           "nonce and tag", payload_size=header.payload_size)
    if header.compression == 0 and not header.flags & L.ENCRYPTED \
            and header.payload_size != header.uncompressed_size:
        raise AprError(ErrorCode.CORRUPT, "uncompressed payload size differs from "
                       "uncompressed_size", payload_size=header.payload_size,
                       uncompressed_size=header.uncompressed_size)


def _decompress(stored: bytes, header: L.Header) -> bytes:
    _, codec, _ = L.COMPRESSIONS[header.compression]
    raw_size = header.uncompressed_size
    if codec is None:
        if len(stored) != raw_size:
            raise AprError(ErrorCode.CORRUPT, "payload size differs from uncompressed_size",
                           size=len(stored), uncompressed_size=raw_size)
        return stored
    if codec == "zstd":
        from ..codecs import zstd
        return zstd.decompress(stored, raw_size)
    # lz4: aprender's lz4_flex `compress_prepend_size`: u32 LE size, then one block.
    from ..codecs import lz4
    if len(stored) < 4 or int.from_bytes(stored[:4], "little") != raw_size:
        raise AprError(ErrorCode.CORRUPT, "LZ4 size prefix differs from uncompressed_size",
                       uncompressed_size=raw_size)
    return lz4.decompress_block(stored[4:], raw_size)


def _compress(payload: bytes, compression: int) -> bytes:
    _, codec, level = L.COMPRESSIONS[compression]
    if codec is None:
        return payload
    if codec == "zstd":
        from ..codecs import zstd
        return zstd.compress(payload, level)
    from ..codecs import lz4
    return len(payload).to_bytes(4, "little") + lz4.compress_block(payload)


def _decrypt(region: bytes, password: Optional[Any], key: Optional[Any]) -> bytes:
    from ..crypto.envelope import password_key, recipient_open
    if password is not None:
        salt, nonce = region[:L.SALT_SIZE], region[L.SALT_SIZE:L.PASSWORD_PREFIX]
        content_key = password_key(password, salt, L.ARGON2_M_COST, L.ARGON2_T_COST,
                                   L.ARGON2_P_COST)
        return crypto.decrypt_aes256gcm(content_key, nonce, region[L.PASSWORD_PREFIX:])
    if key is not None:
        from ..crypto.keys import x25519_public
        if len(region) < L.RECIPIENT_PREFIX + L.TAG_SIZE:
            raise AprError(ErrorCode.CORRUPT, "encrypted payload shorter than its recipient "
                           "block", payload_size=len(region))
        ephemeral = region[:L.X25519_SIZE]
        recipient_id = region[L.X25519_SIZE:L.X25519_SIZE + L.RECIPIENT_ID_SIZE]
        if x25519_public(key.public)[:L.RECIPIENT_ID_SIZE] != recipient_id:
            raise AprError(ErrorCode.DECRYPT, "the payload is encrypted for another recipient")
        nonce = region[L.X25519_SIZE + L.RECIPIENT_ID_SIZE:L.RECIPIENT_PREFIX]
        content_key = recipient_open(key.x25519_private, ephemeral, L.HKDF_INFO)
        return crypto.decrypt_aes256gcm(content_key, nonce, region[L.RECIPIENT_PREFIX:])
    raise AprError(ErrorCode.UNSUPPORTED, "the payload is encrypted: give a password or key")


def _encrypt(compressed: bytes, password: Optional[Any], recipient: Optional[bytes]) -> bytes:
    from ..crypto.envelope import password_key, recipient_seal
    nonce = crypto.random_bytes(L.NONCE_SIZE)
    if password is not None:
        salt = crypto.random_bytes(L.SALT_SIZE)
        content_key = password_key(password, salt, L.ARGON2_M_COST, L.ARGON2_T_COST,
                                   L.ARGON2_P_COST)
        return salt + nonce + crypto.encrypt_aes256gcm(content_key, nonce, compressed)
    assert recipient is not None
    ephemeral, content_key = recipient_seal(recipient, L.HKDF_INFO)
    return (ephemeral + recipient[:L.RECIPIENT_ID_SIZE] + nonce
            + crypto.encrypt_aes256gcm(content_key, nonce, compressed))


def _signature_parts(data: bytes) -> Tuple[bytes, bytes, bytes]:
    """(signed bytes, signature, embedded public key), located from the file size."""
    end = len(data) - L.CRC_SIZE
    start = end - L.SIGNATURE_BLOCK
    if start < L.HEADER_SIZE:
        raise AprError(ErrorCode.SIGNATURE, "file too short to carry a signature block")
    return data[:start], data[start:start + 64], data[start + 64:end]


def _check_signature(data: bytes, trusted_key: Optional[bytes]) -> None:
    signed, signature, embedded = _signature_parts(data)
    if trusted_key is not None and embedded != bytes(trusted_key):
        raise AprError(ErrorCode.SIGNATURE, "signed by a different key than the trusted one",
                       embedded_key=embedded.hex()[:16])
    if not crypto.verify_ed25519(embedded, signed, signature):
        raise AprError(ErrorCode.SIGNATURE, "Ed25519 signature does not verify")


def _check_trusted(data: bytes, trusted_key: bytes) -> None:
    """With a trusted key: the SIGNED flag, the signature, then the CRC, all as E006."""
    if len(data) < L.HEADER_SIZE + L.SIGNATURE_BLOCK + L.CRC_SIZE \
            or not data[21] & L.SIGNED:
        raise AprError(ErrorCode.SIGNATURE, "file is not signed (a trusted key was given)")
    _check_signature(data, trusted_key)
    if zlib.crc32(data[:-L.CRC_SIZE]) != int.from_bytes(data[-L.CRC_SIZE:], "little"):
        raise AprError(ErrorCode.SIGNATURE, "CRC32 after a valid signature is damaged")


def write_apr1_bytes(payload: bytes, model_type: Any, metadata: Dict[str, Any],
                     compression: str = "none", password: Optional[Any] = None,
                     recipient: Optional[bytes] = None,
                     signing_key: Optional[Any] = None, extra_flags: int = 0) -> bytes:
    """The bytes of an APR v1 file.

    `model_type`: a name from the seed 003 catalog ("LINEAR_REGRESSION") or its id;
    `compression`: "none", "zstd-l3", "zstd-l19" or "lz4"; `password` or `recipient`
    (an Ed25519 public key from `apr keygen`, converted to X25519) encrypt the payload;
    `signing_key` (a `crypto.keys.KeyPair`) signs the file; `extra_flags` are
    informational header bits to set (QUANTIZED, HAS_MODEL_CARD, TRUENO_NATIVE ...).
    """
    type_id = model_type if isinstance(model_type, int) else L.MODEL_TYPE_IDS.get(model_type)
    if type_id not in L.MODEL_TYPES:
        raise AprError(ErrorCode.ARGUMENT, "unknown APR v1 model type", model_type=model_type)
    if compression not in L.COMPRESSION_IDS:
        raise AprError(ErrorCode.ARGUMENT, "unknown APR v1 compression",
                       compression=compression, known=sorted(L.COMPRESSION_IDS))
    if password is not None and recipient is not None:
        raise AprError(ErrorCode.ARGUMENT, "give a password or a recipient, not both")
    payload = bytes(payload)
    if len(payload) > L.MAX_UNCOMPRESSED:
        raise AprError(ErrorCode.MEMORY, "payload too large for APR v1", size=len(payload))
    codec = L.COMPRESSION_IDS[compression]
    region = _compress(payload, codec)
    flags = extra_flags & CARRIED_FLAGS
    if password is not None or recipient is not None:
        from ..crypto.keys import x25519_public
        x_recipient = x25519_public(recipient) if recipient is not None else None
        region = _encrypt(region, password, x_recipient)
        flags |= L.ENCRYPTED
    if signing_key is not None:
        flags |= L.SIGNED
    if isinstance(metadata, dict) and metadata.get("license") is not None:
        flags |= L.LICENSED
    meta = packb(metadata)
    header = L.Header(L.MAGIC, L.VERSION[0], L.VERSION[1], type_id, len(meta), len(region),
                      len(payload), codec, flags, bytes(10))
    body = header.pack() + meta + region
    if signing_key is not None:
        body += crypto.sign_ed25519(signing_key.seed, body) + signing_key.public
    return body + zlib.crc32(body).to_bytes(4, "little")


def sign_apr1_bytes(data: bytes, signing_key: Any) -> bytes:
    """A signed copy of the APR v1 file `data` (checked first; an old signature is
    replaced)."""
    model = read_apr1(data, verify=True)
    end = model.payload_offset + model.apr1_header.payload_size
    body = bytearray(data[:end])
    body[21] |= L.SIGNED
    body = bytes(body)
    body += crypto.sign_ed25519(signing_key.seed, body) + signing_key.public
    return body + zlib.crc32(body).to_bytes(4, "little")


def rewrite_apr1_bytes(model: Apr1File, password: Optional[Any] = None,
                       recipient: Optional[bytes] = None) -> bytes:
    """The payload of an opened (and, if encrypted, unlocked) v1 file rewritten with the
    same model type, metadata and compression, encrypted for `password`/`recipient` or
    in the clear; any signature is dropped (the bytes change)."""
    return write_apr1_bytes(model.payload(), model.apr1_header.model_type, model.card,
                            model.compression, password, recipient,
                            extra_flags=model.apr1_flags)


def write_apr1(path: Any, payload: bytes, model_type: Any, metadata: Dict[str, Any],
               compression: str = "none", password: Optional[Any] = None,
               recipient: Optional[bytes] = None, signing_key: Optional[Any] = None,
               overwrite: bool = True) -> int:
    """Write an APR v1 file atomically; returns its size."""
    data = write_apr1_bytes(payload, model_type, metadata, compression, password,
                            recipient, signing_key)
    with atomic_output(path, overwrite=overwrite) as handle:
        handle.write(data)
    return len(data)


__all__ = ["Apr1File", "read_apr1", "write_apr1", "write_apr1_bytes", "sign_apr1_bytes",
           "rewrite_apr1_bytes", "PAYLOAD"]
