"""`apr explain`: error codes, a model's architecture, one tensor's role (seed 000 §4.12).

    apr explain E002                       what the code means, causes, what to do
    apr explain E999                       "Unknown Error Code" (exit 2), never a crash
    apr explain model.apr                  family, purpose, architecture, hyperparameters
    apr explain model.apr --tensor NAME    role, shape, statistics; fuzzy matches if unknown
"""
from __future__ import annotations

import argparse
import difflib
import os
import re
from typing import Any, Dict, List

from apr_core import stats as st
from apr_core.errors import AprError, ErrorCode
from apr_core.formats.open import open_model

from . import model_info
from .common import EXIT_ARGS, emit_json, resolve_model
from .render import console, wants_json


# Common causes and first steps per code; descriptions come from THE error table.
ERROR_HELP = {
    "E001": ("Not a model file, or a format apr cannot read.",
             ["Wrong file (a text/HTML page saved under a model name)",
              "An unsupported container version"],
             ["Run `apr inspect FILE` to see what apr detects", "Check the file's origin"]),
    "E002": ("The file's structure is damaged: offsets, sizes or framing do not add up.",
             ["Interrupted download or copy (truncated file)", "Bit rot, disk error",
              "A writer bug"],
             ["Run `apr validate --checksum FILE`", "Compare the SHA-256 with the source"]),
    "E003": ("The file declares a major version this apr does not support.",
             ["File written by a newer tool"], ["Upgrade apr, or re-export as APR v2.0"]),
    "E004": ("The payload checksum does not match the footer.",
             ["Interrupted download", "Bit rot, disk error", "The file was edited"],
             ["Run `apr validate --checksum FILE`", "Download or convert the file again"]),
    "E005": ("Encrypted tensor payloads could not be decrypted.",
             ["Wrong password or key", "Damaged ciphertext"],
             ["Check the key or password", "Run `apr validate --checksum FILE`"]),
    "E006": ("The Ed25519 signature does not verify.",
             ["The file was modified after signing", "Wrong trusted public key"],
             ["Obtain the file again from the signer", "Check the public key you trust"]),
    "E007": ("A file could not be read or written.",
             ["Path does not exist", "Missing shard file", "Permissions", "Disk full"],
             ["Check the path and permissions", "For sharded models keep all shards together"]),
    "E008": ("A size limit was exceeded (metadata, index or memory).",
             ["Hostile or damaged header claiming huge sizes", "Model larger than RAM"],
             ["Run `apr validate FILE`", "Use a streaming/mmap loader"]),
    "E009": ("A feature, dtype or codec this apr does not implement.",
             ["Newer quantization type", "Unknown compression codec"],
             ["Run `apr tensors FILE` to see the dtypes", "Convert with a tool that knows it"]),
    "E010": ("A tensor or metadata key that was asked for is not in the model.",
             ["Typo in the tensor name", "Different naming convention (GGUF vs HF)"],
             ["Run `apr tensors FILE`", "Use `apr explain FILE --tensor NAME` for suggestions"]),
    "E011": ("An argument is invalid.", ["Typo in an option value"], ["Run `apr COMMAND --help`"]),
    "E012": ("The model failed a validation check (statistics, shapes, contract).",
             ["NaN/Inf weights", "LayerNorm weights scaled by mistake", "Wrong tensor mapping"],
             ["Run `apr validate --quality FILE`", "Use `apr tensors --hist NAME` to look"]),
    "E013": ("A model reference (hf://, http(s)://) could not be fetched or resolved.",
             ["No network", "Repository, revision or file does not exist",
              "A download interrupted too often"],
             ["Check the reference with `apr pull REF`", "Set HF_ENDPOINT for a mirror"]),
    "E014": ("The repository is gated or private and needs a token.",
             ["HF_TOKEN not set", "Token without access to the repository"],
             ["Accept the model's terms on the Hub", "Set HF_TOKEN=hf_... and retry"]),
    "E015": ("Offline mode (APR_OFFLINE=1 or HF_HUB_OFFLINE=1) and the reference is not cached.",
             ["The model was never pulled", "It was removed with `apr rm`"],
             ["Run `apr pull REF` while online", "Unset APR_OFFLINE / HF_HUB_OFFLINE"]),
    "E016": ("A saved session or slot was made for another model, KV cache type or context.",
             ["The session file belongs to another model file (its sha256 differs)",
              "`--kv-type` or `--ctx` differs from the run that saved it"],
             ["Resume with the model file, `--kv-type` and `--ctx` that saved it",
              "Start a new session file"]),
}

# Role of a tensor by its name, GGUF and HF/Whisper spellings; the first match applies.
TENSOR_ROLES = (
    (r"token_embd|embed_tokens|token_embedding|wte|word_embeddings",
     "Token embedding: token id -> vector [n_vocab, d_model]"),
    (r"position|wpe|embed_positions", "Positional embedding: position -> vector"),
    (r"^output\.weight$|lm_head", "Output head: hidden state -> logits [n_vocab, d_model]"),
    (r"attn_q\b|q_proj|query", "Attention query projection"),
    (r"attn_k\b|k_proj|\bkey\b", "Attention key projection"),
    (r"attn_v\b|v_proj|value", "Attention value projection"),
    (r"attn_qkv|c_attn", "Fused attention query/key/value projection"),
    (r"attn_output|o_proj|out_proj|attn\.c_proj", "Attention output projection"),
    (r"ffn_gate|gate_proj", "Feed-forward gate projection (SwiGLU/GeGLU)"),
    (r"ffn_up|up_proj|fc1|c_fc", "Feed-forward up projection"),
    (r"ffn_down|down_proj|fc2|mlp\.c_proj", "Feed-forward down projection"),
    (r"norm|ln_", "Normalization weight/bias (LayerNorm or RMSNorm)"),
    (r"conv", "Convolution (feature extraction)"),
    (r"rope_freqs", "RoPE frequency factors"),
)


def suggestions(name: str, names: List[str], n: int = 5) -> List[str]:
    """The closest names to `name` (fuzzy), best first; substring matches count too."""
    close = difflib.get_close_matches(name, names, n=n, cutoff=0.4)
    contains = [c for c in names if name and (name in c or c in name) and c not in close]
    return (close + contains)[:n]


def explain_code(code: str) -> Dict[str, Any]:
    """What an error code means, or {"known": False} for codes not in the table."""
    code = code.upper()
    if code not in ErrorCode.__members__ or not re.match(r"^E\d{3}$", code):
        return {"code": code, "known": False, "title": "Unknown Error Code"}
    entry = ErrorCode[code]
    summary, causes, steps = ERROR_HELP.get(code, (entry.description, [], []))
    return {"code": code, "known": True, "category": entry.category,
            "title": entry.description, "summary": summary, "exit_code": entry.exit_code,
            "causes": causes, "troubleshooting": steps}


def explain_model(model: Any, path: str) -> Dict[str, Any]:
    """Family, purpose and hyperparameters from the contracts and metadata."""
    meta = model_info.metadata(model, path)
    found = model_info.family(model, meta)
    out: Dict[str, Any] = {"path": path, "format": model.format,
                           "tensor_count": len(model.tensors),
                           "parameters": sum(t.n_elements for t in model.tensors.values())}
    if found is None:
        out.update(family=None, architecture="unknown (no model-family contract matches)",
                   model_type=meta.get("model_type"))
        return out
    fam, config = found
    c = fam.constraints
    out.update(family=fam.name, display_name=fam.contract.get("display_name", fam.name),
               purpose="Text generation (causal language model)",
               architecture="Decoder-only Transformer: {} {}, {} attention, {} MLP, {} "
                            "positions".format(config.n_layers, "layers", c.get(
                                "attention_type", "multi-head"), c.get("mlp_type", "plain"),
                                c.get("positions", "rope")),
               hyperparameters={"n_vocab": config.n_vocab, "d_model": config.d_model,
                                "n_layers": config.n_layers, "n_heads": config.n_heads,
                                "n_kv_heads": config.n_kv_heads, "head_dim": config.head_dim,
                                "d_ff": config.d_ff, "norm": config.norm, "act": config.act,
                                "tied_embeddings": config.tied_embeddings},
               input="Token ids (vocabulary of {:,})".format(config.n_vocab),
               output="Next-token logits [n_vocab]")
    return out


def explain_tensor(model: Any, name: str) -> Dict[str, Any]:
    tensors = {t.name: t for t in st.logical_tensors(model)}
    if name not in tensors:
        raise AprError(ErrorCode.NOT_FOUND, "no such tensor", tensor=name,
                       did_you_mean=suggestions(name, list(tensors)))
    tensor = tensors[name]
    role = next((text for pattern, text in TENSOR_ROLES if re.search(pattern, name)),
                "Unknown role")
    layer = re.search(r"(?:blk|layers|h|layer)\.(\d+)\.", name)
    s = st.tensor_stats(name, st.tensor_values(tensor), tensor.dtype.name)
    findings = st.check(s)
    return {"tensor": name, "role": role, "layer": int(layer.group(1)) if layer else None,
            "dtype": tensor.dtype.name, "shape": list(tensor.shape), "stats": s.to_dict(),
            "health": "Healthy" if not findings else "; ".join(f.message for f in findings)}


def run_explain(args: argparse.Namespace) -> int:
    target = args.target
    if target and re.match(r"^[Ee]\d+$", target) and not os.path.exists(target):
        info = explain_code(target)
        if wants_json(args):
            emit_json(info)
        else:
            _print_code(info)
        return 0 if info["known"] else EXIT_ARGS
    if not target:
        raise AprError(ErrorCode.ARGUMENT, "give an error code (E001) or a model file")
    path = resolve_model(target)
    with open_model(path, verify=False) as model:
        info = explain_tensor(model, args.tensor) if args.tensor else explain_model(model, path)
    if wants_json(args):
        emit_json(info)
        return 0
    out = console()
    if args.tensor:
        s = info["stats"]
        out.print("**{}**".format(info["tensor"]))
        out.print("- **Role**: {}".format(info["role"]))
        if info["layer"] is not None:
            out.print("- **Layer**: {}".format(info["layer"]))
        out.print("- **Shape**: {} ({})".format(info["shape"], info["dtype"]))
        out.print("- **Stats**: Mean {:.4g}, Std {:.4g} ({})".format(
            s["mean"], s["std"], info["health"]))
        return 0
    if info["family"] is None:
        out.print("Unrecognised architecture: {} tensors, model_type {!r}.".format(
            info["tensor_count"], info.get("model_type")))
        return 0
    out.print("This is a **{}** model ({}).".format(info["display_name"], info["family"]))
    out.print("- **Purpose**: {}".format(info["purpose"]))
    out.print("- **Architecture**: {}".format(info["architecture"]))
    out.print("- **Input**: {}".format(info["input"]))
    out.print("- **Output**: {}".format(info["output"]))
    out.print("- **Parameters**: {:,}".format(info["parameters"]))
    out.print("- **Hyperparameters**: {}".format(", ".join(
        "{}={}".format(k, v) for k, v in info["hyperparameters"].items())))
    return 0


def _print_code(info: Dict[str, Any]) -> None:
    out = console()
    if not info["known"]:
        out.print("**{}: Unknown Error Code**".format(info["code"]))
        out.print("Known codes: {}".format(", ".join(c.name for c in ErrorCode)))
        return
    out.print("**{}: {}** ({}, exit code {})".format(info["code"], info["title"],
                                                     info["category"], info["exit_code"]))
    out.print(info["summary"])
    out.print("- **Common Causes**: {}".format(", ".join(info["causes"])))
    out.print("- **Troubleshooting**:")
    for i, step in enumerate(info["troubleshooting"], 1):
        out.print("  {}. {}".format(i, step))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("explain", help="explain an error code, a model's architecture or a "
                       "tensor")
    p.add_argument("target", nargs="?", help="error code (E002) or model file")
    p.add_argument("--tensor", help="explain one tensor of the model (fuzzy suggestions)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_explain)
