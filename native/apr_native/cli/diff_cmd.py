"""`apr diff A B`: how far two models are apart, tensor by tensor (seed 000 §4.5).

Similarity is the element-weighted mean cosine similarity over the union of tensors
(a tensor missing on one side, or with another shape, counts 0), so `diff a a` is exactly
100 %. Per tensor: max |delta|, L2 distance, relative drift ||a - b|| / ||a||; MATCH when
max |delta| < 1e-6, else DRIFT. `--tensor-mapping` pairs names across conventions (GGUF
vs HF, "auto") or through a JSON file, for the APR vs SafeTensors drift report. A HF
directory against a GGUF of the same model compares the HF side laid out as llama.cpp's
converter lays it out (permuted Q/K rows, norm offsets, transposed Conv1D weights), so an
exact conversion reports 100 %.
"""
from __future__ import annotations

import argparse
import math
from typing import Any, Dict, List, Optional, Tuple

from apr_core import stats as st
from apr_core.formats.open import open_model
from apr_core.conversion.quality import measure
from apr_core.tensor import ModelFile

from . import model_info
from .common import emit_json, resolve_model
from .render import console, print_table, progress, wants_json


MATCH_DELTA = 1e-6


def compare_tensor(a: Any, b: Any) -> Dict[str, Any]:
    """One pair of logical tensors: status, max |delta|, L2, relative drift, cosine."""
    row: Dict[str, Any] = {"a": a.name, "b": b.name, "dtype_a": a.dtype.name,
                           "dtype_b": b.dtype.name, "shape_a": list(a.shape),
                           "shape_b": list(b.shape), "elements": 0}
    if tuple(a.shape) != tuple(b.shape):
        row.update(status="SHAPE", max_delta=None, l2=None, drift=None, cosine=0.0)
        return row
    count = 1
    for dim in a.shape:
        count *= dim
    row["elements"] = count
    data_a = a.load()
    data_b = b.load()
    if a.dtype == b.dtype and data_a == data_b:   # same bytes: exact, no decoding needed
        row.update(status="MATCH", max_delta=0.0, l2=0.0, drift=0.0, cosine=1.0)
        return row
    from apr_core.quant import dequantize
    values_a = dequantize(data_a, a.dtype, a.shape)                      # [*shape] f32
    q = measure(a.name, values_a, b.dtype.name, data_b, a.dtype.name, len(data_a))
    l2 = q.rmse * math.sqrt(count)
    norm_a = st.tensor_stats(a.name, values_a).l2
    row.update(status="MATCH" if q.max_abs_error < MATCH_DELTA else "DRIFT",
               max_delta=q.max_abs_error, l2=l2, drift=l2 / norm_a if norm_a else
               (0.0 if l2 == 0 else math.inf), cosine=q.cosine)
    return row


def compare_models(a: ModelFile, b: ModelFile, mapping: Optional[str] = None,
                   sources: Any = (None, None)) -> Dict[str, Any]:
    """Tensor-by-tensor comparison plus summary numbers and vocabulary changes (`sources`:
    the two paths, so HF directories bring their tokenizer.json)."""
    from . import tensor_map   # the name tables load only when a diff runs
    tensors_a = {t.name: t for t in st.logical_tensors(a)}
    tensors_b = {t.name: t for t in st.logical_tensors(b)}
    meta_a, meta_b = model_info.metadata(a, sources[0]), model_info.metadata(b, sources[1])
    pairs, only_a, only_b = tensor_map.pair_names(list(tensors_a), list(tensors_b), mapping)
    # the HF side's tensors as compared, by HF name (GGUF vs HF of the same model only)
    relaid = _llama_cpp_layout(pairs, tensors_a, meta_a, tensors_b, meta_b) \
        if mapping == "auto" else ({}, {})
    rows = []
    for x, y in progress(pairs, "comparing"):
        row = compare_tensor(relaid[0].get(x, tensors_a[x]), relaid[1].get(y, tensors_b[y]))
        rows.append(dict(row, a=x, b=y, dtype_a=tensors_a[x].dtype.name,
                         dtype_b=tensors_b[y].dtype.name))
    weight = sum(r["elements"] * max(r["cosine"], 0.0) for r in rows)
    union = sum(_elements(tensors_a[n]) for n in only_a) + \
        sum(_elements(tensors_b[n]) for n in only_b) + \
        sum(_elements(tensors_a[r["a"]]) for r in rows)
    deltas = [r["max_delta"] for r in rows if r["max_delta"] is not None]
    l2s = [r["l2"] for r in rows if r["l2"] is not None]
    similarity = 100.0 * weight / union if union else 100.0
    if not only_a and not only_b and all(r["status"] == "MATCH" and r["max_delta"] == 0.0
                                         for r in rows):
        similarity = 100.0   # no rounding of identical models
    return {"similarity": similarity, "compared": len(rows),
            "changed": sum(r["status"] != "MATCH" for r in rows),
            "max_delta": max(deltas) if deltas else 0.0,
            "l2": math.sqrt(sum(x * x for x in l2s)),
            "only_in_a": only_a, "only_in_b": only_b, "tensors": rows,
            "vocab": vocab_changes(meta_a, meta_b)}


def _llama_cpp_layout(pairs: List[Tuple[str, str]], tensors_a: Dict[str, Any],
                      meta_a: Dict[str, Any], tensors_b: Dict[str, Any],
                      meta_b: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """For a GGUF-named and a HF-named side of one model: ({A name: tensor}, {B name:
    tensor}) holding the HF side's tensors laid out as llama.cpp's converter lays them out
    (Q/K rows permuted for LLaMA, norms offset for Gemma, Conv1D weights transposed for
    GPT-2), by the GGUF exporter from the HF side's config.json. Empty when the sides are
    not GGUF vs HF, the HF side has no config.json, or its family has no GGUF layout."""
    from apr_core.errors import AprError
    from apr_core.model.gguf_export import hf_to_gguf
    from apr_core.name_maps import detect
    none: Tuple[Dict[str, Any], Dict[str, Any]] = ({}, {})
    schemes = [(detect(list(t)) or (None, None))[1] for t in (tensors_a, tensors_b)]
    if sorted(schemes, key=str) != ["gguf", "hf"]:
        return none
    hf_side = schemes.index("hf")
    hf_tensors, hf_meta = [(tensors_a, meta_a), (tensors_b, meta_b)][hf_side]
    if not isinstance(hf_meta.get("hf_config"), dict):
        return none
    try:
        by_gguf = {t.name: t for t in hf_to_gguf(list(hf_tensors.values()),
                                                 {"hf_config": hf_meta["hf_config"]})}
    except AprError:
        return none
    out: Tuple[Dict[str, Any], Dict[str, Any]] = ({}, {})
    for x, y in pairs:
        hf_name, gguf_name = (x, y) if hf_side == 0 else (y, x)
        if gguf_name in by_gguf:
            out[hf_side][hf_name] = by_gguf[gguf_name]
    return out


def _elements(tensor: Any) -> int:
    count = 1
    for dim in tensor.shape:
        count *= dim
    return count


def vocab_changes(meta_a: Dict[str, Any], meta_b: Dict[str, Any]) -> Dict[str, Any]:
    tokens_a = model_info.vocab_tokens(meta_a)
    tokens_b = model_info.vocab_tokens(meta_b)
    if tokens_a is None or tokens_b is None:
        return {"available": False}
    set_a, set_b = set(tokens_a), set(tokens_b)
    moved = sum(1 for x, y in zip(tokens_a, tokens_b) if x != y and x in set_b)
    return {"available": True, "size_a": len(tokens_a), "size_b": len(tokens_b),
            "added": len(set_b - set_a), "removed": len(set_a - set_b), "reordered": moved}


def run_diff(args: argparse.Namespace) -> int:
    path_a, path_b = resolve_model(args.model_a), resolve_model(args.model_b)
    with open_model(path_a, verify=True) as a, open_model(path_b, verify=True) as b:
        report = compare_models(a, b, args.tensor_mapping, (path_a, path_b))
    report.update(a=path_a, b=path_b)
    if wants_json(args):
        emit_json(report)
        return 0
    out = console()
    out.print("Similarity: {:.1f}%".format(report["similarity"]))
    out.print("Weight Changes: Max delta {:.6g}, L2 distance {:.6g} ({} of {} tensors "
              "changed)".format(report["max_delta"], report["l2"], report["changed"],
                                report["compared"]))
    vocab = report["vocab"]
    if vocab["available"]:
        out.print("Vocab Changes: Added {} tokens, Removed {} tokens{}".format(
            vocab["added"], vocab["removed"], ", {} reordered".format(vocab["reordered"])
            if vocab["reordered"] else ""))
    for side, names in (("A", report["only_in_a"]), ("B", report["only_in_b"])):
        if names:
            out.print("Only in {}: {} tensor(s): {}".format(side, len(names), ", ".join(
                names[:8]) + (" ..." if len(names) > 8 else "")))
    # the drift report (--tensor-mapping) lists every pair, MATCH included (seed 000 §4.5)
    rows = report["tensors"] if args.all or args.tensor_mapping else \
        [r for r in report["tensors"] if r["status"] != "MATCH"]
    if args.tensor_mapping or args.all:
        for r in rows:
            label = r["a"] if r["a"] == r["b"] else "{} -> {}".format(r["a"], r["b"])
            if r["status"] == "MATCH":
                out.print("{}: MATCH (delta < {:g})".format(label, MATCH_DELTA))
            elif r["status"] == "SHAPE":
                out.print("{}: SHAPE {} vs {} !!!".format(label, r["shape_a"], r["shape_b"]))
            else:
                out.print("{}: DRIFT (delta = {:.4g}) !!!".format(label, r["max_delta"]))
    elif rows:
        print_table("Changed tensors", ["tensor", "status", "max delta", "L2", "drift",
                                        "cosine"],
                    [(r["a"], r["status"], r["max_delta"], r["l2"], r["drift"], r["cosine"])
                     for r in rows], right=["max delta", "L2", "drift", "cosine"])
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("diff", help="compare two models tensor by tensor (any formats)")
    p.add_argument("model_a")
    p.add_argument("model_b")
    p.add_argument("--tensor-mapping", nargs="?", const="auto", metavar="MAPPING.json",
                   help="pair tensor names across conventions (GGUF vs HF) automatically, "
                        "or by a JSON file {name in A: name in B}; prints MATCH/DRIFT per "
                        "tensor")
    p.add_argument("--all", action="store_true", help="list every tensor, not only changes")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_diff)
