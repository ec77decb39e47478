"""THE sha256 helper: the digest of a file or of any byte source, read in bounded chunks,
for every place apr pins or checks content (shard manifests, real-model checksums,
import provenance, download verification)."""
from __future__ import annotations

import hashlib
from typing import Any

CHUNK = 4 << 20      # bytes hashed per read: bounded memory, few calls


def sha256_file(path: Any) -> str:
    """Hex sha256 of the file at `path` (str or PathLike)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_source(source: Any) -> str:
    """Hex sha256 of a ByteSource's bytes (apr_core.io: `size`, `read(offset, n)`)."""
    digest = hashlib.sha256()
    offset = 0
    while offset < source.size:
        chunk = source.read(offset, min(CHUNK, source.size - offset))
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()


__all__ = ["sha256_file", "sha256_source", "CHUNK"]
