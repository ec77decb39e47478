"""The transformer runtime: configs, family contracts, weights, layers, KV cache, model.

    from apr_core.model import Transformer
    model = Transformer.from_path("SmolLM2-135M-Instruct.Q4_1.gguf")
    logits = model.forward([1, 2, 3])          # [3, n_vocab]
"""
from __future__ import annotations

from typing import Any

from .config import ModelConfig, RopeScaling  # noqa: F401


def __getattr__(name: str) -> Any:
    """KVCache and Transformer (numpy) load on first use, so reading a config (`apr
    inspect`) does not import numpy."""
    if name == "KVCache":
        from .kv_cache import KVCache
        return KVCache
    if name == "Transformer":
        from .transformer import Transformer
        return Transformer
    raise AttributeError("module {!r} has no attribute {!r}".format(__name__, name))


__all__ = ["ModelConfig", "RopeScaling", "KVCache", "Transformer"]
