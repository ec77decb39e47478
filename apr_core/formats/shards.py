"""Sharded APR v2 models: a manifest plus self-contained shard files (ARCHITECTURE §4).

The manifest is itself an APR v2 file with the SHARDED flag and zero tensors; its metadata
is the model metadata plus seed 000 §3.8's keys::

    "sharded": true, "shard_count": N,
    "shards": [{"file", "size", "crc32" (footer CRC, 8 hex digits), "sha256"}, ...],
    "tensor_shard_map": {tensor name: shard index}

Shards are named `<stem>-00001-of-0000N.apr` beside the manifest and carry only minimal
metadata (`shard_index`, `shard_count`), so the model metadata (possibly a large
vocabulary) is stored once.
"""
from __future__ import annotations

import os
import re
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Tuple

from ..errors import AprError, ErrorCode
from ..integrity import sha256_source
from ..io import ByteSource, open_source
from ..tensor import ModelFile, TensorInfo
from . import flags as F
from .apr2 import AprFile, read_apr2
from .apr2_layout import FOOTER_SIZE, HEADER_SIZE, align_up, entry_size
from .apr2_writer import WriteResult, check_tensors, encode_metadata, write_apr2

DEFAULT_SHARD_SIZE = 2 * 2 ** 30
SHARD_KEYS = ("sharded", "shard_count", "shards", "tensor_shard_map")
# Room reserved per shard for header, footer, index header, shard metadata and the
# padding before the data section, so a shard's file stays within max_shard_size.
_SHARD_OVERHEAD = HEADER_SIZE + FOOTER_SIZE + 8 + 64 + 256
_HEX8 = re.compile(r"[0-9a-f]{8}\Z")
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")

Opener = Callable[[str], Any]


class ShardedWriteResult(NamedTuple):
    manifest: WriteResult
    shards: List[WriteResult]
    files: List[str]  # shard paths, in shard order


def shard_names(manifest_path: Any, count: int) -> List[str]:
    """`model.apr` with 3 shards -> `model-00001-of-00003.apr`, ... (file names only)."""
    stem = os.path.splitext(os.path.basename(os.fspath(manifest_path)))[0]
    return ["{}-{:05d}-of-{:05d}.apr".format(stem, i + 1, count) for i in range(count)]


def write_sharded(manifest_path: Any, tensors: Iterable[Any], metadata: dict,
                  max_shard_size: int = DEFAULT_SHARD_SIZE, alignment: int = 64,
                  compression: Optional[str] = None, overwrite: bool = True,
                  flags: int = 0) -> ShardedWriteResult:
    """Write shards beside `manifest_path`, then the manifest; all or nothing.

    Tensors are packed in the given order; a new shard starts when the next tensor
    (uncompressed, with padding and its index entry) would push the shard past
    `max_shard_size`. A tensor larger than that gets a shard of its own.
    """
    items = check_tensors(tensors)  # global checks: names must be unique across shards
    encode_metadata(metadata)  # fail before writing any shard
    budget = max_shard_size - _SHARD_OVERHEAD
    if budget <= 0:
        raise AprError(ErrorCode.ARGUMENT, "max_shard_size too small",
                       max_shard_size=max_shard_size, minimum=_SHARD_OVERHEAD + 1)
    groups: List[List[Any]] = [[]]
    used = 0
    for item in items:
        cost = align_up(item.nbytes, alignment) + entry_size(item.name_bytes, len(item.shape))
        if groups[-1] and used + cost > budget:
            groups.append([])
            used = 0
        groups[-1].append(item)
        used += cost
    directory = os.path.dirname(os.path.abspath(os.fspath(manifest_path)))
    names = shard_names(manifest_path, len(groups))
    paths = [os.path.join(directory, name) for name in names]
    if os.path.abspath(os.fspath(manifest_path)) in paths:
        raise AprError(ErrorCode.ARGUMENT, "manifest name collides with a shard name",
                       manifest=os.fspath(manifest_path))
    if not overwrite:
        for path in paths + [os.fspath(manifest_path)]:
            if os.path.exists(path):
                raise AprError(ErrorCode.ARGUMENT, "output exists (use --force to overwrite)",
                               path=path)
    written: List[str] = []
    results: List[WriteResult] = []
    try:
        for index, (group, path) in enumerate(zip(groups, paths)):
            shard_meta = {"shard_index": index, "shard_count": len(groups)}
            results.append(write_apr2(path, [item.tensor for item in group], shard_meta,
                                      alignment, compression, sha256=True))
            written.append(path)
        manifest_meta = {k: v for k, v in metadata.items() if k not in SHARD_KEYS}
        manifest_meta.update({
            "sharded": True,
            "shard_count": len(groups),
            "shards": [{"file": name, "size": res.size, "crc32": "{:08x}".format(res.crc32),
                        "sha256": res.sha256} for name, res in zip(names, results)],
            "tensor_shard_map": {item.name_bytes.decode("utf-8"): index
                                 for index, group in enumerate(groups) for item in group},
        })
        manifest = write_apr2(manifest_path, [], manifest_meta, alignment,
                              flags=flags | F.SHARDED, overwrite=overwrite)
    except BaseException:
        for path in written:
            _remove_quietly(path)
        raise
    return ShardedWriteResult(manifest, results, paths)


class ShardedFile(ModelFile):
    """A model spread over shard files; `metadata` is the manifest's metadata."""

    format = "apr2-sharded"

    def __init__(self, manifest: AprFile, shards: List[AprFile], names: List[str]) -> None:
        super().__init__()
        self.manifest = manifest
        self.shards = shards
        self.shard_files = names
        self.metadata = manifest.metadata
        self.flags = manifest.flags
        self.warnings = list(manifest.warnings)
        for number, (shard, name) in enumerate(zip(shards, names)):
            self.warnings.extend("{}: {}".format(name, text) for text in shard.warnings)
            for info in shard.tensors.values():
                self.tensors[info.name] = info._replace(shard=number)

    def _read_payload(self, info: TensorInfo) -> bytes:
        return self.shards[info.shard]._read_payload(info)

    def close(self) -> None:
        for shard in self.shards:
            shard.close()
        self.manifest.close()


def read_sharded(manifest: Any, opener: Optional[Opener] = None,
                 verify: bool = True) -> ShardedFile:
    """Open a sharded model from its manifest (path, bytes or `ByteSource`).

    `opener(file_name)` returns a path, bytes or `ByteSource` for a shard; by default
    shards are files beside a manifest path. Checks every shard's presence (E007), size
    (E002), sha256 when `verify` (E004), footer CRC against the manifest (E004) and that
    its tensors are exactly those the manifest maps to it (E002); errors name the shard.
    """
    if opener is None:
        if isinstance(manifest, (ByteSource, bytes, bytearray, memoryview)):
            raise AprError(ErrorCode.ARGUMENT, "an opener is needed for a manifest that is "
                           "not a file path")
        directory = os.path.dirname(os.path.abspath(os.fspath(manifest)))
        opener = lambda name: os.path.join(directory, name)  # noqa: E731
    head = read_apr2(manifest, verify=verify)
    shards: List[AprFile] = []
    try:
        if not head.is_sharded:
            raise AprError(ErrorCode.FORMAT, "not a sharded-model manifest (SHARDED flag "
                           "unset)", source=head.source.name)
        entries, mapping = _parse_manifest(head)
        names = [entry["file"] for entry in entries]
        for number, entry in enumerate(entries):
            shards.append(_open_shard(opener, entry, verify))
            _check_contents(shards[-1], number, entry["file"], mapping)
        return ShardedFile(head, shards, names)
    except BaseException:
        for shard in shards:
            shard.close()
        head.close()
        raise


def _parse_manifest(head: AprFile) -> Tuple[List[Dict[str, Any]], Dict[str, int]]:
    meta = head.metadata
    if head.tensors:
        raise AprError(ErrorCode.CORRUPT, "a manifest must hold no tensors",
                       tensors=len(head.tensors))
    entries = meta.get("shards")
    mapping = meta.get("tensor_shard_map")
    count = meta.get("shard_count")
    if (meta.get("sharded") is not True or not isinstance(entries, list)
            or not isinstance(mapping, dict) or count != len(entries)
            or isinstance(count, bool)):
        raise AprError(ErrorCode.CORRUPT, "manifest metadata lacks valid 'sharded', "
                       "'shard_count', 'shards' and 'tensor_shard_map'")
    seen = set()
    for entry in entries:
        if not isinstance(entry, dict):
            raise AprError(ErrorCode.CORRUPT, "manifest shard entry is not an object")
        name, size = entry.get("file"), entry.get("size")
        # A bare file name only: a manifest must not reach outside its own directory.
        if (not isinstance(name, str) or not name or name in (".", "..") or "/" in name
                or "\\" in name or "\0" in name or name in seen):
            raise AprError(ErrorCode.CORRUPT, "invalid or duplicate shard file name",
                           file=name)
        seen.add(name)
        sha = entry.get("sha256")
        if (not isinstance(size, int) or isinstance(size, bool) or size < 0
                or not isinstance(entry.get("crc32"), str) or not _HEX8.match(entry["crc32"])
                or not (sha is None or isinstance(sha, str) and _HEX64.match(sha))):
            raise AprError(ErrorCode.CORRUPT, "invalid size, crc32 or sha256 for shard",
                           shard=name)
    for tensor, number in mapping.items():
        if not isinstance(number, int) or isinstance(number, bool) or not (
                0 <= number < len(entries)):
            raise AprError(ErrorCode.CORRUPT, "tensor_shard_map points at no shard",
                           tensor=tensor, shard_index=number)
    return entries, mapping


def _open_shard(opener: Opener, entry: Dict[str, Any], verify: bool) -> AprFile:
    name = entry["file"]
    try:
        src = open_source(opener(name))
    except AprError as exc:
        raise _name_shard(exc, name, "shard file missing or unreadable: {}".format(name))
    except OSError as exc:
        raise AprError(ErrorCode.IO, "shard file missing or unreadable: {}".format(name),
                       shard=name, reason=exc.strerror or str(exc))
    try:
        if src.size != entry["size"]:
            raise AprError(ErrorCode.CORRUPT, "shard size differs from the manifest: "
                           "{}".format(name), shard=name, size=src.size,
                           expected=entry["size"])
        sha = entry.get("sha256")
        if verify and sha is not None and sha256_source(src) != sha:
            raise AprError(ErrorCode.CHECKSUM, "shard sha256 mismatch: {}".format(name),
                           shard=name)
        # The sha256 already covers every byte; CRC only when the manifest has no hash.
        shard = read_apr2(src, verify=verify and sha is None)
        if shard.footer.crc32 != int(entry["crc32"], 16):
            raise AprError(ErrorCode.CHECKSUM, "shard CRC differs from the manifest: "
                           "{}".format(name), shard=name)
        if shard.is_sharded:
            raise AprError(ErrorCode.CORRUPT, "a shard may not be a manifest itself",
                           shard=name)
    except AprError as exc:
        src.close()
        raise _name_shard(exc, name, exc.message)
    except BaseException:
        src.close()
        raise
    shard.owns_source = True  # the shard object now closes what the opener produced
    return shard


def _check_contents(shard: AprFile, number: int, name: str, mapping: Dict[str, int]) -> None:
    expected = {tensor for tensor, index in mapping.items() if index == number}
    actual = set(shard.tensors)
    if expected != actual:
        raise AprError(ErrorCode.CORRUPT, "shard contents disagree with tensor_shard_map: "
                       "{}".format(name), shard=name,
                       missing=sorted(expected - actual)[:5],
                       unexpected=sorted(actual - expected)[:5])


def _name_shard(exc: AprError, name: str, message: str) -> AprError:
    context = dict(exc.context)
    context["shard"] = name
    return AprError(exc.code, message, **context)


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


__all__ = ["write_sharded", "read_sharded", "ShardedFile", "ShardedWriteResult",
           "shard_names", "SHARD_KEYS", "DEFAULT_SHARD_SIZE"]
