"""Q4_K and Q6_K blocks dotted with int8 activations that share one scale per 256-element
block (`block_table.quantize_x8` over runs of `block_table.KRUN`, as llama.cpp's Q8_K
activations for its K-quant dots), as numba intrinsics.

Each 32-element run's byte products (`llvm_ir._byte_words`: psignb + pmaddubsw, 16
int16 pair sums) are multiplied by the run's integer weight scales in the same pmaddwd
that folds them to `<8 x i32>`, and summed as integers over the block: a block costs one
int-to-float conversion and one FMA by `d * xd` (weight scale times the block's
activation scale). With a scale per 32-element run each run needed its own conversion,
broadcast scale and FMA: ~100 vector instructions a Q4_K block, bound by the vector
ports (llvm-mca, Zen 3: 30 cycles). One thread, rows in L2, ns per 32 weights (AVX2
EPYC at ~3 GHz, load 3-9): Q4_K 1.7-2.3 -> 1.22-1.55, Q6_K 3.3-3.5 -> 1.92 (its scale
picks one vpermd each, `_scale_words`).

Lanes: lane l of a block's sum holds, over its eight runs, the run's scale times the
products of elements 4l..4l+3 (Q6_K: lanes 0-3 are a run's first 16-element group,
4-7 its second, each times its group's scale). Bounds: Q4_K |sum| <= 8 x 2 x 63 x 2 x
15 x 127, Q6_K <= 8 x 2 x 128 x 2 x 32 x 127: well inside int32.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .block_ir import f32x8
from .kquant_scales import _k4_codes
from .llvm_ir import (F32, I8, I16, I32, _byte_words, _const, _fmuladd, _load, _madd_words,
                      _ptr, _shift_mask, _splat, _vec)


def _at(builder, base, offset):
    """`base + offset` (an i64 byte offset and a constant)."""
    return builder.add(base, ir.Constant(base.type, offset))


def _loader(context, builder, arrty, w, p):
    """The byte loader `load(offset, n)` (`<n x i8>` at `w[p + offset:]`) of the block at
    byte `p` of the uint8 array `w` (numba type `arrty`)."""
    w_ptr = _ptr(context, builder, arrty, w, ir.Constant(I32, 0))

    def load(offset, n):
        return _load(builder, builder.gep(w_ptr, [_at(builder, p, offset)]), n)
    return load


def _block_sum(context, builder, signature, args, runs):
    """`acc + s * float32(sum of runs)` for an intrinsic `(w, p, xq, xo, s, acc)`; `runs`
    yields (codes `<32 x i8>`, signed, scales `<16 x i16>`, run index) for the block at
    `w[p:]`, given a byte loader `load(offset, n)`."""
    w, p, xq, xo, s, acc = args
    load = _loader(context, builder, signature.args[0], w, p)
    x_ptr = _ptr(context, builder, signature.args[2], xq, xo)
    total = None
    for codes, signed, scales, r in runs(load):
        x = _load(builder, builder.gep(x_ptr, [ir.Constant(I32, 32 * r)]), 32, I8)
        part = _madd_words(builder, _byte_words(builder, codes, x, signed), scales)
        total = part if total is None else builder.add(total, part)
    s = _splat(builder, context.cast(builder, s, signature.args[4], types.float32), 8)
    return _fmuladd(builder, builder.sitofp(total, _vec(F32, 8)), s, acc)


def _scale_words(builder, scales):
    """`<n x i16>` scales -> a function of (a, b) giving the `<16 x i16>` that pmaddwd
    needs to scale lanes 0-3 by scale a and 4-7 by scale b: each scale is doubled into
    a 32-bit word once per block, so a run's pick is one dword permute (vpermd) rather
    than a byte shuffle and a widening per run."""
    n = scales.type.count
    dup = builder.bitcast(builder.shuffle_vector(scales, scales, _const(
        I32, [i // 2 for i in range(2 * n)])), _vec(I32, n))

    def pick(a, b):
        return builder.bitcast(builder.shuffle_vector(dup, dup, _const(I32, [a] * 4 + [b] * 4)),
                               _vec(I16, 16))
    return pick


def q4_k_runs(builder, load):
    """A Q4_K block's runs for `_block_sum`, from its byte loader `load(offset, n)`: run
    j = nibble 4 (j & 1) of the 32 code bytes at 16 + 32 (j >> 1), times its 6-bit scale
    sc_j."""
    sc, _ = _k4_codes(builder, load(4, 16))
    pick = _scale_words(builder, builder.zext(sc, _vec(I16, 8)))
    for j in range(8):
        codes = _shift_mask(builder, load(16 + 32 * (j >> 1), 32), 4 * (j & 1), 15)
        yield codes, False, pick(j, j), j


def q6_k_runs(builder, load):
    """A Q6_K block's runs for `_block_sum`: run (h, k) (elements 128 h + 32 k ..) =
    nibble 4 (k >> 1) of the ql bytes at 64 h + 32 (k & 1) | bits 2k, 2k+1 of the qh bytes
    at 128 + 32 h << 4, minus 32; its 16-element groups g = 8 h + 2 k and g + 1 times the
    int8 group scales at 192 + g."""
    pick = _scale_words(builder, builder.sext(load(192, 16), _vec(I16, 16)))
    for h in range(2):
        for k in range(4):
            low = _shift_mask(builder, load(64 * h + 32 * (k & 1), 32), 4 * (k >> 1), 15)
            high = _shift_mask(builder, load(128 + 32 * h, 32), 2 * k, 3)
            codes = builder.sub(builder.or_(low, builder.shl(high, _const(I8, [4] * 32))),
                                _const(I8, [32] * 32))
            g = 8 * h + 2 * k
            yield codes, True, pick(g, g + 1), 4 * h + k


@intrinsic
def acc_q4_k_block(typingctx, w, p, xq, xo, s, acc):
    """`acc` + `s` times the Q4_K block at `w[p:p+144]` . int8 `xq[xo:xo+256]` (its min
    term apart: `kquant_scales.k4_mins8`; runs: `q4_k_runs`)."""
    def codegen(context, builder, signature, args):
        return _block_sum(context, builder, signature, args,
                          lambda load: q4_k_runs(builder, load))
    return f32x8(w, p, xq, xo, s, acc), codegen


@intrinsic
def acc_q6_k_block(typingctx, w, p, xq, xo, s, acc):
    """`acc` + `s` times the Q6_K block at `w[p:p+210]` . int8 `xq[xo:xo+256]` (runs:
    `q6_k_runs`)."""
    def codegen(context, builder, signature, args):
        return _block_sum(context, builder, signature, args,
                          lambda load: q6_k_runs(builder, load))
    return f32x8(w, p, xq, xo, s, acc), codegen
