"""Kernel backends for apr_core's registry: CUDA -> numba CPU -> numpy.

    from apr_native import backends
    kernels = backends.select()          # "auto": APR_BACKEND if set, else the fastest
    kernels = backends.select("numba")   # or name one: numpy | simd | numba | cuda | webgpu
    kernels = backends.select("numba", threads=2)   # numba on a pool of 2 threads of its own
    model = TextModel.load(path, kernels=kernels)

`select` registers the backend's "matmul" kernels (one per block type it implements),
"matmul_group" and the fused per-layer kinds of `apr_core.model.fused` into
`apr_core.quant.registry` (once per process: registering only adds implementations) and
returns a `registry.Kernels` for it. The model holds that object, so which backend runs
is the model's, never process-wide: two models in one process may use different ones.
Model code is shared by every backend and never copied; weight types a backend lacks fall
back to numpy's kernel.

What stays process-wide, and why: the registry's table of implementations (registering
adds functions, it selects nothing) and `_registered` (which backends' functions are in
it, and for CUDA whether the device or the emulated ones: switching APR_CUDA_EMULATE
within one process re-registers them for every CUDA model). numba's worker pool is the
process's unless a thread count is asked for (`threads=`, `EngineOptions.threads`): then
the kernels own a pool of that size (`numba_kernels.NumbaKernels`).

"simd" (never automatic, but where `apr run` / `apr chat` start: `quick_start`, and where
they stay while numba's kernels compile in the background: `numba_warmup`) runs the
browser's exact block kernels built natively (`apr_native.simd`) and numpy's fused kinds.
"webgpu" (never automatic) runs the whole forward pass on a WebGPU device (`apr_native.gpu`;
the CPU backend when there is no adapter, with the reason logged).
"cuda" is automatic only with a real device (`numba.cuda.is_available()`); it runs the
kinds "matmul" and "attention" (the other kinds use the references). With
`NUMBA_ENABLE_CUDASIM=1` numba's simulator runs the same kernels on the CPU (for tests;
far too slow to generate with); with `APR_CUDA_EMULATE=1` the kernels' thread code runs
compiled on the CPU over the same grid (`kernels.cuda.cuda_emulated`: checks whole models).
"""
from __future__ import annotations

import os
import sys
from typing import Dict, List, Optional

from apr_core.errors import AprError, ErrorCode
from apr_core.quant import registry

NAMES = ("numpy", "simd", "numba", "cuda", "webgpu")
ENV = "APR_BACKEND"
THREADS_ENV = "APR_THREADS"
CUDA_EMULATE_ENV = "APR_CUDA_EMULATE"

_registered: Dict[str, str] = {}     # backend -> the mode its kernels were registered in
_compile_announced = False


def _numba_ok() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def _cuda_emulated() -> bool:
    return os.environ.get(CUDA_EMULATE_ENV) == "1"


def _cuda_ok(simulated_too: bool) -> bool:
    if not _numba_ok():
        return False
    if _cuda_emulated():
        return simulated_too
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return simulated_too
    if not _cuda_driver_present():
        return False
    try:
        from numba import cuda
        return bool(cuda.is_available())
    except Exception:  # a broken driver install must not stop the CPU backends
        return False


# Where a CUDA driver shows itself on Linux (native driver, WSL's GPU paravirtualization).
_CUDA_DEVICE_FILES = ("/dev/nvidiactl", "/proc/driver/nvidia/version", "/dev/dxg")


def _cuda_driver_present() -> bool:
    """False only when this is Linux with no NVIDIA device node: then importing numba.cuda
    (~0.4 s) and probing the driver (~1 s) would find nothing. NUMBA_CUDA_DRIVER (a driver
    library elsewhere) and other systems always probe."""
    if not sys.platform.startswith("linux") or os.environ.get("NUMBA_CUDA_DRIVER"):
        return True
    return any(os.path.exists(path) for path in _CUDA_DEVICE_FILES)


def available() -> List[str]:
    """Backends usable here, fastest first (the simulator counts only when forced)."""
    names = ["cuda"] if _cuda_ok(simulated_too=False) else []
    if _numba_ok():
        names.append("numba")
    return names + ["numpy"]


def threads() -> int:
    """Worker threads for numba kernels: APR_THREADS, else every core we may run on."""
    wanted = os.environ.get(THREADS_ENV)
    if wanted:
        try:
            return max(1, int(wanted))
        except ValueError:
            raise AprError(ErrorCode.ARGUMENT, "APR_THREADS must be an integer", value=wanted)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _register_numba() -> None:
    from .kernels import cpu
    from .kernels.layer import decoder_block, fused_layers
    from .dot_select import WRAPPERS      # one token's activation codes per weight type
    for name in cpu.SUPPORTED:
        registry.register("matmul", name, backend="numba")(WRAPPERS["matmul"](cpu.numba_matmul))
    registry.register("matmul_group", "*", backend="numba")(
        WRAPPERS["matmul_group"](cpu.numba_matmul_group))
    for kind, kernel in {**fused_layers.KERNELS, **decoder_block.KERNELS}.items():  # model.fused's
        registry.register(kind, "*", backend="numba")(WRAPPERS.get(kind, lambda k: k)(kernel))


def _register_cuda() -> None:
    if _cuda_emulated():
        from .kernels.cuda import cuda_emulated as kernels
    else:
        from .kernels.cuda import cuda_matmul as kernels
    for name in kernels.SUPPORTED:
        registry.register("matmul", name, backend="cuda")(kernels.KERNELS["matmul"])
    registry.register("attention", "*", backend="cuda")(kernels.KERNELS["attention"])


def _register_simd() -> None:
    from .simd.build import library
    from .simd.kernels import BACKEND, SimdMatmul
    from apr_core.quant.block_kinds import BLOCK_KINDS
    path = library()
    if path is None:
        raise AprError(ErrorCode.UNSUPPORTED, "backend simd needs a C compiler (pip install "
                       "ziglang, or a cc on PATH) to build its kernels once")
    kernels = SimdMatmul(path, threads())
    for name in BLOCK_KINDS:
        registry.register("matmul", name, backend=BACKEND)(kernels)
    registry.register("matmul_group", "*", backend=BACKEND)(kernels.group)


_REGISTER = {"numba": _register_numba, "cuda": _register_cuda, "simd": _register_simd}


def select(name: Optional[str] = None, quick_start: bool = False,
           threads: Optional[int] = None) -> registry.Kernels:
    """The kernels of `name` (or $APR_BACKEND, or the best available); `.backend` names it.
    `threads`: numba's kernels run on a pool of that many threads of their own
    (`NumbaKernels`, whatever other engines in the process use; no quick start then);
    None: on the process's pool (APR_THREADS, else every core). Other backends size
    their own threads (BLAS, the simd library: APR_THREADS).
    `quick_start` (one-shot commands: `apr run`, `apr chat`): with neither named, kernels
    that start on "simd" and switch to numba before decoding (`simd.quick_start`), or
    stay on simd while numba's cache is cold. Where numba's kernels are about to compile
    (minutes), one line on stderr says so.

    AprError(ARGUMENT) for an unknown name, AprError(UNSUPPORTED) when the named backend
    cannot run here (numba not installed, no CUDA device).
    """
    wanted = (name or os.environ.get(ENV) or "auto").strip().lower()
    if wanted == "auto" and quick_start and threads is None:
        quick = _quick_start()
        if quick is not None:
            return quick
    if wanted == "auto":
        wanted = available()[0]
    if wanted == "webgpu":       # the whole model on a WebGPU device, else the best CPU one
        from .gpu.backend import webgpu_kernels
        return webgpu_kernels(select(next(n for n in available() if n != "cuda")))
    if wanted not in NAMES:
        raise AprError(ErrorCode.ARGUMENT, "unknown backend", backend=wanted,
                       choices=", ".join(("auto",) + NAMES))
    if wanted == "numba" and not _numba_ok():
        raise AprError(ErrorCode.UNSUPPORTED, "backend numba needs the numba package "
                       "(pip install 'apr[native]')")
    if wanted == "cuda" and not _cuda_ok(simulated_too=True):
        raise AprError(ErrorCode.UNSUPPORTED, "backend cuda needs a CUDA device (or "
                       "NUMBA_ENABLE_CUDASIM=1 for numba's simulator, APR_CUDA_EMULATE=1 "
                       "for its thread code on the CPU)")
    # which CUDA kernels get registered depends on the mode: device/simulator or emulation
    mode = "emulated" if wanted == "cuda" and _cuda_emulated() else "native"
    if wanted in _REGISTER and _registered.get(wanted) != mode:
        _REGISTER[wanted]()
        _registered[wanted] = mode
    if wanted == "numba":
        _announce_numba_compile()
        from .numba_rows import UNIFORM_ROWS
        if threads is not None:
            from .numba_kernels import NumbaKernels
            return NumbaKernels(threads, UNIFORM_ROWS)
        _prestart_process_pool()
        return registry.Kernels(wanted, uniform_rows=UNIFORM_ROWS)
    return registry.Kernels(wanted)


def _prestart_process_pool() -> None:
    """Start the process's numba pool (if not yet) with `threads()` threads: its workers
    load their code while the model loads. The pool takes its size from numba's thread
    count, a per-thread setting: set on this thread for the start only, then put back."""
    import numba
    from .kernels import pool
    before = numba.get_num_threads()
    numba.set_num_threads(min(threads(), numba.config.NUMBA_NUM_THREADS))
    try:
        pool.prestart()
    finally:
        numba.set_num_threads(before)


def _quick_start() -> Optional[registry.Kernels]:
    """`QuickStartKernels` (simd, then numba) when numba would be chosen and the simd
    library is built; None otherwise (a missing library is built in the background for
    the next start, never while this one waits). With numba's cache cold the kernels
    are portable (simd for the whole run) and a missing library is built now: seconds,
    where numba's compile takes minutes."""
    if os.environ.get(ENV) or not _numba_importable() or _cuda_driver_present():
        return None
    from . import numba_cache, numba_warmup
    from .simd.build import build_in_background, can_build, library
    from .simd.quick_start import QuickStartKernels, announce
    portable = not numba_cache.ready()
    missing = library(build=False) is None
    if missing and not (portable and can_build()):
        build_in_background()
        return None                             # numba's kernels (a cold compile says so)
    if portable:
        announce(building=missing, compiling_already=numba_warmup.running())
        if missing and _build_simd() is None:
            return None
    from .numba_rows import UNIFORM_ROWS
    select("simd")                          # registers its kernels (once per process)
    return QuickStartKernels(lambda: select("numba"), UNIFORM_ROWS, portable)


def _build_simd() -> Optional[str]:
    """The simd library built now; None when the build failed (then numba's kernels)."""
    from .simd.build import library
    try:
        return library()
    except AprError:
        return None


def _announce_numba_compile() -> None:
    """Say so, once per process, when numba's kernels are about to compile (its cache is
    cold: a first run, a changed kernel source, another numba)."""
    global _compile_announced
    from . import numba_cache
    if not _compile_announced and not numba_cache.ready():
        _compile_announced = True
        from .config import notice
        notice("compiling numba's CPU kernels for this machine (once, ~2 min)")


def _numba_importable() -> bool:
    """Whether numba is installed, without importing it (~0.2 s)."""
    import importlib.util
    return "numba" in sys.modules or importlib.util.find_spec("numba") is not None


__all__ = ["select", "available", "threads", "NAMES", "ENV"]
