"""Q4_K and Q6_K blocks dotted with the int8 codes of a group of tokens at once (numba
intrinsics): each block's runs are unpacked once (`kquant_bytes.q4_k_runs`,
`q6_k_runs`) and dotted with every token of the group, and each token's sums go through
exactly the integer and float operations of the one-token dot (`kquant_bytes`'s
`acc_q4_k_block` / `acc_q6_k_block`, `kquant_scales.k4_mins8`), so a token's result has
the same bits whatever group it is computed in.

    q4_k_tokens8(w, p, d, dmin, xq, xo, x_stride, xd, xs, so, s_stride, acc, ao)  # or ..4
    q6_k_tokens8(w, p, d, bo, xu, xo, x_stride, xd, bias, so, s_stride, acc, ao)
    q6_k_bias(w, p, bias, bo)

Token g's codes are `xq.flat[xo + g x_stride:][:256]`, its activation scale
`xd.flat[so + g s_stride]` and run sums `xs.flat[so + g s_stride:][:8]`; `acc.flat[ao:]`
(float32, [2 G, 8]) holds the group's running 8-lane sums: rows 0..G-1 `acc += float32(block
sum) (d xd)` (one FMA a block, as the one-token dot), rows G..2G-1 the Q4_K min terms
`mins += (dmin mn_j) xs_j` (Q6_K: untouched).

Q6_K takes its activations offset, `xu` = the bytes x XOR 0x80 (x + 128 in [1, 255] read
unsigned: `kquant_token_rows` makes them once per call), as pmaddubsw's unsigned operand
and its signed codes c (-32..31) as the signed one: the pair sums (x0 + 128) c0 + (x1 +
128) c1 never saturate (|.| <= 2 x 255 x 32), and exceed the one-token dot's by 128 (c0 +
c1), a function of the weights alone. `q6_k_bias` computes that excess through the same
scales and lanes, the block's `<8 x i32>` `bias.flat[bo:bo + 8]` (int32), once per block
and call; each token subtracts it from its integer lane sums, which are then exactly the
one-token dot's.

Why: a prompt's projections (prefill) multiplied the rows dequantized to float32 with
every token, an FMA lane per weight and token (8 a vector) after the dequantizing; here
a weight and token cost a thirty-second of a pmaddubsw, of a pmaddwd and of an add, Q4_K
and Q6_K alike (the run's codes and scales are unpacked once for the group; Q6_K's signed
codes cost a psignb more before its activations were offset), as llama.cpp's Q8_K
prefill does, and speculative verification takes the very dots decode takes. (The
offset alone, with the excess made in the group loop, measured within noise of the
psignb form, one thread on Zen 3: pmaddubsw and pmaddwd bind the loop, and the excess
added two of them a run and block; Q6_K's prefill gain came with the excess pass,
`kquant_token_rows`.)
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .kquant_bytes import _loader, q4_k_runs, q6_k_runs
from .kquant_scales import _k4_codes
from .llvm_ir import (F32, I8, I32, _byte_words, _const, _fmuladd, _load, _madd_words, _ptr,
                      _splat, _vec)


def _q6_k_excess(builder, load):
    """128 times a Q6_K block's codes through its scales (`q6_k_runs`), lanes as the dots':
    what pmaddubsw's offset activations x + 128 add to every token's `<8 x i32>` sums."""
    total = None
    for codes, _, scales, _ in q6_k_runs(builder, load):
        part = _madd_words(builder, _byte_words(builder, _const(I8, [-128] * 32), codes, False),
                           scales)                                      # (-128: byte 0x80)
        total = part if total is None else builder.add(total, part)
    return total


@intrinsic
def q6_k_bias(typingctx, w, p, bias, bo):
    """`bias.flat[bo:bo + 8]` (int32) = the Q6_K block at `w[p:p+210]`'s excess
    (`_q6_k_excess`)."""
    def codegen(context, builder, signature, args):
        w, p, bias, bo = args
        out = _ptr(context, builder, signature.args[2], bias, bo)
        builder.store(_q6_k_excess(builder, _loader(context, builder, signature.args[0], w, p)),
                      builder.bitcast(out, _vec(I32, 8).as_pointer()), align=4)
        return context.get_dummy_value()
    return types.void(w, p, bias, bo), codegen


def _group_dot(runs_of, with_mins: bool, group: int, name: str):
    """The intrinsic `name` for blocks whose runs `runs_of(builder, load)` yields, `group`
    tokens: Q4_K with its min terms (`with_mins`), else Q6_K (offset activations, the
    block's excess subtracted)."""
    def codegen(context, builder, signature, args):
        # the 4th and 9th arguments: Q4_K's dmin and run sums xs, Q6_K's excess offset and
        # table (its bo and bias)
        w, p, d, fourth, xq, xo, x_stride, xd, ninth, so, s_stride, acc, ao = args
        sig = signature.args
        load = _loader(context, builder, sig[0], w, p)
        x_ptr = _ptr(context, builder, sig[4], xq, xo)
        x_rows = [builder.gep(x_ptr, [builder.mul(x_stride, ir.Constant(x_stride.type, g))])
                  for g in range(group)]
        totals = [None] * group
        for codes, signed, scales, r in runs_of(builder, load):
            for g in range(group):
                x = _load(builder, builder.gep(x_rows[g], [ir.Constant(I32, 32 * r)]), 32, I8)
                words = (_byte_words(builder, x, codes, False) if signed         # x + 128
                         else _byte_words(builder, codes, x, False))
                part = _madd_words(builder, words, scales)
                totals[g] = part if totals[g] is None else builder.add(totals[g], part)
        if with_mins:                           # Q4_K: dmin, run sums
            dmin = _splat(builder, context.cast(builder, fourth, sig[3], types.float32), 8)
            mn = _k4_codes(builder, load(4, 16))[1]
            xs_ptr = _ptr(context, builder, sig[8], ninth, so)
        else:                                   # Q6_K: the block's excess bias[bo:bo + 8]
            excess = _load(builder, _ptr(context, builder, sig[8], ninth, fourth), 8, I32)
            totals = [builder.sub(total, excess) for total in totals]
        d = context.cast(builder, d, sig[2], types.float32)
        acc_ptr = builder.bitcast(_ptr(context, builder, sig[11], acc, ao),
                                  _vec(F32, 8).as_pointer())
        xd_ptr = _ptr(context, builder, sig[7], xd, so)
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

    def typer(typingctx, w, p, d, fourth, xq, xo, x_stride, xd, ninth, so, s_stride, acc,
              ao):
        return (types.void(w, p, d, fourth, xq, xo, x_stride, xd, ninth, so, s_stride, acc,
                           ao), codegen)
    typer.__name__ = typer.__qualname__ = name
    return intrinsic(typer)


q4_k_tokens4 = _group_dot(q4_k_runs, True, 4, "q4_k_tokens4")
q4_k_tokens8 = _group_dot(q4_k_runs, True, 8, "q4_k_tokens8")
q6_k_tokens4 = _group_dot(q6_k_runs, False, 4, "q6_k_tokens4")
q6_k_tokens8 = _group_dot(q6_k_runs, False, 8, "q6_k_tokens8")

__all__ = ["q4_k_tokens4", "q4_k_tokens8", "q6_k_tokens4", "q6_k_tokens8", "q6_k_bias"]
