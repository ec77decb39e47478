"""`open_model`: one entry point for every supported file, directory or byte source."""
from __future__ import annotations

import os
from typing import Any

from ..errors import AprError, ErrorCode
from ..io import ByteSource, open_source
from ..tensor import ModelFile
from .detect import APR1, APR2, GGUF, SAFETENSORS, detect_format

INDEX_SUFFIX = ".safetensors.index.json"


def open_model(target: Any, verify: bool = True) -> ModelFile:
    """Open an APR v2 file or sharded manifest, GGUF, SafeTensors file, sharded SafeTensors
    index or HF model directory. `verify=False` skips whole-file checksums (the `inspect`
    path reads only headers and indexes)."""
    if isinstance(target, (str, os.PathLike)):
        path = os.fspath(target)
        if os.path.isdir(path) or path.endswith(INDEX_SUFFIX):
            from .safetensors_index import open_safetensors_dir, read_safetensors_index
            if os.path.isdir(path):
                return open_safetensors_dir(path)
            return read_safetensors_index(path)
    source = open_source(target)
    try:
        model = _open_source(source, target, verify)
    except BaseException:
        source.close()
        raise
    if source is not target:
        model.owns_source = True  # opened here from a path: closing the model closes it
    return model


def _open_source(source: ByteSource, target: Any, verify: bool) -> ModelFile:
    fmt = detect_format(source)
    if fmt == APR2:
        from .apr2 import read_apr2
        from .flags import SHARDED
        model = read_apr2(source, verify=verify)
        if model.flags & SHARDED:
            if not isinstance(target, (str, os.PathLike)):
                raise AprError(ErrorCode.ARGUMENT,
                               "a sharded manifest must be opened by path (its shards are files)")
            source.close()  # the manifest is reopened by path with its shards
            from .shards import read_sharded
            return read_sharded(os.fspath(target), verify=verify)
        return model
    if fmt == GGUF:
        from .gguf import read_gguf
        return read_gguf(source)
    if fmt == SAFETENSORS:
        from .safetensors import read_safetensors
        return read_safetensors(source)
    if fmt == APR1:
        raise AprError(ErrorCode.UNSUPPORTED, "APR v1 files are not readable yet")
    raise AprError(ErrorCode.FORMAT, "unknown format", format=fmt)
