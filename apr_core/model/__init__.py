"""The transformer runtime: configs, family contracts, weights, layers, KV cache, model.

    from apr_core.model import Transformer
    model = Transformer.from_path("SmolLM2-135M-Instruct.Q4_1.gguf")
    logits = model.forward([1, 2, 3])          # [3, n_vocab]
"""
from __future__ import annotations

from .config import ModelConfig, RopeScaling  # noqa: F401
from .kv_cache import KVCache  # noqa: F401
from .transformer import Transformer  # noqa: F401

__all__ = ["ModelConfig", "RopeScaling", "KVCache", "Transformer"]
