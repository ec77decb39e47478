"""THE hyperparameter table: each model config field with its GGUF key suffix(es) (after
"<arch>."), its Hugging Face config.json key(s) and its APR metadata "architecture"
key(s). Reading a model (apr_core.model.config), carrying GGUF hyperparameters into APR
metadata and back (apr_core.formats.metadata) and exporting a GGUF (model.gguf_export)
all derive their mappings from this one table; within a column the first key present
wins, and an APR key pairs with the GGUF suffix in the same position.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Tuple


class Hparam(NamedTuple):
    field: str                 # ModelConfig's name (or a raw name config.py resolves)
    gguf: Tuple[str, ...]      # key suffixes after "<arch>."
    hf: Tuple[str, ...]        # config.json keys
    apr: Tuple[str, ...]       # APR metadata "architecture" keys
    gguf_type: Optional[str] = None   # written as this GGUF type by a GGUF export


HPARAMS = (
    Hparam("max_ctx", ("context_length",), ("max_position_embeddings", "n_positions"),
           ("n_ctx",), "u32"),
    Hparam("d_model", ("embedding_length",), ("hidden_size", "n_embd"), ("d_model",), "u32"),
    Hparam("n_layers", ("block_count",), ("num_hidden_layers", "n_layer"), ("n_layers",),
           "u32"),
    Hparam("d_ff", ("feed_forward_length",), ("intermediate_size", "n_inner"), ("d_ff",),
           "u32"),
    Hparam("n_heads", ("attention.head_count",), ("num_attention_heads", "n_head"),
           ("n_heads",), "u32"),
    Hparam("n_kv_heads", ("attention.head_count_kv",), ("num_key_value_heads",),
           ("n_kv_heads",), "u32"),
    Hparam("norm_eps", ("attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon"),
           ("rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps"),
           ("norm_eps", "layer_norm_eps")),
    Hparam("rope_theta", ("rope.freq_base",), ("rope_theta",), ("rope_theta",)),
    Hparam("rope_dim", ("rope.dimension_count",), (), ("rope_dim",)),
    Hparam("n_vocab", ("vocab_size",), ("vocab_size",), ("n_vocab",), "u32"),
    Hparam("head_dim", ("attention.key_length",), ("head_dim",), ()),
    Hparam("rope_theta_local", ("rope.freq_base_swa",), ("rope_local_base_freq",), ()),
    Hparam("rope_scaling_type", ("rope.scaling.type",), (), ()),
    Hparam("rope_scaling_factor", ("rope.scaling.factor", "rope.scale_linear"), (), ()),
    Hparam("rope_scaling_orig_ctx", ("rope.scaling.original_context_length",), (), ()),
    Hparam("rope_yarn_beta_fast", ("rope.scaling.yarn_beta_fast",), (), ()),
    Hparam("rope_yarn_beta_slow", ("rope.scaling.yarn_beta_slow",), (), ()),
    Hparam("sliding_window", ("attention.sliding_window",), ("sliding_window",), ()),
    Hparam("swa_pattern", ("attention.sliding_window_pattern",),
           ("sliding_window_pattern", "_sliding_window_pattern"), ()),
    Hparam("act", (), ("hidden_activation", "hidden_act", "activation_function"), ()),
    Hparam("rope_scaling", (), ("rope_scaling",), ()),
    Hparam("rope_parameters", (), ("rope_parameters",), ()),
    Hparam("partial_rotary_factor", (), ("partial_rotary_factor",), ()),
    Hparam("qkv_bias", (), ("attention_bias",), ()),
    Hparam("tied_embeddings", (), ("tie_word_embeddings",), ()),
    Hparam("use_sliding_window", (), ("use_sliding_window",), ()),
    Hparam("layer_types", (), ("layer_types",), ()),
    Hparam("query_pre_attn_scalar", (), ("query_pre_attn_scalar",), ()),
)


def keys(column: str) -> Tuple[Tuple[str, Tuple[str, ...]], ...]:
    """(field, keys) for every row with keys in `column` ("gguf", "hf" or "apr")."""
    return tuple((h.field, getattr(h, column)) for h in HPARAMS if getattr(h, column))


def apr_gguf_pairs() -> Tuple[Tuple[str, str], ...]:
    """(APR architecture key, GGUF suffix) pairs, in table order."""
    return tuple(pair for h in HPARAMS if h.apr for pair in zip(h.apr, h.gguf))


def gguf_suffix(field: str) -> str:
    """The GGUF key suffix a GGUF export writes `field` under."""
    return next(h.gguf[0] for h in HPARAMS if h.field == field)


__all__ = ["Hparam", "HPARAMS", "keys", "apr_gguf_pairs", "gguf_suffix"]
