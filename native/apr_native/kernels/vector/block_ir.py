"""Vector IR for the block kernels: numba intrinsics that unpack one block's codes as an
LLVM vector and either dot them with int16 activations or scale them to float32.

Why intrinsics: written as plain numba loops, a 16- or 32-element block loop is fully
unrolled before LLVM's loop vectorizer sees it, numba leaves the SLP vectorizer off, and
numba widens every small-int operation to int64 -- the result is scalar code at
< 1 GB/s (ARCHITECTURE §7). Here each block is built directly as `<n x i8>` vector
operations (load, shift, mask, shuffle), the dot with int16 activations is
`reduce.add(sext(codes) * sext(x))`, which the x86 backend lowers to `vpmaddwd`, and
the dequantizing store is `sitofp`, one `fmul` and one `fadd` per lane, rounded exactly
as the numpy reference (no fast-math flags, so no FMA contraction). The IR is
target-independent: other CPUs get their own lowering.

Each layout is a function `(builder, w_ptr, offsets...) -> <n x i8> codes`; `make_pair`
turns one into a dot, an accumulating dot and a dequantize intrinsic:
    dot(w, *offsets, xq, xo) -> int32      sum_i code_i * xq[xo + i]   (xq int16)
    acc(w, *offsets, xq, xo, s, acc) -> acc + s * float32(the products folded to 8 lanes)
    deq(w, *offsets, d, m, out, oo)        out[oo + i] = float32(code_i) * d + m
`acc` carries a row's running sum as an `F32x8` value (numba type `f32x8`, an LLVM
`<8 x float>` kept in a register across the caller's block loop; `zero8()` starts one,
`hsum8(acc)` reduces it once per row): a block's integer products are only folded to 8
lanes (pmaddwd's pairs, then halves), never summed horizontally, so a block costs a
handful of vector instructions instead of a shuffle tree.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import datamodel
from numba.extending import intrinsic, register_model

from .llvm_ir import (F32, I16, I32, I8, _F16C, _PMADDWD, _byte_pairs,
                      _const, _fmuladd, _fold_pairs, _load, _pmaddwd, _ptr, _reduce_add,
                      _shift_mask, _splat, _vec)
from .word_layouts import _lane_mask, _u32, nib16_qh_words, nib16_words


class F32x8(types.Type):
    """numba type of an 8-lane float32 accumulator (an LLVM `<8 x float>` value)."""

    def __init__(self) -> None:
        super().__init__(name="f32x8")


f32x8 = F32x8()


@register_model(F32x8)
class _F32x8Model(datamodel.models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _vec(F32, 8))


@intrinsic
def zero8(typingctx):
    """An `f32x8` of zeros."""
    def codegen(context, builder, signature, args):
        return ir.Constant(_vec(F32, 8), [0.0] * 8)
    return f32x8(), codegen


@intrinsic
def hsum8(typingctx, acc):
    """The sum of an `f32x8`'s lanes as float32 (pairwise: (0+4)+(2+6) ...)."""
    def codegen(context, builder, signature, args):
        v = args[0]
        for half in (4, 2, 1):
            v = builder.fadd(builder.shuffle_vector(v, v, _const(I32, range(half))),
                             builder.shuffle_vector(v, v, _const(I32, range(half, 2 * half))))
        return builder.extract_element(v, ir.Constant(I32, 0))
    return types.float32(acc), codegen


@intrinsic
def load_f16(typingctx, w, offset):
    """The little-endian IEEE half at `w[offset:offset+2]` widened to float32 (exact;
    one vcvtph2ps where the CPU has F16C)."""
    def codegen(context, builder, signature, args):
        ptr = _ptr(context, builder, signature.args[0], args[0], args[1])
        bits = builder.load(builder.bitcast(ptr, ir.IntType(16).as_pointer()), align=1)
        return builder.fpext(builder.bitcast(bits, ir.HalfType()), F32)
    return types.float32(w, offset), codegen


@intrinsic
def load_f16x2(typingctx, w, offset):
    """The two little-endian IEEE halves at `w[offset:offset+4]` as a float32 pair.

    For block scales inside the dot loops. Converting a half the plain way compiles to
    `vpinsrw` into whatever register the backend picks -- often the loop's running sum,
    which chained every block's scale to it (measured 2x slower blocks). Here one 32-bit
    load is widened in a zeroed register (vmovd) and converted by `vcvtph2ps` as an
    opaque instruction, so nothing narrows it back. Every block type has a 4-byte run
    holding its scale(s) inside the block, so the load never leaves it."""
    def codegen(context, builder, signature, args):
        ptr = _ptr(context, builder, signature.args[0], args[0], args[1])
        bits = builder.load(builder.bitcast(ptr, I32.as_pointer()), align=1)
        if _F16C:
            lanes = builder.insert_element(ir.Constant(_vec(I32, 4), [0] * 4), bits,
                                           ir.Constant(I32, 0))
            asm = ir.InlineAsm(ir.FunctionType(_vec(F32, 4), [_vec(I32, 4)]),
                               "vcvtph2ps $1, $0", "=x,x")
            wide = builder.call(asm, [lanes])
        else:
            wide = builder.fpext(builder.bitcast(bits, _vec(ir.HalfType(), 2)), _vec(F32, 2))
        return context.make_tuple(builder, signature.return_type,
                                  [builder.extract_element(wide, ir.Constant(I32, i))
                                   for i in range(2)])
    return types.UniTuple(types.float32, 2)(w, offset), codegen


@intrinsic
def byte_codes(typingctx, xq):
    """Whether the activation codes `xq` are int8 (the byte dots): a constant LLVM folds,
    so the int8 and the int16 form of a kernel each keep only their own branch."""
    def codegen(context, builder, signature, args):
        return ir.Constant(ir.IntType(1), int(signature.args[0].dtype == types.int8))
    return types.boolean(xq), codegen


@intrinsic
def prefetch(typingctx, w, offset):
    """Hint the cache line holding `w[offset]` into L1 (`llvm.prefetch`: never faults, so
    an offset past the array's end is harmless)."""
    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        ptr = builder.bitcast(builder.gep(data, [args[1]]), I8.as_pointer())
        name = "llvm.prefetch.p0i8"
        fn = builder.module.globals.get(name) or ir.Function(
            builder.module, ir.FunctionType(ir.VoidType(), [I8.as_pointer(), I32, I32, I32]),
            name)
        builder.call(fn, [ptr, ir.Constant(I32, 0), ir.Constant(I32, 3), ir.Constant(I32, 1)])
        return context.get_dummy_value()
    return types.void(w, offset), codegen


@intrinsic
def add8(typingctx, a, b):
    """The lane-wise sum of two `f32x8`."""
    def codegen(context, builder, signature, args):
        return builder.fadd(args[0], args[1])
    return f32x8(a, b), codegen


# --------------------------------------------------------------------------- layouts
# Each returns `<n x i8>` codes, already minus the type's offset (signed), from the block
# bytes at `w_ptr` and the extra (i64 / i8) arguments named in LAYOUT_ARGS.

def nib16(builder, w, args):
    """Legacy 4-bit: byte j gives element j (low nibble) and j + 16 (high nibble)."""
    (off,) = args
    raw = _load(builder, builder.gep(w, [off]), 16)
    lo = _shift_mask(builder, raw, 0, 15)
    hi = _shift_mask(builder, raw, 4, 15)
    return builder.shuffle_vector(lo, hi, _const(I32, range(32)))


def nib16_qh(builder, w, args):
    """Legacy 5-bit: nib16 plus bit j of the little-endian u32 at `qh_off` as bit 4.

    The u32 is bitcast to a `<32 x i1>` (bit j -> lane j on little-endian targets) that
    selects 16 or 0 per lane: one mask move and one masked blend with AVX-512. Spreading
    the qh bytes with a byte shuffle and testing each lane's bit against a constant cost
    three more vector ops per block (Q5_0 dots 2.5 -> 1.87 ns a block on one thread;
    1.48 ns in the word form below, which the dots use where pmaddwd exists)."""
    off, qh_off = args
    low = nib16(builder, w, (off,))
    is_set = _lane_mask(builder, _u32(builder, w, qh_off))
    high = builder.select(is_set, _const(I8, [16] * 32), _const(I8, [0] * 32))
    return builder.or_(low, high)


def i8x32(builder, w, args):
    """Q8_0: 32 signed codes stored as they are."""
    (off,) = args
    return _load(builder, builder.gep(w, [off]), 32)


def nib32(builder, w, args):
    """K-quant 4-bit: nibble `shift` (0 or 4) of 32 consecutive bytes."""
    off, shift = args
    return _shift_mask(builder, _load(builder, builder.gep(w, [off]), 32), shift, 15)


def nib32_hb(builder, w, args):
    """Q5_K: nib32 plus bit `hshift` of byte l at `h_off` as bit 4 of element l."""
    off, shift, h_off, hshift = args
    low = nib32(builder, w, (off, shift))
    high = _shift_mask(builder, _load(builder, builder.gep(w, [h_off]), 32), hshift, 1)
    return builder.or_(low, builder.shl(high, _const(I8, [4] * 32)))


def q6_16(builder, w, args):
    """Q6_K, 16 elements: nibble `shift` of the ql bytes | 2 bits at `hshift` of the qh
    bytes << 4, minus 32."""
    off, shift, h_off, hshift = args
    low = _shift_mask(builder, _load(builder, builder.gep(w, [off]), 16), shift, 15)
    high = _shift_mask(builder, _load(builder, builder.gep(w, [h_off]), 16), hshift, 3)
    codes = builder.or_(low, builder.shl(high, _const(I8, [4] * 16)))
    return builder.sub(codes, _const(I8, [32] * 16))


def _minus(offset: int, layout):
    """Wrap a layout so its codes are `code - offset` (Q4_0: 8, Q5_0: 16)."""
    def shifted(builder, w, args):
        codes = layout(builder, w, args)
        return builder.sub(codes, _const(I8, [offset] * codes.type.count))
    return shifted


# byte layout -> its word form for the dots, where that is cheaper (pmaddwd hosts only)
WORD_LAYOUTS = {nib16: nib16_words, nib16_qh: nib16_qh_words}

# layout -> (its extra argument types: "i" an int offset, "s" a shift amount)
LAYOUT_ARGS = {nib16: "i", nib16_qh: "ii", i8x32: "i", nib32: "is", nib32_hb: "isis",
               q6_16: "isis"}


# layouts whose codes are signed before any offset is taken off
SIGNED_LAYOUTS = (i8x32, q6_16)


def _lower_args(builder, kinds, values):
    out = []
    for kind, value in zip(kinds, values):
        out.append(builder.trunc(value, I8) if kind == "s" else value)
    return out


def _typer(n_args: int, result, codegen, name: str):
    """An intrinsic of fixed arity `n_args` (numba intrinsics take no *args)."""
    if n_args == 4:
        def typer(typingctx, a0, a1, a2, a3):
            return result(a0, a1, a2, a3), codegen
    elif n_args == 5:
        def typer(typingctx, a0, a1, a2, a3, a4):
            return result(a0, a1, a2, a3, a4), codegen
    elif n_args == 6:
        def typer(typingctx, a0, a1, a2, a3, a4, a5):
            return result(a0, a1, a2, a3, a4, a5), codegen
    elif n_args == 7:
        def typer(typingctx, a0, a1, a2, a3, a4, a5, a6):
            return result(a0, a1, a2, a3, a4, a5, a6), codegen
    elif n_args == 9:
        def typer(typingctx, a0, a1, a2, a3, a4, a5, a6, a7, a8):
            return result(a0, a1, a2, a3, a4, a5, a6, a7, a8), codegen
    else:
        raise ValueError(n_args)
    typer.__name__ = typer.__qualname__ = name
    return intrinsic(typer)


def make_pair(layout, name: str, offset: int = 0):
    """(dot, deq, acc) intrinsics for `layout`, codes minus `offset`."""
    kinds = LAYOUT_ARGS[layout]
    build = _minus(offset, layout) if offset else layout
    n_extra = len(kinds)
    signed = bool(offset) or layout in SIGNED_LAYOUTS        # codes may be negative

    def codes_of(context, builder, signature, args):
        w_ptr = _ptr(context, builder, signature.args[0], args[0], ir.Constant(I32, 0))
        return build(builder, w_ptr, _lower_args(builder, kinds, args[1:1 + n_extra]))

    def dot_codegen(context, builder, signature, args):
        codes = codes_of(context, builder, signature, args)
        n = codes.type.count
        x_ptr = _ptr(context, builder, signature.args[1 + n_extra], args[1 + n_extra],
                     args[2 + n_extra])
        x = _load(builder, x_ptr, n, I16)
        prod = builder.mul(builder.sext(codes, _vec(I32, n)), builder.sext(x, _vec(I32, n)))
        return _reduce_add(builder, prod)

    def deq_codegen(context, builder, signature, args):
        codes = codes_of(context, builder, signature, args)
        n = codes.type.count
        d, m, out, oo = args[1 + n_extra:5 + n_extra]
        d_ty, m_ty = signature.args[1 + n_extra:3 + n_extra]
        d = context.cast(builder, d, d_ty, types.float32)
        m = context.cast(builder, m, m_ty, types.float32)
        values = builder.sitofp(codes, _vec(F32, n))
        values = builder.fadd(builder.fmul(values, _splat(builder, d, n)), _splat(builder, m, n))
        o_ptr = _ptr(context, builder, signature.args[3 + n_extra], out, oo)
        builder.store(values, builder.bitcast(o_ptr, _vec(F32, n).as_pointer()), align=4)
        return context.get_dummy_value()

    def word_sums(context, builder, signature, args, x_ptr):
        """`<8 x i32>` pair sums of the word layout's halves with the activations."""
        w_ptr = _ptr(context, builder, signature.args[0], args[0], ir.Constant(I32, 0))
        halves = WORD_LAYOUTS[layout](builder, w_ptr,
                                      _lower_args(builder, kinds, args[1:1 + n_extra]), offset)
        total = None
        for i, half in enumerate(halves):
            part = _pmaddwd(builder, half, _load(builder, builder.gep(x_ptr, [
                ir.Constant(I32, 16 * i)]), 16, I16))
            total = part if total is None else builder.add(total, part)
        return total

    def acc_codegen(context, builder, signature, args):
        x_ptr = _ptr(context, builder, signature.args[1 + n_extra], args[1 + n_extra],
                     args[2 + n_extra])
        if signature.args[1 + n_extra].dtype == types.int8:
            codes = codes_of(context, builder, signature, args)
            sums = _byte_pairs(builder, codes, _load(builder, x_ptr, codes.type.count, I8),
                               signed)
        elif _PMADDWD is not None and layout in WORD_LAYOUTS:
            sums = word_sums(context, builder, signature, args, x_ptr)       # <8 x i32>
        else:
            codes = codes_of(context, builder, signature, args)
            sums = _fold_pairs(builder, codes, _load(builder, x_ptr, codes.type.count, I16))
        s = context.cast(builder, args[3 + n_extra], signature.args[3 + n_extra],
                         types.float32)
        return _fmuladd(builder, builder.sitofp(sums, _vec(F32, 8)), _splat(builder, s, 8),
                        args[4 + n_extra])

    return (_typer(3 + n_extra, types.int32, dot_codegen, "dot_" + name),
            _typer(5 + n_extra, types.void, deq_codegen, "deq_" + name),
            _typer(5 + n_extra, f32x8, acc_codegen, "acc_" + name))


dot_q4_0, deq_q4_0, acc_q4_0 = make_pair(nib16, "q4_0", 8)
dot_q4_1, deq_q4_1, acc_q4_1 = make_pair(nib16, "q4_1")
dot_q5_0, deq_q5_0, acc_q5_0 = make_pair(nib16_qh, "q5_0", 16)
dot_q5_1, deq_q5_1, acc_q5_1 = make_pair(nib16_qh, "q5_1")
dot_q8_0, deq_q8_0, acc_q8_0 = make_pair(i8x32, "q8_0")
dot_q4_k, deq_q4_k, acc_q4_k = make_pair(nib32, "q4_k")
dot_q5_k, deq_q5_k, acc_q5_k = make_pair(nib32_hb, "q5_k")
dot_q6_k, deq_q6_k, acc_q6_k = make_pair(q6_16, "q6_k")


@intrinsic
def acc_q6_k_run(typingctx, w, ql, shift, qh, hshift, xq, xo, s0, s1, acc):
    """A 32-element run of Q6_K (elements from the ql bytes at `ql`, the qh bytes at `qh`,
    two 16-element groups scaled by `s0`, `s1`) accumulated into `acc` like `acc_q6_k`.

    int16 activations: `acc_q6_k` on each group (the same IR). int8: the 32 codes in one
    vector, `_byte_pairs` (lanes 0-3 hold the first group's sums, 4-7 the second's) and
    one FMA by the scales (s0 x4, s1 x4): half the instructions of two 16-element dots."""
    def codegen(context, builder, signature, args):
        w_, ql_, shift_, qh_, hshift_, xq_, xo_, s0_, s1_, acc_ = args
        w_ptr = _ptr(context, builder, signature.args[0], w_, ir.Constant(I32, 0))
        sh, hsh = builder.trunc(shift_, I8), builder.trunc(hshift_, I8)
        x_ptr = _ptr(context, builder, signature.args[5], xq_, xo_)
        scales = [context.cast(builder, v, t, types.float32)
                  for v, t in ((s0_, signature.args[7]), (s1_, signature.args[8]))]
        if signature.args[5].dtype == types.int8:
            low = _shift_mask(builder, _load(builder, builder.gep(w_ptr, [ql_]), 32), sh, 15)
            high = _shift_mask(builder, _load(builder, builder.gep(w_ptr, [qh_]), 32), hsh, 3)
            codes = builder.sub(builder.or_(low, builder.shl(high, _const(I8, [4] * 32))),
                                _const(I8, [32] * 32))
            sums = _byte_pairs(builder, codes, _load(builder, x_ptr, 32, I8), True)
            lo, hi = _splat(builder, scales[0], 8), _splat(builder, scales[1], 8)
            s = builder.shuffle_vector(lo, hi, _const(I32, [0, 1, 2, 3, 12, 13, 14, 15]))
            return _fmuladd(builder, builder.sitofp(sums, _vec(F32, 8)), s, acc_)
        for half in range(2):
            step = ir.Constant(ql_.type, 16 * half)
            codes = q6_16(builder, w_ptr, (builder.add(ql_, step), sh,
                                           builder.add(qh_, step), hsh))
            x = _load(builder, builder.gep(x_ptr, [ir.Constant(I32, 16 * half)]), 16, I16)
            sums = _fold_pairs(builder, codes, x)
            acc_ = _fmuladd(builder, builder.sitofp(sums, _vec(F32, 8)),
                            _splat(builder, scales[half], 8), acc_)
        return acc_
    return f32x8(w, ql, shift, qh, hshift, xq, xo, s0, s1, acc), codegen
