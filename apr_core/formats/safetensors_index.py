"""Sharded SafeTensors checkpoints (`model.safetensors.index.json`) and HF model directories.

The index is the one `transformers`/`huggingface_hub` write:
`{"metadata": {"total_size": N}, "weight_map": {tensor name: shard file name}}`, shards named
`model-00001-of-00003.safetensors`. The writer splits tensors exactly as
`huggingface_hub.split_state_dict_into_shards_factory` does (in the given order; a new
shard starts when the next tensor would tip the current one over `max_shard_size`; a tensor
larger than the limit gets a shard of its own) and, like `save_pretrained`, writes a plain
`model.safetensors` without an index when everything fits in one shard.

Shards are reached through an `opener(file_name) -> ByteSource`, so the browser shell can
serve them from fetch/IndexedDB; the default opens files beside the index.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any, Callable, Dict, List, Optional, Sequence

from ..atomic import atomic_output
from ..errors import AprError, ErrorCode
from ..io import ByteSource, FileSource
from ..tensor import ModelFile, TensorInfo, check_shape
from .safetensors import (DEFAULT_MAX_HEADER_SIZE, SafeTensorsFile, load_json_strict,
                          read_safetensors, write_safetensors)

INDEX_SUFFIX = ".safetensors.index.json"
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model" + INDEX_SUFFIX

Opener = Callable[[str], ByteSource]


def shard_file_name(prefix: str, number: int, count: int) -> str:
    """`model-00002-of-00005.safetensors` for number=2, count=5 (1-based, as transformers)."""
    return "{}-{:05d}-of-{:05d}.safetensors".format(prefix, number, count)


class ShardedSafeTensorsFile(ModelFile):
    """All tensors of a sharded checkpoint as one `ModelFile`.

    `tensors` lists the weight_map's tensors by shard, then by offset; `TensorInfo.shard`
    is the 0-based position in `shard_files` (sorted file names). Only the shards'
    headers are read on construction; payloads are read on `read_raw`.
    """

    format = "safetensors"

    def __init__(self, shard_files: List[str], shards: List[SafeTensorsFile],
                 index_metadata: Dict[str, Any], weight_map: Dict[str, str]) -> None:
        super().__init__()
        self.shard_files = shard_files
        self._shards = shards
        self.index_metadata = index_metadata
        self.weight_map = weight_map
        # The first shard's __metadata__ (e.g. {"format": "pt"}) with the index's
        # model-wide keys (total_size) on top.
        merged: Dict[str, Any] = dict(shards[0].metadata) if shards else {}
        merged.update(index_metadata)
        self.metadata = merged
        for number, (file_name, shard) in enumerate(zip(shard_files, shards)):
            for name, info in shard.tensors.items():
                if weight_map.get(name) == file_name:
                    self.tensors[name] = info._replace(shard=number)
        for name, file_name in weight_map.items():
            if name not in self.tensors:
                raise AprError(ErrorCode.CORRUPT, "tensor listed in the index is missing "
                               "from its shard", tensor=name, shard=file_name)

    def _read_payload(self, info: TensorInfo) -> bytes:
        return self._shards[info.shard].source.read(info.offset, info.size)

    def close(self) -> None:
        for shard in self._shards:
            shard.close()


def parse_safetensors_index(data: bytes, opener: Opener, name: str = "<index>",
                            max_header_size: int = DEFAULT_MAX_HEADER_SIZE
                            ) -> ShardedSafeTensorsFile:
    """Build the sharded model from index JSON bytes; shards come from `opener(file)`."""
    document = load_json_strict(data, name)
    if not isinstance(document, dict):
        raise AprError(ErrorCode.FORMAT, "index must be a JSON object", source=name)
    metadata = document.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise AprError(ErrorCode.FORMAT, "index 'metadata' must be an object", source=name)
    weight_map = document.get("weight_map")
    if not isinstance(weight_map, dict):
        raise AprError(ErrorCode.FORMAT, "index lacks a 'weight_map' object", source=name)
    for tensor, file_name in weight_map.items():
        if not isinstance(file_name, str):
            raise AprError(ErrorCode.FORMAT, "weight_map values must be file names",
                           tensor=tensor, source=name)
        _check_shard_name(file_name, name)
    shard_files = sorted(set(weight_map.values()))
    shards: List[SafeTensorsFile] = []
    try:
        for file_name in shard_files:
            source = opener(file_name)
            try:
                shard = read_safetensors(source, max_header_size)
            except BaseException:
                source.close()
                raise
            # The opener's source belongs to us now: close it with the model.
            shard.owns_source = True
            shards.append(shard)
        return ShardedSafeTensorsFile(shard_files, shards, metadata, weight_map)
    except BaseException:
        for shard in shards:
            shard.close()
        raise


def _check_shard_name(file_name: str, source: str) -> None:
    # An index comes from the network as often as not: never let it point outside its
    # directory.
    parts = file_name.replace("\\", "/").split("/")
    if (not file_name or file_name.startswith(("/", "\\")) or ".." in parts
            or ":" in parts[0] or "\x00" in file_name):
        raise AprError(ErrorCode.FORMAT, "weight_map names a file outside the model "
                       "directory", shard=file_name, source=source)
    if not file_name.endswith(".safetensors"):
        # Never hand a pickle (.bin) or anything else to the SafeTensors parser by way of
        # an index (huggingface_hub refuses it too).
        raise AprError(ErrorCode.FORMAT, "weight_map names a file that is not .safetensors",
                       shard=file_name, source=source)


def _file_opener(directory: str) -> Opener:
    def opener(file_name: str) -> ByteSource:
        path = os.path.join(directory, file_name)
        if not os.path.isfile(path):
            raise AprError(ErrorCode.IO, "shard file listed in the index is missing",
                           shard=file_name, path=path)
        return FileSource(path)
    return opener


def read_safetensors_index(path: Any, opener: Optional[Opener] = None,
                           max_header_size: int = DEFAULT_MAX_HEADER_SIZE
                           ) -> ShardedSafeTensorsFile:
    """Open a sharded checkpoint from its `*.safetensors.index.json` or its directory.

    A missing shard is AprError IO naming it; a weight_map tensor absent from its shard is
    CORRUPT; bad index JSON is FORMAT.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, INDEX_FILE)
    if not os.path.isfile(path):
        raise AprError(ErrorCode.IO, "index file not found", path=path)
    size = os.path.getsize(path)
    if size > max_header_size:
        raise AprError(ErrorCode.MEMORY, "index file larger than the configured limit",
                       path=path, size=size, limit=max_header_size)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise AprError(ErrorCode.IO, "cannot read index: {}".format(exc.strerror), path=path)
    if opener is None:
        opener = _file_opener(os.path.dirname(os.path.abspath(path)))
    return parse_safetensors_index(data, opener, path, max_header_size)


def open_safetensors_dir(path: Any) -> ModelFile:
    """Open the weights of a Hugging Face model directory, a `.safetensors` or an index.

    In a directory, `model.safetensors` wins over `model.safetensors.index.json` (the order
    transformers checks); failing both, a directory with exactly one index or exactly one
    `.safetensors` file is opened.
    """
    path = os.fspath(path)
    if os.path.isfile(path):
        if path.endswith(".index.json"):
            return read_safetensors_index(path)
        return read_safetensors(path)
    if not os.path.isdir(path):
        raise AprError(ErrorCode.IO, "no such file or directory", path=path)
    for candidate, reader in ((SINGLE_FILE, read_safetensors),
                              (INDEX_FILE, read_safetensors_index)):
        full = os.path.join(path, candidate)
        if os.path.isfile(full):
            return reader(full)
    names = sorted(os.listdir(path))
    indexes = [n for n in names if n.endswith(INDEX_SUFFIX)]
    singles = [n for n in names if n.endswith(".safetensors")]
    if len(indexes) == 1:
        return read_safetensors_index(os.path.join(path, indexes[0]))
    if not indexes and len(singles) == 1:
        return read_safetensors(os.path.join(path, singles[0]))
    raise AprError(ErrorCode.IO, "no unambiguous SafeTensors weights in directory",
                   path=path, indexes=len(indexes), files=len(singles))


# ---------------------------------------------------------------------------------------
# Writing

def plan_shards(tensors: Sequence[Any], max_shard_size: int) -> List[List[Any]]:
    """Split `tensors` (in order) into shards the way huggingface_hub does."""
    if isinstance(max_shard_size, bool) or not isinstance(max_shard_size, int) \
            or max_shard_size <= 0:
        raise AprError(ErrorCode.ARGUMENT, "max_shard_size must be a positive int",
                       max_shard_size=repr(max_shard_size))
    shards: List[List[Any]] = []
    current: List[Any] = []
    current_size = 0
    for tensor in tensors:
        size = tensor.dtype.nbytes(check_shape(tensor.name, tensor.dtype, tensor.shape))
        if size > max_shard_size:
            shards.append([tensor])
            continue
        if current_size + size > max_shard_size:
            shards.append(current)
            current, current_size = [], 0
        current.append(tensor)
        current_size += size
    if current:
        shards.append(current)
    return shards


def write_safetensors_sharded(directory: Any, tensors: Sequence[Any], max_shard_size: int,
                              metadata: Optional[Dict[str, str]] = None,
                              prefix: str = "model", overwrite: bool = True) -> List[str]:
    """Write a transformers-style sharded checkpoint into `directory`; return the paths.

    `metadata` is every shard's `__metadata__`; the index carries `{"total_size": bytes}`.
    With a single shard the result is `<prefix>.safetensors` and no index, as
    `save_pretrained` does. Shards are written first, the index last, each atomically.
    With `overwrite`, leftovers of an earlier save under the same prefix (other shard
    counts, a stale index or single file) are removed afterwards, as transformers does.
    """
    directory = os.fspath(directory)
    tensors = list(tensors)
    shards = plan_shards(tensors, max_shard_size)
    if len(shards) <= 1:
        names = [prefix + ".safetensors"]
        shards = shards or [[]]
    else:
        names = [shard_file_name(prefix, i + 1, len(shards)) for i in range(len(shards))]
    index_name = prefix + INDEX_SUFFIX
    seen = set()
    for tensor in tensors:
        # Checked up front: each shard only sees its own names, and a duplicate found in
        # shard 3 would leave shards 1-2 written.
        if tensor.name in seen:
            raise AprError(ErrorCode.ARGUMENT, "duplicate tensor name", tensor=tensor.name)
        seen.add(tensor.name)
    targets = names + ([index_name] if len(names) > 1 else [])
    if not overwrite:
        for name in targets:
            if os.path.exists(os.path.join(directory, name)):
                raise AprError(ErrorCode.ARGUMENT, "output exists (use --force to overwrite)",
                               path=os.path.join(directory, name))
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise AprError(ErrorCode.IO, "cannot create directory: {}".format(exc.strerror),
                       path=directory)
    written: List[str] = []
    weight_map: Dict[str, str] = {}
    total_size = 0
    for name, shard in zip(names, shards):
        target = os.path.join(directory, name)
        write_safetensors(target, shard, metadata, overwrite=overwrite)
        written.append(target)
        for tensor in shard:
            weight_map[tensor.name] = name
            total_size += tensor.dtype.nbytes(tuple(tensor.shape))
    if len(names) > 1:
        index = {"metadata": {"total_size": total_size}, "weight_map": weight_map}
        # transformers' exact serialization: indent 2, sorted keys, trailing newline.
        text = json.dumps(index, indent=2, sort_keys=True) + "\n"
        target = os.path.join(directory, index_name)
        with atomic_output(target, overwrite=overwrite) as handle:
            handle.write(text.encode("utf-8"))
        written.append(target)
    if overwrite:
        _remove_stale(directory, prefix, set(targets))
    return written


def _remove_stale(directory: str, prefix: str, keep: set) -> None:
    # Only names this writer produces: <prefix>.safetensors, <prefix>-NNNNN-of-NNNNN.safetensors
    # and <prefix>.safetensors.index.json.
    pattern = re.compile(re.escape(prefix) + r"(-\d{5}-of-\d{5}\.safetensors|\.safetensors"
                         + r"|\.safetensors\.index\.json)")
    for name in os.listdir(directory):
        if name not in keep and pattern.fullmatch(name) \
                and os.path.isfile(os.path.join(directory, name)):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass  # a leftover we cannot delete is harmless: the new index is authoritative


__all__ = ["ShardedSafeTensorsFile", "read_safetensors_index", "parse_safetensors_index",
           "write_safetensors_sharded", "open_safetensors_dir", "plan_shards",
           "shard_file_name", "INDEX_SUFFIX"]
