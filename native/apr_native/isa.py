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
    v8_flags: Tuple[str, ...]     # V8's (Chromium --js-flags) switches: the same level
    summary: str


_V3 = frozenset({"sse4.2", "avx", "avx2", "fma", "f16c", "bmi2"})
_V4 = _V3 | {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"}
# V8 compiles WebAssembly SIMD with 128-bit instructions only: AVX (VEX encodings), AVX2,
# FMA3, F16C and the VEX-encoded AVX-VNNI(-INT8) (relaxed SIMD's i8 dots) are what a level
# can take from it; it never emits AVX-512. Wasm SIMD itself needs SSE4.1, so "generic"
# keeps SSE4.1 (a browser on a bare SSE2 CPU runs the shell's scalar path instead).
_V8_NO_VNNI = ("--no-enable-avx-vnni", "--no-enable-avx-vnni-int8")
_V8_NO_AVX = _V8_NO_VNNI + ("--no-enable-avx", "--no-enable-avx2", "--no-enable-fma3",
                            "--no-enable-f16c", "--no-enable-bmi1", "--no-enable-bmi2",
                            "--no-enable-lzcnt")
_LLAMA_OFF = ("-DGGML_NATIVE=OFF", "-DGGML_AVX512_VBMI=OFF", "-DGGML_AVX512_BF16=OFF",
              "-DGGML_AVX_VNNI=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF",
              "-DGGML_AMX_BF16=OFF")

# THE table of levels, lowest first.
LEVELS: Dict[str, Level] = {
    "generic": Level("x86-64", "", frozenset(), ("-march=x86-64",),
                     _LLAMA_OFF + ("-DGGML_SSE42=OFF", "-DGGML_AVX=OFF", "-DGGML_AVX2=OFF",
                                   "-DGGML_FMA=OFF", "-DGGML_F16C=OFF", "-DGGML_BMI2=OFF",
                                   "-DGGML_AVX512=OFF", "-DGGML_AVX512_VNNI=OFF"),
                     _V8_NO_AVX,
                     "x86-64 baseline (SSE2): no wide integer dots"),
    "avx2": Level("x86-64-v3", "", _V3, ("-march=x86-64-v3",),
                  _LLAMA_OFF + ("-DGGML_SSE42=ON", "-DGGML_AVX=ON", "-DGGML_AVX2=ON",
                                "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_BMI2=ON",
                                "-DGGML_AVX512=OFF", "-DGGML_AVX512_VNNI=OFF"),
                  _V8_NO_VNNI,
                  "AVX2 + FMA + F16C (x86-64-v3): most laptops and desktops"),
    "avx512": Level("x86-64-v4", "", _V4, ("-march=x86-64-v4",),
                    _LLAMA_OFF + ("-DGGML_SSE42=ON", "-DGGML_AVX=ON", "-DGGML_AVX2=ON",
                                  "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_BMI2=ON",
                                  "-DGGML_AVX512=ON", "-DGGML_AVX512_VNNI=OFF"),
                    _V8_NO_VNNI,
                    "AVX-512 F/BW/VL/DQ (x86-64-v4), no VNNI"),
    "avx512vnni": Level("x86-64-v4", "+avx512vnni", _V4 | {"avx512vnni"},
                        ("-march=x86-64-v4", "-mavx512vnni"),
                        _LLAMA_OFF + ("-DGGML_SSE42=ON", "-DGGML_AVX=ON", "-DGGML_AVX2=ON",
                                      "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_BMI2=ON",
                                      "-DGGML_AVX512=ON", "-DGGML_AVX512_VNNI=ON"),
                        (),
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
# The weight types whose one-token dots take int8 activation codes by default, at the
# levels in INT8_LEVELS: the K-quants, where the byte dot gains most per block (1.41x
# Q4_K, 1.5-1.6x Q6_K on one AVX2 thread; the legacy types 1.07-1.35x) and, at the Qwen2
# 1.5B shape whose weights are all Q4_K/Q6_K, end to end (docs/performance.md, "Int8
# decode dots"). The legacy types (Q4_0/1, Q5_0/1, Q8_0) keep the exact dots: with int8
# codes the demo (SmolLM2-135M Q4_1/Q8_0) flips its near-tie first answer token.
INT8_TYPES = frozenset({"Q4_K", "Q6_K"})
# The levels measured faster with them: AVX2 without AVX-512 (`has`), i.e. "avx2", or
# "native" on an AVX2-only host.
INT8_LEVELS = ("avx2",)


def dots_forced() -> Optional[bool]:
    """$APR_DOTS: True for "int8", False for "exact", None when unset (the per-type
    default of `int8_dots`)."""
    wanted = os.environ.get(DOTS_ENV, "").strip().lower()
    if wanted in ("int8", "exact"):
        return wanted == "int8"
    if wanted:
        raise AprError(ErrorCode.ARGUMENT, "{} must be int8 or exact".format(DOTS_ENV),
                       value=wanted)
    return None


def int8_level() -> bool:
    """Whether the requested level is one of INT8_LEVELS: AVX2 and no AVX-512."""
    return has("avx2") and not has("avx512f")


@functools.lru_cache(maxsize=None)
def _int8_default(level: str, types: Tuple[str, ...]) -> bool:
    return bool(types) and all(t in INT8_TYPES for t in types) and int8_level()


def int8_dots(types: Tuple[str, ...] = ()) -> bool:
    """Whether one token's matvecs over weights of the GGML `types` take int8 activation
    codes (`vpmaddubsw`) rather than int16 ones (the exact dots): $APR_DOTS "int8" or
    "exact" forces either for every type; unset, int8 exactly when every one of `types`
    is in INT8_TYPES and the level is one of INT8_LEVELS (no types: exact). One pool task
    takes one kind of codes, so a task (a layer's one-call step, a group of projections)
    mixing K-quant and legacy weights takes the exact ones (`dot_select`).

    The int8 dots' next-token KL to the exact path is below llama.cpp's own (whose
    activations are int8 too; tests/native/test_int8_quality.py); they are not exact:
    on the legacy-quant demo (SmolLM2, "What is the capital of France?") they answer
    "L'Étoile ..." instead of "Paris", as llama.cpp's int8 activations do."""
    forced = dots_forced()
    if forced is not None:
        return forced
    return _int8_default(requested(), tuple(types))


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


def v8_flags(name: str) -> Tuple[str, ...]:
    """Chromium's `--js-flags` switches that keep V8's WebAssembly code at level `name`
    (none for "native")."""
    return () if name == NATIVE else LEVELS[name].v8_flags


def signature() -> str:
    """What the requested level changes in compiled code, for cache keys."""
    name = requested()
    if name == NATIVE:
        return NATIVE
    level = LEVELS[name]
    return "{}:{}{}".format(name, level.llvm_cpu, level.llvm_features)
