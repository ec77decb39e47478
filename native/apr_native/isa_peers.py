"""The benchmark peers of an instruction level (`apr_native.isa`): how `apr bench --isa`
and bench/ scripts run apr and llama.cpp at the same level.

apr takes the level from $APR_ISA in its own process. llama.cpp takes it from a build:
"native" is the installed llama-cpp-python wheel (built for this CPU), a named level is
llama.cpp's shared libraries built with that level's cmake switches
(`scripts/build_llama_lib.sh LEVEL`, cached under the apr cache), which the same
llama-cpp-python loads through LLAMA_CPP_LIB_PATH.
"""
from __future__ import annotations

import os
from typing import Dict

from apr_core.errors import AprError, ErrorCode

from . import isa

LIB_ENV = "LLAMA_CPP_LIB_PATH"       # llama-cpp-python's override of its library folder


def _llama_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("llama_cpp_python")
    except PackageNotFoundError:
        raise AprError(ErrorCode.UNSUPPORTED, "--compare llama.cpp needs llama-cpp-python")


def llama_lib(level: str) -> str:
    """The folder of llama.cpp's libraries built for `level` (may not exist yet)."""
    from .config import cache_dir
    return os.path.join(str(cache_dir()), "llama-lib", "{}-{}".format(_llama_version(), level))


def check(level: str, with_llama: bool) -> None:
    """AprError when this host cannot run `level`, or llama.cpp is wanted at a named
    level it was not built for (the error says how to build it)."""
    if level != isa.NATIVE:
        isa.check(level)
        if with_llama and not os.path.exists(os.path.join(llama_lib(level), "libllama.so")):
            raise AprError(ErrorCode.UNSUPPORTED, "no llama.cpp built for instruction level "
                           "{0!r}: run scripts/build_llama_lib.sh {0} (about 5 minutes, "
                           "cached)".format(level), folder=llama_lib(level))


def child_env(runtime: str, level: str) -> Dict[str, str]:
    """Environment variables of a benchmark child running `runtime` at `level`."""
    env = {isa.ENV: level}
    if runtime == "llama.cpp" and level != isa.NATIVE:
        env[LIB_ENV] = llama_lib(level)
    return env


def describe(runtime: str, level: str) -> str:
    """What `runtime` runs at `level`, for reports."""
    if runtime == "apr":
        return level if level == isa.NATIVE else "{} ({})".format(level,
                                                                  isa.LEVELS[level].llvm_cpu)
    if runtime == "llama.cpp":
        return "native (llama-cpp-python wheel)" if level == isa.NATIVE else \
            "{} (libraries built by scripts/build_llama_lib.sh)".format(level)
    return "native"
