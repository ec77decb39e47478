"""Accelerated kernels for apr_native: numba CPU (`cpu`) and numba CUDA (`cuda`). The
sub-packages and what each holds are mapped in README.md next to this file.

They plug into apr_core's kernel registry (see `apr_native.backends`); model code never
imports them directly.

numba's on-disk cache (`cache=True`, so CI and users compile once) stamps each function
with its own source file only, so a kernel calling code from another file here would keep
stale machine code after that file changed. The locators below stamp every function of
this package and its sub-packages with all of their sources instead
(`numba_cache.package_stamp`).
"""
from __future__ import annotations

import os

# numba's OpenMP pool only dequantizes whole weights (`cpu.dequantize_rows`); matmuls and
# attention run on `pool`'s threads. OpenMP workers spin between regions by default,
# and a spinning worker holds a core its sibling (or `pool`'s worker) needs: measured here
# under load, 2 spinning threads ran the SmolLM2 matvecs at 0.2 tok/s, passive ones at
# 28 tok/s. Set before numba loads its OpenMP library; an explicit setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from .. import isa  # noqa: E402

# The instruction level the kernels compile for ($APR_ISA; the host's own by default),
# applied before numba builds its target machine. numba keys its cache entries by CPU
# name and features, so every level keeps its own machine code.
isa.apply()


def _half_conversions() -> None:
    """Without F16C (the generic level), LLVM lowers half <-> float to libcalls
    (__extendhfsf2, __truncsfhf2) that numba's JIT does not resolve by itself: libgcc_s
    (GCC 12 and later) exports both, so its symbols are made visible to the JIT."""
    import ctypes.util

    import llvmlite.binding as llvm
    found = ctypes.util.find_library("gcc_s")
    if found:
        llvm.load_library_permanently(found)


if not isa.has("f16c"):
    _half_conversions()

from numba.core import caching  # noqa: E402

from ..numba_cache import package_stamp  # noqa: E402

_HERE = os.path.dirname(os.path.abspath(__file__))
_STAMP = package_stamp()     # numba_cache.ready() names its marker by the same stamp


class _PackageStamp:
    """Mixin: the cache is valid only for the exact sources of this package."""

    def get_source_stamp(self):
        return _STAMP

    @classmethod
    def from_function(cls, py_func, py_file):
        if not os.path.abspath(py_file).startswith(_HERE + os.sep):
            return None
        return super().from_function(py_func, py_file)


class _UserProvided(_PackageStamp, caching.UserProvidedCacheLocator):   # NUMBA_CACHE_DIR
    pass


class _InTree(_PackageStamp, caching.InTreeCacheLocator):
    pass


class _UserWide(_PackageStamp, caching.UserWideCacheLocator):
    pass


if not any(issubclass(c, _PackageStamp) for c in caching.CacheImpl._locator_classes):
    caching.CacheImpl._locator_classes[0:0] = [_UserProvided, _InTree, _UserWide]
