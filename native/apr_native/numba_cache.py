"""Where numba caches apr's CPU kernels, and whether that cache is ready, known without
importing numba (~0.3 s) or compiling anything (~2 min on 2 cores when it is cold).

    numba_cache.ready()        # True once a warm-up (`numba_warmup`) filled the cache
    numba_cache.mark_ready()   # the warm-up's last step
    numba_cache.package_stamp()    # the source stamp every kernel's cache entry carries

numba compiles each kernel on its first call and keeps the machine code in an on-disk
cache (`cache=True`), one index file per function. Which functions a model calls depends
on the model, so "ready" is a marker the warm-up writes after a whole generation on
numba's kernels, in numba's own cache folder: deleting that folder (or pointing
NUMBA_CACHE_DIR elsewhere) makes the cache cold again, and the marker's name carries
everything that invalidates numba's entries (the kernels' sources, numba's and Python's
versions, the CPU), so a changed kernel or another machine is never taken for ready.
"""
from __future__ import annotations

import hashlib
import os
import sys
from typing import Optional

# The kernels' package (apr_native/kernels): the folder numba's locators are keyed by.
KERNELS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")
MARKER_PREFIX = "apr-ready-"
PYTHON_TAG = ".py%d%d" % sys.version_info[:2]        # as numba's own cache file names
# numba's CPU name and features, set directly (its own keys include the target CPU); an
# instruction level asked for ($APR_ISA) sets them itself (`_target`).
NUMBA_TARGET_ENV = ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES")


def package_stamp() -> str:
    """A digest of every source of the kernels package and its sub-packages. numba's own
    stamp covers only a function's file, which would keep stale machine code for a kernel
    calling code from another file after that file changed; `apr_native.kernels` stamps
    every function with this instead."""
    digest = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(KERNELS_DIR)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, "rb") as handle:
                    relative = os.path.relpath(path, KERNELS_DIR).replace(os.sep, "/")
                    digest.update(relative.encode() + b"\0" + handle.read())
    return digest.hexdigest()


def cache_path() -> str:
    """The folder numba caches the kernels in: its locators' order as
    `apr_native.kernels` installs them (NUMBA_CACHE_DIR, else the package's writable
    __pycache__, else the user-wide cache)."""
    # numba's `get_suitable_cache_subpath`: the folder's name and a hash of its path
    subpath = "_".join([os.path.basename(KERNELS_DIR),
                        hashlib.sha1(KERNELS_DIR.encode()).hexdigest()])
    chosen = os.environ.get("NUMBA_CACHE_DIR")
    if chosen:
        return os.path.join(chosen, subpath)
    in_tree = os.path.join(KERNELS_DIR, "__pycache__")
    if os.access(in_tree if os.path.isdir(in_tree) else KERNELS_DIR, os.W_OK):
        return in_tree
    return os.path.join(_user_cache_dir(), subpath)


def _user_cache_dir() -> str:
    """numba's user-wide cache folder (numba.misc.appdirs.user_cache_dir("numba"))."""
    if sys.platform == "win32":
        return os.path.join(os.environ.get("LOCALAPPDATA", os.path.expanduser("~")),
                            "numba", "Cache")
    if sys.platform == "darwin":
        return os.path.expanduser(os.path.join("~", "Library", "Caches", "numba"))
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                        "numba")


def _marker() -> Optional[str]:
    """The marker's path, None without numba."""
    numba_version = _numba_version()
    if numba_version is None:
        return None
    from .simd.build import cpu_signature
    digest = hashlib.sha256()
    for part in (package_stamp().encode(), numba_version, cpu_signature()):
        digest.update(part + b"\0")
    digest.update(_target())
    return os.path.join(cache_path(), MARKER_PREFIX + digest.hexdigest()[:20] + PYTHON_TAG)


def _target() -> bytes:
    """What numba compiles for, when not the host: a named instruction level, whose
    NUMBA_CPU_NAME/FEATURES `isa.apply` sets from it (so the marker is the same before and
    after, in the run that checks it and the warm-up that writes it), else numba's CPU
    settings as the user gave them."""
    from . import isa
    level = isa.requested()
    names = NUMBA_TARGET_ENV if level == isa.NATIVE else ()
    return b"\0".join([level.encode()] + [os.environ.get(n, "").encode() for n in names])


def _numba_version() -> Optional[bytes]:
    """numba's version file (its release, as numba's own cache index checks it), read
    without importing numba or importlib.metadata (~0.2 s on a busy machine)."""
    import importlib.util
    spec = importlib.util.find_spec("numba")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        with open(os.path.join(list(spec.submodule_search_locations)[0], "_version.py"),
                  "rb") as handle:
            return handle.read()
    except OSError:
        return None


def ready() -> bool:
    """Whether numba's kernels load from the cache here rather than compile (a warm-up
    ran with these sources, this numba, this Python and this CPU)."""
    marker = _marker()
    return marker is not None and os.path.exists(marker)


def mark_ready() -> None:
    """Record that the cache holds the kernels (after a generation that compiled them).
    This Python's earlier markers go: numba's index keeps one stamp per function, so a
    source reverted to an earlier state is cold again."""
    marker = _marker()
    if marker is None:
        return
    folder = os.path.dirname(marker)
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(folder):
        if (name.startswith(MARKER_PREFIX) and name.endswith(PYTHON_TAG)
                and name != os.path.basename(marker)):
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass
    with open(marker, "wb"):
        pass


__all__ = ["ready", "mark_ready", "cache_path", "package_stamp"]
