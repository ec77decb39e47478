"""WGSL compute kernels of a decoder forward pass, and THE table of their uniform fields.

Every kernel reads the step header `S: array<u32>` (its rows and the offsets of the
per-step inputs, `step.HEADER`) and a uniform struct `P` whose fields are `PARAMS[kind]`
(all u32; float fields carry their bits). The plan writes each dispatch's values in that
order, so the struct and its data cannot drift apart.

    kind       what it computes (numpy definition)                 dispatch
    matmul     Y[t, y_off + r] = W[r] . X[t] (+ B[b_off + r])  (weights.Linear.matmul)
               one workgroup per output row, threads over 32-element units, TILE
               activation rows per workgroup                      (rows, rows/65535, T/TILE)
    embed      X[t] = W[ids[t]] * scale      (Linear.rows)         (T)
    norm       X[r] += A[r]; H[r] = norm(X[r]) * w (+ b)            (rows * heads)
               (layers.rms_norm / layer_norm; heads: per-head Q/K norms)
    rope_store rotate q, k (layers.rotate) and store k, v at their slots  (T)
    attention  causal GQA over the slots of each row's block table,      (H, T)
               online softmax in float32 (fused.attention_paged)
    glu        G = act(G) * U  (plain MLP: G = act(G))                (T * d_ff / 256)
    add        X += A                                                 (T * d / 256)
    gather     XR[r] = X[out_rows[r]]                                  (R)
    argmax     IDS[r] = first index of the max of L[r]                (R)
"""
from __future__ import annotations

from typing import Dict, Tuple

from .wgsl_decode import decoder_source

TILE = 8            # activation rows per matmul workgroup (weights decoded once for all)
MATMUL_WG = 32      # threads per matmul workgroup (one output row)
ROWS_WG = 64        # output rows per workgroup of the thread-per-row matmul
WG = 64             # threads of the other row kernels
FLAT_WG = 256       # threads of the elementwise kernels
MAX_X = 65535       # largest workgroup count per dimension WebGPU guarantees
MAX_HEAD_DIM = 256  # attention keeps head_dim / WG accumulators per thread

PARAMS: Dict[str, Tuple[str, ...]] = {
    "matmul": ("n_rows", "k", "units", "row_bytes", "rows_src", "row_start", "row_cap",
               "x_stride", "x_off", "y_stride", "y_off", "has_bias", "b_off"),
    "matmul_rows": ("n_rows", "k", "units", "row_bytes", "rows_src", "row_start",
                    "row_cap", "x_stride", "x_off", "y_stride", "y_off", "has_bias", "b_off"),
    "embed": ("n_rows", "row_lo", "k", "units", "row_bytes", "scale"),
    "norm": ("n", "eps", "layer", "rows_src", "heads", "row_stride", "col_off", "has_add",
             "has_bias", "in_place"),
    "rope_store": ("n_heads", "n_kv", "hd", "dim", "neox", "table", "stride", "q_off",
                   "k_off", "v_off"),
    "attention": ("n_heads", "n_kv", "hd", "scale", "window", "stride", "q_off",
                  "out_stride"),
    "glu": ("n", "gated", "act"),
    "add": ("n",),
    "gather": ("n",),
    "argmax": ("n",),
}

ACTS = {"silu": 0, "gelu": 1, "gelu_tanh": 2}

# header words of the step buffer (apr_core.gpu.step writes them)
HEADER_WGSL = """
fn rows_t() -> u32 { return S[0]; }
fn rows_r() -> u32 { return S[1]; }
fn table_w() -> u32 { return S[2]; }
fn ids_at(t: u32) -> u32 { return S[S[3] + t]; }
fn pos_at(t: u32) -> u32 { return S[S[4] + t]; }
fn slot_at(t: u32) -> u32 { return S[S[5] + t]; }
fn block_size() -> u32 { return S[6]; }
fn table_at(t: u32, i: u32) -> u32 { return S[S[7] + t * S[2] + i]; }
fn out_row(r: u32) -> u32 { return S[S[8] + r]; }
fn rope_cos(kind: u32, t: u32, i: u32, half: u32) -> f32 {
    return bitcast<f32>(S[S[9 + 2u * kind] + t * half + i]);
}
fn rope_sin(kind: u32, t: u32, i: u32, half: u32) -> f32 {
    return bitcast<f32>(S[S[10 + 2u * kind] + t * half + i]);
}
"""


def params_struct(kind: str) -> str:
    fields = "".join("    {}: u32,\n".format(name) for name in PARAMS[kind])
    return "struct Params {\n" + fields + "}\n@group(0) @binding(0) var<uniform> P: Params;\n"


def _head(kind: str, bindings: str) -> str:
    return (params_struct(kind) + "@group(0) @binding(1) var<storage, read> S: array<u32>;\n"
            + bindings + HEADER_WGSL)


_MATMUL_X4 = """
@group(0) @binding(2) var<storage, read> W: array<u32>;
@group(0) @binding(3) var<storage, read> X4: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> Y: array<f32>;
@group(0) @binding(5) var<storage, read> B: array<f32>;
"""

_MATMUL = """
@group(0) @binding(2) var<storage, read> W: array<u32>;
@group(0) @binding(3) var<storage, read> X: array<f32>;
@group(0) @binding(4) var<storage, read_write> Y: array<f32>;
@group(0) @binding(5) var<storage, read> B: array<f32>;
"""

_MATMUL_MAIN = """
var<workgroup> partial: array<f32, {wg_tile}>;

@compute @workgroup_size({wg})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{
    let row = wid.x + wid.y * {max_x}u;
    var count = rows_t();
    if (P.rows_src == 1u) {{ count = rows_r(); }}
    let stop = min(count, P.row_start + P.row_cap);
    let t0 = P.row_start + wid.z * {tile}u;
    var acc: array<f32, {tile}>;
    if (row < P.n_rows && t0 < stop) {{
        let rb = row * P.row_bytes;
        for (var u = lid; u < P.units; u = u + {wg}u) {{
            decode32(rb, u);
            let col = u * 32u;
            let cnt = min(32u, P.k - col);
            for (var t = 0u; t < {tile}u; t = t + 1u) {{
                if (t0 + t < stop) {{
                    let xb = (t0 + t) * P.x_stride + P.x_off + col;
                    var s = 0.0;
                    for (var i = 0u; i < cnt; i = i + 1u) {{ s = s + wv[i] * X[xb + i]; }}
                    acc[t] = acc[t] + s;
                }}
            }}
        }}
    }}
    for (var t = 0u; t < {tile}u; t = t + 1u) {{ partial[lid * {tile}u + t] = acc[t]; }}
    workgroupBarrier();
    for (var half = {wg}u / 2u; half > 0u; half = half / 2u) {{
        if (lid < half) {{
            for (var t = 0u; t < {tile}u; t = t + 1u) {{
                partial[lid * {tile}u + t] = partial[lid * {tile}u + t]
                    + partial[(lid + half) * {tile}u + t];
            }}
        }}
        workgroupBarrier();
    }}
    if (row < P.n_rows && lid < {tile}u && t0 + lid < stop) {{
        var y = partial[lid];
        if (P.has_bias == 1u) {{ y = y + B[P.b_off + row]; }}
        Y[(t0 + lid - P.row_start) * P.y_stride + P.y_off + row] = y;
    }}
}}
"""

# One thread per output row (no barriers: what a CPU adapter such as lavapipe runs best;
# a GPU prefers the workgroup-per-row form above, `Limits.row_threads`).
_MATMUL_ROWS_MAIN = """
@compute @workgroup_size({wg})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{
    let row = (wid.y * {max_x}u + wid.x) * {wg}u + lid;
    var count = rows_t();
    if (P.rows_src == 1u) {{ count = rows_r(); }}
    let stop = min(count, P.row_start + P.row_cap);
    let t0 = P.row_start + wid.z * {tile}u;
    if (row < P.n_rows && t0 < stop) {{
        var acc: array<f32, {tile}>;
        let rb = row * P.row_bytes;
        for (var u = 0u; u < P.units; u = u + 1u) {{
            decode32(rb, u);
            let col = u * 32u;
            for (var t = 0u; t < {tile}u; t = t + 1u) {{
                if (t0 + t < stop) {{
                    let xb = ((t0 + t) * P.x_stride + P.x_off + col) / 4u;
                    var s = 0.0;
                    for (var i = 0u; i < 8u; i = i + 1u) {{
                        let x4 = select(vec4<f32>(0.0), X4[xb + i], col + 4u * i < P.k);
                        s = s + wv[4u * i] * x4.x + wv[4u * i + 1u] * x4.y
                            + wv[4u * i + 2u] * x4.z + wv[4u * i + 3u] * x4.w;
                    }}
                    acc[t] = acc[t] + s;
                }}
            }}
        }}
        for (var t = 0u; t < {tile}u; t = t + 1u) {{
            if (t0 + t < stop) {{
                var y = acc[t];
                if (P.has_bias == 1u) {{ y = y + B[P.b_off + row]; }}
                Y[(t0 + t - P.row_start) * P.y_stride + P.y_off + row] = y;
            }}
        }}
    }}
}}
"""

_EMBED = """
@group(0) @binding(2) var<storage, read> W: array<u32>;
@group(0) @binding(3) var<storage, read_write> X: array<f32>;
"""

_EMBED_MAIN = """
@compute @workgroup_size({wg})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{
    let t = wid.x;
    let id = ids_at(t);
    if (t < rows_t() && id >= P.row_lo && id < P.row_lo + P.n_rows) {{
        let rb = (id - P.row_lo) * P.row_bytes;
        let scale = bitcast<f32>(P.scale);
        for (var u = lid; u < P.units; u = u + {wg}u) {{
            decode32(rb, u);
            let col = u * 32u;
            for (var i = 0u; i < min(32u, P.k - col); i = i + 1u) {{
                var v = wv[i];
                if (scale != 1.0) {{ v = v * scale; }}
                X[t * P.k + col + i] = v;
            }}
        }}
    }}
}}
"""


def matmul_source(dtype_name: str, row_threads: int = MATMUL_WG) -> str:
    """WGSL of kind "matmul" over weights stored as `dtype_name`: `row_threads` threads
    per output row (MATMUL_WG, or 1: a thread per row, ROWS_WG rows per workgroup)."""
    if row_threads == 1:
        main = _MATMUL_ROWS_MAIN.format(wg=ROWS_WG, tile=TILE, max_x=MAX_X)
    else:
        main = _MATMUL_MAIN.format(wg=MATMUL_WG, tile=TILE, wg_tile=MATMUL_WG * TILE,
                                   max_x=MAX_X)
    return _head("matmul", _MATMUL_X4 if row_threads == 1 else _MATMUL) + \
        decoder_source(dtype_name) + main


def embed_source(dtype_name: str) -> str:
    """WGSL of kind "embed" (rows of a table stored as `dtype_name`)."""
    return _head("embed", _EMBED) + decoder_source(dtype_name) + _EMBED_MAIN.format(wg=WG)


def source(kind: str, dtype_name: str = "") -> str:
    """The WGSL of `kind` (weight kinds take the stored dtype's name)."""
    if kind.startswith("matmul"):
        return matmul_source(dtype_name, 1 if kind == "matmul_rows" else MATMUL_WG)
    if kind == "embed":
        return embed_source(dtype_name)
    from .wgsl_ops import OPS
    return _head(kind, OPS[kind])


__all__ = ["PARAMS", "ACTS", "TILE", "MATMUL_WG", "WG", "FLAT_WG", "MAX_X", "MAX_HEAD_DIM",
           "ROWS_WG", "source", "params_struct"]
