"""`open_model`: one entry point for every supported file, directory or byte source."""
from __future__ import annotations

import os
from typing import Any, NamedTuple, Optional

from ..errors import AprError, ErrorCode
from ..io import ByteSource, open_source
from ..tensor import ModelFile
from .detect import APR1, APR2, GGUF, SAFETENSORS, detect_format

INDEX_SUFFIX = ".safetensors.index.json"
TRUSTED_KEY_ENV = "APR_TRUSTED_KEY"


def open_model(target: Any, verify: bool = True, trusted_key: Optional[bytes] = None,
               password: Optional[Any] = None, key: Optional[Any] = None) -> ModelFile:
    """Open an APR v2 file or sharded manifest, APR v1 file, GGUF, SafeTensors file,
    sharded SafeTensors index or HF model directory. `verify=False` skips whole-file
    checksums (the `inspect` path reads only headers and indexes).

    `trusted_key` (32-byte Ed25519 public key): the file must be signed by that key; the
    signature (and, for a sharded manifest, every shard's pinned sha256) is checked before
    anything else is parsed, E006 on failure. `password` or `key` (a
    `crypto.keys.KeyPair`) decrypt an ENCRYPTED APR file (E005 when wrong).

    Without `trusted_key`, the environment variable APR_TRUSTED_KEY (the path of a
    `KEY.pub` from `apr keygen`) configures one: every model opened must then be signed
    by it, so `apr run` and the server refuse anything else.
    """
    if trusted_key is None and os.environ.get(TRUSTED_KEY_ENV):
        trusted_key = configured_trusted_key()
    secrets = _Secrets(trusted_key, password, key)
    if isinstance(target, (str, os.PathLike)):
        path = os.fspath(target)
        if os.path.isdir(path) or path.endswith(INDEX_SUFFIX):
            if trusted_key is not None:
                raise AprError(ErrorCode.SIGNATURE, "a trusted key requires a signed APR file; "
                               "directories and SafeTensors indexes carry no signature",
                               path=path)
            from .safetensors_index import open_safetensors_dir, read_safetensors_index
            if os.path.isdir(path):
                return open_safetensors_dir(path)
            return read_safetensors_index(path)
    source = open_source(target)
    try:
        model = _open_source(source, target, verify, secrets)
    except BaseException:
        source.close()
        raise
    if source is not target:
        model.owns_source = True  # opened here from a path: closing the model closes it
    return model


def configured_trusted_key() -> Optional[bytes]:
    """The public key named by APR_TRUSTED_KEY, or None when the variable is unset."""
    path = os.environ.get(TRUSTED_KEY_ENV)
    if not path:
        return None
    from ..crypto.keys import parse_public
    try:
        with open(path, "r", encoding="utf-8") as handle:
            return parse_public(handle.read())
    except OSError as exc:
        raise AprError(ErrorCode.IO, "cannot read the trusted key named by {}".format(
            TRUSTED_KEY_ENV), path=path, reason=exc.strerror) from None


class _Secrets(NamedTuple):
    trusted_key: Optional[bytes]
    password: Optional[Any]
    key: Optional[Any]


def _open_source(source: ByteSource, target: Any, verify: bool,
                 secrets: _Secrets) -> ModelFile:
    if secrets.trusted_key is not None and source.size >= 4 \
            and source.read(0, 4) != b"APRN":
        # Before detection: with a trusted key, even a damaged magic is a signature error.
        from .apr2_sign import verify_source
        verify_source(source, secrets.trusted_key)
        verify = True
    fmt = detect_format(source)
    if fmt == APR2:
        from .apr2 import read_apr2
        from .flags import ENCRYPTED, SHARDED
        model = read_apr2(source, verify=verify)
        if model.flags & SHARDED:
            if not isinstance(target, (str, os.PathLike)):
                raise AprError(ErrorCode.ARGUMENT,
                               "a sharded manifest must be opened by path (its shards are files)")
            source.close()  # the manifest is reopened by path with its shards
            if secrets.trusted_key is not None:
                from .apr2_sign import check_shards
                check_shards(os.fspath(target))
            from .shards import read_sharded
            return read_sharded(os.fspath(target), verify=verify)
        if model.flags & ENCRYPTED and (secrets.password is not None
                                        or secrets.key is not None):
            from .apr2_encrypt import unlock
            unlock(model, secrets.password, secrets.key)
        return model
    if fmt == APR1:
        from .apr1 import read_apr1
        return read_apr1(source, verify=verify, password=secrets.password, key=secrets.key,
                         trusted_key=secrets.trusted_key)
    if fmt == GGUF:
        from .gguf import read_gguf
        return read_gguf(source)
    if fmt == SAFETENSORS:
        from .safetensors import read_safetensors
        return read_safetensors(source)
    raise AprError(ErrorCode.FORMAT, "unknown format", format=fmt)
