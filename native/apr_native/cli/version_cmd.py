"""`apr version` / `apr --version`: what a bug report needs to carry.

apr's version, Python's, numpy's and numba's, the kernel backend `--backend auto` picks
here, the CPU's SIMD level (AVX2 / AVX-512 / VNNI) and whether CUDA or a wgpu adapter is
usable, as llama.cpp prints with `--version` and its system-info line.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
from typing import Any, Dict, List, Optional

from .. import __version__
from .commands import help_line


# CPU feature -> the /proc/cpuinfo flags that provide it (any of them).
SIMD_FLAGS = {"avx2": ("avx2",), "avx512": ("avx512f",), "vnni": ("avx512_vnni", "avx_vnni")}
# The same features in numpy's own CPU detection (the fallback off Linux).
NUMPY_FEATURES = {"avx2": ("AVX2",), "avx512": ("AVX512F",), "vnni": ("AVX512VNNI",)}


def _package_version(name: str) -> Optional[str]:
    """Installed version of a distribution, without importing it (None if absent)."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:                          # Python 3.7
        return None
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _cpuinfo_flags() -> Optional[set]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        return None
    return None


def cpu_features() -> Dict[str, Any]:
    """{"avx2", "avx512", "vnni": bool, "simd": the best level's name, "source"}."""
    flags = _cpuinfo_flags()
    if flags is not None:
        found = {k: any(f in flags for f in names) for k, names in SIMD_FLAGS.items()}
        source = "/proc/cpuinfo"
    else:
        try:
            from numpy._core._multiarray_umath import __cpu_features__ as numpy_features
        except ImportError:                      # numpy < 2
            from numpy.core._multiarray_umath import __cpu_features__ as numpy_features
        found = {k: any(numpy_features.get(f, False) for f in names)
                 for k, names in NUMPY_FEATURES.items()}
        source = "numpy"
    level = "AVX-512" if found["avx512"] else "AVX2" if found["avx2"] else "none"
    if found["vnni"] and level != "none":
        level += " VNNI"
    return dict(found, simd=level, machine=platform.machine(), source=source)


def _cuda() -> Dict[str, Any]:
    if _package_version("numba") is None:
        return {"usable": False, "detail": "numba not installed"}
    try:
        from numba import cuda
        if not cuda.is_available():
            return {"usable": False, "detail": "no CUDA device or driver"}
        device = cuda.get_current_device()
        name = device.name.decode() if isinstance(device.name, bytes) else str(device.name)
        return {"usable": True, "detail": name}
    except Exception as err:  # a broken driver install is a fact to report, not a crash
        return {"usable": False, "detail": "{}: {}".format(type(err).__name__, err)}


def _wgpu() -> Dict[str, Any]:
    if _package_version("wgpu") is None:
        return {"usable": False, "detail": "wgpu not installed"}
    try:
        import wgpu
        adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
        if adapter is None:
            return {"usable": False, "detail": "no adapter"}
        info = adapter.info
        return {"usable": True, "detail": "{} ({}, {})".format(
            info.get("device", "?"), info.get("backend_type", "?"),
            info.get("adapter_type", "?"))}
    except Exception as err:  # no Vulkan/Metal/DX12 driver: report it
        return {"usable": False, "detail": "{}: {}".format(type(err).__name__, err)}


def system_info() -> Dict[str, Any]:
    """Every fact `apr version` reports."""
    import numpy
    from apr_core import __version__ as core_version
    from .. import backends
    available: List[str] = backends.available()
    return {
        "apr": __version__,
        "apr_core": core_version,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": "{} {}".format(platform.system(), platform.machine()),
        "numpy": numpy.__version__,
        "numba": _package_version("numba"),
        "backend": available[0],
        "backends_available": available,
        "backend_env": os.environ.get(backends.ENV),
        "threads": backends.threads(),
        "cpu": cpu_features(),
        "cuda": _cuda(),
        "wgpu": _wgpu(),
    }


def _yes(fact: Dict[str, Any]) -> str:
    return ("yes: " if fact["usable"] else "no: ") + fact["detail"]


def format_info(info: Dict[str, Any]) -> str:
    cpu = info["cpu"]
    env = " ($APR_BACKEND={})".format(info["backend_env"]) if info["backend_env"] else ""
    lines = [
        "apr {} (apr_core {})".format(info["apr"], info["apr_core"]),
        "python: {} {} on {}".format(info["implementation"], info["python"], info["platform"]),
        "numpy: {}".format(info["numpy"]),
        "numba: {}".format(info["numba"] or "not installed"),
        "backend: {} (auto; available: {}){}".format(
            info["backend"], ", ".join(info["backends_available"]), env),
        "threads: {}".format(info["threads"]),
        "cpu: {} | AVX2 = {:d} | AVX-512 = {:d} | VNNI = {:d}".format(
            cpu["simd"], cpu["avx2"], cpu["avx512"], cpu["vnni"]),
        "cuda: " + _yes(info["cuda"]),
        "wgpu: " + _yes(info["wgpu"]),
    ]
    return "\n".join(lines)


def run_version(args: argparse.Namespace) -> int:
    info = system_info()
    if args.json:
        from .common import emit_json
        emit_json(info)
    else:
        sys.stdout.write(format_info(info) + "\n")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("version", help=help_line("version"),
                       description="apr's version, Python/numpy/numba versions, the kernel "
                       "backend `auto` picks, the CPU's SIMD level and whether CUDA or a "
                       "wgpu adapter is usable (same as `apr --version`).")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=run_version)
