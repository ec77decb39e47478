"""WGSL of the kernels that read no weight blocks: norms, RoPE + KV store, attention,
the gated MLP's activation, residual add, row gather, argmax (`wgsl_kernels` documents
each kind; the numpy definitions are `apr_core.model.layers` and `.fused`).

Loops with a barrier in them run the same trip count in every thread of a workgroup:
their bounds come from the uniform params and from the step header at a workgroup-uniform
index, so WGSL's uniformity rules hold.
"""
from __future__ import annotations

from typing import Dict

_REDUCE = """
var<workgroup> red: array<f32, 64>;

fn reduce_sum(lid: u32, v: f32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var half = 32u; half > 0u; half = half / 2u) {
        if (lid < half) { red[lid] = red[lid] + red[lid + half]; }
        workgroupBarrier();
    }
    let total = red[0];
    workgroupBarrier();
    return total;
}
"""

NORM = """
@group(0) @binding(2) var<storage, read_write> X: array<f32>;
@group(0) @binding(3) var<storage, read> A: array<f32>;
@group(0) @binding(4) var<storage, read> Wn: array<f32>;
@group(0) @binding(5) var<storage, read> Bn: array<f32>;
@group(0) @binding(6) var<storage, read_write> H: array<f32>;
""" + _REDUCE + """
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    var count = rows_t();
    if (P.rows_src == 1u) { count = rows_r(); }
    let r = wid.y * 65535u + wid.x;
    let live = r < count * P.heads;
    let base = (r / P.heads) * P.row_stride + P.col_off + (r % P.heads) * P.n;
    let layer = P.layer == 1u;
    var part = 0.0;
    if (live) {
        for (var i = lid; i < P.n; i = i + 64u) {
            var v = X[base + i];
            if (P.has_add == 1u) {
                v = v + A[base + i];
                X[base + i] = v;
            }
            if (layer) { part = part + v; } else { part = part + v * v; }
        }
    }
    let nf = f32(P.n);
    var mean = 0.0;
    var variance = reduce_sum(lid, part) / nf;
    if (layer) {
        mean = variance;
        var dev = 0.0;
        if (live) {
            for (var i = lid; i < P.n; i = i + 64u) {
                let c = X[base + i] - mean;
                dev = dev + c * c;
            }
        }
        variance = reduce_sum(lid, dev) / nf;
    }
    let inv = 1.0 / sqrt(variance + bitcast<f32>(P.eps));
    if (live) {
        for (var i = lid; i < P.n; i = i + 64u) {
            var y = ((X[base + i] - mean) * inv) * Wn[i];
            if (P.has_bias == 1u) { y = y + Bn[i]; }
            if (P.in_place == 1u) { X[base + i] = y; } else { H[base + i] = y; }
        }
    }
}
"""

ROPE_STORE = """
@group(0) @binding(2) var<storage, read_write> QKV: array<f32>;
@group(0) @binding(3) var<storage, read_write> KC: array<f32>;
@group(0) @binding(4) var<storage, read_write> VC: array<f32>;

fn rotated(base: u32, e: u32, t: u32) -> f32 {
    let half = P.dim / 2u;
    if (P.neox == 1u) {
        let p = e % half;
        let a = QKV[base + p];
        let b = QKV[base + p + half];
        let c = rope_cos(P.table, t, p, half);
        let s = rope_sin(P.table, t, p, half);
        if (e < half) { return a * c - b * s; }
        return b * c + a * s;
    }
    let p = e / 2u;
    let a = QKV[base + 2u * p];
    let b = QKV[base + 2u * p + 1u];
    let c = rope_cos(P.table, t, p, half);
    let s = rope_sin(P.table, t, p, half);
    if (e % 2u == 0u) { return a * c - b * s; }
    return a * s + b * c;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = wid.x;
    if (t < rows_t()) {
        let row = t * P.stride;
        let kv_row = P.n_kv * P.hd;
        let slot = slot_at(t);
        if (P.dim > 0u) {
            // q in place: one thread per rotated pair (reads both, writes both)
            let half = P.dim / 2u;
            for (var i = lid; i < P.n_heads * half; i = i + 64u) {
                let base = row + P.q_off + (i / half) * P.hd;
                let p = i % half;
                var lo = 2u * p;
                var hi = 2u * p + 1u;
                if (P.neox == 1u) { lo = p; hi = p + half; }
                let a = rotated(base, lo, t);
                let b = rotated(base, hi, t);
                QKV[base + lo] = a;
                QKV[base + hi] = b;
            }
        }
        for (var i = lid; i < kv_row; i = i + 64u) {
            let e = i % P.hd;
            let base = row + P.k_off + (i / P.hd) * P.hd;
            var k = QKV[base + e];
            if (e < P.dim) { k = rotated(base, e, t); }
            KC[slot * kv_row + i] = k;
            VC[slot * kv_row + i] = QKV[row + P.v_off + i];
        }
    }
}
"""

ATTENTION = """
@group(0) @binding(2) var<storage, read> QKV: array<f32>;
@group(0) @binding(3) var<storage, read> KC: array<f32>;
@group(0) @binding(4) var<storage, read> VC: array<f32>;
@group(0) @binding(5) var<storage, read_write> O: array<f32>;

var<workgroup> scores: array<f32, 64>;
var<workgroup> slots: array<u32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let t = wid.y;
    let live = t < rows_t();
    var pos = 0u;
    var n_keys = 0u;
    if (live) { pos = pos_at(t); n_keys = pos + 1u; }
    var first = 0u;
    if (P.window > 0u && n_keys > P.window) { first = n_keys - P.window; }
    let kvh = h / (P.n_heads / P.n_kv);
    let kv_row = P.n_kv * P.hd;
    let qb = t * P.stride + P.q_off + h * P.hd;
    let scale = bitcast<f32>(P.scale);
    let bs = block_size();
    var m = -3.0e38;
    var s = 0.0;
    var acc: array<f32, 4>;
    for (var tile = first; tile < n_keys; tile = tile + 64u) {
        let j = tile + lid;
        var score = -3.0e38;
        var slot = 0u;
        if (j < n_keys) {
            slot = table_at(t, j / bs) * bs + j % bs;
            let kb = slot * kv_row + kvh * P.hd;
            var dot = 0.0;
            for (var e = 0u; e < P.hd; e = e + 1u) { dot = dot + QKV[qb + e] * KC[kb + e]; }
            score = dot * scale;
        }
        scores[lid] = score;
        slots[lid] = slot;
        workgroupBarrier();
        let cnt = min(64u, n_keys - tile);
        var top = m;
        for (var i = 0u; i < cnt; i = i + 1u) { top = max(top, scores[i]); }
        let corr = exp(m - top);
        s = s * corr;
        for (var r = 0u; r < 4u; r = r + 1u) { acc[r] = acc[r] * corr; }
        for (var i = 0u; i < cnt; i = i + 1u) {
            let p = exp(scores[i] - top);
            s = s + p;
            let vb = slots[i] * kv_row + kvh * P.hd;
            for (var r = 0u; r < 4u; r = r + 1u) {
                let e = lid + 64u * r;
                if (e < P.hd) { acc[r] = acc[r] + p * VC[vb + e]; }
            }
        }
        m = top;
        workgroupBarrier();
    }
    if (live) {
        for (var r = 0u; r < 4u; r = r + 1u) {
            let e = lid + 64u * r;
            if (e < P.hd) { O[t * P.out_stride + h * P.hd + e] = acc[r] / s; }
        }
    }
}
"""

_FLAT_INDEX = """
fn flat(wid: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * 65535u + wid.x) * 256u + lid;
}
"""

GLU = """
@group(0) @binding(2) var<storage, read_write> G: array<f32>;
@group(0) @binding(3) var<storage, read> U: array<f32>;
""" + _FLAT_INDEX + """
fn erf_as(x: f32) -> f32 {       // Abramowitz & Stegun 7.1.26, as layers.erf
    let a = abs(x);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741
        + t * (-1.453152027 + t * 1.061405429))));
    return sign(x) * (1.0 - poly * exp(-a * a));
}

fn act(x: f32) -> f32 {
    if (P.act == 0u) { return x / (1.0 + exp(-x)); }
    if (P.act == 1u) { return 0.5 * x * (1.0 + erf_as(x * 0.70710678118654752)); }
    let inner = clamp(0.7978845608028654 * (x + 0.044715 * x * x * x), -20.0, 20.0);
    return 0.5 * x * (1.0 + tanh(inner));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = flat(wid, lid);
    if (i < rows_t() * P.n) {
        var y = act(G[i]);
        if (P.gated == 1u) { y = y * U[i]; }
        G[i] = y;
    }
}
"""

ADD = """
@group(0) @binding(2) var<storage, read_write> X: array<f32>;
@group(0) @binding(3) var<storage, read> A: array<f32>;
""" + _FLAT_INDEX + """
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = flat(wid, lid);
    if (i < rows_t() * P.n) { X[i] = X[i] + A[i]; }
}
"""

GATHER = """
@group(0) @binding(2) var<storage, read> X: array<f32>;
@group(0) @binding(3) var<storage, read_write> XR: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let r = wid.x;
    if (r < rows_r()) {
        let src = out_row(r) * P.n;
        for (var i = lid; i < P.n; i = i + 64u) { XR[r * P.n + i] = X[src + i]; }
    }
}
"""

ARGMAX = """
@group(0) @binding(2) var<storage, read> L: array<f32>;
@group(0) @binding(3) var<storage, read_write> IDS: array<u32>;

var<workgroup> best_v: array<f32, 64>;
var<workgroup> best_i: array<u32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let r = wid.x;
    var bv = -3.4e38;
    var bi = 0xFFFFFFFFu;
    if (r < rows_r()) {
        for (var i = lid; i < P.n; i = i + 64u) {
            let v = L[r * P.n + i];
            if (v > bv) { bv = v; bi = i; }
        }
    }
    best_v[lid] = bv;
    best_i[lid] = bi;
    workgroupBarrier();
    for (var half = 32u; half > 0u; half = half / 2u) {
        if (lid < half) {
            let ov = best_v[lid + half];
            let oi = best_i[lid + half];
            if (ov > best_v[lid] || (ov == best_v[lid] && oi < best_i[lid])) {
                best_v[lid] = ov;
                best_i[lid] = oi;
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u && r < rows_r()) { IDS[r] = best_i[0]; }
}
"""

OPS: Dict[str, str] = {"norm": NORM, "rope_store": ROPE_STORE, "attention": ATTENTION,
                       "glu": GLU, "add": ADD, "gather": GATHER, "argmax": ARGMAX}

__all__ = ["OPS"]
