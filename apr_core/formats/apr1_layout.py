"""APR v1 (`APRN`, seed 003 §2-§6) tables and byte layout; no I/O, no crypto.

File layout (all integers little-endian)::

    header (32) | metadata (MessagePack map) | payload region | [signature (96)] | crc32 (4)

Header: magic "APRN", u8 major, u8 minor, u16 model_type, u32 metadata_size,
u32 payload_size (bytes of the payload region), u32 uncompressed_size, u8 compression,
u8 flags, 10 reserved bytes (aprender stores a quality score in the first of them).

Payload region: the compressed payload; when ENCRYPTED, seed 003 §5.2/§5.3::

    password:  salt (16) | nonce (12) | AES-256-GCM(compressed payload) incl. tag
    recipient: ephemeral X25519 public (32) | recipient id (8) | nonce (12) | ciphertext

The recipient id is the first 8 bytes of the recipient's X25519 public key (as aprender
writes it). The signature block is Ed25519 over every byte before it (64) followed by the
signer's public key (32). The CRC32 covers every byte before it.
"""
from __future__ import annotations

import struct
from typing import List, NamedTuple

MAGIC = b"APRN"
VERSION = (1, 0)
HEADER = struct.Struct("<4sBBHIIIBB10s")
HEADER_SIZE = HEADER.size  # 32
CRC_SIZE = 4
SIGNATURE_BLOCK = 96
SALT_SIZE = 16
NONCE_SIZE = 12
TAG_SIZE = 16
X25519_SIZE = 32
RECIPIENT_ID_SIZE = 8
PASSWORD_PREFIX = SALT_SIZE + NONCE_SIZE
RECIPIENT_PREFIX = X25519_SIZE + RECIPIENT_ID_SIZE + NONCE_SIZE
HKDF_INFO = b"apr-v1-encrypt"
# seed 003 §5.2 (OWASP): 19 MiB, 2 passes, 1 lane -> 32-byte key
ARGON2_M_COST, ARGON2_T_COST, ARGON2_P_COST = 19456, 2, 1
# Largest payload a v1 reader accepts (aprender's MAX_UNCOMPRESSED_SIZE).
MAX_UNCOMPRESSED = 1 << 30

# seed 003 §3.1; 0x0040 is aprender's later addition.
MODEL_TYPES = {
    0x0001: "LINEAR_REGRESSION", 0x0002: "LOGISTIC_REGRESSION", 0x0003: "DECISION_TREE",
    0x0004: "RANDOM_FOREST", 0x0005: "GRADIENT_BOOSTING", 0x0006: "KMEANS", 0x0007: "PCA",
    0x0008: "NAIVE_BAYES", 0x0009: "KNN", 0x000A: "SVM", 0x0010: "NGRAM_LM",
    0x0011: "TFIDF", 0x0012: "COUNT_VECTORIZER", 0x0020: "NEURAL_SEQUENTIAL",
    0x0021: "NEURAL_CUSTOM", 0x0030: "CONTENT_RECOMMENDER", 0x0040: "MIXTURE_OF_EXPERTS",
    0x00FF: "CUSTOM",
}
MODEL_TYPE_IDS = {name: code for code, name in MODEL_TYPES.items()}

# seed 003 §6.1: id -> (name, apr_core codec name, zstd level)
COMPRESSIONS = {0: ("none", None, None), 1: ("zstd-l3", "zstd", 3),
                2: ("zstd-l19", "zstd", 19), 3: ("lz4", "lz4", None)}
COMPRESSION_IDS = {name: code for code, (name, _, _) in COMPRESSIONS.items()}

# seed 003 §3.2; bit 6 is aprender's HAS_MODEL_CARD, bit 7 is reserved.
ENCRYPTED, SIGNED, STREAMING, LICENSED, TRUENO_NATIVE, QUANTIZED, HAS_MODEL_CARD = (
    1, 2, 4, 8, 16, 32, 64)
FLAGS = (("ENCRYPTED", ENCRYPTED), ("SIGNED", SIGNED), ("STREAMING", STREAMING),
         ("LICENSED", LICENSED), ("TRUENO_NATIVE", TRUENO_NATIVE), ("QUANTIZED", QUANTIZED),
         ("HAS_MODEL_CARD", HAS_MODEL_CARD))


class Header(NamedTuple):
    magic: bytes
    major: int
    minor: int
    model_type: int
    metadata_size: int
    payload_size: int
    uncompressed_size: int
    compression: int
    flags: int
    reserved: bytes

    def pack(self) -> bytes:
        return HEADER.pack(*self)


def flag_names(flags: int) -> List[str]:
    names = [name for name, bit in FLAGS if flags & bit]
    if flags & 0x80:
        names.append("BIT7")
    return names


def trailer_size(flags: int) -> int:
    """Bytes after the payload region: optional signature block plus the CRC."""
    return CRC_SIZE + (SIGNATURE_BLOCK if flags & SIGNED else 0)
