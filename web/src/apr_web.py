"""apr in the browser: the Python half of the web shell (runs in Pyodide, in a Web Worker).

Every format is parsed here, by `apr_core`; the JavaScript side only moves bytes. It exposes
`aprHost` (see web/src/worker.js) with:

    head(url) -> Promise<str>                      JSON {size, validator (ETag/Last-Modified)}
    fetchRange(url, offset, length) -> Promise<Uint8Array>
    fetchFile(url, size) -> Promise<Uint8Array>    a whole file, progress reported to the page
    ensureShard(spec_json) -> Promise<bool>        download + verify + commit into IndexedDB
    readShard(sha256, offset, length) -> Promise<Uint8Array>
    emit(kind, payload_json)                       progress, tokens and stats for the page

Parsers are synchronous; they run over `RemoteSource`s that raise `NeedBytes` for ranges not
fetched yet, and `drive` fetches the range and runs the (cheap) parse again, exactly like
`apr_core.io.run_async` but across several sources (a manifest and its shards).
Functions called from JS return JSON text, so results cross every Pyodide generation alike.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Dict, Optional

import js  # type: ignore[import-not-found]  # Pyodide's bridge to the worker's globals

from apr_core.errors import AprError
from apr_core.formats.flags import flag_names
from apr_core.formats.open import open_model

from apr_websource import RemoteSource, _error, _models, _open, _state, drive

LIST_PREVIEW = 16  # metadata arrays longer than this are summarised for display


# ------------------------------------------------------------------ describing models

def _preview(value: Any) -> Any:
    if isinstance(value, list) and len(value) > LIST_PREVIEW:
        return {"preview": [_preview(v) for v in value[:LIST_PREVIEW]], "length": len(value)}
    if isinstance(value, dict):
        return {k: _preview(v) for k, v in value.items()}
    return value


def _summary(model: Any, name: str, full: bool) -> Dict[str, Any]:
    flags = getattr(model, "flags", None)
    tensors = [{"name": t.name, "dtype": t.dtype.name, "shape": list(t.shape),
                "stored": t.size, "bytes": t.nbytes, "shard": t.shard}
               for t in model.tensors.values()]
    return {
        "name": name, "format": model.format,
        "flags": flag_names(flags) if isinstance(flags, int) else [],
        "metadata": model.metadata if full else _preview(model.metadata),
        "tensors": tensors,
        "parameters": sum(t.n_elements for t in model.tensors.values()),
        "shards": list(getattr(model, "shard_files", []) or []),
        "warnings": list(getattr(model, "warnings", []) or []),
    }


async def describe(url: str, digests: bool = False, full: bool = True,
                   options: Optional[Dict[str, Any]] = None) -> str:
    """Header, metadata and tensor index of a model URL; with `digests`, the sha256 of every
    tensor's decoded bytes (read tensor by tensor, each from its own byte range); for a
    signed file, the signature check's result. `options`: see `_open`."""
    try:
        model = await _open(url, options)
        out = _summary(model, url, full)
        out["signature"] = model.signature
        if digests:
            hashes = {}
            for name in model.tensors:
                raw = await drive(lambda: model.read_raw(name))
                hashes[name] = hashlib.sha256(raw.data).hexdigest()
            out["tensor_sha256"] = hashes
        return json.dumps(out)
    except Exception as exc:  # reported to the page as one line, never a dead worker
        return _error(exc)


def inspect_file(path: str, name: str) -> str:
    """Summary of a local file the user opened (written into the worker's memory FS)."""
    for key in [k for k in _models if k.startswith("file:")]:  # one local file at a time
        old = _models.pop(key)
        old.close()
        os.remove(old.local_path)
    try:
        model = open_model(path, verify=True)
        model.local_path = path
        _models["file:" + name] = model
        return json.dumps(_summary(model, name, full=False))
    except Exception as exc:
        return _error(exc)


def tensor_stats(key: str) -> str:
    """Emit a `stats` event per tensor (apr_core.stats: min, max, mean, std, NaN/Inf/zeros)."""
    try:
        from apr_core import stats
    except ImportError:  # no numpy in this runtime
        return json.dumps({"error": {"code": "numpy", "message": "statistics need numpy"}})
    model = _models[key]
    for tensor in model.lazy_tensors():
        try:
            row = stats.tensor_stats(tensor.name, stats.tensor_values(tensor),
                                     tensor.dtype.name).to_dict()
        except AprError as exc:
            row = {"name": tensor.name, "error": exc.message}
        js.aprHost.emit("stats", json.dumps(row))
    return json.dumps({"ok": True})


def forget(url: str) -> str:
    """Drop an opened model from memory (its shards stay cached)."""
    model = _models.pop(url, None)
    if model is not None:
        model.close()
    if _state.get("url") == url:
        on_gpu = getattr(_state.get("engine"), "backend", None) == "webgpu"
        _state.pop("model", None)   # the worker's kernels stay chosen
        _state.pop("engine", None)
        _state.pop("url", None)
        release = _state.get("release_kernels")
        if release is not None:
            release()   # the weights placed in the kernels' memory go with it
        if on_gpu:
            import apr_webgpu
            apr_webgpu.release()    # and its GPU buffers
    return json.dumps({"forgotten": model is not None})


# Generation and the WebCrypto provider live beside this module; the worker reaches every
# function through apr_web.
from apr_webcrypto import crypto_self_test, register_webcrypto  # noqa: E402
from apr_webrun import chat, dequant_digests, greedy, load, logits, profile_decode  # noqa: E402
from apr_websession import check as session_check, forget as session_forget  # noqa: E402
from apr_websession import locate as session_path, prepare as session_prepare  # noqa: E402

__all__ = ["describe", "inspect_file", "tensor_stats", "load", "chat", "logits", "greedy",
           "dequant_digests", "profile_decode", "forget", "drive", "RemoteSource",
           "register_webcrypto", "crypto_self_test", "session_check", "session_forget",
           "session_path", "session_prepare"]
