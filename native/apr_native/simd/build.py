"""Compile the shell's block kernels for this machine, once, into the user cache.

    path = library()      # the shared library's path, or None where nothing can build it

The library is named by a hash of everything that decides its bytes (the C sources, this
directory's wasm_simd128.h, the flags, the compiler, the CPU's model and flags: it is built
with -march=native), so a changed source or another machine sharing the cache builds its
own, and a cached build is never stale. A build goes to a temporary file renamed into place,
so concurrent processes never load half a library. Compilers: zig's clang (PyPI `ziglang`,
the one scripts/build_wasm_kernels.py uses for the browser's binaries), else `cc`.
"""
from __future__ import annotations

import functools
import hashlib
import os
import sys
from typing import List, Optional

from apr_core.errors import AprError, ErrorCode

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = ("matmul_k.c",)
HEADERS = ("block_codes.h",)
# FMA contraction off, as in the browser's build: the float32 steps stay the ones a numpy
# replay computes (wasm_tests/kquant_emulation.py), bit for bit. -nostdlib: the kernels
# call nothing from libc or compiler-rt, and without it zig's first use on a machine
# compiles its compiler-rt (~8 s of CPU) before the kernels (~2 s).
# The -march of the instruction level ($APR_ISA, `apr_native.isa`) is added by `flags()`.
FLAGS = ["-shared", "-fPIC", "-O2", "-ffp-contract=off", "-g0",
         "-fvisibility=hidden", "-nostdlib"]
BUILD_ENV = "APR_SIMD_BUILD"          # "never": use only a library already built
BUILD_LOCK_S = 300                    # a background build older than this has died


def kernel_dir() -> str:
    from ..web_root import web_root
    return os.path.join(web_root(), "src", "kernels")


def compiler() -> Optional[List[str]]:
    """The C compiler command: zig's clang when `ziglang` is installed, else `cc`."""
    import importlib.util
    import shutil
    if importlib.util.find_spec("ziglang") is not None:
        return [sys.executable, "-m", "ziglang", "cc"]
    found = shutil.which("cc")
    return [found] if found else None


def flags(command: Optional[List[str]] = None) -> List[str]:
    """The compiler flags for `command` (default `compiler()`): FLAGS and the instruction
    level's -march. zig's clang names the x86-64 levels as LLVM's CPUs do in zig
    (x86_64_v3) and refuses GCC's spelling (-march=x86-64-v3: "unknown CPU: 'x86'"), so
    for zig the name's hyphens become underscores."""
    from .. import isa
    march = list(isa.march())
    command = compiler() if command is None else command
    if command and any("ziglang" in part for part in command):
        march = ["-march=" + flag[len("-march="):].replace("-", "_")
                 if flag.startswith("-march=") else flag for flag in march]
    return FLAGS + march


def can_build() -> bool:
    """Whether `library()` may build: a compiler is there and APR_SIMD_BUILD is not "never"."""
    return compiler() is not None and os.environ.get(BUILD_ENV) != "never"


@functools.lru_cache(maxsize=None)
def cpu_signature() -> bytes:
    """What -march=native depends on: the CPU's model and feature flags."""
    try:
        with open("/proc/cpuinfo", "rb") as handle:
            lines = handle.read(1 << 16).splitlines()
        return b"\n".join(sorted({line for line in lines
                                  if line.startswith((b"model name", b"flags"))}))
    except OSError:
        import platform
        return (platform.machine() + platform.processor()).encode()


def _key(command: List[str]) -> str:
    digest = hashlib.sha256()
    for name in SOURCES + HEADERS:
        with open(os.path.join(kernel_dir(), name), "rb") as handle:
            digest.update(name.encode() + b"\0" + handle.read())
    with open(os.path.join(HERE, "wasm_simd128.h"), "rb") as handle:
        digest.update(handle.read())
    digest.update(" ".join(flags(command) + command[1:]).encode() + cpu_signature())
    return digest.hexdigest()[:24]


def library(build: bool = True) -> Optional[str]:
    """The built library's path: cached, else built now (a few seconds; `build` False or
    APR_SIMD_BUILD=never: None instead). None when no compiler is found."""
    from ..config import cache_dir
    command = compiler()
    if command is None:
        return None
    path = os.path.join(str(cache_dir()), "simd", "apr_simd-%s.so" % _key(command))
    if os.path.exists(path):
        return path
    if not build or os.environ.get(BUILD_ENV) == "never":
        return None
    _compile(command, path)
    return path


def build_in_background() -> None:
    """Start a build that outlives this process (the next start finds the library), unless
    another process started one in the last BUILD_LOCK_S seconds."""
    from ..background import spawn_once
    if can_build():
        spawn_once(_lock(), ["apr_native.simd.build"], BUILD_LOCK_S)


def _lock() -> str:
    from ..config import cache_dir
    return os.path.join(str(cache_dir()), "simd", "building")


def _compile(command: List[str], path: str) -> None:
    import subprocess       # (with tempfile: only when building, not at every start)
    import tempfile
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, scratch = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(path))
    os.close(fd)
    try:
        done = subprocess.run(
            command + flags(command) + ["-I", HERE, "-o", scratch]
            + [os.path.join(kernel_dir(), name) for name in SOURCES],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise AprError(ErrorCode.UNSUPPORTED, "building the native SIMD kernels failed",
                           compiler=command[-1], error=done.stderr.decode(errors="replace")[-400:])
        os.replace(scratch, path)
        _remove_other_builds(path)
    finally:
        if os.path.exists(scratch):
            os.unlink(scratch)


def _remove_other_builds(keep: str) -> None:
    """Earlier builds (other sources or flags): a process still running one keeps its
    mapping after the unlink."""
    folder = os.path.dirname(keep)
    for name in os.listdir(folder):
        other = os.path.join(folder, name)
        if name.startswith("apr_simd-") and name.endswith(".so") and other != keep:
            try:
                os.unlink(other)
            except OSError:
                pass


if __name__ == "__main__":                      # build_in_background's process
    try:
        print(library())
    finally:
        if len(sys.argv) > 1:
            from ..background import release
            release(sys.argv[1])                # the lock it was started under
