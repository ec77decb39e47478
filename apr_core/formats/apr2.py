"""APR v2 reader (seed 000 §3, ARCHITECTURE §4).

`read_apr2(source, verify=True)` validates the header, footer, metadata and index before
allocating anything proportional to what they claim, then (with `verify`) streams the
file through CRC32. With `verify=False` it reads only the header, footer, metadata and
index: the `inspect` path, O(header + index) bytes even for a 50 GB file.

Structural problems raise `AprError` with a precise code; oddities that do not stop a
load (unknown flag bits, non-zero padding, misaligned payloads) land in `.warnings`.
"""
from __future__ import annotations

import zlib
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..codecs import CODEC_MASK, CODEC_NAMES
from ..codecs.framing import decode_blocks
from ..errors import AprError, ErrorCode
from ..json_files import parse_json
from ..io import ByteSource, open_source
from ..tensor import ModelFile, TensorInfo, check_layout
from . import flags as F
from .apr2_layout import (DEFAULT_MAX_METADATA, FOOTER_MAGIC, FOOTER_SIZE, HEADER_SIZE,
                          MAGIC, VERSION_MINOR, Footer, Header, IndexEntry, data_end,
                          parse_footer, parse_header, parse_index)
# The writer lives in its own module; re-exported so `apr2` is the one entry point.
from .apr2_writer import WriteResult, write_apr2, write_apr2_bytes

DEFAULT_MAX_INDEX = 256 * 2 ** 20
# The index->data gap is read with the index when at most this long (writers pad < 64).
MAX_PAD_CHECK = 4096
# How far back from EOF to look for a displaced footer when diagnosing appended bytes.
TRAILING_SCAN = 1 << 16
CRC_CHUNK = 1 << 22

PayloadFilter = Callable[[TensorInfo, bytes], bytes]


class AprFile(ModelFile):
    """A parsed APR v2 file. `tensors` is in index (sorted-name) order."""

    format = "apr2"

    def __init__(self, source: ByteSource, header: Header, footer: Footer,
                 metadata: Dict[str, Any], entries: List[IndexEntry], warnings: List[str],
                 owns_source: bool = False) -> None:
        super().__init__()
        self.source = source
        self.header = header
        self.footer = footer
        self.flags = header.flags
        self.metadata = metadata
        self.entries = entries
        self.warnings = warnings
        self.data_offset = header.data_offset
        self.data_end = data_end(source.size, header.flags)
        # Applied to stored bytes before decompression; the crypto layer installs a
        # decryptor here (payloads are compressed, then encrypted).
        self.payload_filter: Optional[PayloadFilter] = None
        self.owns_source = owns_source
        for entry in entries:
            self.tensors[entry.name] = TensorInfo(
                entry.name, entry.dtype, entry.shape, header.data_offset + entry.offset,
                entry.size, entry.raw_size, entry.flags)

    @property
    def is_sharded(self) -> bool:
        """A sharded-model manifest: route it to `shards.read_sharded`."""
        return bool(self.flags & F.SHARDED)

    @property
    def alignment(self) -> int:
        """Declared payload alignment (0 when the header declares none)."""
        return F.declared_alignment(self.flags)

    @property
    def signature_range(self) -> Optional[Tuple[int, int]]:
        """(offset, length) of the signature block when SIGNED, else None."""
        if not self.flags & F.SIGNED:
            return None
        return self.data_end, self.source.size - FOOTER_SIZE - self.data_end

    def read_stored(self, name: str) -> bytes:
        """A tensor's payload exactly as stored (compressed/encrypted bytes)."""
        info = self.info(name)
        return self.source.read(info.offset, info.size)

    def decode_stored(self, info: TensorInfo, stored: bytes) -> bytes:
        """Turn stored payload bytes into the tensor's raw bytes (decrypt, decompress)."""
        if self.payload_filter is not None:
            stored = self.payload_filter(info, stored)
        elif self.flags & F.ENCRYPTED:
            raise AprError(ErrorCode.UNSUPPORTED,
                           "tensor payloads are encrypted; open the file with a key",
                           tensor=info.name)
        codec = info.flags & CODEC_MASK
        if codec:
            return decode_blocks(stored, codec, info.raw_size)
        return stored

    def _read_payload(self, info: TensorInfo) -> bytes:
        return self.decode_stored(info, self.source.read(info.offset, info.size))

    def verify(self) -> None:
        """Stream every byte before the footer through CRC32 (E004 on mismatch).

        The same pass checks that all padding between payloads is zero (a warning if not).
        """
        gaps = self._padding_gaps()
        dirty: List[int] = []
        crc, offset, gap_i = 0, 0, 0
        end = self.source.size - FOOTER_SIZE
        while offset < end:
            chunk = self.source.read(offset, min(CRC_CHUNK, end - offset))
            crc = zlib.crc32(chunk, crc)
            stop = offset + len(chunk)
            while gap_i < len(gaps) and gaps[gap_i][0] < stop:
                start, gap_end = gaps[gap_i]
                lo, hi = max(start, offset), min(gap_end, stop)
                if chunk[lo - offset:hi - offset].count(0) != hi - lo and dirty[-1:] != [start]:
                    dirty.append(start)
                if gap_end > stop:
                    break
                gap_i += 1
            offset = stop
        if crc != self.footer.crc32:
            raise AprError(ErrorCode.CHECKSUM, "CRC32 mismatch: the file is corrupted",
                           source=self.source.name, stored="{:08x}".format(self.footer.crc32),
                           computed="{:08x}".format(crc))
        if dirty:
            _warn(self.warnings, "padding bytes are not zero in {} gap(s), first at offset "
                  "{}".format(len(dirty), dirty[0]))

    def _padding_gaps(self) -> List[Tuple[int, int]]:
        """Byte ranges between index end, payloads and the trailer: all should be zero."""
        gaps = []
        cursor = self.header.index_offset + self.header.index_size
        for info in sorted(self.tensors.values(), key=lambda t: t.offset):
            if info.offset > cursor:
                gaps.append((cursor, info.offset))
            cursor = max(cursor, info.offset + info.size)
        if self.data_end > cursor:
            gaps.append((cursor, self.data_end))
        return gaps


def read_apr2(source: Any, verify: bool = True, max_metadata: int = DEFAULT_MAX_METADATA,
              max_index: int = DEFAULT_MAX_INDEX) -> AprFile:
    """Open an APR v2 file from a path, bytes or `ByteSource`.

    `verify=True` checks the CRC32 of the whole file (E004); `verify=False` reads only the
    header, footer, metadata and index. Metadata larger than `max_metadata` (or an index
    larger than `max_index`) is refused with E008 before anything is read.
    """
    src = open_source(source)
    owns = src is not source
    try:
        model = _parse(src, max_metadata, max_index, owns)
        if verify:
            model.verify()
        return model
    except BaseException:
        if owns:
            src.close()
        raise


def _warn(warnings: List[str], message: str) -> None:
    if message not in warnings:
        warnings.append(message)


def _parse(src: ByteSource, max_metadata: int, max_index: int, owns: bool) -> AprFile:
    size = src.size
    head = src.read(0, min(HEADER_SIZE, size))
    if head[:4] != MAGIC:
        raise AprError(ErrorCode.FORMAT, "not an APR v2 file (bad magic)", magic=head[:4],
                       source=src.name)
    if size < HEADER_SIZE + FOOTER_SIZE:
        raise AprError(ErrorCode.CORRUPT, "file too short for header and footer (truncated?)",
                       size=size, source=src.name)
    header = parse_header(head)
    warnings: List[str] = []
    if header.version_minor > VERSION_MINOR:
        warnings.append("newer minor version 2.{}: unknown features are ignored".format(
            header.version_minor))
    unknown = header.flags & ~F.KNOWN_HEADER_FLAGS
    if unknown:
        warnings.append("unknown header flag bits 0x{:08x} ignored".format(unknown))
    _check_caps(header, max_metadata, max_index)
    footer = _read_footer(src)
    _check_bounds(header, size)
    index_end = header.index_offset + header.index_size
    pad = header.data_offset - index_end
    block = src.read(HEADER_SIZE, index_end - HEADER_SIZE + (pad if pad <= MAX_PAD_CHECK else 0))
    metadata = _parse_metadata(block[:header.metadata_size])
    entries = parse_index(block[header.metadata_size:index_end - HEADER_SIZE], warnings)
    padding = block[index_end - HEADER_SIZE:]
    if padding.count(0) != len(padding):
        warnings.append("padding before the data section is not zero")
    elif pad > MAX_PAD_CHECK:
        warnings.append("unexpected {}-byte gap between index and data".format(pad))
    model = AprFile(src, header, footer, metadata, entries, warnings, owns)
    _check_entries(model)
    return model


def _read_footer(src: ByteSource) -> Footer:
    size = src.size
    footer = parse_footer(src.read(size - FOOTER_SIZE, FOOTER_SIZE))
    if footer.magic != FOOTER_MAGIC:
        displaced = _find_displaced_footer(src)
        if displaced is not None:
            raise AprError(ErrorCode.CORRUPT, "{} unexpected byte(s) after the APR2 footer "
                           "(data appended to the file?)".format(size - displaced),
                           footer_end=displaced, file_size=size, source=src.name)
        raise AprError(ErrorCode.CORRUPT, "footer magic '2RPA' missing at end of file "
                       "(truncated or damaged)", source=src.name, file_size=size)
    if footer.file_size != size:
        problem = "truncated" if footer.file_size > size else "has extra bytes"
        raise AprError(ErrorCode.CORRUPT, "file size disagrees with the footer: file "
                       "{}".format(problem), footer_size=footer.file_size, file_size=size,
                       source=src.name)
    return footer


def _find_displaced_footer(src: ByteSource) -> Optional[int]:
    """End offset of a valid-looking footer that is not at EOF (so bytes were appended)."""
    start = max(HEADER_SIZE, src.size - TRAILING_SCAN - FOOTER_SIZE)
    tail = src.read(start, src.size - start)
    pos = tail.rfind(FOOTER_MAGIC)
    while pos >= 4:
        footer_start = start + pos - 4
        if pos - 4 + FOOTER_SIZE <= len(tail):
            recorded = parse_footer(tail[pos - 4:pos - 4 + FOOTER_SIZE]).file_size
            if recorded == footer_start + FOOTER_SIZE:
                return recorded
        pos = tail.rfind(FOOTER_MAGIC, 0, pos)
    return None


def _check_caps(header: Header, max_metadata: int, max_index: int) -> None:
    """Refuse oversized metadata or index (E008) before reading anything they claim."""
    if header.metadata_size > max_metadata:
        raise AprError(ErrorCode.MEMORY, "metadata section exceeds the size limit",
                       metadata_size=header.metadata_size, limit=max_metadata)
    if header.index_size > max_index:
        raise AprError(ErrorCode.MEMORY, "tensor index exceeds the size limit",
                       index_size=header.index_size, limit=max_index)


def _check_bounds(header: Header, size: int) -> None:
    """header < metadata < index <= data_offset <= end of tensor data."""
    end = data_end(size, header.flags)
    if header.metadata_offset != HEADER_SIZE:
        raise AprError(ErrorCode.CORRUPT, "metadata must follow the 32-byte header",
                       metadata_offset=header.metadata_offset)
    if header.index_offset != header.metadata_offset + header.metadata_size:
        raise AprError(ErrorCode.CORRUPT, "tensor index must follow the metadata",
                       index_offset=header.index_offset,
                       metadata_end=header.metadata_offset + header.metadata_size)
    index_end = header.index_offset + header.index_size
    if index_end > header.data_offset:
        raise AprError(ErrorCode.CORRUPT, "tensor index overlaps the data section",
                       index_end=index_end, data_offset=header.data_offset)
    if header.data_offset > end:
        raise AprError(ErrorCode.CORRUPT, "data section starts beyond the end of the file",
                       data_offset=header.data_offset, data_end=end, file_size=size)


def _parse_metadata(raw: bytes) -> Dict[str, Any]:
    metadata = parse_json(raw, "metadata")
    return metadata


def _check_entries(model: AprFile) -> None:
    """Codec, sizes and placement of every payload; alignment oddities become warnings."""
    encrypted = model.flags & F.ENCRYPTED
    for entry in model.entries:
        codec = entry.flags & CODEC_MASK
        if codec not in CODEC_NAMES:
            raise AprError(ErrorCode.UNSUPPORTED, "unknown compression codec",
                           tensor=entry.name, codec=codec)
        if entry.flags & ~F.KNOWN_TENSOR_FLAGS:
            _warn(model.warnings, "unknown per-tensor flag bits ignored (first: {})".format(
                entry.name))
        nbytes = entry.dtype.nbytes(entry.shape)
        if codec and entry.raw_size != nbytes:
            raise AprError(ErrorCode.CORRUPT, "compressed tensor's raw_size does not match "
                           "its shape", tensor=entry.name, raw_size=entry.raw_size,
                           expected=nbytes)
        if not codec and entry.raw_size:
            raise AprError(ErrorCode.CORRUPT, "uncompressed tensor has a non-zero raw_size",
                           tensor=entry.name, raw_size=entry.raw_size)
        # Encrypted payloads carry the cipher's overhead, which the crypto layer checks.
        if not codec and not encrypted and entry.size != nbytes:
            raise AprError(ErrorCode.CORRUPT, "tensor size does not match its shape",
                           tensor=entry.name, size=entry.size, expected=nbytes)
    infos = list(model.tensors.values())
    check_layout(infos, model.data_offset, model.data_end, model.source.name)
    alignment = model.alignment
    if model.flags & F.ALIGNED_64 and model.flags & F.ALIGNED_32:
        model.warnings.append("both ALIGNED_64 and ALIGNED_32 are set; checking 64")
    if not alignment:
        if infos:
            model.warnings.append("no alignment flag set; expected 64-byte alignment")
        alignment = 64
    loose = [t.name for t in infos if t.offset % alignment]
    if model.data_offset % alignment or loose:
        model.warnings.append("{} tensor payload(s) not {}-byte aligned{}".format(
            len(loose), alignment, " (first: {})".format(loose[0]) if loose else
            " (data section start)"))


__all__ = ["AprFile", "read_apr2", "write_apr2", "write_apr2_bytes", "WriteResult",
           "DEFAULT_MAX_METADATA", "DEFAULT_MAX_INDEX"]
