"""Which dtype each tensor gets: llama.cpp's file-type recipes and plain types.

    plan(tensors, "Q4_K_M")                -> {name: dtype name or None (keep)}
    plan(tensors, "q4_k", keep_embeddings_q8=True)
    resolve(name)                          -> (name, FileType) or (dtype name, None)

`tensors` is a sequence of (name, shape) with row-major shapes (outermost first), names in
GGUF form (`blk.3.attn_v.weight`) or HF form (`model.layers.3.self_attn.v_proj.weight`).

A file type follows llama.cpp's `llama_tensor_get_type` (src/llama-quant.cpp) for dense,
non-Falcon models without an importance matrix: only 2-D+ tensors whose name ends in
`weight` and is not a norm are quantized (`QUANTIZABLE`); the output head (and the token
embedding when it is tied) gets Q6_K unless the file type is Q8_0; attn_v / ffn_down get
more bits on the layers `use_more_bits` picks; a 256-block type that does not fit a row
falls back (`FALLBACK`) and F16 is the last resort. Layer counters walk the tensors in
llama.cpp's order (layer number, then name), as its loader's weights map does.

A plain type (`q4_k`) applies to every quantizable tensor whose rows hold whole blocks and
leaves the others alone; `keep_embeddings_q8` (seed 003) keeps the token embedding in Q8_0.
"""
from __future__ import annotations

import re
from typing import Dict, Iterable, NamedTuple, Optional, Sequence, Tuple

from .. import dtypes
from ..errors import AprError, ErrorCode

# HF (transformers) name suffix -> GGUF name suffix, for the roles recipes care about.
HF_TO_GGUF = {
    "model.embed_tokens.weight": "token_embd.weight",
    "lm_head.weight": "output.weight",
    "model.norm.weight": "output_norm.weight",
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.qkv_proj.weight": "attn_qkv.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
_HF_LAYER = re.compile(r"^(?:model\.)?layers\.(\d+)\.(.+)$")
_GGUF_LAYER = re.compile(r"^blk\.(\d+)\.")

# Substrings that keep a tensor out of quantization (llama.cpp's tensor_allows_quantization,
# the entries that apply to dense text models).
NOT_QUANTIZED = ("_norm.weight", "ffn_gate_inp.weight", "position_embd.weight",
                 "token_types.weight", "ssm_conv1d", "attn_rel_b.weight")

# (category, substring) in llama.cpp's tensor_get_category order; first match wins.
CATEGORIES = (("attn_qkv", "attn_qkv.weight"), ("attn_kv_b", "attn_kv_b.weight"),
              ("attn_v", "attn_v.weight"), ("attn_k", "attn_k.weight"),
              ("attn_q", "attn_q.weight"), ("attn_output", "attn_output.weight"),
              ("ffn_up", "ffn_up"), ("ffn_gate", "ffn_gate"), ("ffn_down", "ffn_down"))
ATTN_V_LIKE = ("attn_v", "attn_qkv", "attn_kv_b")

# A 256-block type whose rows do not fit falls back to this 32-block type.
FALLBACK = {"Q2_K": "Q4_0", "Q3_K": "Q4_0", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}


class Rule(NamedTuple):
    """`dtype` when `when` holds for layer counter i of n (see `_holds`)."""

    when: str
    dtype: str


class FileType(NamedTuple):
    """One llama.cpp file type: its `llama_ftype` id (GGUF `general.file_type`), default
    dtype and per-category rules (first match wins)."""

    name: str
    ftype: int
    default: str
    rules: Dict[str, Tuple[Rule, ...]]


def _ft(name: str, ftype: int, default: str, **rules: Sequence[Tuple[str, str]]) -> FileType:
    return FileType(name, ftype, default,
                    {cat: tuple(Rule(*r) for r in rs) for cat, rs in rules.items()})


# THE recipe table. Conditions: "always"; "more_bits" (llama.cpp's use_more_bits);
# "first_8th"/"first_16th" (i < n/8, i < n/16); "first_2"/"first_4" (i < 2, i < 4);
# "gqa4" (n_head / n_head_kv >= 4).
FILE_TYPES = {ft.name: ft for ft in (
    _ft("F32", 0, "F32"), _ft("F16", 1, "F16"), _ft("BF16", 32, "BF16"),
    _ft("Q4_0", 2, "Q4_0"), _ft("Q4_1", 3, "Q4_1"), _ft("Q5_0", 8, "Q5_0"), _ft("Q5_1", 9, "Q5_1"),
    _ft("Q8_0", 7, "Q8_0"),
    _ft("Q2_K", 10, "Q2_K", attn_v=[("gqa4", "Q4_K"), ("always", "Q3_K")],
        ffn_down=[("always", "Q3_K")], attn_output=[("always", "Q3_K")]),
    _ft("Q3_K_S", 11, "Q3_K"),
    _ft("Q3_K_M", 12, "Q3_K", attn_v=[("first_2", "Q5_K"), ("always", "Q4_K")],
        ffn_down=[("first_16th", "Q5_K"), ("always", "Q4_K")],
        attn_output=[("always", "Q4_K")]),
    _ft("Q3_K_L", 13, "Q3_K", attn_v=[("always", "Q5_K")], ffn_down=[("always", "Q5_K")],
        attn_output=[("always", "Q5_K")]),
    _ft("Q4_K_S", 14, "Q4_K", attn_v=[("first_4", "Q5_K")], ffn_down=[("first_8th", "Q5_K")]),
    _ft("Q4_K_M", 15, "Q4_K", attn_v=[("more_bits", "Q6_K")], ffn_down=[("more_bits", "Q6_K")]),
    _ft("Q5_K_S", 16, "Q5_K"),
    _ft("Q5_K_M", 17, "Q5_K", attn_v=[("more_bits", "Q6_K")], ffn_down=[("more_bits", "Q6_K")]),
    _ft("Q6_K", 18, "Q6_K"),
)}
# attn_qkv / attn_kv_b follow the attn_v rules and share its counter: llama.cpp tests
# "attn_v-like" before its own attn_qkv branch, so that branch is never reached.


def _use_more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _holds(when: str, i: int, n: int, n_gqa: int) -> bool:
    tests = {"always": lambda: True, "more_bits": lambda: _use_more_bits(i, n),
             "first_8th": lambda: i < n // 8, "first_16th": lambda: i < n // 16,
             "first_2": lambda: i < 2, "first_4": lambda: i < 4, "gqa4": lambda: n_gqa >= 4}
    return tests[when]()


def gguf_name(name: str) -> str:
    """The GGUF name of a tensor given in HF or GGUF form (unknown names are kept)."""
    if name in HF_TO_GGUF:
        return HF_TO_GGUF[name]
    match = _HF_LAYER.match(name)
    if match and match.group(2) in HF_TO_GGUF:
        return "blk.{}.{}".format(match.group(1), HF_TO_GGUF[match.group(2)])
    return name


def category(gguf: str) -> str:
    """llama.cpp's tensor category of a GGUF name: output, token_embd, attn_v, ... or other."""
    if gguf == "output.weight":
        return "output"
    if gguf in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    for cat, needle in CATEGORIES:
        if needle in gguf:
            return cat
    return "other"


def quantizable(gguf: str, shape: Sequence[int]) -> bool:
    """Whether llama.cpp would quantize this tensor at all (2-D+, a weight, not a norm)."""
    return (len(shape) >= 2 and gguf.endswith("weight")
            and not any(needle in gguf for needle in NOT_QUANTIZED))


def _is_plain(name: str) -> bool:
    try:
        dtype = dtypes.by_name(name.upper())
    except AprError:
        return False
    from .api import supported_types
    return dtype.name in supported_types("quantize") or dtype.name == "F32"


# Seed 000 §4.8.1 spellings -> the plain types they mean (int8 is Q8_0 at 8.5 bits/weight:
# ggml's 8-bit type keeps a scale per 32 weights; int4 is Q4_0).
SEED_TYPE_NAMES = {"int8": "q8_0", "int4": "q4_0"}


def resolve(name: str) -> Tuple[str, Optional[FileType]]:
    """(dtype name, None) for a plain type, (name, FileType) for a llama.cpp file type.

    Names spelled in upper case that are file types (`Q4_K_M`, `Q8_0`, `Q6_K`) are file
    types; lower case (`q8_0`, `q4_k`) or names that are only dtypes (`Q4_K`) are plain.
    """
    name = SEED_TYPE_NAMES.get(name.lower(), name)
    upper = name.upper()
    if name in FILE_TYPES:
        return name, FILE_TYPES[name]
    if _is_plain(upper):
        return upper, None
    if upper in FILE_TYPES:
        return upper, FILE_TYPES[upper]
    from .api import supported_types
    raise AprError(ErrorCode.ARGUMENT, "unknown quantization type or file type", name=name,
                   types=list(supported_types("quantize")), file_types=sorted(FILE_TYPES))


def _fits(dtype_name: str, row: int) -> bool:
    return row % dtypes.by_name(dtype_name).block_size == 0


def _fallback(dtype_name: str, row: int) -> str:
    """llama.cpp's tensor_type_fallback: a 32-block type, else F16."""
    if _fits(dtype_name, row):
        return dtype_name
    dtype_name = FALLBACK.get(dtype_name, dtype_name)
    return dtype_name if _fits(dtype_name, row) else "F16"


def _llama_order(item: Tuple[str, str, Tuple[int, ...]]) -> Tuple[int, str]:
    match = _GGUF_LAYER.match(item[1])
    return (int(match.group(1)) if match else -1, item[1])


def plan(tensors: Iterable[Tuple[str, Sequence[int]]], quant: str, *, n_gqa: int = 1,
         keep_embeddings_q8: bool = False) -> Dict[str, Optional[str]]:
    """The dtype name each tensor gets under `quant` (plain type or file type), or None
    for tensors that keep their dtype (1-D tensors, norms, rows that do not fit)."""
    upper, file_type = resolve(quant)
    items = sorted(((name, gguf_name(name), tuple(shape)) for name, shape in tensors),
                   key=_llama_order)
    result: Dict[str, Optional[str]] = {}
    if file_type is None:
        for name, gguf, shape in items:
            ok = quantizable(gguf, shape) and _fits(upper, shape[-1])
            result[name] = upper if ok else None
            if ok and keep_embeddings_q8 and category(gguf) == "token_embd":
                result[name] = "Q8_0" if _fits("Q8_0", shape[-1]) else None
        return result
    cats = [category(gguf) for _, gguf, _ in items]
    tied = "output" not in cats
    n_layers = 1 + max([int(m.group(1)) for m in (_GGUF_LAYER.match(g) for _, g, _ in items)
                        if m] or [-1])
    counts = {"attn_v": sum(c in ATTN_V_LIKE for c in cats), "ffn_down": n_layers}
    seen = {"attn_v": 0, "ffn_down": 0}
    default_quantized = dtypes.by_name(file_type.default).quantized
    for (name, gguf, shape), cat in zip(items, cats):
        if not quantizable(gguf, shape):
            result[name] = None
            continue
        chosen = file_type.default
        if default_quantized:
            chosen = _choose(file_type, cat, tied, shape[-1], seen, counts, n_gqa)
            chosen = _fallback(chosen, shape[-1])
        if keep_embeddings_q8 and cat == "token_embd" and _fits("Q8_0", shape[-1]):
            chosen = "Q8_0"
        result[name] = chosen
    return result


def _choose(file_type: FileType, cat: str, tied: bool, row: int, seen: Dict[str, int],
            counts: Dict[str, int], n_gqa: int) -> str:
    """llama_tensor_get_type_impl for one tensor; advances the layer counters."""
    default = file_type.default
    if cat == "output" or (tied and cat == "token_embd"):
        if not _fits(default, row) or default == "Q8_0":
            return "Q8_0"
        return "Q6_K"
    key = "attn_v" if cat in ATTN_V_LIKE else cat
    if key not in seen:
        rules = file_type.rules.get(cat, ())
        return _first(rules, 0, 1, n_gqa, default)
    i = seen[key]
    seen[key] += 1
    return _first(file_type.rules.get(key, ()), i, counts[key], n_gqa, default)


def _first(rules: Sequence[Rule], i: int, n: int, n_gqa: int, default: str) -> str:
    for rule in rules:
        if _holds(rule.when, i, n, n_gqa):
            return rule.dtype
    return default
