"""LoRA adapters in the browser: `apr.load(url, {lora: [{url, scale}]})` (see apr_webrun).

Each adapter URL is fetched (a GGUF LoRA file when it ends in `.gguf`, else a PEFT
directory: its `adapter_config.json` and `adapter_model.safetensors`) into Pyodide's file
system, where apr_core's one reader (apr_core.formats.lora, as `--lora FILE[:SCALE]`
natively) takes it through `EngineOptions.lora`: the same adapted weights as native apr.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Sequence, Tuple

from apr_core.errors import AprError, ErrorCode

from apr_websource import _url_source

LORA_DIR = "/lora"
PEFT_FILES = ("adapter_config.json", "adapter_model.safetensors")


async def _fetch(url: str, path: str) -> None:
    source = await _url_source(url)
    await source.fill_all()
    with open(path, "wb") as handle:
        handle.write(source.read(0, source.size))


async def fetch_adapters(specs: Sequence[Dict[str, Any]]) -> Tuple[Tuple[str, float], ...]:
    """`({url, scale}, ...)` -> `((local path, scale), ...)` for `EngineOptions.lora`."""
    out: List[Tuple[str, float]] = []
    for index, spec in enumerate(specs or ()):
        if not isinstance(spec, dict) or not isinstance(spec.get("url"), str):
            raise AprError(ErrorCode.ARGUMENT, "lora takes a list of {url, scale}",
                           adapter=index)
        url = spec["url"]
        try:
            scale = float(spec.get("scale", 1.0))
        except (TypeError, ValueError):
            raise AprError(ErrorCode.ARGUMENT, "a LoRA scale must be a number", url=url,
                           scale=repr(spec.get("scale")))
        folder = "{}/{}".format(LORA_DIR, index)
        os.makedirs(folder, exist_ok=True)
        if url.lower().endswith(".gguf"):
            path = folder + "/adapter.gguf"
            await _fetch(url, path)
        else:
            path = folder
            for name in PEFT_FILES:
                await _fetch(url.rstrip("/") + "/" + name, "{}/{}".format(folder, name))
        out.append((path, scale))
    return tuple(out)


__all__ = ["fetch_adapters"]
