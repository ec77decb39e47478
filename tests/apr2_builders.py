"""Hand-assembled APR v2 files, field by field from `apr2_layout`, for the bad-file tests
(tests/formats/test_apr2_badfiles.py and the CLI integrity tests): the footer CRC is
recomputed after each edit unless a test is about the CRC or footer."""
from __future__ import annotations

import struct
import zlib

from apr_core.formats import flags as F
from apr_core.formats.apr2_layout import (FOOTER_MAGIC, HEADER_SIZE, MAGIC, Footer, Header,
                                          align_up, pack_entry, pack_index)

META = b'{"apr_version": "2.0.0"}'


def with_footer(body: bytes) -> bytes:
    return body + Footer(zlib.crc32(body), FOOTER_MAGIC, len(body) + 16).pack()


def refooter(data: bytes) -> bytes:
    return with_footer(data[:-16])


def assemble(entries, data=b"", meta=META, flags=F.ALIGNED_64, version=(2, 0), align=64,
             pad_byte=b"\0", count=None):
    """A file from packed index entries and the data section; offsets are the caller's."""
    index = pack_index(entries)
    if count is not None:
        index = struct.pack("<I", count) + index[4:]
    index_end = HEADER_SIZE + len(meta) + len(index)
    data_offset = align_up(index_end, align)
    header = Header(MAGIC, version[0], version[1], flags, HEADER_SIZE, len(meta),
                    HEADER_SIZE + len(meta), len(index), data_offset)
    return with_footer(header.pack() + meta + index + pad_byte * (data_offset - index_end)
                       + data)


def f32_entry(name: bytes, offset=0, shape=(4,), dtype_id=0, flags=0, size=None, raw_size=0):
    count = 1
    for dim in shape:
        count *= dim
    return pack_entry(name, dtype_id, shape, offset, 4 * count if size is None else size,
                      raw_size, flags)


def good_file() -> bytes:
    values = struct.pack("<4f", 1.0, 2.0, -3.5, 0.25)
    return assemble([f32_entry(b"a"), f32_entry(b"b", offset=64)],
                    values + b"\0" * 48 + values)
