"""Benchmark: pure-Python LZ4 block codec vs the `lz4` package (C), measured in the same run.

    python bench/codecs.py [--mib 1] [--repeat 3]

Data is cut into 64 KiB blocks as APR v2 framing does. Prints MB/s of raw data for compress
and decompress, the compression ratio of each side, and pure/C speed ratios. The pure decoder
is timed on blocks from both compressors (it must read either).
"""
from __future__ import annotations

import argparse
import os
import random
import struct
import sys
import time
from typing import Callable, Dict, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from apr_core.codecs import BLOCK_SIZE  # noqa: E402
from apr_core.codecs import lz4 as pure  # noqa: E402

try:
    import lz4
    import lz4.block as c_lz4
except ImportError:
    sys.exit("bench/codecs.py needs the lz4 package as the peer: pip install lz4")


def _datasets(size: int) -> Dict[str, bytes]:
    rng = random.Random(42)
    stdlib = os.path.dirname(os.__file__)
    text = b""
    for name in sorted(os.listdir(stdlib)):
        if name.endswith(".py") and len(text) < size:
            with open(os.path.join(stdlib, name), "rb") as handle:
                text += handle.read()
    count = size // 4
    weights = struct.pack("<%df" % count, *(rng.gauss(0.0, 0.02) for _ in range(count)))
    halves = struct.pack("<%de" % (size // 2), *(rng.gauss(0.0, 0.02) for _ in range(size // 2)))
    sparse = bytearray(size)
    for _ in range(size // 64):
        sparse[rng.randrange(size)] = rng.randrange(1, 256)
    return {
        "python source": text[:size],
        "f32 weights": weights,
        "f16 weights": halves,
        "q4 nibbles": bytes(rng.getrandbits(8) for _ in range(size)),
        "sparse (98% zero)": bytes(sparse),
    }


def _best(func: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return min(times)


def _mbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e6 if seconds > 0 else float("inf")


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=1.0, help="MiB of data per dataset")
    parser.add_argument("--repeat", type=int, default=3, help="best of N timings")
    args = parser.parse_args(argv)
    size = max(BLOCK_SIZE, int(args.mib * (1 << 20)))

    print("lz4 package {} (liblz4 {}), Python {}".format(
        lz4.__version__, lz4.library_version_string(), sys.version.split()[0]))
    header = "{:<18} {:>7} {:>7} | {:>9} {:>9} {:>6} | {:>9} {:>9} {:>9} {:>6}".format(
        "dataset", "ratio-P", "ratio-C", "comp-P", "comp-C", "P/C", "dec-P", "dec-P(C)",
        "dec-C", "P/C")
    print(header)
    print("-" * len(header))
    for name, data in _datasets(size).items():
        blocks = [data[i:i + BLOCK_SIZE] for i in range(0, len(data), BLOCK_SIZE)]
        sizes = [len(b) for b in blocks]
        ours = [pure.compress(b) for b in blocks]
        theirs = [c_lz4.compress(b, store_size=False) for b in blocks]
        for packed, raw in zip(ours, blocks):   # a benchmark of wrong output is worthless
            assert c_lz4.decompress(packed, uncompressed_size=len(raw)) == raw
        t_comp_p = _best(lambda: [pure.compress(b) for b in blocks], args.repeat)
        t_comp_c = _best(lambda: [c_lz4.compress(b, store_size=False) for b in blocks],
                         args.repeat)
        t_dec_p = _best(lambda: [pure.decompress(p, n) for p, n in zip(ours, sizes)],
                        args.repeat)
        t_dec_pc = _best(lambda: [pure.decompress(p, n) for p, n in zip(theirs, sizes)],
                         args.repeat)
        t_dec_c = _best(lambda: [c_lz4.decompress(p, uncompressed_size=n)
                                 for p, n in zip(theirs, sizes)], args.repeat)
        total = len(data)
        comp_p, comp_c = _mbps(total, t_comp_p), _mbps(total, t_comp_c)
        dec_p, dec_pc, dec_c = (_mbps(total, t_dec_p), _mbps(total, t_dec_pc),
                                _mbps(total, t_dec_c))
        print("{:<18} {:>7.3f} {:>7.3f} | {:>9.1f} {:>9.1f} {:>6.3f} | {:>9.1f} {:>9.1f} {:>9.1f}"
              " {:>6.3f}".format(name, sum(map(len, ours)) / total,
                                 sum(map(len, theirs)) / total, comp_p, comp_c,
                                 comp_p / comp_c, dec_p, dec_pc, dec_c, dec_p / dec_c))
    print("MB/s of raw data; P = pure Python (apr_core.codecs.lz4), C = lz4 package;"
          " dec-P(C) = pure decoder on the C compressor's blocks.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
