"""Vector IR for the multi-token dots (`token_rows`): a weight block's codes unpacked once
into a register value, then dotted with the int16 activations of a group of tokens
whose running sums stay in registers, two tokens per 16-lane vector.

    codes = codes_q5_0(w, qs_off, qh_off)              # <32 x i16>, minus the offset
    accs = acc_pairs(codes, xp, xo, xdt, so, d, 1.0, accs)   # tuple of f32x16, 2 tokens each

For each token `acc_pairs` computes exactly what `block_ir.acc_*` computes for that block:
the same integer pair sums folded to 8 lanes (lane j holds the pair sums j and j + 8 of
a 32-element block, pair j of a 16-element one; integers, so how they are added cannot
change them), converted to float32 and accumulated with one `llvm.fmuladd` by the same
float32 scale. So a token's running sum goes through the very float operations of the
one-token kernel, in the same order, and comes out bit-identical whatever the number of
tokens. The min terms (`acc_mins`, `axpy_slots`) are the one-token kernel's fmul then
fadd, per token.

Why: with the token loop outside the block loop (`block_rows.dot_rows`) every token
unpacked every block again (for a 5-bit block more vector work than its dot). Here a
pair of tokens costs one zmm pmaddwd and one vpdpwssd (AVX-512 VNNI folds the second
pmaddwd and the add; the activations come laid out so that no shuffle is needed,
`token_rows.pair_layout`), a conversion, a scale permute and an FMA: one thread, ns per
32 weights, Q5_0: 1 token 1.10 (`dot_rows`), 2 tokens 1.63, 16 tokens 6.1 (`dot_rows`:
17.0). Hosts without AVX-512 get the generic IR of the same sums.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils, datamodel
from numba.extending import intrinsic, register_model

from . import block_ir
from .lanes16 import f32x16
from .llvm_ir import (F32, I16, I32, _PMADDWD, _const, _fold_pairs, _fmuladd, _host_has,
                      _load, _ptr, _splat, _vec)


class I16xN(types.Type):
    """numba type of a block's unpacked codes (an LLVM `<n x i16>` value)."""

    def __init__(self, n: int) -> None:
        self.count = n
        super().__init__(name="i16x%d" % n)


i16x32, i16x16 = I16xN(32), I16xN(16)


@register_model(I16xN)
class _I16xNModel(datamodel.models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _vec(I16, fe_type.count))


def _make_codes(layout, name: str, offset: int, count: int):
    """An intrinsic `(w, *layout offsets) -> <count x i16>` codes minus `offset`: the
    word form of `block_ir.WORD_LAYOUTS` where the dots use it, else the byte layout
    sign-extended (the same integers either way)."""
    kinds = block_ir.LAYOUT_ARGS[layout]
    result = I16xN(count)

    def codegen(context, builder, signature, args):
        w_ptr = _ptr(context, builder, signature.args[0], args[0], ir.Constant(I32, 0))
        extra = block_ir._lower_args(builder, kinds, args[1:1 + len(kinds)])
        if _PMADDWD is not None and layout in block_ir.WORD_LAYOUTS:
            lo, hi = block_ir.WORD_LAYOUTS[layout](builder, w_ptr, extra, offset)
            return builder.shuffle_vector(lo, hi, _const(I32, range(32)))
        build = block_ir._minus(offset, layout) if offset else layout
        return builder.sext(build(builder, w_ptr, extra), _vec(I16, count))

    if len(kinds) == 1:
        def typer(typingctx, w, a0):
            return result(w, a0), codegen
    elif len(kinds) == 2:
        def typer(typingctx, w, a0, a1):
            return result(w, a0, a1), codegen
    else:
        def typer(typingctx, w, a0, a1, a2, a3):
            return result(w, a0, a1, a2, a3), codegen
    typer.__name__ = typer.__qualname__ = "codes_" + name
    return intrinsic(typer)


codes_q4_0 = _make_codes(block_ir.nib16, "q4_0", 8, 32)
codes_q4_1 = _make_codes(block_ir.nib16, "q4_1", 0, 32)
codes_q5_0 = _make_codes(block_ir.nib16_qh, "q5_0", 16, 32)
codes_q5_1 = _make_codes(block_ir.nib16_qh, "q5_1", 0, 32)
codes_q8_0 = _make_codes(block_ir.i8x32, "q8_0", 0, 32)
codes_q4_k = _make_codes(block_ir.nib32, "q4_k", 0, 32)
codes_q5_k = _make_codes(block_ir.nib32_hb, "q5_k", 0, 32)
codes_q6_k = _make_codes(block_ir.q6_16, "q6_k", 0, 16)


# zmm pmaddwd where the host has AVX-512 BW (numba compiles for the host)
_PMADDWD512 = "llvm.x86.avx512.pmaddw.d.512" if _host_has("avx512bw") else None


def _call(builder, name, ret, args):
    fn = builder.module.globals.get(name) or ir.Function(
        builder.module, ir.FunctionType(ret, [a.type for a in args]), name)
    return builder.call(fn, args)


def _two_token_sums(builder, codes, x0, x1):
    """Two tokens a, b: `<16 x i32>`, lanes 0-7 a's `llvm_ir._fold_pairs`, 8-15 b's, from
    the pair layout (`x0` = [a 0:16 | b 0:16], `x1` = [a 16:32 | b 16:32]; `x1` None for
    16-element codes). With AVX-512 a zmm pmaddwd of the codes' halves doubled against each: the
    lanes come out where they belong, no shuffle of activations (and LLVM folds the
    add of the second into vpdpwssd where the CPU has VNNI)."""
    n = codes.type.count
    lo2 = builder.shuffle_vector(codes, codes, _const(I32, list(range(16)) * 2))
    if _PMADDWD512 is not None:
        wide = _vec(I32, 16)
        sums = _call(builder, _PMADDWD512, wide, [lo2, x0])
        if n == 32:
            hi2 = builder.shuffle_vector(codes, codes, _const(I32, list(range(16, 32)) * 2))
            sums = builder.add(sums, _call(builder, _PMADDWD512, wide, [hi2, x1]))
        return sums
    halves = []
    for t in range(2):
        pick = _const(I32, range(16 * t, 16 * t + 16))
        x = builder.shuffle_vector(x0, x0, pick)
        if n == 32:
            x = builder.shuffle_vector(x, builder.shuffle_vector(x1, x1, pick),
                                       _const(I32, range(32)))
        halves.append(_fold_pairs(builder, codes, x))
    return builder.shuffle_vector(halves[0], halves[1], _const(I32, range(16)))


@intrinsic
def acc_pairs(typingctx, codes, xp, xo, sarr, so, d1, d2, accs):
    """One block's (or run's) codes . the activations of a group of token pairs, into
    their running sums `accs` (a tuple of `f32x16`, two tokens each) -> the new tuple.

    Pair k's activations are `xp.flat[xo + 64 k:]` in the pair layout (`token_rows.
    pair_layout`: 16 of token a, 16 of token b, then their next 16 for 32-element codes),
    token g's scale is `(sarr.flat[so + g] * d1) * d2` (d2 = 1.0 folds away), and its
    lanes get exactly the one-token kernel's `fmuladd(float32(sums8), scale, acc)`."""
    pairs = accs.count

    def codegen(context, builder, signature, args):
        codes, xp, xo, sarr, so, d1, d2, accs = args
        n = signature.args[0].count
        x0 = _ptr(context, builder, signature.args[1], xp, xo)
        s_ptr = _ptr(context, builder, signature.args[3], sarr, so)
        d1, d2 = (context.cast(builder, value, signature.args[arg], types.float32)
                  for arg, value in ((5, d1), (6, d2)))
        if _PMADDWD512 is not None:          # all scales in one vector, a permute per pair
            s = _load(builder, s_ptr, 2 * pairs, F32)
            for value in (d1, d2):
                s = builder.fmul(s, _splat(builder, value, 2 * pairs))
        out = accs
        for k in range(pairs):
            xa = _load(builder, builder.gep(x0, [ir.Constant(I32, 64 * k)]), 32, I16)
            xb = _load(builder, builder.gep(x0, [ir.Constant(I32, 64 * k + 32)]), 32, I16) \
                if n == 32 else None
            sums = _two_token_sums(builder, codes, xa, xb)                  # <16 x i32>
            if _PMADDWD512 is not None:
                scale = builder.shuffle_vector(s, s, _const(I32, [2 * k] * 8 + [2 * k + 1] * 8))
            else:                            # per token a broadcast load and two products:
                halves = []                  # permutes of one vector spill at 16 ymm
                for t in range(2):
                    v = builder.load(builder.gep(s_ptr, [ir.Constant(I32, 2 * k + t)]))
                    halves.append(_splat(builder, builder.fmul(builder.fmul(v, d1), d2), 8))
                scale = builder.shuffle_vector(halves[0], halves[1], _const(I32, range(16)))
            acc = _fmuladd(builder, builder.sitofp(sums, _vec(F32, 16)), scale,
                           builder.extract_value(accs, k))
            out = builder.insert_value(out, acc, k)
        return out
    return accs(codes, xp, xo, sarr, so, d1, d2, accs), codegen


def _scaled_slots(context, builder, signature, args, arr_at, m_at, lanes):
    """`m * arr.flat[so:so + lanes]` (float32 fmul), the array and offset at argument
    `arr_at`, `arr_at + 1`, the multiplier at `m_at`."""
    x = _load(builder, _ptr(context, builder, signature.args[arr_at], args[arr_at],
                            args[arr_at + 1]), lanes, F32)
    m = context.cast(builder, args[m_at], signature.args[m_at], types.float32)
    one = builder.insert_element(ir.Constant(_vec(F32, lanes), ir.Undefined), m,
                                 ir.Constant(I32, 0))
    return builder.fmul(builder.shuffle_vector(one, one, _const(I32, [0] * lanes)), x)


@intrinsic
def acc_mins(typingctx, mins, m, xst, so, accs):
    """`mins + m * xst.flat[so:so + 2 pairs]` lane by lane (an `f32x16`, lanes past the
    group's tokens untouched): the legacy min terms of a block for every token of the
    group, the one-token kernel's `mins += m * xs` (fmul, then fadd)."""
    lanes = 2 * accs.count

    def codegen(context, builder, signature, args):
        prod = _scaled_slots(context, builder, signature, args, 2, 1, lanes)
        if lanes < 16:
            prod = builder.shuffle_vector(prod, ir.Constant(prod.type, [0.0] * lanes),
                                          _const(I32, list(range(lanes)) +
                                                 [lanes] * (16 - lanes)))
        return builder.fadd(args[0], prod)
    return f32x16(mins, m, xst, so, accs), codegen


@intrinsic
def axpy_slots(typingctx, acc, ao, m, xst, so, accs):
    """`acc.flat[ao:ao + L] += m * xst.flat[so:so + L]` (fmul, then fadd) for the
    L = 2 pairs tokens of a group: a K-quant min lane of a block for every token."""
    lanes = 2 * accs.count

    def codegen(context, builder, signature, args):
        prod = _scaled_slots(context, builder, signature, args, 3, 2, lanes)
        at = builder.bitcast(_ptr(context, builder, signature.args[0], args[0], args[1]),
                             _vec(F32, lanes).as_pointer())
        builder.store(builder.fadd(builder.load(at, align=4), prod), at, align=4)
        return context.get_dummy_value()
    return types.void(acc, ao, m, xst, so, accs), codegen


@intrinsic
def lane(typingctx, v, i):
    """Lane `i` of an `f32x16`."""
    def codegen(context, builder, signature, args):
        return builder.extract_element(args[0], args[1])
    return types.float32(v, i), codegen


@intrinsic
def zero16(typingctx):
    """An `f32x16` of zeros."""
    def codegen(context, builder, signature, args):
        return ir.Constant(_vec(F32, 16), [0.0] * 16)
    return f32x16(), codegen


@intrinsic
def pair_hsums(typingctx, accs, k):
    """The two tokens' sums of pair `k` of `accs`, each reduced as `block_ir.hsum8` does."""
    def codegen(context, builder, signature, args):
        accs, k = args
        slot = cgutils.alloca_once(builder, accs.type)     # in the entry block: once
        builder.store(accs, slot)
        v = builder.load(builder.gep(slot, [ir.Constant(I32, 0), k]))
        sums = []
        for h in range(2):
            part = builder.shuffle_vector(v, v, _const(I32, range(8 * h, 8 * h + 8)))
            for half in (4, 2, 1):
                part = builder.fadd(
                    builder.shuffle_vector(part, part, _const(I32, range(half))),
                    builder.shuffle_vector(part, part, _const(I32, range(half, 2 * half))))
            sums.append(builder.extract_element(part, ir.Constant(I32, 0)))
        return context.make_tuple(builder, signature.return_type, sums)
    return types.UniTuple(types.float32, 2)(accs, k), codegen


__all__ = ["acc_pairs", "acc_mins", "axpy_slots", "lane", "zero16", "pair_hsums", "f32x16",
           "codes_q4_0", "codes_q4_1", "codes_q5_0", "codes_q5_1", "codes_q8_0", "codes_q4_k",
           "codes_q5_k", "codes_q6_k"]
