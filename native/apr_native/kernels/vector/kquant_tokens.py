"""Q4_K and Q6_K blocks dotted with the int8 codes of a group of tokens at once (numba
intrinsics): each block's runs are unpacked once (`kquant_bytes.q4_k_runs`,
`q6_k_runs`) and dotted with every token of the group, and each token's sums go through
exactly the integer and float operations of the one-token dot (`kquant_bytes`'s
`acc_q4_k_block` / `acc_q6_k_block`, `kquant_scales.k4_mins8`), so a token's result has
the same bits whatever group it is computed in.

    q4_k_tokens8(w, p, d, dmin, xq, xo, x_stride, xd, xs, so, s_stride, acc, ao)  # or ..4
    q6_k_tokens8(w, p, d, d, xq, xo, x_stride, xd, xs, so, s_stride, acc, ao)

Token g's codes are `xq.flat[xo + g x_stride:][:256]`, its activation scale
`xd.flat[so + g s_stride]` and run sums `xs.flat[so + g s_stride:][:8]`; `acc.flat[ao:]`
(float32, [2 G, 8]) holds the group's running 8-lane sums: rows 0..G-1 `acc += float32(block
sum) (d xd)` (one FMA a block, as the one-token dot), rows G..2G-1 the Q4_K min terms
`mins += (dmin mn_j) xs_j` (Q6_K: untouched).

Why: a prompt's projections (prefill) multiplied the rows dequantized to float32 with
every token, an FMA lane per weight and token (8 a vector) after the dequantizing; here
a weight and token cost a thirty-second of a pmaddubsw, of a pmaddwd and of an add (the
run's codes and scales are unpacked once for the group), as llama.cpp's Q8_K prefill
does, and speculative verification takes the very dots decode takes.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .kquant_bytes import _at, q4_k_runs, q6_k_runs
from .kquant_scales import _k4_codes
from .llvm_ir import F32, I8, I32, _byte_words, _fmuladd, _load, _madd_words, _ptr, _splat, _vec

def _group_dot(runs_of, with_mins: bool, group: int, name: str):
    """The intrinsic `name` for blocks whose runs `runs_of(builder, load)` yields, `group`
    tokens."""
    def codegen(context, builder, signature, args):
        w, p, d, dmin, xq, xo, x_stride, xd, xs, so, s_stride, acc, ao = args
        sig = signature.args
        w_ptr = _ptr(context, builder, sig[0], w, ir.Constant(I32, 0))

        def load(offset, n):
            return _load(builder, builder.gep(w_ptr, [_at(builder, p, offset)]), n)

        x_ptr = _ptr(context, builder, sig[4], xq, xo)
        x_rows = [builder.gep(x_ptr, [builder.mul(x_stride, ir.Constant(x_stride.type, g))])
                  for g in range(group)]
        totals = [None] * group
        for codes, signed, scales, r in runs_of(builder, load):
            for g in range(group):
                x = _load(builder, builder.gep(x_rows[g], [ir.Constant(I32, 32 * r)]), 32, I8)
                part = _madd_words(builder, _byte_words(builder, codes, x, signed), scales)
                totals[g] = part if totals[g] is None else builder.add(totals[g], part)
        d = context.cast(builder, d, sig[2], types.float32)
        dmin = _splat(builder, context.cast(builder, dmin, sig[3], types.float32), 8)
        mn = _k4_codes(builder, load(4, 16))[1] if with_mins else None
        acc_ptr = builder.bitcast(_ptr(context, builder, sig[11], acc, ao),
                                  _vec(F32, 8).as_pointer())
        xd_ptr = _ptr(context, builder, sig[7], xd, so)
        xs_ptr = _ptr(context, builder, sig[8], xs, so)
        for g in range(group):
            at = builder.mul(s_stride, ir.Constant(s_stride.type, g))
            s = builder.fmul(d, builder.load(builder.gep(xd_ptr, [at])))       # d * xd
            slot = builder.gep(acc_ptr, [ir.Constant(I32, g)])
            total = builder.sitofp(totals[g], _vec(F32, 8))
            builder.store(_fmuladd(builder, total, _splat(builder, s, 8),
                                   builder.load(slot, align=4)), slot, align=4)
            if with_mins:                                   # kquant_scales._k4_min_terms
                run_sums = _load(builder, builder.gep(xs_ptr, [at]), 8, F32)
                term = builder.fmul(builder.fmul(dmin, builder.uitofp(mn, _vec(F32, 8))),
                                    run_sums)
                slot = builder.gep(acc_ptr, [ir.Constant(I32, group + g)])
                builder.store(builder.fadd(builder.load(slot, align=4), term), slot, align=4)
        return context.get_dummy_value()

    def typer(typingctx, w, p, d, dmin, xq, xo, x_stride, xd, xs, so, s_stride, acc, ao):
        return (types.void(w, p, d, dmin, xq, xo, x_stride, xd, xs, so, s_stride, acc, ao),
                codegen)
    typer.__name__ = typer.__qualname__ = name
    return intrinsic(typer)


q4_k_tokens4 = _group_dot(q4_k_runs, True, 4, "q4_k_tokens4")
q4_k_tokens8 = _group_dot(q4_k_runs, True, 8, "q4_k_tokens8")
q6_k_tokens4 = _group_dot(q6_k_runs, False, 4, "q6_k_tokens4")
q6_k_tokens8 = _group_dot(q6_k_runs, False, 8, "q6_k_tokens8")

__all__ = ["q4_k_tokens4", "q4_k_tokens8", "q6_k_tokens4", "q6_k_tokens8"]
