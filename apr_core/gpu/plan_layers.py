"""The dispatches of a whole forward step, in `Transformer.run_block`'s order.

    embed -> per layer: [x += a] norm -> q k v (one qkv buffer) -> [q/k norm] ->
    rope_store (k, v into the layer's KV) -> attention -> o -> [post norm] ->
    x += a, norm -> gate, up -> glu -> down -> [post norm]
    -> x += a -> gather the logit rows -> output norm -> LM head (row chunks) [-> argmax]

Activation buffers hold `capacity.rows` rows ([T, width] float32, row-major); the logits
of `capacity.out_rows` rows are split into chunks that fit one binding.
"""
from __future__ import annotations

from typing import Any, Optional

from .plan import GpuUnfit, Limits, Plan
from .step import ROPE_KINDS, Capacity
from .wgsl_kernels import ACTS, FLAT_WG, MAX_HEAD_DIM, MAX_X, ROWS_WG, TILE

F32 = 4


def build_plan(model: Any, capacity: Capacity, limits: Limits) -> Plan:
    """The plan of `model` (a Transformer) for steps within `capacity`; GpuUnfit when
    the device or this executor cannot run it."""
    return add_layers(Plan(capacity, limits), model)


def add_layers(plan: Plan, model: Any) -> Plan:
    cfg = model.config
    _check_supported(model)
    cap = plan.capacity
    t, r = cap.rows, cap.out_rows
    qkv_w = cfg.q_dim + 2 * cfg.kv_dim
    for name, width in (("x", cfg.d_model), ("h", cfg.d_model), ("a", cfg.d_model),
                        ("qkv", qkv_w), ("att", cfg.q_dim), ("g", cfg.d_ff),
                        ("u", cfg.d_ff)):
        plan.buffer(name, t * width * F32)
    plan.buffer("xr", r * cfg.d_model * F32)
    plan.buffer("hr", r * cfg.d_model * F32)
    plan.buffer("ids", r * 4)
    plan.kv_row_bytes = cfg.kv_dim * F32
    _embed(plan, model)
    for block in model.blocks:
        _layer(plan, model, block, qkv_w)
    _flat(plan, "add", {"n": cfg.d_model}, [_b("step"), _b("x"), _b("a")], cfg.d_model)
    _output(plan, model)
    half = max([rope.dim // 2 for rope in model.ropes.values()] or [0])
    return plan.finish(half)


def _check_supported(model: Any) -> None:
    cfg = model.config
    if model.position_embedding is not None or cfg.positions != "rope":
        raise GpuUnfit("learned position embeddings are not implemented on the GPU")
    if cfg.head_dim > MAX_HEAD_DIM:
        raise GpuUnfit("head_dim {} > {}".format(cfg.head_dim, MAX_HEAD_DIM))
    if cfg.n_heads % cfg.n_kv_heads:
        raise GpuUnfit("query heads are not a multiple of KV heads")


def _b(name: str, offset: int = 0, size: int = 0):
    return (name, offset, size)


def _flat(plan: Plan, kind: str, values: dict, binds: list, per: int) -> None:
    plan.dispatch(kind, kind, values, binds, (1, 1, 1), "T", per, FLAT_WG, 0)


def _matmul(plan: Plan, linear: Any, x: str, x_stride: int, x_off: int, y: str,
            y_stride: int, y_off: int, rows_src: str = "T", row_start: int = 0,
            row_cap: int = 1 << 30) -> None:
    dtype_name, parts = plan.weight(linear.name, linear)
    in_dim = linear.shape[1]
    bias = plan.floats("bias:" + linear.name, linear.bias)
    for part in parts:
        values = {"n_rows": part.rows, "k": in_dim, "units": -(-in_dim // 32),
                  "row_bytes": _row_bytes(linear),
                  "rows_src": 0 if rows_src == "T" else 1, "row_start": row_start,
                  "row_cap": row_cap, "x_stride": x_stride, "x_off": x_off,
                  "y_stride": y_stride, "y_off": y_off + part.row_lo,
                  "has_bias": int(linear.bias is not None), "b_off": part.row_lo}
        kind = "matmul" if plan.limits.row_threads > 1 else "matmul_rows"
        wgs = part.rows if kind == "matmul" else -(-part.rows // ROWS_WG)
        groups = (min(wgs, MAX_X), -(-wgs // MAX_X), 1)
        plan.dispatch(kind, "{}:{}".format(kind, dtype_name), values,
                      [_b("step"), _b(part.buffer), _b(x), _b(y), _b(bias)],
                      groups, rows_src, 1, TILE, 2)


def _row_bytes(linear: Any) -> int:
    if linear.weight is not None:
        return linear.shape[1] * F32
    return linear.dtype.nbytes((linear.shape[1],))


def _norm(plan: Plan, key: str, norm: Any, x: str, out: Optional[str], add: Optional[str],
          n: int, rows_src: str = "T", heads: int = 1, row_stride: int = 0,
          col_off: int = 0, weight: Any = None, eps: Optional[float] = None) -> None:
    """`norm` (a layers.Norm, or `weight` for a per-head RMS norm) of rows of `x`:
    into `out`, or in place when `out` is None; `add` first adds that buffer into x."""
    w = plan.floats("norm:" + key, norm.weight if norm is not None else weight)
    bias = norm.bias if norm is not None else None
    values = {"n": n, "eps": float(norm.eps if norm is not None else eps),
              "layer": int(norm is not None and norm.kind == "layer"),
              "rows_src": 0 if rows_src == "T" else 1, "heads": heads,
              "row_stride": row_stride or n, "col_off": col_off,
              "has_add": int(add is not None), "has_bias": int(bias is not None),
              "in_place": int(out is None)}
    plan.dispatch("norm", "norm", values,
                  [_b("step"), _b(x), _b(add or "dummy"), _b(w),
                   _b(plan.floats("norm_bias:" + key, bias)), _b(out or "dummy")],
                  (1, 1, 1), rows_src, heads, 1, 0)


def _embed(plan: Plan, model: Any) -> None:
    emb, cfg = model.embedding, model.config
    dtype_name, parts = plan.weight(emb.name, emb)
    for part in parts:
        values = {"n_rows": part.rows, "row_lo": part.row_lo, "k": cfg.d_model,
                  "units": -(-cfg.d_model // 32), "row_bytes": _row_bytes(emb),
                  "scale": float(cfg.embed_scale)}
        plan.dispatch("embed", "embed:" + dtype_name, values,
                      [_b("step"), _b(part.buffer), _b("x")], (1, 1, 1), "T", 1, 1, 0)


def _layer(plan: Plan, model: Any, block: Any, qkv_w: int) -> None:
    cfg, i = model.config, block.index
    lin, norms = block.linears, block.norms
    d = cfg.d_model
    _norm(plan, "{}.attn".format(i), norms["attn_norm"], "x", "h", "a" if i else None, d)
    if lin.get("qkv") is not None:
        _matmul(plan, lin["qkv"], "h", d, 0, "qkv", qkv_w, 0)
    else:
        for role, off in (("q", 0), ("k", cfg.q_dim), ("v", cfg.q_dim + cfg.kv_dim)):
            _matmul(plan, lin[role], "h", d, 0, "qkv", qkv_w, off)
    if block.q_norm is not None:
        _norm(plan, "{}.q".format(i), None, "qkv", None, None, cfg.head_dim, heads=cfg.n_heads,
              row_stride=qkv_w, weight=block.q_norm, eps=cfg.norm_eps)
        _norm(plan, "{}.k".format(i), None, "qkv", None, None, cfg.head_dim,
              heads=cfg.n_kv_heads, row_stride=qkv_w, col_off=cfg.q_dim,
              weight=block.k_norm, eps=cfg.norm_eps)
    kind = "sliding" if block.sliding else "full"
    rope = model.ropes.get(kind)
    k_buf, v_buf = "k:{}".format(i), "v:{}".format(i)
    plan.dispatch("rope_store", "rope_store", {
        "n_heads": cfg.n_heads, "n_kv": cfg.n_kv_heads, "hd": cfg.head_dim,
        "dim": rope.dim if rope is not None else 0,
        "neox": int(rope is not None and rope.style == "neox"),
        "table": ROPE_KINDS.index(kind), "stride": qkv_w, "q_off": 0,
        "k_off": cfg.q_dim, "v_off": cfg.q_dim + cfg.kv_dim},
        [_b("step"), _b("qkv"), _b(k_buf), _b(v_buf)], (1, 1, 1), "T", 1, 1, 0)
    window = (cfg.sliding_window if block.sliding else None) or 0
    plan.dispatch("attention", "attention", {
        "n_heads": cfg.n_heads, "n_kv": cfg.n_kv_heads, "hd": cfg.head_dim,
        "scale": float(model.attn_scale), "window": window, "stride": qkv_w, "q_off": 0,
        "out_stride": cfg.q_dim},
        [_b("step"), _b("qkv"), _b(k_buf), _b(v_buf), _b("att")],
        (cfg.n_heads, 1, 1), "T", 1, 1, 1)
    _matmul(plan, lin["o"], "att", cfg.q_dim, 0, "a", d, 0)
    if norms.get("post_attn_norm") is not None:
        _norm(plan, "{}.post_attn".format(i), norms["post_attn_norm"], "a", None, None, d)
    _norm(plan, "{}.ffn".format(i), norms["ffn_norm"], "x", "h", "a", d)
    gated = lin.get("gate") is not None
    if gated:
        _matmul(plan, lin["gate"], "h", d, 0, "g", cfg.d_ff, 0)
        _matmul(plan, lin["up"], "h", d, 0, "u", cfg.d_ff, 0)
    else:
        _matmul(plan, lin["up"], "h", d, 0, "g", cfg.d_ff, 0)
    _flat(plan, "glu", {"n": cfg.d_ff, "gated": int(gated), "act": ACTS[cfg.act]},
          [_b("step"), _b("g"), _b("u")], cfg.d_ff)
    _matmul(plan, lin["down"], "g", cfg.d_ff, 0, "a", d, 0)
    if norms.get("post_ffn_norm") is not None:
        _norm(plan, "{}.post_ffn".format(i), norms["post_ffn_norm"], "a", None, None, d)


def _output(plan: Plan, model: Any) -> None:
    cfg, cap = model.config, plan.capacity
    d, vocab = cfg.d_model, cfg.n_vocab
    plan.dispatch("gather", "gather", {"n": d}, [_b("step"), _b("x"), _b("xr")],
                  (1, 1, 1), "R", 1, 1, 0)
    _norm(plan, "output", model.output_norm, "xr", "hr", None, d, rows_src="R")
    per_chunk = max(1, min(cap.out_rows, (plan.limits.max_binding - 16) // (vocab * F32)))
    for i, first in enumerate(range(0, cap.out_rows, per_chunk)):
        rows = min(per_chunk, cap.out_rows - first)
        name = plan.buffer("logits:{}".format(i), rows * vocab * F32)
        plan.logit_chunks.append((name, first, rows))
        _matmul(plan, model.lm_head, "hr", d, 0, name, vocab, 0, "R", first, rows)
    if len(plan.logit_chunks) == 1:
        plan.dispatch("argmax", "argmax", {"n": vocab},
                      [_b("step"), _b(plan.logit_chunks[0][0]), _b("ids")],
                      (1, 1, 1), "R", 1, 1, 0)
    plan.buffer("readback", cap.out_rows * vocab * F32, "readback")
