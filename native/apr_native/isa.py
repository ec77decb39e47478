"""The instruction level apr's CPU kernels are compiled for: the host's own, or a lower
level that users' CPUs have, so that one machine can measure what another kind gets.

    APR_ISA=avx2 apr run demo "Hi"          # numba and the simd library restricted to AVX2
    apr bench demo --isa avx2 --compare llama.cpp

A level is an LLVM CPU name plus extra features (what numba compiles for:
NUMBA_CPU_NAME / NUMBA_CPU_FEATURES, set here before numba reads its configuration), the
C compiler's `-march` (the simd library, `apr_native.simd.build`) and llama.cpp's cmake
switches for a peer built at the same level (`scripts/build_llama_lib.sh`). "native" (the
default) is the host's own CPU and features. The kernels' code paths (`kernels.llvm_ir`:
pmaddwd, F16C, zmm pair sums) ask `has(feature)`, which answers for the chosen level,
never more than the host has. A level the host lacks is refused (E009 UNSUPPORTED),
since its code would stop on an illegal instruction.

Why levels rather than a list of features: they are what compilers (x86-64-v3/v4),
llama.cpp's builds and users' CPUs are described by; each exact kernel path is
bit-identical at every level (integer sums, one float order), which
tests/native/test_isa_levels.py holds.
"""
from __future__ import annotations

import functools
import os
import sys
from typing import Dict, FrozenSet, NamedTuple, Optional, Tuple

from apr_core.errors import AprError, ErrorCode

ENV = "APR_ISA"


class Level(NamedTuple):
    """One instruction level."""
    llvm_cpu: str                 # NUMBA_CPU_NAME
    llvm_features: str            # NUMBA_CPU_FEATURES ("" = the CPU name's own)
    features: FrozenSet[str]      # the LLVM feature names it guarantees (`has`)
    march: Tuple[str, ...]        # C compiler flags for the simd library
    llama_cmake: Tuple[str, ...]  # llama.cpp's cmake switches for a peer at this level
    summary: str


_V3 = frozenset({"sse4.2", "avx", "avx2", "fma", "f16c", "bmi2"})
_V4 = _V3 | {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"}
_LLAMA_OFF = ("-DGGML_NATIVE=OFF", "-DGGML_AVX512_VBMI=OFF", "-DGGML_AVX512_BF16=OFF",
              "-DGGML_AVX_VNNI=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF",
              "-DGGML_AMX_BF16=OFF")

# THE table of levels, lowest first.
LEVELS: Dict[str, Level] = {
    "generic": Level("x86-64", "", frozenset(), ("-march=x86-64",),
                     _LLAMA_OFF + ("-DGGML_SSE42=OFF", "-DGGML_AVX=OFF", "-DGGML_AVX2=OFF",
                                   "-DGGML_FMA=OFF", "-DGGML_F16C=OFF", "-DGGML_BMI2=OFF",
                                   "-DGGML_AVX512=OFF", "-DGGML_AVX512_VNNI=OFF"),
                     "x86-64 baseline (SSE2): no wide integer dots"),
    "avx2": Level("x86-64-v3", "", _V3, ("-march=x86-64-v3",),
                  _LLAMA_OFF + ("-DGGML_SSE42=ON", "-DGGML_AVX=ON", "-DGGML_AVX2=ON",
                                "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_BMI2=ON",
                                "-DGGML_AVX512=OFF", "-DGGML_AVX512_VNNI=OFF"),
                  "AVX2 + FMA + F16C (x86-64-v3): most laptops and desktops"),
    "avx512": Level("x86-64-v4", "", _V4, ("-march=x86-64-v4",),
                    _LLAMA_OFF + ("-DGGML_SSE42=ON", "-DGGML_AVX=ON", "-DGGML_AVX2=ON",
                                  "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_BMI2=ON",
                                  "-DGGML_AVX512=ON", "-DGGML_AVX512_VNNI=OFF"),
                    "AVX-512 F/BW/VL/DQ (x86-64-v4), no VNNI"),
    "avx512vnni": Level("x86-64-v4", "+avx512vnni", _V4 | {"avx512vnni"},
                        ("-march=x86-64-v4", "-mavx512vnni"),
                        _LLAMA_OFF + ("-DGGML_SSE42=ON", "-DGGML_AVX=ON", "-DGGML_AVX2=ON",
                                      "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_BMI2=ON",
                                      "-DGGML_AVX512=ON", "-DGGML_AVX512_VNNI=ON"),
                        "AVX-512 with VNNI (Zen 4, Ice Lake and later servers)"),
}
NATIVE = "native"
NAMES = (NATIVE,) + tuple(LEVELS)


def requested() -> str:
    """The level $APR_ISA asks for ("native" when unset)."""
    name = os.environ.get(ENV, "").strip().lower() or NATIVE
    if name not in NAMES:
        raise AprError(ErrorCode.ARGUMENT, "{}={!r} is not an instruction level; one of: {}"
                       .format(ENV, name, ", ".join(NAMES)))
    return name


@functools.lru_cache(maxsize=None)
def host_features() -> FrozenSet[str]:
    """The LLVM feature names the host CPU has (empty off x86 or without llvmlite)."""
    try:
        import llvmlite.binding as llvm
        return frozenset(name for name, on in llvm.get_host_cpu_features().items() if on)
    except Exception:  # no llvmlite, or a host llvmlite cannot query: nothing assumed
        return frozenset()


def missing(name: str) -> FrozenSet[str]:
    """The features level `name` needs that the host lacks (empty: it runs here)."""
    if name == NATIVE:
        return frozenset()
    return LEVELS[name].features - host_features()


def available() -> Tuple[str, ...]:
    """The levels this host can run, lowest first (then "native")."""
    return tuple(n for n in LEVELS if not missing(n)) + (NATIVE,)


def best_level() -> Optional[str]:
    """The highest named level the host has (None when it has none, e.g. off x86)."""
    runs = [n for n in LEVELS if not missing(n)]
    return runs[-1] if runs and host_features() else None


def check(name: str) -> None:
    """AprError(UNSUPPORTED) when the host cannot run level `name`."""
    lacking = missing(name)
    if lacking:
        raise AprError(ErrorCode.UNSUPPORTED, "this CPU cannot run instruction level {!r}: "
                       "it lacks {}".format(name, ", ".join(sorted(lacking))),
                       available=", ".join(available()))


def has(feature: str) -> bool:
    """Whether kernels compiled at the requested level may use `feature`."""
    name = requested()
    if feature not in host_features():
        return False
    return name == NATIVE or feature in LEVELS[name].features


DOTS_ENV = "APR_DOTS"


def int8_dots() -> bool:
    """Whether one token's matvecs take int8 activation codes: $APR_DOTS "int8" (opt in) or
    "exact" (int16 codes, the default). Not the default anywhere: on the AVX2 level they are
    1.1-1.6x faster per block on one thread and their next-token KL to the exact path is
    below llama.cpp's, but they flip the demo's near-tie first answer token (SmolLM2, "What
    is the capital of France?": "L'Étoile ..." instead of "Paris", as llama.cpp's int8
    activations do), and end to end they measured within the noise of the exact dots."""
    wanted = os.environ.get(DOTS_ENV, "").strip().lower()
    if wanted in ("int8", "exact"):
        return wanted == "int8"
    if wanted:
        raise AprError(ErrorCode.ARGUMENT, "{} must be int8 or exact".format(DOTS_ENV),
                       value=wanted)
    return False


def apply() -> str:
    """Point numba at the requested level (before it compiles anything) and return the
    level's name. An explicit NUMBA_CPU_NAME of the user's is left alone under "native"."""
    name = requested()
    if name == NATIVE:
        return name
    check(name)
    level = LEVELS[name]
    os.environ["NUMBA_CPU_NAME"] = level.llvm_cpu
    os.environ["NUMBA_CPU_FEATURES"] = level.llvm_features
    if "numba" in sys.modules:               # configuration read at its import: read again
        from numba.core import config
        config.reload_config()
    return name


def march() -> Tuple[str, ...]:
    """C compiler flags of the requested level (`-march=native` for "native")."""
    name = requested()
    return ("-march=native",) if name == NATIVE else LEVELS[name].march


def signature() -> str:
    """What the requested level changes in compiled code, for cache keys."""
    name = requested()
    if name == NATIVE:
        return NATIVE
    level = LEVELS[name]
    return "{}:{}{}".format(name, level.llvm_cpu, level.llvm_features)
