"""How long `inspect` takes on a 50 GB model, and how many bytes it reads (APR v2 and GGUF).

Builds sparse files (a real header and index describing ~50 GB of tensors, the data a hole)
and times `open_model(..., verify=False)` against gguf-py's GGUFReader on the same GGUF, and
the CLI path too: `apr inspect --json` in-process (what a user waits for once Python is up,
bytes read counted at the FileSource) and as a fresh `python -m apr_native.cli.main`
process (interpreter start and imports included).
Usage: python bench/inspect_huge.py [--gib 50]
"""
import argparse
import contextlib
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

from apr_core.formats.open import open_model
from apr_core.io import CountingSource, FileSource

TENSOR_BYTES = 1 << 30  # one [16384, 16384] F32 tensor


def sparse_apr(path, gib):
    """A valid APR v2 header/metadata/index/footer whose 1 GiB tensors are a file hole."""
    from apr_core.formats import flags as F
    from apr_core.formats.apr2_layout import (FOOTER_MAGIC, HEADER_SIZE, MAGIC, Footer, Header,
                                              pack_entry, pack_index)
    meta = json.dumps({"apr_version": "2.0.0", "model_type": "sparse-bench"}).encode()
    entries = [pack_entry("blk.{:03d}.weight".format(i).encode(), 0, (16384, 16384),
                          i * TENSOR_BYTES, TENSOR_BYTES, 0, 0) for i in range(gib)]
    index = pack_index(entries)
    data_offset = _align(HEADER_SIZE + len(meta) + len(index), 64)
    size = data_offset + gib * TENSOR_BYTES + 16
    header = Header(MAGIC, 2, 0, F.ALIGNED_64, HEADER_SIZE, len(meta), HEADER_SIZE + len(meta),
                    len(index), data_offset)
    with open(path, "wb") as handle:
        handle.write(header.pack() + meta + index)
        handle.truncate(size)
        handle.seek(size - 16)
        handle.write(Footer(0, FOOTER_MAGIC, size).pack())


def sparse_gguf(path, gib):
    """A valid GGUF v3 header whose 1 GiB F32 tensors are a file hole."""
    def string(text):
        raw = text.encode()
        return struct.pack("<Q", len(raw)) + raw
    kv = string("general.architecture") + struct.pack("<I", 8) + string("sparse-bench")
    infos = b"".join(string("blk.{:03d}.weight".format(i)) + struct.pack(
        "<IQQIQ", 2, 16384, 16384, 0, i * TENSOR_BYTES) for i in range(gib))
    head = b"GGUF" + struct.pack("<IQQ", 3, gib, 1) + kv + infos
    size = _align(len(head), 32) + gib * TENSOR_BYTES
    with open(path, "wb") as handle:
        handle.write(head)
        handle.truncate(size)


def _align(n, alignment):
    return (n + alignment - 1) // alignment * alignment


def time_inspect(path):
    start = time.perf_counter()
    source = CountingSource(FileSource(path))
    with open_model(source, verify=False) as model:
        n = len(model.tensors)
    return time.perf_counter() - start, source.bytes_read, n


def time_cli(path):
    """`apr inspect PATH --json` through the CLI entry point: (seconds, bytes read,
    seconds of it spent building the argument parser of every command)."""
    from apr_core import io as apr_io
    from apr_native.cli.main import build_parser, main as apr_main
    counted = []
    original = apr_io.FileSource._read

    def counting(self, offset, length):
        counted.append(length)
        return original(self, offset, length)
    apr_io.FileSource._read = counting
    try:
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            code = apr_main(["inspect", path, "--json"])
        seconds = time.perf_counter() - start
    finally:
        apr_io.FileSource._read = original
    assert code == 0, code
    start = time.perf_counter()
    build_parser()
    return seconds, sum(counted), time.perf_counter() - start


def time_cli_process(path):
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "apr_native.cli.main", "inspect", path, "--json"],
                   check=True, stdout=subprocess.DEVNULL, env=dict(os.environ, APR_QUIET="1"))
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gib", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("apr", "gguf"):
            path = os.path.join(tmp, "model." + kind)
            (sparse_apr if kind == "apr" else sparse_gguf)(path, args.gib)
            time_inspect(path)  # warm-up: module imports, page cache
            seconds, read, n = time_inspect(path)
            line = "{:5s} {:6.1f} GiB  {} tensors  inspect {:7.2f} ms  read {:,} bytes".format(
                kind, os.path.getsize(path) / 2**30, n, seconds * 1e3, read)
            if kind == "gguf":
                try:
                    import gguf
                    gguf.GGUFReader(path)  # warm-up too: module imports, page cache
                    start = time.perf_counter()
                    gguf.GGUFReader(path)
                    peer = time.perf_counter() - start
                    line += "  | gguf-py GGUFReader {:.2f} ms ({:.1f}x)".format(
                        peer * 1e3, peer / seconds)
                except ImportError:
                    pass
            print(line)
            time_cli(path)  # warm-up: CLI modules
            cli, cli_read, parser = time_cli(path)
            print("      apr inspect --json (CLI, in-process) {:7.2f} ms (argparse setup {:.1f} "
                  "ms)  read {:,} bytes  | fresh process {:.0f} ms".format(
                      cli * 1e3, parser * 1e3, cli_read, time_cli_process(path) * 1e3))
            os.unlink(path)


if __name__ == "__main__":
    main()
