"""APR v2 signatures (ARCHITECTURE §4 "Signatures").

A SIGNED file carries a 96-byte block between the last tensor and the footer: a 64-byte
Ed25519 signature, then the signer's 32-byte public key. The signature covers every byte
before the block (header with the SIGNED bit, metadata, index, payloads) through their
SHA-512 digest, so a multi-gigabyte file is hashed in one streaming pass and never held
in memory::

    message = b"APR2-SIGNATURE-V1\\n" + SHA-512(file[0 : size - 112])

The footer CRC covers the block too. Verification locates the block from the file size
alone (never from a parsed, possibly forged header), so with a trusted key *any* altered
byte of a signed file fails with E006: signed bytes break the signature, block bytes
break it or the key match, and footer bytes fail the footer check that follows.
A sharded model is signed through its manifest, which pins every shard's sha256.
"""
from __future__ import annotations

import hashlib
import os
import struct
import zlib
from typing import Any, Dict, Optional, Tuple

from .. import crypto
from ..atomic import atomic_output
from ..errors import AprError, ErrorCode
from ..io import ByteSource, open_source
from . import flags as F
from .apr2_layout import (FOOTER_MAGIC, FOOTER_SIZE, HEADER_SIZE, MAGIC, SIGNATURE_SIZE,
                          Footer, data_end, parse_footer)

DOMAIN = b"APR2-SIGNATURE-V1\n"
CHUNK = 1 << 22
INTEGRITY_ONLY = "integrity only, provenance unknown"
TRUSTED = "trusted"
_FLAGS = struct.Struct("<I")


def _stream(src: ByteSource, start: int, end: int, *digests: Any) -> None:
    offset = start
    while offset < end:
        chunk = src.read(offset, min(CHUNK, end - offset))
        for digest in digests:
            digest.update(chunk)
        offset += len(chunk)


class _Crc:
    """zlib.crc32 behind the hashlib `update` interface."""

    def __init__(self, value: int = 0) -> None:
        self.value = value

    def update(self, data: bytes) -> None:
        self.value = zlib.crc32(data, self.value)


def sign_apr2(source: Any, output: Any, key: Any, overwrite: bool = True) -> Dict[str, Any]:
    """Write a signed copy of the APR v2 file `source` to `output` with `key`
    (`crypto.keys.KeyPair`). The input is verified first (CRC); an existing signature
    block is replaced. Returns {"size", "public_key"}."""
    from .apr2 import read_apr2
    src = open_source(source)
    try:
        model = read_apr2(src, verify=True)  # refuse to sign a damaged file
        body_end = data_end(src.size, model.flags)
        header = bytearray(src.read(0, HEADER_SIZE))
        header[8:12] = _FLAGS.pack(model.flags | F.SIGNED)
        with atomic_output(output, overwrite=overwrite) as handle:
            sha, crc = hashlib.sha512(bytes(header)), _Crc(zlib.crc32(bytes(header)))
            handle.write(bytes(header))

            class _Tee:
                @staticmethod
                def update(chunk: bytes) -> None:
                    handle.write(chunk)
            _stream(src, HEADER_SIZE, body_end, sha, crc, _Tee)
            signature = crypto.sign_ed25519(key.seed, DOMAIN + sha.digest())
            block = signature + key.public
            crc.update(block)
            handle.write(block)
            size = body_end + SIGNATURE_SIZE + FOOTER_SIZE
            handle.write(Footer(crc.value, FOOTER_MAGIC, size).pack())
        return {"size": size, "public_key": key.public.hex()}
    finally:
        if src is not source:
            src.close()


def verify_source(src: ByteSource, trusted_key: Optional[bytes] = None) -> Dict[str, Any]:
    """Check a signed APR v2 source; E006 on any failure.

    Returns {"status": "trusted" | INTEGRITY_ONLY, "public_key": hex}. Without
    `trusted_key` the embedded key is used: that proves integrity, not provenance.
    """
    size = src.size
    if size < HEADER_SIZE + SIGNATURE_SIZE + FOOTER_SIZE or src.read(0, 4) != MAGIC:
        raise AprError(ErrorCode.SIGNATURE, "not a signed APR v2 file", source=src.name)
    (flags,) = _FLAGS.unpack(src.read(8, 4))
    if not flags & F.SIGNED:
        raise AprError(ErrorCode.SIGNATURE, "file is not signed (SIGNED flag unset)",
                       source=src.name)
    block_start = size - FOOTER_SIZE - SIGNATURE_SIZE
    block = src.read(block_start, SIGNATURE_SIZE)
    signature, embedded = block[:64], block[64:]
    if trusted_key is not None and embedded != bytes(trusted_key):
        raise AprError(ErrorCode.SIGNATURE, "signed by a different key than the trusted one",
                       source=src.name, embedded_key=embedded.hex()[:16])
    sha, crc = hashlib.sha512(), _Crc()
    _stream(src, 0, block_start, sha, crc)
    if not crypto.verify_ed25519(embedded, DOMAIN + sha.digest(), signature):
        raise AprError(ErrorCode.SIGNATURE, "Ed25519 signature does not verify: the file "
                       "was altered or signed by someone else", source=src.name)
    crc.update(block)
    footer = parse_footer(src.read(size - FOOTER_SIZE, FOOTER_SIZE))
    if footer.magic != FOOTER_MAGIC or footer.file_size != size or footer.crc32 != crc.value:
        raise AprError(ErrorCode.SIGNATURE, "footer after a valid signature is damaged",
                       source=src.name)
    return {"status": TRUSTED if trusted_key is not None else INTEGRITY_ONLY,
            "public_key": embedded.hex()}


def verify_apr2(target: Any, trusted_key: Optional[bytes] = None) -> Dict[str, Any]:
    """`verify_source` on a path, bytes or source; for a sharded manifest (a path) also
    checks that every shard matches the sha256 the signed manifest pins (E006)."""
    src = open_source(target)
    try:
        result = verify_source(src, trusted_key)
        (flags,) = _FLAGS.unpack(src.read(8, 4))
    finally:
        if src is not target:
            src.close()
    if flags & F.SHARDED and isinstance(target, (str, os.PathLike)):
        result["shards"] = check_shards(os.fspath(target))
    return result


def check_shards(manifest_path: str) -> int:
    from .shards import read_sharded
    from .apr2 import read_apr2
    with read_apr2(manifest_path, verify=False) as head:
        entries = head.metadata.get("shards")
        if not isinstance(entries, list) or not all(
                isinstance(e, dict) and isinstance(e.get("sha256"), str) for e in entries):
            raise AprError(ErrorCode.SIGNATURE, "signed manifest does not pin every shard's "
                           "sha256", source=manifest_path)
    try:
        read_sharded(manifest_path, verify=True).close()
    except AprError as exc:
        if exc.code in (ErrorCode.CHECKSUM, ErrorCode.CORRUPT, ErrorCode.IO):
            raise AprError(ErrorCode.SIGNATURE, "shard does not match the signed manifest: "
                           "{}".format(exc.message), **exc.context) from None
        raise
    return len(entries)


def signature_block(model: Any) -> Optional[Tuple[bytes, bytes]]:
    """(signature, embedded public key) of a parsed AprFile, or None when unsigned."""
    span = model.signature_range
    if span is None:
        return None
    block = model.source.read(span[0], span[1])
    return block[:64], block[64:]


__all__ = ["sign_apr2", "verify_source", "verify_apr2", "check_shards", "signature_block", "DOMAIN",
           "TRUSTED", "INTEGRITY_ONLY"]
