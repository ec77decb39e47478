"""This machine's roofline: measured memory bandwidth and peak GFLOP/s, cached per machine,
and the verdict on an op (memory- or compute-bound, % of its roof).

    roof = machine_roof()                 # cached in <cache dir>/profile_roofline.json
    verdict(roof, flops, nbytes, seconds) -> {"gbs", "gflops", "intensity", "bound", "roof_pct"}

The probe:
- bandwidth: reads of a float32 array of `BANDWIDTH_BYTES`, best of `REPEATS`: numpy's
  sum (one thread) and, when numba is installed, a parallel sum on every numba thread
  (what the numba kernels' threads can stream); the roof is the faster of the two. 1 GiB
  so that the reads come from DRAM: this VM reports a 32 MiB L3, yet 256 MiB reads ran
  1.5x faster than 1 GiB ones (the host apparently caches more than the guest is told).
- peak: the fastest of float32 numpy matmuls N x N for N in `PEAK_SIZES` (BLAS, its own
  threads; 2 * N^3 FLOPs) and, with numba, the numba backend's own prefill matmul (a
  quantized 1024 x 2048 weight times 128 tokens: 2 * rows * cols * T nominal FLOPs, as the
  profile counts a matmul's), best of `PEAK_REPEATS` each. The BLAS numpy ships need not
  use every vector unit (numba's products beat it by a third here), so the backend's own
  kernel is part of the peak.
On a shared machine both vary from run to run (the BLAS peak by 3x here): the cache keeps
the measurement, so verdicts stay comparable between profiles, and `--probe` measures
again keeping the best bandwidth and the best peak seen on this machine (a busy machine
measures low, never high).
An op of arithmetic intensity I = FLOPs / bytes is memory-bound below the ridge point
peak / bandwidth; its roof is min(peak, I * bandwidth) and "% of roof" its achieved
GFLOP/s over that (for a memory-bound op: achieved GB/s over the bandwidth).
"""
from __future__ import annotations

import json
import os
import platform
import time
from typing import Any, Callable, Dict, Optional

import numpy as np

from apr_core.atomic import atomic_output

from ..config import cache_dir

BANDWIDTH_BYTES = 1 << 30
PEAK_SIZES = (1024, 2048)
PEAK_PRODUCTS, PEAK_TOKENS, PEAK_TYPES = (1024, 2048), 128, ("Q4_1", "Q8_0")
REPEATS = 7
PEAK_REPEATS = 12      # a busy machine's BLAS varies 2-3x between runs: take many
CACHE_FILE = "profile_roofline.json"
BANDWIDTH_FIELDS = ("bandwidth_gbs", "bandwidth_method", "bandwidth_probes_gbs")
PEAK_FIELDS = ("peak_gflops", "peak_method", "peak_probes_gflops")
VERSION = 3                     # bump when the probe changes: older entries re-measure


def machine_key() -> str:
    """What identifies this machine to the cache: host, CPU model, usable cores."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return "{} | {} | {} cores".format(platform.node(), model, cores)


def _best(fn: Callable[[], Any], repeats: int = REPEATS) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _numba_sum() -> Optional[Callable[[np.ndarray], float]]:
    try:
        from numba import njit, prange
    except ImportError:
        return None

    @njit(parallel=True, fastmath=True, cache=True)
    def parallel_sum(values):
        total = 0.0
        for i in prange(values.size):
            total += values[i]
        return total
    return parallel_sum


def _numba_products_peak(rng: Any) -> Dict[str, float]:
    """GFLOP/s of the numba backend's own prefill matmul (`PEAK_PRODUCTS` quantized
    weights times `PEAK_TOKENS` tokens: rows decoded, then float products) per weight
    type in `PEAK_TYPES`; {} without numba."""
    from apr_core.dtypes import by_name
    from apr_core.errors import AprError
    from apr_core.quant import quantize
    from .. import backends
    try:
        kernels = backends.select("numba")
    except AprError:
        return {}
    rows, cols = PEAK_PRODUCTS
    x = rng.standard_normal((PEAK_TOKENS, cols), dtype=np.float32)    # [T, cols]
    out = {}
    for name in PEAK_TYPES:
        dtype = by_name(name)
        data = np.frombuffer(quantize(rng.standard_normal((rows, cols), dtype=np.float32),
                                      dtype), np.uint8)
        kernel = kernels.lookup("matmul", name)
        kernel(data, dtype, (rows, cols), x, 1 << 20)               # compiled code loads
        seconds = _best(lambda: kernel(data, dtype, (rows, cols), x, 1 << 20), PEAK_REPEATS)
        out["numba {} matmul {}x{} times {} tokens".format(name, rows, cols, PEAK_TOKENS)] = (
            2.0 * rows * cols * PEAK_TOKENS / seconds / 1e9)
    return out


def probe() -> Dict[str, Any]:
    """Measure bandwidth and peak now (a second or two)."""
    values = np.ones(BANDWIDTH_BYTES // 4, np.float32)             # [n] touched: real pages
    numpy_gbs = values.nbytes / _best(lambda: values.sum()) / 1e9
    bandwidth = {"numpy_sum_1_thread": numpy_gbs}
    parallel = _numba_sum()
    if parallel is not None:
        import numba
        before = numba.get_num_threads()
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)     # the machine's, not --threads
        try:
            parallel(values[:1024])                                 # compile / load the cache
            bandwidth["numba_sum_{}_threads".format(numba.get_num_threads())] = (
                values.nbytes / _best(lambda: parallel(values)) / 1e9)
        finally:
            numba.set_num_threads(before)
    del values
    method = max(bandwidth, key=bandwidth.get)
    peaks = {}
    rng = np.random.default_rng(0)
    for n in PEAK_SIZES:
        a = rng.standard_normal((n, n), dtype=np.float32)           # [n, n]
        a @ a                                                       # BLAS threads start
        peaks["float32 numpy matmul {0}x{0} (BLAS)".format(n)] = (
            2.0 * n ** 3 / _best(lambda: a @ a, PEAK_REPEATS) / 1e9)
    peaks.update(_numba_products_peak(rng))
    peak_method = max(peaks, key=peaks.get)
    peak = peaks[peak_method]
    return {"bandwidth_gbs": bandwidth[method], "peak_gflops": peak,
            "ridge_flops_per_byte": peak / bandwidth[method],
            "bandwidth_method": "read of a {} MiB float32 array, best of {}: {}".format(
                BANDWIDTH_BYTES >> 20, REPEATS, method),
            "bandwidth_probes_gbs": bandwidth,
            "peak_method": "{}, best of {}".format(peak_method, PEAK_REPEATS),
            "peak_probes_gflops": peaks,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),     # the latest probe
            "version": VERSION}


def best_of(old: Optional[Dict[str, Any]], new: Dict[str, Any]) -> Dict[str, Any]:
    """The best bandwidth and the best peak of two probes of one machine (each with its
    method): on a busy machine a probe measures low, never high. `probes` counts them."""
    if old is None:
        return dict(new, probes=1)
    out = dict(new, probes=int(old.get("probes", 1)) + 1)
    for fields in (BANDWIDTH_FIELDS, PEAK_FIELDS):
        better = old if old[fields[0]] > new[fields[0]] else new
        out.update((field, better[field]) for field in fields)
    out["ridge_flops_per_byte"] = out["peak_gflops"] / out["bandwidth_gbs"]
    return out


def machine_roof(force: bool = False) -> Dict[str, Any]:
    """This machine's roof from the cache, probed when absent; `force` probes again and
    keeps the best of all probes (`best_of`). `cached` says whether this call probed,
    `machine` is the cache key, `cache` the file."""
    path = cache_dir() / CACHE_FILE
    key = machine_key()
    table: Dict[str, Any] = {}
    try:
        with open(path, encoding="utf-8") as handle:
            table = json.load(handle)
    except (OSError, ValueError):
        table = {}                          # absent or unreadable: measure again
    if not isinstance(table, dict):
        table = {}
    entry = table.get(key)
    if not (isinstance(entry, dict) and entry.get("version") == VERSION):
        entry = None
    cached = entry is not None and not force
    if not cached:
        entry = table[key] = best_of(entry, probe())
        try:
            os.makedirs(str(path.parent), exist_ok=True)
            with atomic_output(str(path)) as handle:
                handle.write(json.dumps(table, indent=1).encode("utf-8"))
        except OSError:
            pass                            # a read-only cache: the roof is still measured
    return dict(entry, cached=cached, machine=key, cache=str(path))


def verdict(roof: Dict[str, Any], flops: float, nbytes: float, seconds: float
            ) -> Dict[str, Any]:
    """Achieved GB/s and GFLOP/s of an op, its intensity (FLOP/byte), which roof bounds it
    and how close it came (None where the op moved or computed nothing measurable)."""
    measurable = seconds > 0 and (nbytes or flops)
    gbs = nbytes / seconds / 1e9 if measurable else None
    gflops = flops / seconds / 1e9 if measurable else None
    out = {"gbs": gbs, "gflops": gflops,
           "intensity": flops / nbytes if nbytes else None, "bound": None, "roof_pct": None}
    if seconds <= 0 or not nbytes:
        return out
    bandwidth, peak = roof["bandwidth_gbs"], roof["peak_gflops"]
    intensity = flops / nbytes
    if intensity < roof["ridge_flops_per_byte"]:
        out["bound"] = "memory"
        out["roof_pct"] = 100.0 * gbs / bandwidth
    else:
        out["bound"] = "compute"
        out["roof_pct"] = 100.0 * gflops / min(peak, intensity * bandwidth)
    return out


__all__ = ["machine_roof", "probe", "verdict", "machine_key"]
