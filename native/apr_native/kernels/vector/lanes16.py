"""16-lane float32 vector values for the blocked attention kernel (`paged_attention`): numba
intrinsics over LLVM `<16 x float>` (one zmm register with AVX-512, two ymm with AVX2).

Why: the attention tiles are small matrix products (score tile = K block . Q^T, output
tile += V block^T . P) whose accumulators must stay in registers across the reduction
loop. Written as numba loops over scratch arrays, LLVM keeps them in memory (it cannot
prove the scratch arrays do not alias), a store-load chain per FMA. As values of type
`f32x16` they are SSA values the register allocator keeps in registers.

Arrays are addressed by a flat element offset (`arr.ctypes.data` + offset * itemsize,
C order); nothing is bounds-checked, as in numba's own array code. The KV row decoders
read a byte array at a byte offset (`*_b` functions): one compiled kernel serves every
KV storage type.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import datamodel
from numba.extending import intrinsic, register_model

from .llvm_ir import F32, I8, I32, _const, _fmuladd, _ptr, _splat, _vec

LANES = 16
V16 = _vec(F32, LANES)
HALF = ir.HalfType()


class F32x16(types.Type):
    """numba type of a 16-lane float32 vector (an LLVM `<16 x float>` value)."""

    def __init__(self) -> None:
        super().__init__(name="f32x16")


f32x16 = F32x16()


@register_model(F32x16)
class _F32x16Model(datamodel.models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, V16)


def _byte_ptr(context, builder, arrty, arr, offset, elem):
    """`elem*` at byte `offset` of a uint8 array's data."""
    return builder.bitcast(_ptr(context, builder, arrty, arr, offset), elem.as_pointer())


@intrinsic
def vzero(typingctx):
    """An `f32x16` of zeros."""
    def codegen(context, builder, signature, args):
        return ir.Constant(V16, [0.0] * LANES)
    return f32x16(), codegen


@intrinsic
def vsplat(typingctx, x):
    """`x` (a float32) in every lane."""
    def codegen(context, builder, signature, args):
        return _splat(builder, args[0], LANES)
    return f32x16(types.float32), codegen


@intrinsic
def vload(typingctx, arr, offset):
    """Lanes `arr.flat[offset : offset + 16]` of a float32 array."""
    def codegen(context, builder, signature, args):
        ptr = _ptr(context, builder, signature.args[0], args[0], args[1])
        return builder.load(builder.bitcast(ptr, V16.as_pointer()), align=4)
    return f32x16(arr, offset), codegen


@intrinsic
def vstore(typingctx, arr, offset, v):
    """`arr.flat[offset : offset + 16] = v` for a float32 array."""
    def codegen(context, builder, signature, args):
        ptr = _ptr(context, builder, signature.args[0], args[0], args[1])
        builder.store(args[2], builder.bitcast(ptr, V16.as_pointer()), align=4)
        return context.get_dummy_value()
    return types.none(arr, offset, v), codegen


@intrinsic
def vfma(typingctx, a, b, c):
    """`a * b + c` lane-wise (fused where the CPU has FMA)."""
    def codegen(context, builder, signature, args):
        return _fmuladd(builder, *args)
    return f32x16(a, b, c), codegen


@intrinsic
def vmul(typingctx, a, b):
    """`a * b` lane-wise."""
    def codegen(context, builder, signature, args):
        return builder.fmul(args[0], args[1])
    return f32x16(a, b), codegen


@intrinsic
def vadd(typingctx, a, b):
    """`a + b` lane-wise."""
    def codegen(context, builder, signature, args):
        return builder.fadd(args[0], args[1])
    return f32x16(a, b), codegen


@intrinsic
def vsub(typingctx, a, b):
    """`a - b` lane-wise."""
    def codegen(context, builder, signature, args):
        return builder.fsub(args[0], args[1])
    return f32x16(a, b), codegen


@intrinsic
def vmax(typingctx, a, b):
    """`a if a > b else b` lane-wise (b where either is NaN)."""
    def codegen(context, builder, signature, args):
        return builder.select(builder.fcmp_ordered(">", args[0], args[1]), args[0], args[1])
    return f32x16(a, b), codegen


def _repeat(builder, arr_ptr, width: int) -> ir.Value:
    """The `width` float32 values at `arr_ptr` repeated over the 16 lanes."""
    part = builder.load(builder.bitcast(arr_ptr, _vec(F32, width).as_pointer()), align=4)
    return builder.shuffle_vector(part, part, _const(I32, list(range(width)) * (LANES // width)))


@intrinsic
def vbcast2(typingctx, arr, offset):
    """`arr.flat[offset : offset + 2]` repeated over the lanes (lane l holds element l % 2)."""
    def codegen(context, builder, signature, args):
        return _repeat(builder, _ptr(context, builder, signature.args[0], args[0], args[1]), 2)
    return f32x16(arr, offset), codegen


@intrinsic
def vbcast4(typingctx, arr, offset):
    """`arr.flat[offset : offset + 4]` repeated over the lanes (lane l holds element l % 4)."""
    def codegen(context, builder, signature, args):
        return _repeat(builder, _ptr(context, builder, signature.args[0], args[0], args[1]), 4)
    return f32x16(arr, offset), codegen


def _swap(builder, v, width: int) -> ir.Value:
    """`v` with each run of `width` lanes exchanged with its neighbour run."""
    order = [lane ^ width for lane in range(LANES)]
    return builder.shuffle_vector(v, v, _const(I32, order))


@intrinsic
def vswap1(typingctx, v):
    """Lanes exchanged pairwise: lane l holds lane l ^ 1."""
    def codegen(context, builder, signature, args):
        return _swap(builder, args[0], 1)
    return f32x16(v), codegen


@intrinsic
def vswap2(typingctx, v):
    """Pairs of lanes exchanged: lane l holds lane l ^ 2."""
    def codegen(context, builder, signature, args):
        return _swap(builder, args[0], 2)
    return f32x16(v), codegen


def _c16(value: float) -> ir.Constant:
    return ir.Constant(V16, [value] * LANES)


# Cephes expf (as apr_native.kernels.vector.fastexp.exp_f32, the same constants and order).
_EXP_LO, _EXP_HI, _LOG2E, _ROUND = -87.0, 88.0, 1.44269504088896341, 12582912.0
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4
_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
      1.6666665459e-1, 5.0000001201e-1)


@intrinsic
def vexp0(typingctx, x):
    """e**x lane-wise (fastexp's Cephes expf, <= 1 ulp), exactly 0 where x <= -87 or NaN
    (masked scores: -inf, -inf - -inf)."""
    def codegen(context, builder, signature, args):
        b = builder
        x = args[0]
        live = b.fcmp_ordered(">", x, _c16(_EXP_LO))
        v = b.select(b.fcmp_ordered(">", x, _c16(_EXP_HI)), _c16(_EXP_HI), x)
        v = b.select(live, v, _c16(_EXP_LO))
        n = b.fsub(b.fadd(b.fmul(v, _c16(_LOG2E)), _c16(_ROUND)), _c16(_ROUND))
        r = b.fsub(v, b.fmul(n, _c16(_LN2_HI)))
        r = b.fsub(r, b.fmul(n, _c16(_LN2_LO)))
        p = _c16(_P[0])
        for c in _P[1:]:
            p = b.fadd(b.fmul(p, r), _c16(c))
        p = b.fadd(b.fadd(b.fmul(p, b.fmul(r, r)), r), _c16(1.0))
        bits = b.shl(b.add(b.fptosi(n, _vec(I32, LANES)), ir.Constant(_vec(I32, LANES),
                                                                      [127] * LANES)),
                     ir.Constant(_vec(I32, LANES), [23] * LANES))
        e = b.fmul(p, b.bitcast(bits, V16))
        return b.select(live, e, _c16(0.0))
    return f32x16(x), codegen


# ------------------------------------------------------------------ KV row decoders
# Each writes 16 or 32 float32 values of a stored row into `out.flat[oo ...]`, decoding
# exactly as apr_core's numpy dequantizers (one float32 product per value).

@intrinsic
def f32_row16_b(typingctx, w, wo, out, oo):
    """16 float32 values stored at byte `wo` of `w` -> `out.flat[oo:oo+16]`."""
    def codegen(context, builder, signature, args):
        src = _byte_ptr(context, builder, signature.args[0], args[0], args[1], V16)
        dst = _ptr(context, builder, signature.args[2], args[2], args[3])
        builder.store(builder.load(src, align=1), builder.bitcast(dst, V16.as_pointer()),
                      align=4)
        return context.get_dummy_value()
    return types.none(w, wo, out, oo), codegen


@intrinsic
def f16_row16_b(typingctx, w, wo, out, oo):
    """16 IEEE halves at byte `wo` of `w` widened (exactly) -> `out.flat[oo:oo+16]`."""
    def codegen(context, builder, signature, args):
        src = _byte_ptr(context, builder, signature.args[0], args[0], args[1],
                        _vec(HALF, LANES))
        dst = _ptr(context, builder, signature.args[2], args[2], args[3])
        wide = builder.fpext(builder.load(src, align=1), V16)
        builder.store(wide, builder.bitcast(dst, V16.as_pointer()), align=4)
        return context.get_dummy_value()
    return types.none(w, wo, out, oo), codegen


def _half_at(builder, w_ptr):
    return builder.fpext(builder.load(builder.bitcast(w_ptr, HALF.as_pointer()), align=1), F32)


@intrinsic
def q8_0_block_b(typingctx, w, wo, out, oo):
    """The Q8_0 block (f16 d, 32 int8 q) at byte `wo` -> `out.flat[oo:oo+32]` = q * d."""
    def codegen(context, builder, signature, args):
        base = _ptr(context, builder, signature.args[0], args[0], args[1])
        d = _splat(builder, _half_at(builder, base), 32)
        codes = builder.load(builder.bitcast(builder.gep(base, [ir.Constant(I32, 2)]),
                                             _vec(I8, 32).as_pointer()), align=1)
        vals = builder.fmul(builder.sitofp(codes, _vec(F32, 32)), d)
        dst = _ptr(context, builder, signature.args[2], args[2], args[3])
        builder.store(vals, builder.bitcast(dst, _vec(F32, 32).as_pointer()), align=4)
        return context.get_dummy_value()
    return types.none(w, wo, out, oo), codegen


@intrinsic
def q4_0_block_b(typingctx, w, wo, out, oo):
    """The Q4_0 block (f16 d, 16 bytes: element j low nibble, j + 16 high) at byte `wo`
    -> `out.flat[oo:oo+32]` = (q - 8) * d."""
    def codegen(context, builder, signature, args):
        base = _ptr(context, builder, signature.args[0], args[0], args[1])
        d = _splat(builder, _half_at(builder, base), 32)
        packed = builder.load(builder.bitcast(builder.gep(base, [ir.Constant(I32, 2)]),
                                              _vec(I8, 16).as_pointer()), align=1)
        both = builder.shuffle_vector(packed, packed, _const(I32, list(range(16)) * 2))
        shifts = _const(I8, [0] * 16 + [4] * 16)
        nib = builder.and_(builder.lshr(both, shifts), _const(I8, [15] * 32))
        centred = builder.sub(nib, _const(I8, [8] * 32))
        vals = builder.fmul(builder.sitofp(centred, _vec(F32, 32)), d)
        dst = _ptr(context, builder, signature.args[2], args[2], args[3])
        builder.store(vals, builder.bitcast(dst, _vec(F32, 32).as_pointer()), align=4)
        return context.get_dummy_value()
    return types.none(w, wo, out, oo), codegen


@intrinsic
def f16_bits(typingctx, x):
    """The IEEE half nearest `x` (ties to even, overflow to inf) as its uint16 bits."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.fptrunc(args[0], HALF), ir.IntType(16))
    return types.uint16(types.float32), codegen


@intrinsic
def f16_value(typingctx, bits):
    """The float32 value of the IEEE half with uint16 `bits` (exact)."""
    def codegen(context, builder, signature, args):
        return builder.fpext(builder.bitcast(args[0], HALF), F32)
    return types.float32(types.uint16), codegen


@intrinsic
def put_f32_b(typingctx, w, wo, x):
    """Store the float32 `x` at byte `wo` of the uint8 array `w`."""
    def codegen(context, builder, signature, args):
        builder.store(args[2], _byte_ptr(context, builder, signature.args[0], args[0],
                                         args[1], F32), align=1)
        return context.get_dummy_value()
    return types.none(w, wo, types.float32), codegen


@intrinsic
def put_u16_b(typingctx, w, wo, bits):
    """Store the uint16 `bits` (little-endian) at byte `wo` of the uint8 array `w`."""
    def codegen(context, builder, signature, args):
        builder.store(args[2], _byte_ptr(context, builder, signature.args[0], args[0],
                                         args[1], ir.IntType(16)), align=1)
        return context.get_dummy_value()
    return types.none(w, wo, types.uint16), codegen


__all__ = ["f32x16", "LANES", "vzero", "vsplat", "vload", "vstore", "vfma", "vmul", "vadd",
           "vsub", "vmax", "vexp0", "vbcast2", "vbcast4", "vswap1", "vswap2",
           "f32_row16_b", "f16_row16_b", "q8_0_block_b", "q4_0_block_b", "f16_bits",
           "f16_value", "put_f32_b", "put_u16_b"]
