"""The decoder-only transformer: load from any ModelFile, run prefill and decode steps.

    model = Transformer.from_model_file(open_model("SmolLM2.gguf"))
    cache = model.new_cache(256)
    logits = model.forward(prompt_ids, cache)          # [T, n_vocab], prefill
    logits = model.forward([next_id], cache)           # [1, n_vocab], one decode step

Loading goes config (config.py) -> contract check of every tensor's presence and shape
(families.py) -> weights (weights.py: projections stay quantized unless
`dequantize_at_load=True`). One block implementation serves every family; the config
switches its parts (fused QKV, biases, Q/K norms, sandwich norms, gated MLP, learned
positions, sliding-window layers).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from ..errors import AprError, ErrorCode
from ..json_files import read_json_file
from ..quant import dequantize, registry
from ..tensor import ModelFile
from .config import ModelConfig, config_from_apr, config_from_gguf, config_from_hf
from .families import Family, Resolved, contracts, resolve_tensors
from .fused import KINDS as _FUSED_KINDS  # noqa: F401  (registers the fused kinds' numpy references)
from .kv_types import DEFAULT as KV_DEFAULT
from .kv_cache import KVCache
from .layers import ACTIVATION_FNS, Norm, Rope
from .weights import Linear, matmul_group

# Projection role -> its bias role; norm role -> its bias role (contract role names).
LINEAR_BIAS = {"q": "q_bias", "k": "k_bias", "v": "v_bias", "qkv": "qkv_bias",
               "o": "o_bias", "gate": None, "up": "up_bias", "down": "down_bias"}
NORM_BIAS = {"attn_norm": "attn_norm_bias", "ffn_norm": "ffn_norm_bias",
             "post_attn_norm": None, "post_ffn_norm": None}


class Block:
    """One decoder layer's weights; roles absent from the family are None."""

    def __init__(self, index: int, sliding: bool) -> None:
        self.index = index
        self.sliding = sliding
        self.linears: Dict[str, Optional[Linear]] = {}
        self.norms: Dict[str, Optional[Norm]] = {}
        self.q_norm: Optional[np.ndarray] = None    # [head_dim]
        self.k_norm: Optional[np.ndarray] = None    # [head_dim]


class Transformer:
    """A loaded model. `forward(token_ids, cache)` -> logits `[T, n_vocab]` float32."""

    def __init__(self, config: ModelConfig, embedding: Linear, lm_head: Linear,
                 output_norm: Norm, blocks: List[Block],
                 position_embedding: Optional[Linear] = None,
                 rope_freqs: Optional[np.ndarray] = None,
                 kernels: Optional[registry.Kernels] = None) -> None:
        self.config = config
        self.kernels = kernels or registry.NUMPY   # the backend this model runs on
        self.embedding = embedding
        self.lm_head = lm_head
        self.output_norm = output_norm
        self.blocks = blocks
        self.position_embedding = position_embedding
        self._rope_freqs = rope_freqs
        self.ropes: Dict[str, Rope] = self._build_ropes(config)
        self.attn_scale = config.attn_scale or config.head_dim ** -0.5
        self.act = ACTIVATION_FNS[config.act]
        self.kv_type = KV_DEFAULT     # KV cache type of new caches (`--kv-type`)
        # a device backend's whole-model runner (webgpu: apr_core.gpu.GpuForward), set by
        # its kernels' `attach`; forward passes go to it, with the KV cache on the device
        self.device: Any = None

    def _build_ropes(self, config: ModelConfig) -> Dict[str, Rope]:
        if config.positions != "rope":
            return {}
        full = Rope(config.rope_dim, config.rope_theta, config.rope_style,
                    config.rope_scaling, self._rope_freqs)
        # Sliding layers with their own theta (Gemma 3) use plain, unscaled RoPE.
        sliding = full if config.rope_theta_local is None else Rope(
            config.rope_dim, config.rope_theta_local, config.rope_style,
            type(config.rope_scaling)())
        return {"full": full, "sliding": sliding}

    def reconfigure(self, **changes: Any) -> None:
        """Replace config fields at run time (`max_ctx`, `rope_theta`, `rope_scaling`:
        `--ctx` and the RoPE overrides) and rebuild what depends on them. Caches made
        before keep their capacity."""
        self.config = dataclasses.replace(self.config, **changes)
        if "rope_scaling" in changes and changes["rope_scaling"].kind != "llama3":
            self._rope_freqs = None     # a GGUF's llama3 frequency tensor no longer applies
        self.ropes = self._build_ropes(self.config)

    # ------------------------------------------------------------------ loading

    @classmethod
    def from_model_file(cls, model_file: ModelFile, dequantize_at_load: bool = False,
                        hf_config: Optional[Dict[str, Any]] = None,
                        kernels: Optional[registry.Kernels] = None) -> "Transformer":
        """Load weights from an open ModelFile (APR, GGUF, SafeTensors).

        `hf_config` is the transformers config.json dict, needed for SafeTensors files
        (which carry no hyperparameters). Every tensor is checked against the family
        contract before weights are read. Projections stay quantized in memory unless
        `dequantize_at_load`. `kernels` is the backend it runs on (default numpy's).
        """
        config = model_config(model_file, hf_config)
        family = Family(config.arch, contracts()[config.arch])
        where = resolve_tensors(family, config.source, config.dims(), config.flags(),
                                config.n_layers, model_file.tensors)
        model = _Loader(model_file, config, where, dequantize_at_load,
                        kernels or registry.NUMPY).build(cls)
        attach = getattr(model.kernels, "attach", None)
        if attach is not None:       # a device backend uploads the weights now
            attach(model)
        return model

    @classmethod
    def from_path(cls, path: str, dequantize_at_load: bool = False,
                  opener: Optional[Callable[[str], ModelFile]] = None,
                  kernels: Optional[registry.Kernels] = None) -> "Transformer":
        """Load a model file or a Hugging Face model directory (weights + config.json).

        `opener(path)` opens the file (default `open_model`; apr_native passes its mmap
        loader, whose tensors are zero-copy views)."""
        from ..formats.open import open_model
        hf_config = None
        if os.path.isdir(path):
            hf_config = read_hf_config(path)
        with (opener or open_model)(path) as model_file:
            return cls.from_model_file(model_file, dequantize_at_load, hf_config, kernels)

    # ------------------------------------------------------------------ running

    def new_cache(self, capacity: Optional[int] = None, kv_type: Optional[str] = None
                  ) -> KVCache:
        """A KV cache for up to `capacity` positions (default: the model's context), in
        KV type `kv_type` (default: the model's `kv_type`)."""
        cfg = self.config
        size = min(int(capacity or cfg.max_ctx), cfg.max_ctx)
        return KVCache(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, size, self.kernels,
                       kv_type or self.kv_type)

    def forward(self, token_ids: Sequence[int], cache: Optional[KVCache] = None,
                last_only: bool = False) -> np.ndarray:
        """Run `token_ids` after whatever `cache` holds; return logits `[T, n_vocab]`
        (`[1, n_vocab]` for the last position only when `last_only`). Without a cache the
        tokens are a whole sequence from position 0."""
        if self.device is not None:
            count = np.asarray(token_ids).reshape(-1).size
            return self.device.forward_rows(token_ids, cache, [count - 1] if last_only
                                            else range(count))
        x = self.hidden_states(token_ids, cache)                       # [T, d_model]
        if last_only:
            x = x[-1:]
        return self.lm_head.matmul(x)                                  # [T, d] -> [T, n_vocab]

    def forward_rows(self, token_ids: Sequence[int], cache: Any, rows: Sequence[int]
                     ) -> np.ndarray:
        """`forward` with logits for the given rows only (a batch step: the last row of
        each sequence that samples next) -> `[len(rows), n_vocab]`."""
        if self.device is not None:
            return self.device.forward_rows(token_ids, cache, rows)
        x = self.hidden_states(token_ids, cache)                       # [T, d_model]
        picked = np.ascontiguousarray(x[np.asarray(rows, np.int64)])   # [R, d_model]
        return self.lm_head.matmul(picked)                             # [R, n_vocab]

    def hidden_states(self, token_ids: Sequence[int], cache: Optional[KVCache] = None,
                      observe: Optional[Callable[[str, np.ndarray], None]] = None
                      ) -> np.ndarray:
        """Final hidden states `[T, d_model]` after the output norm (what the LM head
        reads; mean-pooled they are the server's embeddings). Cache use as `forward`.

        `observe(step, x)` sees the residual stream `[T, d_model]` after each step, named
        as llama.cpp names the tensors that make it: "token_embd", "blk.0" .. "blk.N-1",
        "output_norm" (`apr trace` prints them)."""
        cfg = self.config
        ids = np.asarray(token_ids, np.int64).reshape(-1)
        if ids.size == 0:
            raise AprError(ErrorCode.ARGUMENT, "forward needs at least one token")
        if ids.min() < 0 or ids.max() >= cfg.n_vocab:
            raise AprError(ErrorCode.ARGUMENT, "token id outside the vocabulary",
                           n_vocab=cfg.n_vocab, min=int(ids.min()), max=int(ids.max()))
        if cache is None:
            cache = self.new_cache(ids.size)
        cache.check_room(ids.size)
        positions = cache.positions(ids.size)                          # [T] int64
        x = self.embedding.rows(ids)                                   # [T, d_model]
        if cfg.embed_scale != 1.0:
            x = x * np.float32(cfg.embed_scale)
        if self.position_embedding is not None:
            x = x + self.position_embedding.rows(positions)            # learned positions
        if observe is not None:
            observe("token_embd", x)
        tables = {kind: rope.tables(positions) for kind, rope in self.ropes.items()}
        for block in self.blocks:
            x = self.kernels.fused("decoder_block")(self, block, x, positions, cache, tables)
            if observe is not None:
                observe("blk.{}".format(block.index), x)
        cache.advance(ids.size)
        out = self.output_norm(x)                                      # [T, d_model]
        if observe is not None:
            observe("output_norm", out)
        return out

    def run_block(self, block: Block, x: np.ndarray, positions: np.ndarray, cache: KVCache,
                  tables: Dict[str, Any]) -> np.ndarray:
        """Decoder layer `block` on the residual stream `x [T, d]` at `positions [T]`
        (its K and V stored in `cache`: a KVCache from `cache.length`, or a batch step's
        BatchKV at its slots; `tables` the RoPE cos/sin by kind) -> the stream after it `[T, d]`. THE definition of a layer: the fused kind
        "decoder_block" calls it unless a backend runs the whole layer itself."""
        cfg = self.config
        lin, norms = block.linears, block.norms
        _, h = _norm_add(self.kernels, norms["attn_norm"], x, None)                  # [T, d]
        if lin.get("qkv") is not None:
            qkv = lin["qkv"].matmul(h)                                 # [T, q_dim + 2 kv_dim]
            q, k, v = np.split(qkv, [cfg.q_dim, cfg.q_dim + cfg.kv_dim], axis=1)
        else:
            q, k, v = matmul_group([lin["q"], lin["k"], lin["v"]], h)
        t = x.shape[0]
        q = q.reshape(t, cfg.n_heads, cfg.head_dim)                    # [T, H, hd]
        k = k.reshape(t, cfg.n_kv_heads, cfg.head_dim)                 # [T, n_kv, hd]
        v = v.reshape(t, cfg.n_kv_heads, cfg.head_dim)
        if block.q_norm is not None:
            norm = self.kernels.fused("rms_norm")
            q = norm(q, block.q_norm, cfg.norm_eps)                   # [T, H, hd]
            k = norm(k, block.k_norm, cfg.norm_eps)                   # [T, n_kv, hd]
        kind = "sliding" if block.sliding else "full"
        rope = self.ropes.get(kind)
        cos, sin = tables[kind] if rope is not None else (None, None)  # [T, dim/2] each
        q = cache.rope_store(block.index, q, k, v, cos, sin, rope.dim if rope is not None
                             else 0, rope is not None and rope.style == "neox")
        window = (cfg.sliding_window if block.sliding else None) or 0
        a = cache.attention(block.index, q, positions, self.attn_scale, window)  # [T, q_dim]
        a = lin["o"].matmul(a)                                         # [T, d]
        if norms.get("post_attn_norm") is not None:
            a = _norm(self.kernels, norms["post_attn_norm"], a)
        x, h = _norm_add(self.kernels, norms["ffn_norm"], x, a)                      # [T, d] each
        if lin.get("gate") is not None:
            m = self.kernels.fused("matmul_glu")(lin["gate"], lin["up"], h, cfg.act)  # [T, d_ff]
        else:
            m = self.act(lin["up"].matmul(h))
        m = lin["down"].matmul(m)                                      # [T, d_ff] -> [T, d]
        if norms.get("post_ffn_norm") is not None:
            m = _norm(self.kernels, norms["post_ffn_norm"], m)
        return x + m

    def layer_weight_bytes(self) -> int:
        """Bytes of the layers' projection weights, each weight once: what every token of
        a pass reads (the LM head is apart; a prompt needs one of its rows)."""
        return sum({id(l): l.nbytes for b in self.blocks for l in b.linears.values()
                    if l is not None}.values())

    def memory_report(self) -> Dict[str, int]:
        """Bytes held by projection weights, split by quantized vs dense storage."""
        seen: Dict[int, Linear] = {}
        for linear in [self.embedding, self.lm_head, self.position_embedding] + [
                l for b in self.blocks for l in b.linears.values()]:
            if linear is not None:
                seen[id(linear)] = linear
        quantized = sum(l.nbytes for l in seen.values() if l.quantized_in_memory)
        dense = sum(l.nbytes for l in seen.values() if not l.quantized_in_memory)
        return {"quantized_bytes": quantized, "dense_bytes": dense, "linears": len(seen)}


def _norm(kernels: registry.Kernels, norm: Norm, x: np.ndarray) -> np.ndarray:
    """`norm(x)`; an RMSNorm without bias through the kernels' fused kind "rms_norm"."""
    if norm.kind == "rms" and norm.bias is None:
        return kernels.fused("rms_norm")(x, norm.weight, norm.eps)
    return norm(x)


def _norm_add(kernels: registry.Kernels, norm: Norm, x: np.ndarray, a: Optional[np.ndarray]):
    """`(x + a, norm(x + a))` (`a` None: `(x, norm(x))`): one fused kernel call for an
    RMSNorm without bias, the general Norm otherwise (LayerNorm families)."""
    if norm.kind == "rms" and norm.bias is None:
        return kernels.fused("rms_norm_add")(x, a, norm.weight, norm.eps)
    s = x if a is None else x + a
    return s, norm(s)


def read_hf_config(directory: str) -> Dict[str, Any]:
    """`config.json` of a Hugging Face model directory, or AprError(NOT_FOUND/FORMAT)."""
    return read_json_file(os.path.join(directory, "config.json"), "config.json")


def model_config(model_file: ModelFile, hf_config: Optional[Dict[str, Any]] = None
                 ) -> ModelConfig:
    """The ModelConfig of an open file: GGUF KV, HF config.json (SafeTensors) or APR."""
    names = model_file.tensors
    if hf_config is not None:
        return config_from_hf(hf_config, names)
    if model_file.format == "gguf":
        return config_from_gguf(model_file.metadata, names)
    if model_file.format == "safetensors":
        raise AprError(ErrorCode.NOT_FOUND, "SafeTensors weights need the model's config.json "
                       "(open the model directory, or pass hf_config)")
    return config_from_apr(model_file.metadata, names)


class _Loader:
    """Reads the resolved tensors into a Transformer (shared Linears for tied weights)."""

    def __init__(self, model_file: ModelFile, config: ModelConfig,
                 where: Dict[Any, Optional[Resolved]], dense: bool,
                 kernels: registry.Kernels) -> None:
        self.file = model_file
        self.kernels = kernels
        self.config = config
        self.where = where
        self.dense = dense
        self.linears: Dict[str, Linear] = {}

    def vector(self, layer: int, role: Optional[str], offset: float = 0.0
               ) -> Optional[np.ndarray]:
        found = self.where.get((layer, role)) if role else None
        if found is None:
            return None
        raw = self.file.read_raw(found.name)
        values = np.array(dequantize(raw.data, raw.dtype, raw.shape), np.float32).reshape(-1)
        return values + np.float32(offset) if offset else values

    def linear(self, layer: int, role: str, bias_role: Optional[str] = None,
               dense: Optional[bool] = None) -> Optional[Linear]:
        found = self.where.get((layer, role))
        if found is None:
            return None
        if found.name in self.linears:
            return self.linears[found.name]
        bias = self.vector(layer, bias_role)
        raw = self.file.read_raw(found.name)
        if found.transposed:   # HF Conv1D [in, out]: decode and transpose once
            weight = dequantize(raw.data, raw.dtype, raw.shape).T      # [out, in]
            made = Linear.from_dense(found.name, weight, bias, self.kernels)
        else:
            made = Linear(found.name, raw.data, raw.dtype, raw.shape, bias,
                          dense=self.dense if dense is None else dense, kernels=self.kernels)
        self.linears[found.name] = made
        return made

    def norm(self, layer: int, role: str, bias_role: Optional[str] = None) -> Optional[Norm]:
        cfg = self.config
        weight = self.vector(layer, role, cfg.norm_weight_offset)
        if weight is None:
            return None
        return Norm(cfg.norm, weight, self.vector(layer, bias_role), cfg.norm_eps)

    def build(self, cls: Any) -> Transformer:
        cfg = self.config
        blocks = []
        for i in range(cfg.n_layers):
            block = Block(i, cfg.layer_types[i] == "sliding")
            for role, bias_role in LINEAR_BIAS.items():
                block.linears[role] = self.linear(i, role, bias_role)
            for role, bias_role in NORM_BIAS.items():
                block.norms[role] = self.norm(i, role, bias_role)
            block.q_norm = self.vector(i, "q_norm", cfg.norm_weight_offset)
            block.k_norm = self.vector(i, "k_norm", cfg.norm_weight_offset)
            blocks.append(block)
        embedding = self.linear(-1, "embedding")
        lm_head = self.linear(-1, "lm_head")
        if embedding is None or lm_head is None:
            raise AprError(ErrorCode.NOT_FOUND, "the family contract names no embedding or "
                           "LM head for this source", family=cfg.arch, source=cfg.source)
        position = self.linear(-1, "position_embedding")
        output_norm = self.norm(-1, "output_norm", "output_norm_bias")
        return cls(cfg, embedding, lm_head, output_norm, blocks, position,
                   self.vector(-1, "rope_freqs"), self.kernels)


__all__ = ["Transformer", "Block", "model_config", "read_hf_config"]
