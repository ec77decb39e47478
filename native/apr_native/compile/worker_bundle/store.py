"""The model of a worker bundle, read from an R2-style binding (`env.MODEL`) once per isolate.

The binding is Cloudflare's R2 bucket API (or `workerd/r2_disk.mjs` locally, or a test's
stand-in): `await head(key)` -> an object with `size` (None when absent) and
`await get(key, {range: {offset, length}})` -> an object whose `arrayBuffer()` holds those
bytes. `R2Reader` is apr_core's `AsyncRangeReader` over it; the object is read in ranged
chunks (so the JavaScript side never holds more than a chunk), checked against the size
and sha256 recorded at build time, and opened through apr_core's `open_model` -> THE
engine object: with the SIMD kernels, its weights streamed into their memory
(placement.py), else the whole object in one buffer (`BytesSource`).

This file is apr_native/compile/worker_bundle/store.py; in the bundle it is
`apr_worker/store.py`.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
from typing import Any, Dict, Optional, Tuple

from apr_core.errors import AprError, ErrorCode
from apr_core.io import AsyncRangeReader, BytesSource
from apr_worker.placement import CHUNK, check_digest, check_size, open_header, stream_placed
DEFAULT_KV_MEMORY = 16 << 20    # bytes of KV blocks: about 700 positions of SmolLM2-135M
MANIFEST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "manifest.json")

_state: Dict[str, Any] = {}     # one engine per isolate, loaded by the first request


def manifest() -> Dict[str, Any]:
    """What `apr compile` recorded: the model's object key, size, sha256, name and the
    engine settings (`dequantize`, `kv_memory`)."""
    if "manifest" not in _state:
        with open(MANIFEST, "r", encoding="utf-8") as handle:
            _state["manifest"] = json.load(handle)
    return _state["manifest"]


def js_object(value: Dict[str, Any]) -> Any:
    """A plain JavaScript object for an options argument (a Python dict would reach
    JavaScript as a proxy whose fields R2 cannot read), alike in every Pyodide."""
    import js  # type: ignore[import-not-found]  # Pyodide's bridge to JavaScript
    return js.JSON.parse(json.dumps(value))


def js_bytes(buffer: Any) -> bytes:
    """A JavaScript ArrayBuffer as Python bytes (`to_bytes` in new Pyodide, `to_py` in 0.17)."""
    import js  # type: ignore[import-not-found]
    view = js.Uint8Array.new(buffer)
    if hasattr(view, "to_bytes"):
        return view.to_bytes()
    return bytes(view.to_py())


class R2Reader(AsyncRangeReader):
    """apr_core's asynchronous range reader over one object of an R2-style bucket."""

    def __init__(self, bucket: Any, key: str, size: int) -> None:
        self.bucket = bucket
        self.key = key
        self.size = size
        self.name = "r2://MODEL/" + key

    @classmethod
    async def open(cls, bucket: Any, key: str) -> "R2Reader":
        head = await bucket.head(key)
        if head is None:
            raise AprError(ErrorCode.IO, "the model object is not in the MODEL bucket: "
                           "upload it (see the bundle's README)", key=key)
        return cls(bucket, key, int(head.size))

    async def read(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise AprError(ErrorCode.IO, "range outside the model object", key=self.key,
                           offset=offset, length=length, size=self.size)
        body = await self.bucket.get(self.key, js_object(
            {"range": {"offset": offset, "length": length}}))
        if body is None:
            raise AprError(ErrorCode.IO, "the model object vanished while being read",
                           key=self.key)
        data = js_bytes(await body.arrayBuffer())
        if len(data) != length:
            raise AprError(ErrorCode.IO, "short read from the MODEL bucket", key=self.key,
                           offset=offset, expected=length, got=len(data))
        return data


async def read_all(reader: AsyncRangeReader, expect: Dict[str, Any]) -> bytearray:
    """The whole object's bytes, checked against `expect` (`size`, `sha256`)."""
    size = check_size(reader, expect)
    data = bytearray(size)
    digest = hashlib.sha256()
    for offset in range(0, size, CHUNK):
        chunk = await reader.read(offset, min(CHUNK, size - offset))
        data[offset:offset + len(chunk)] = chunk
        digest.update(chunk)
    check_digest(reader, expect, digest)
    return data


def simd_kernels() -> Any:
    """(kernels, the shell's kernel object) when worker.mjs registered the SIMD kernels
    (apr_webkernel) with placement, else None."""
    try:
        from apr_websource import _state as shell
    except ImportError:           # a runtime without the shell's glue: numpy's kernels
        return None
    if shell.get("kernels") is None or not shell.get("placement"):
        return None
    import js  # type: ignore[import-not-found]
    return shell["kernels"], js.aprSimd


async def open_for_engine(reader: Any, expect: Dict[str, Any]) -> Tuple[Any, Any, bool]:
    """(model, kernels, dequantize?): a GGUF's block weights streamed into the SIMD
    kernels' memory (placement.py) when they are there; else the whole object read into
    Python and numpy's kernels over float32 weights."""
    from apr_core.formats.open import open_model
    from apr_core.quant import registry
    simd = simd_kernels()
    if simd is not None:
        from apr_webplace import PlacedModel, placeable
        model_file = await open_header(reader)
        targets = placeable(model_file)
        if targets:
            placed = await stream_placed(reader, expect, model_file, targets, simd[1])
            return PlacedModel(model_file, placed), simd[0], False
    data = await read_all(reader, expect)
    model_file = open_model(BytesSource(data, reader.name), verify=False)  # sha256 checked
    return model_file, registry.NUMPY, True


async def load_engine(env: Any) -> Any:
    """THE engine object over the model in `env.MODEL` (key: `env.MODEL_KEY` if bound,
    else the build's)."""
    from apr_core.runtime.engine import Engine, EngineOptions
    from apr_core.runtime.text_model import TextModel
    info = manifest()
    bucket = getattr(env, "MODEL", None)
    if bucket is None:
        raise AprError(ErrorCode.IO, "no MODEL binding: bind the R2 bucket that holds the "
                       "model as MODEL (wrangler.toml [[r2_buckets]])")
    key = str(getattr(env, "MODEL_KEY", None) or info["model"]["key"])
    reader = await R2Reader.open(bucket, key)
    model, kernels, dequantize = await open_for_engine(reader, info["model"])
    text_model = TextModel.from_model_file(
        model, dequantize_at_load=dequantize and bool(info.get("dequantize", True)),
        kernels=kernels)
    options = EngineOptions(mmap=False, max_batch=1,
                            kv_memory=int(info.get("kv_memory", DEFAULT_KV_MEMORY)))
    return Engine(text_model, options, path=reader.name)


async def engine(env: Any) -> Any:
    """The isolate's engine, loading it on first use; concurrent first requests share one
    load, and a failed load is tried again by the next request."""
    task: Optional[Any] = _state.get("engine")
    if task is None:
        task = _state["engine"] = asyncio.ensure_future(load_engine(env))
    try:
        return await task
    except BaseException:
        if _state.get("engine") is task:
            del _state["engine"]
        raise


__all__ = ["R2Reader", "engine", "load_engine", "manifest", "read_all"]
