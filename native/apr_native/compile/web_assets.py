"""The files of a compiled web site other than the model: the browser shell, the Pyodide
runtime it boots, and how the finished folder replaces an older one.

The site has the layout `apr web` serves (apr_native.web_bundle.site_mounts), flattened
into plain files so any static host serves it with relative URLs:

    index.html, src/...        web/ (the page, its JS, CSS and Python glue)
    pyodide/017/...            the Pyodide 0.17 files that boot and load numpy, nothing else
    site/...                   web_bundle.prepare_site: apr_core.whl and config.json
    models/...                 the model's manifest and shards (apr_native.compile.web)
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Dict, Iterator, List, Tuple

from apr_core.errors import AprError, ErrorCode

RUNTIME_FLAVOR = "017"            # Pyodide 0.17 ships numpy, which generation needs
RUNTIME_DIR = "pyodide/" + RUNTIME_FLAVOR
# what pyodide.js fetches to boot (pyodide.asm.js fetches the .wasm and .data beside it)
RUNTIME_BOOT = ("pyodide.js", "pyodide.asm.js", "pyodide.asm.wasm", "pyodide.asm.data",
                "packages.json")
RUNTIME_PACKAGES = ("numpy",)     # loaded by boot.js (`py.loadPackage(["numpy"])`)
# sources of generated files under web/src (the page loads what is built from them)
SHELL_SOURCES = (".c", ".h", ".wat", ".md")
SHELL_TOP = ("index.html", "src")
MARKER_KEY = "compiled"           # site/config.json key naming what built the site


def copy_shell(web_root: str, dest: str) -> List[str]:
    """Copy the page and web/src (not build sources, caches or dotfiles) into `dest`;
    returns the site paths written."""
    written = []
    for top in SHELL_TOP:
        source = os.path.join(web_root, top)
        if os.path.isfile(source):
            written.append(_copy(source, dest, top))
            continue
        for folder, dirs, files in os.walk(source):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
            for name in sorted(files):
                if name.startswith(".") or name.endswith(SHELL_SOURCES + (".pyc",)):
                    continue
                path = os.path.join(folder, name)
                written.append(_copy(path, dest, os.path.relpath(path, web_root)))
    return written


def runtime_files(runtime_dir: str) -> List[str]:
    """File names of the Pyodide distribution the page needs: the boot files plus each
    package of RUNTIME_PACKAGES and its dependencies (`<name>.js` and `<name>.data`)."""
    with open(os.path.join(runtime_dir, "packages.json"), encoding="utf-8") as handle:
        dependencies: Dict[str, List[str]] = json.load(handle)["dependencies"]
    wanted, todo = [], list(RUNTIME_PACKAGES)
    while todo:
        name = todo.pop()
        if name in wanted:
            continue
        if name not in dependencies:
            raise AprError(ErrorCode.IO, "the Pyodide copy lacks a package the page loads",
                           package=name, path=runtime_dir)
        wanted.append(name)
        todo.extend(dependencies[name])
    return list(RUNTIME_BOOT) + [name + ext for name in sorted(wanted) for ext in (".js", ".data")]


def copy_runtime(runtime_dir: str, dest: str) -> List[str]:
    """Copy the needed Pyodide files into `dest`/pyodide/017; returns the site paths."""
    return [_copy(os.path.join(runtime_dir, name), dest, RUNTIME_DIR + "/" + name)
            for name in runtime_files(runtime_dir)]


def _copy(source: str, dest: str, relative: str) -> str:
    target = os.path.join(dest, relative)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copyfile(source, target)
    return relative.replace(os.sep, "/")


def site_files(root: str) -> Iterator[Tuple[str, int]]:
    """(site path, size) of every file under `root`, sorted."""
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(folder, name)
            yield os.path.relpath(path, root).replace(os.sep, "/"), os.path.getsize(path)


def is_compiled_site(path: str) -> bool:
    """True for a folder an earlier `apr compile --target web` wrote."""
    try:
        with open(os.path.join(path, "site", "config.json"), encoding="utf-8") as handle:
            return MARKER_KEY in json.load(handle)
    except (OSError, ValueError, TypeError):
        return False


def staging_dir(output: str) -> str:
    """An empty folder beside `output` to build in (renamed into place when complete)."""
    parent = os.path.dirname(os.path.abspath(output))
    os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(prefix=".{}.".format(os.path.basename(os.path.abspath(output))),
                            suffix=".tmp", dir=parent)


def make_readable(root: str) -> None:
    """Folders and files get the modes the umask gives new ones (rwxr-xr-x, rw-r--r--):
    mkdtemp's folder and the atomic writers' files start private (0700, 0600), which
    would hide the site from a web server running as another user."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(root, 0o777 & ~umask)
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            os.chmod(os.path.join(folder, name), 0o777 & ~umask)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o666 & ~umask)


def check_replaceable(output: str, overwrite: bool) -> None:
    """Refuse an existing output unless `overwrite`; even then, only a file, an empty
    folder or an earlier compiled site is replaced, never some other folder."""
    if not os.path.lexists(output):
        return
    if not overwrite:
        raise AprError(ErrorCode.ARGUMENT, "output exists (use -f/--force to overwrite)",
                       path=output)
    if os.path.isdir(output) and not os.path.islink(output) and os.listdir(output) \
            and not is_compiled_site(output):
        raise AprError(ErrorCode.ARGUMENT, "output is a folder that `apr compile --target "
                       "web` did not write: not replacing it", path=output)


def move_into_place(staging: str, output: str, overwrite: bool) -> None:
    """Rename the finished `staging` folder to `output` (replacing what
    check_replaceable allows); the old one is removed only after the rename."""
    check_replaceable(output, overwrite)
    if not os.path.lexists(output):
        os.rename(staging, output)
        return
    old = staging + ".old"
    os.rename(output, old)
    os.rename(staging, output)
    if os.path.isdir(old) and not os.path.islink(old):
        shutil.rmtree(old)
    else:
        os.unlink(old)


__all__ = ["copy_shell", "copy_runtime", "runtime_files", "site_files", "is_compiled_site",
           "staging_dir", "make_readable", "check_replaceable", "move_into_place", "RUNTIME_FLAVOR",
           "RUNTIME_DIR", "MARKER_KEY"]
