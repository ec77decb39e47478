"""The npm Pyodide of a JavaScript worker bundle, turned into workerd modules at build time.

workerd (and Cloudflare) never compile WebAssembly from bytes at run time: every wasm module
must arrive precompiled as a module binding, and classic scripts cannot be evaluated. So the
Pyodide 0.17 full distribution (npm `@pyodide/pyodide`, Python 3.8 + numpy 1.17.5: the one
Pyodide with numpy that the registries ship) becomes:

    pyodide/pyodide.asm.wasm       the runtime (a wasm module)
    pyodide/pyodide.asm.data       the standard library's packed file system (data)
    pyodide/numpy.data             numpy's packed file system (data)
    pyodide/packages.json          the package list (json)
    pyodide/*.mjs                  pyodide.js, pyodide.asm.js and numpy.js, each wrapped in an
                                   exported function that runs the unmodified script text
    pyodide/so/*.wasm              numpy's shared libraries, unpacked from numpy.data
                                   (Emscripten's LZ4 chunks), served by their bytes
    pyodide/adapters/SIG.wasm      the JS-call adapter of every signature the runtime's JS
                                   library declares (`.sig="..."`), byte for byte what
                                   Emscripten's convertJsFunctionToWasm builds at run time
    pyodide_modules.mjs            imports them all for boot.mjs (.so sizes, fingerprints)

    write_assets(distribution_dir, bundle_dir) -> {"bytes": ..., "so": [...], "adapters": [...]}
"""
from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, List

PYODIDE_VERSION = "0.17.0"
SCRIPTS = ("pyodide.js", "pyodide.asm.js", "numpy.js")   # wrapped into .mjs modules
DATA = ("pyodide.asm.data", "numpy.data")
EDGE = 4096                        # bytes at each end of a library that fingerprint() reads
LZ4_CHUNK = 2048                   # Emscripten's file packager compresses 2 KiB chunks
WRAP = ("// {name} of npm @pyodide/pyodide {version}, unmodified inside run(): workerd\n"
        "// evaluates no classic scripts, so the worker's importScripts calls run(). A module\n"
        "// is strict code: the names the script assigns without declaring are declared here.\n"
        "export default function run() {{\n{declare}{text}\n{tail}}}\n")
# globals the scripts assign or read on purpose: never shadowed by a declaration
GLOBALS = {"console", "setImmediate", "clearImmediate", "self", "globalThis", "pyodide",
           "location", "importScripts", "fetch", "Module"}
TAILS = {"pyodide.asm.js": "globalThis._createPyodideModule = _createPyodideModule;\n"}
TYPE_CODES = {"i": 0x7F, "j": 0x7E, "f": 0x7D, "d": 0x7C}


def adapter_bytes(sig: str) -> bytes:
    """The module Emscripten's convertJsFunctionToWasm(func, sig) compiles: one imported
    function `e.f` of type `sig` (return code first), exported again as `f`."""
    params = [TYPE_CODES[c] for c in sig[1:]]
    section = [1, 0, 1, 0x60, len(params)] + params
    section += [0] if sig[0] == "v" else [1, TYPE_CODES[sig[0]]]
    section[1] = len(section) - 2
    return bytes([0, 97, 115, 109, 1, 0, 0, 0] + section +
                 [2, 7, 1, 1, 101, 1, 102, 0, 0, 7, 5, 1, 1, 102, 0, 0])


def undeclared(script: str) -> List[str]:
    """Names a sloppy-mode script assigns that no var/let/const/function/parameter
    declares (a strict module would throw ReferenceError on them). A heuristic over
    minified Emscripten output; declaring a name that was declared after all is harmless."""
    assigned = set(re.findall(r"(?:^|[;{}()\n,])\s*([A-Za-z_$][\w$]*)\s*=(?![=>])", script))
    declared = set(re.findall(r"\b(?:var|let|const|function|class)\s+([A-Za-z_$][\w$]*)",
                              script))
    for params in re.findall(r"function\s*[\w$]*\s*\(([^)]*)\)", script):
        declared.update(p.strip() for p in params.split(","))
    for params in re.findall(r"\(([\w$, ]*)\)\s*=>", script):
        declared.update(p.strip() for p in params.split(","))
    declared.update(re.findall(r"([A-Za-z_$][\w$]*)\s*=>", script))
    for decl in re.findall(r"\bvar\s+([^;]*);", script):
        declared.update(re.findall(r"(?:^|,)\s*([A-Za-z_$][\w$]*)\s*(?:=|$|,)", decl))
    return sorted(assigned - declared - GLOBALS)


def signatures(asm_js: str) -> List[str]:
    """Every signature the runtime's JS library functions declare."""
    found = set(re.findall(r'\.sig="([vijfd][ijfd]*)"', asm_js))
    return sorted(found)


def fingerprint(data: bytes) -> int:
    """32-bit FNV-1a of the first and last EDGE bytes, as the worker computes it over the
    bytes Emscripten hands it (boot.mjs); with the size it tells numpy's libraries apart."""
    value = 0x811C9DC5
    for byte in data[:EDGE] + data[-EDGE:]:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def _numbers(script: str, name: str) -> List[int]:
    match = re.search(name + r":\[([^\]]*)\]", script)
    if match is None:
        raise ValueError("no {} in the package script".format(name))
    return [int(float(v)) for v in match.group(1).split(",") if v]


def unpack_package(script: str, data: bytes) -> Dict[str, bytes]:
    """The files of an Emscripten file-packager package (its loader script and .data),
    LZ4 chunks decompressed when the package is compressed."""
    from apr_core.codecs.lz4 import decompress_block
    files = re.findall(r'filename:"([^"]+)",start:([0-9.e]+),end:([0-9.e]+)', script)
    if "compressedData" in script:
        offsets, sizes = _numbers(script, "offsets"), _numbers(script, "sizes")
        successes = _numbers(script, "successes")
        total = max(int(float(end)) for _, _, end in files)
        out = bytearray()
        for index, (offset, size, packed) in enumerate(zip(offsets, sizes, successes)):
            raw = min(LZ4_CHUNK, total - index * LZ4_CHUNK)
            chunk = data[offset:offset + size]
            out += decompress_block(chunk, raw) if packed else chunk[:raw]
        data = bytes(out)
    return {name: data[int(float(a)):int(float(b))] for name, a, b in files}


def write_assets(dist: str, bundle: str, packages=("numpy",)) -> Dict[str, Any]:
    """Write the Pyodide modules into `bundle/pyodide/`; returns what was written."""
    out = os.path.join(bundle, "pyodide")
    for sub in ("so", "adapters"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    written = 0

    def put(rel: str, data: bytes) -> None:
        nonlocal written
        with open(os.path.join(out, rel), "wb") as handle:
            handle.write(data)
        written += len(data)

    for name in SCRIPTS:
        with open(os.path.join(dist, name), "r", encoding="utf-8") as handle:
            text = handle.read()
        names = undeclared(text)
        declare = "var {};\n".format(", ".join(names)) if names else ""
        put(name.replace(".js", ".mjs"), WRAP.format(
            name=name, version=PYODIDE_VERSION, declare=declare, text=text,
            tail=TAILS.get(name, "")).encode())
        if name == "pyodide.asm.js":
            sigs = signatures(text)
    for name in DATA + ("pyodide.asm.wasm", "packages.json"):
        with open(os.path.join(dist, name), "rb") as handle:
            put(name, handle.read())
    libraries = []
    for package in packages:
        with open(os.path.join(dist, package + ".js"), "r", encoding="utf-8") as handle:
            script = handle.read()
        with open(os.path.join(dist, package + ".data"), "rb") as handle:
            files = unpack_package(script, handle.read())
        for path, data in sorted(files.items()):
            if path.endswith(".so"):
                rel = "so/" + path.strip("/").replace("/", "_")[:-3] + ".wasm"
                put(rel, data)
                libraries.append({"module": rel, "path": path, "size": len(data),
                                  "fnv": fingerprint(data)})
    adapters = []
    for sig in sigs:
        rel = "adapters/{}.wasm".format(sig)
        put(rel, adapter_bytes(sig))
        adapters.append({"module": rel, "sig": sig})
    index = modules_index(libraries, adapters).encode()
    with open(os.path.join(bundle, "pyodide_modules.mjs"), "wb") as handle:
        handle.write(index)
    return {"bytes": written + len(index), "so": libraries, "adapters": adapters}


def modules_index(libraries: List[Dict[str, Any]], adapters: List[Dict[str, Any]]) -> str:
    """pyodide_modules.mjs: every embedded Pyodide module, in the shape boot.mjs takes."""
    lines = ["// Written by apr compile --target worker (pyodide_assets.py): the embedded Pyodide.",
             'import runLoader from "./pyodide/pyodide.mjs";',
             'import runAsm from "./pyodide/pyodide.asm.mjs";',
             'import runNumpy from "./pyodide/numpy.mjs";',
             'import asmWasm from "./pyodide/pyodide.asm.wasm";',
             'import asmData from "./pyodide/pyodide.asm.data";',
             'import numpyData from "./pyodide/numpy.data";',
             'import packages from "./pyodide/packages.json";']
    for i, lib in enumerate(libraries):
        lines.append('import so{} from "./pyodide/{}";'.format(i, lib["module"]))
    for i, adapter in enumerate(adapters):
        lines.append('import ad{} from "./pyodide/{}";'.format(i, adapter["module"]))
    libs = ",\n    ".join('{{ module: so{}, size: {}, fnv: {}, path: "{}" }}'.format(
        i, lib["size"], lib["fnv"], lib["path"]) for i, lib in enumerate(libraries))
    ads = ", ".join('"{}": ad{}'.format(a["sig"], i) for i, a in enumerate(adapters))
    lines.append("export default {{\n  runLoader, runAsm, runNumpy, asmWasm, packages,\n"
                 '  data: {{ "pyodide.asm.data": asmData, "numpy.data": numpyData }},\n'
                 "  libraries: [\n    {}\n  ],\n  adapters: {{ {} }},\n}};\n".format(libs, ads))
    return "\n".join(lines)


__all__ = ["write_assets", "adapter_bytes", "unpack_package", "fingerprint", "PYODIDE_VERSION"]
