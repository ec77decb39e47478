"""Vector IR for the block kernels: numba intrinsics that unpack one block's codes as an
LLVM vector and either dot them with int16 activations or scale them to float32.

Why intrinsics: written as plain numba loops, a 16- or 32-element block loop is fully
unrolled before LLVM's loop vectorizer sees it, numba leaves the SLP vectorizer off, and
numba widens every small-int operation to int64 -- the result is scalar code at
< 1 GB/s (ARCHITECTURE §7). Here each block is built directly as `<n x i8>` vector
operations (load, shift, mask, shuffle), the dot with int16 activations is
`reduce.add(sext(codes) * sext(x))`, which the x86 backend lowers to `vpmaddwd`, and the dequantizing store is `sitofp`, one
`fmul` and one `fadd` per lane, rounded exactly as the numpy reference (no fast-math flags,
so no FMA contraction). The IR is target-independent: other CPUs get their own lowering.

Each layout is a function `(builder, w_ptr, offsets...) -> <n x i8> codes`; `make_pair`
turns one into a dot intrinsic and a dequantize intrinsic with matching arguments:
    dot(w, *offsets, xq, xo) -> int32      sum_i code_i * xq[xo + i]   (xq int16)
    deq(w, *offsets, d, m, out, oo)        out[oo + i] = float32(code_i) * d + m
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

I8, I16, I32, F32 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.FloatType()


def _vec(elem: ir.Type, n: int) -> ir.VectorType:
    return ir.VectorType(elem, n)


def _const(elem: ir.Type, values) -> ir.Constant:
    return ir.Constant(_vec(elem, len(values)), list(values))


def _splat(builder: ir.IRBuilder, value: ir.Value, n: int) -> ir.Value:
    vty = _vec(value.type, n)
    one = builder.insert_element(ir.Constant(vty, ir.Undefined), value, ir.Constant(I32, 0))
    return builder.shuffle_vector(one, one, ir.Constant(_vec(I32, n), [0] * n))


def _ptr(context, builder, arrty, arr, offset) -> ir.Value:
    """Address of `arr[offset]` (element pointer of its dtype)."""
    data = context.make_array(arrty)(context, builder, arr).data
    return builder.gep(data, [offset])


def _load(builder: ir.IRBuilder, ptr: ir.Value, n: int, elem: ir.Type = I8) -> ir.Value:
    return builder.load(builder.bitcast(ptr, _vec(elem, n).as_pointer()), align=1)


def _shift_mask(builder, bytes_, shift, mask: int) -> ir.Value:
    """`(bytes >> shift) & mask` lane-wise; `shift` an i8 value (runtime) or int."""
    n = bytes_.type.count
    amount = _splat(builder, shift, n) if isinstance(shift, ir.Value) else _const(I8, [shift] * n)
    return builder.and_(builder.lshr(bytes_, amount), _const(I8, [mask] * n))


def _reduce_add(builder: ir.IRBuilder, v: ir.Value) -> ir.Value:
    name = "llvm.vector.reduce.add.v{}i32".format(v.type.count)
    fn = builder.module.globals.get(name) or ir.Function(
        builder.module, ir.FunctionType(I32, [v.type]), name)
    return builder.call(fn, [v])


@intrinsic
def load_f16(typingctx, w, offset):
    """The little-endian IEEE half at `w[offset:offset+2]` widened to float32 (exact;
    one vcvtph2ps where the CPU has F16C)."""
    def codegen(context, builder, signature, args):
        ptr = _ptr(context, builder, signature.args[0], args[0], args[1])
        bits = builder.load(builder.bitcast(ptr, ir.IntType(16).as_pointer()), align=1)
        return builder.fpext(builder.bitcast(bits, ir.HalfType()), F32)
    return types.float32(w, offset), codegen


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
    """Legacy 5-bit: nib16 plus bit j of the little-endian u32 at `qh_off` as bit 4."""
    off, qh_off = args
    low = nib16(builder, w, (off,))
    qh_ptr = builder.bitcast(builder.gep(w, [qh_off]), I32.as_pointer())
    qh = _splat(builder, builder.load(qh_ptr, align=1), 32)
    bits = builder.and_(builder.lshr(qh, _const(I32, range(32))), _const(I32, [1] * 32))
    high = builder.shl(builder.trunc(bits, _vec(I8, 32)), _const(I8, [4] * 32))
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


# layout -> (its extra argument types: "i" an int offset, "s" a shift amount)
LAYOUT_ARGS = {nib16: "i", nib16_qh: "ii", i8x32: "i", nib32: "is", nib32_hb: "isis",
               q6_16: "isis"}


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
    """(dot, deq) intrinsics for `layout`, codes minus `offset`."""
    kinds = LAYOUT_ARGS[layout]
    build = _minus(offset, layout) if offset else layout
    n_extra = len(kinds)

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

    return (_typer(3 + n_extra, types.int32, dot_codegen, "dot_" + name),
            _typer(5 + n_extra, types.void, deq_codegen, "deq_" + name))


dot_q4_0, deq_q4_0 = make_pair(nib16, "q4_0", 8)
dot_q4_1, deq_q4_1 = make_pair(nib16, "q4_1")
dot_q5_0, deq_q5_0 = make_pair(nib16_qh, "q5_0", 16)
dot_q5_1, deq_q5_1 = make_pair(nib16_qh, "q5_1")
dot_q8_0, deq_q8_0 = make_pair(i8x32, "q8_0")
dot_q4_k, deq_q4_k = make_pair(nib32, "q4_k")
dot_q5_k, deq_q5_k = make_pair(nib32_hb, "q5_k")
dot_q6_k, deq_q6_k = make_pair(q6_16, "q6_k")
