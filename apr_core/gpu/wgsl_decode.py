"""WGSL block decoders: THE table of how each stored dtype is read on the GPU.

A weight is bound as `W: array<u32>` holding the tensor's stored bytes unchanged (padded
to a whole word at the end). Blocks of 18, 22, 34, 210 ... bytes are not word-aligned,
so every field is read by byte offset from the one or two words covering it (`rd8`,
`rd16`, `rd32`); f16 fields go through `unpack2x16float`, bf16 by a shift into the top
half of an f32. No repacking, no float copies.

Each dtype's `decode32(rb, u)` writes the 32 float32 weights of unit `u` of the row whose
bytes start at `rb` into the private array `wv`: unit u is elements `32 u .. 32 u + 31`
(a legacy block; an eighth of a k-quant super-block; 32 plain floats). The arithmetic is
the numpy reference's (`apr_core.quant.kernels`): integer code formed exactly, then the
same float32 products in the same order (`d * sc` before `* q`), so a decoded weight
equals the reference's except where the GPU fuses a multiply-add into one rounding.

Layouts (ggml-common.h) are documented in `apr_core.quant.kernels.legacy` / `.kquants`.
"""
from __future__ import annotations

from typing import Dict

HELPERS = """
var<private> wv: array<f32, 32>;

fn rd8(off: u32) -> u32 {
    return (W[off >> 2u] >> ((off & 3u) * 8u)) & 0xFFu;
}

fn rd32(off: u32) -> u32 {        // branch-free: every SIMD lane takes the same path
    let i = off >> 2u;
    let s = (off & 3u) * 8u;
    let hi = select(W[i + 1u] << ((32u - s) & 31u), 0u, s == 0u);
    return (W[i] >> s) | hi;
}

fn rd16(off: u32) -> u32 {
    return rd32(off) & 0xFFFFu;
}

fn f16at(off: u32) -> f32 {
    return unpack2x16float(rd16(off)).x;
}

fn sbyte(b: u32) -> f32 {            // a byte as int8 -> f32
    return f32(bitcast<i32>(b << 24u) >> 24u);
}
"""

# dtype name -> (elements per unit address step, WGSL body of decode32). `rb` is the row's
# first byte, `u` the unit index within the row.
_LEGACY = {
    "Q4_0": """
    let b = rb + u * 18u;
    let d = f16at(b);
    for (var j = 0u; j < 4u; j = j + 1u) {
        let q = rd32(b + 2u + 4u * j);
        for (var k = 0u; k < 4u; k = k + 1u) {
            let byte = (q >> (8u * k)) & 0xFFu;
            wv[4u * j + k] = d * f32(i32(byte & 15u) - 8);
            wv[4u * j + k + 16u] = d * f32(i32(byte >> 4u) - 8);
        }
    }""",
    "Q4_1": """
    let b = rb + u * 20u;
    let d = f16at(b);
    let m = f16at(b + 2u);
    for (var j = 0u; j < 4u; j = j + 1u) {
        let q = rd32(b + 4u + 4u * j);
        for (var k = 0u; k < 4u; k = k + 1u) {
            let byte = (q >> (8u * k)) & 0xFFu;
            wv[4u * j + k] = d * f32(byte & 15u) + m;
            wv[4u * j + k + 16u] = d * f32(byte >> 4u) + m;
        }
    }""",
    "Q5_0": """
    let b = rb + u * 22u;
    let d = f16at(b);
    let qh = rd32(b + 2u);
    for (var j = 0u; j < 4u; j = j + 1u) {
        let q = rd32(b + 6u + 4u * j);
        for (var k = 0u; k < 4u; k = k + 1u) {
            let l = 4u * j + k;
            let byte = (q >> (8u * k)) & 0xFFu;
            let lo = (byte & 15u) | (((qh >> l) & 1u) << 4u);
            let hi = (byte >> 4u) | (((qh >> (l + 16u)) & 1u) << 4u);
            wv[l] = d * f32(i32(lo) - 16);
            wv[l + 16u] = d * f32(i32(hi) - 16);
        }
    }""",
    "Q5_1": """
    let b = rb + u * 24u;
    let d = f16at(b);
    let m = f16at(b + 2u);
    let qh = rd32(b + 4u);
    for (var j = 0u; j < 4u; j = j + 1u) {
        let q = rd32(b + 8u + 4u * j);
        for (var k = 0u; k < 4u; k = k + 1u) {
            let l = 4u * j + k;
            let byte = (q >> (8u * k)) & 0xFFu;
            let lo = (byte & 15u) | (((qh >> l) & 1u) << 4u);
            let hi = (byte >> 4u) | (((qh >> (l + 16u)) & 1u) << 4u);
            wv[l] = d * f32(lo) + m;
            wv[l + 16u] = d * f32(hi) + m;
        }
    }""",
    "Q8_0": """
    let b = rb + u * 34u;
    let d = f16at(b);
    for (var j = 0u; j < 8u; j = j + 1u) {
        let q = rd32(b + 2u + 4u * j);
        for (var k = 0u; k < 4u; k = k + 1u) {
            wv[4u * j + k] = d * sbyte((q >> (8u * k)) & 0xFFu);
        }
    }""",
}

# k-quants: unit u is sub-block j = u % 8 of super-block u / 8.
_K4_SCALES = """
    var sc: u32;
    var mn: u32;
    if (j < 4u) {
        sc = rd8(b + 4u + j) & 63u;
        mn = rd8(b + 8u + j) & 63u;
    } else {
        sc = (rd8(b + 8u + j) & 15u) | ((rd8(b + j) >> 6u) << 4u);
        mn = (rd8(b + 8u + j) >> 4u) | ((rd8(b + 4u + j) >> 6u) << 4u);
    }
    let dl = f16at(b) * f32(sc);
    let ml = f16at(b + 2u) * f32(mn);
    let c = j / 2u;
    let shift = (j % 2u) * 4u;"""

_KQUANTS = {
    "Q4_K": """
    let b = rb + (u / 8u) * 144u;
    let j = u % 8u;""" + _K4_SCALES + """
    for (var w = 0u; w < 8u; w = w + 1u) {
        let q = rd32(b + 16u + 32u * c + 4u * w);
        for (var k = 0u; k < 4u; k = k + 1u) {
            wv[4u * w + k] = dl * f32((q >> (8u * k + shift)) & 15u) - ml;
        }
    }""",
    "Q5_K": """
    let b = rb + (u / 8u) * 176u;
    let j = u % 8u;""" + _K4_SCALES + """
    for (var w = 0u; w < 8u; w = w + 1u) {
        let q = rd32(b + 48u + 32u * c + 4u * w);
        let h = rd32(b + 16u + 4u * w);
        for (var k = 0u; k < 4u; k = k + 1u) {
            let code = ((q >> (8u * k + shift)) & 15u) | (((h >> (8u * k + j)) & 1u) << 4u);
            wv[4u * w + k] = dl * f32(code) - ml;
        }
    }""",
    "Q6_K": """
    let b = rb + (u / 8u) * 210u;
    let j = u % 8u;
    let half = j / 4u;
    let k4 = j % 4u;
    let d = f16at(b + 208u);
    let d0 = d * sbyte(rd8(b + 192u + 8u * half + 2u * k4));
    let d1 = d * sbyte(rd8(b + 193u + 8u * half + 2u * k4));
    let lshift = (k4 / 2u) * 4u;
    for (var w = 0u; w < 8u; w = w + 1u) {
        let ql = rd32(b + 64u * half + 32u * (k4 % 2u) + 4u * w);
        let qh = rd32(b + 128u + 32u * half + 4u * w);
        for (var k = 0u; k < 4u; k = k + 1u) {
            let code = ((ql >> (8u * k + lshift)) & 15u) | (((qh >> (8u * k + 2u * k4)) & 3u) << 4u);
            let l = 4u * w + k;
            var dl = d0;
            if (l >= 16u) { dl = d1; }
            wv[l] = dl * f32(i32(code) - 32);
        }
    }""",
    "Q3_K": """
    let b = rb + (u / 8u) * 110u;
    let j = u % 8u;
    let half = j / 4u;
    let k4 = j % 4u;
    let d = f16at(b + 108u);
    var dls: array<f32, 2>;
    for (var g = 0u; g < 2u; g = g + 1u) {
        let s = 2u * j + g;
        var low4: u32;
        if (s < 8u) { low4 = rd8(b + 96u + s) & 15u; } else { low4 = rd8(b + 88u + s) >> 4u; }
        let top2 = (rd8(b + 104u + s % 4u) >> (2u * (s / 4u))) & 3u;
        dls[g] = d * f32(i32(low4 | (top2 << 4u)) - 32);
    }
    for (var w = 0u; w < 8u; w = w + 1u) {
        let ql = rd32(b + 32u + 32u * half + 4u * w);
        let hm = rd32(b + 4u * w);
        for (var k = 0u; k < 4u; k = k + 1u) {
            let code = ((ql >> (8u * k + 2u * k4)) & 3u) | (((hm >> (8u * k + j)) & 1u) << 2u);
            let l = 4u * w + k;
            wv[l] = dls[l / 16u] * f32(i32(code) - 4);
        }
    }""",
    "Q2_K": """
    let b = rb + (u / 8u) * 84u;
    let j = u % 8u;
    let half = j / 4u;
    let k4 = j % 4u;
    let d = f16at(b + 80u);
    let dmin = f16at(b + 82u);
    for (var w = 0u; w < 8u; w = w + 1u) {
        let q = rd32(b + 16u + 32u * half + 4u * w);
        for (var k = 0u; k < 4u; k = k + 1u) {
            let l = 4u * w + k;
            let scb = rd8(b + 2u * j + l / 16u);
            let dl = d * f32(scb & 15u);
            let ml = dmin * f32(scb >> 4u);
            wv[l] = dl * f32((q >> (8u * k + 2u * k4)) & 3u) - ml;
        }
    }""",
}

# Plain floats: unit u is elements 32 u .. (the row tail past K is never multiplied).
_FLOATS = {
    "F32": """
    let b = rb + u * 128u;
    for (var l = 0u; l < 32u; l = l + 1u) { wv[l] = bitcast<f32>(rd32(b + 4u * l)); }""",
    "F16": """
    let b = rb + u * 64u;
    for (var l = 0u; l < 32u; l = l + 1u) { wv[l] = f16at(b + 2u * l); }""",
    "BF16": """
    let b = rb + u * 64u;
    for (var l = 0u; l < 32u; l = l + 1u) { wv[l] = bitcast<f32>(rd16(b + 2u * l) << 16u); }""",
}

DECODERS: Dict[str, str] = {}
DECODERS.update(_LEGACY)
DECODERS.update(_KQUANTS)
DECODERS.update(_FLOATS)

SUPPORTED = tuple(sorted(DECODERS))


# Types whose every field read is word-aligned (block and row sizes multiples of 4):
# `rd32` is then a single load.
ALIGNED = ("F32", "Q2_K", "Q4_1", "Q4_K", "Q5_1", "Q5_K")
_ALIGNED_RD = """
fn rd32(off: u32) -> u32 {        // this type's u32 reads are all word-aligned
    return W[off >> 2u];
}

fn rd16(off: u32) -> u32 {        // and its u16 reads never straddle two words
    return (W[off >> 2u] >> ((off & 3u) * 8u)) & 0xFFFFu;
}
"""


def decoder_source(dtype_name: str) -> str:
    """The helpers and `decode32` of `dtype_name` (a name in `SUPPORTED`)."""
    helpers = HELPERS
    if dtype_name in ALIGNED:
        start = helpers.index("fn rd32(")
        end = helpers.index("fn f16at(")
        helpers = helpers[:start] + _ALIGNED_RD.lstrip() + "\n" + helpers[end:]
    return helpers + "\nfn decode32(rb: u32, u: u32) {" + DECODERS[dtype_name] + "\n}\n"


def units_per_row(dtype_name: str, k: int) -> int:
    """Units of 32 elements in a row of `k` (plain floats: the last one may be partial)."""
    return (k + 31) // 32


__all__ = ["DECODERS", "SUPPORTED", "ALIGNED", "decoder_source", "units_per_row", "HELPERS"]
