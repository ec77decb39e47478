"""LLVM IR building blocks for the numba intrinsics of `block_ir` and `kquant_scales`: vector
types and constants, unaligned loads, lane-wise shift-and-mask, FMA, x86 `pmaddwd` pair
sums and the host-CPU feature probes that choose between them.
"""
from __future__ import annotations

from llvmlite import ir

from ... import isa

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


def _fmuladd(builder: ir.IRBuilder, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
    """a * b + c lane-wise, fused where the CPU has FMA (llvm.fmuladd)."""
    name = "llvm.fmuladd.v{}f32".format(a.type.count)
    fn = builder.module.globals.get(name) or ir.Function(
        builder.module, ir.FunctionType(a.type, [a.type] * 3), name)
    return builder.call(fn, [a, b, c])


def _pmaddwd(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    """x86 `pmaddwd` of two `<16 x i16>`: adjacent products summed, `<8 x i32>` (only
    where `_PMADDWD` is set)."""
    fn = builder.module.globals.get(_PMADDWD) or ir.Function(
        builder.module, ir.FunctionType(_vec(I32, 8), [_vec(I16, 16)] * 2), _PMADDWD)
    return builder.call(fn, [a, b])


def _fold_pairs(builder: ir.IRBuilder, codes: ir.Value, x: ir.Value) -> ir.Value:
    """`<n x i8>` or `<n x i16>` codes times `<n x i16>` activations folded to
    `<8 x i32>`: adjacent pairs first (x86 `pmaddwd` where the CPU has it), then halves,
    so lane j holds the pair sums j, j + 8, ... (integers: exact in any order)."""
    n = codes.type.count
    if _PMADDWD is not None and n % 16 == 0:
        c16 = codes if codes.type.element == I16 else builder.sext(codes, _vec(I16, n))
        parts = []
        for i in range(0, n, 16):
            pick = _const(I32, range(i, i + 16))
            parts.append(_pmaddwd(builder, builder.shuffle_vector(c16, c16, pick),
                                  builder.shuffle_vector(x, x, pick)))
        total = parts[0]
        for part in parts[1:]:
            total = builder.add(total, part)
        return total
    wide = _vec(I32, n)
    prod = builder.mul(builder.sext(codes, wide), builder.sext(x, wide))
    s = builder.add(builder.shuffle_vector(prod, prod, _const(I32, range(0, n, 2))),
                    builder.shuffle_vector(prod, prod, _const(I32, range(1, n, 2))))
    while s.type.count > 8:
        half = s.type.count // 2
        s = builder.add(builder.shuffle_vector(s, s, _const(I32, range(half))),
                        builder.shuffle_vector(s, s, _const(I32, range(half, 2 * half))))
    return s


def _host_has(feature: str) -> bool:
    """Whether the kernels may use `feature` ("avx2", "f16c"): the host CPU has it and
    the instruction level numba compiles for ($APR_ISA, `apr_native.isa`) includes it.
    A non-x86 host or an llvmlite without the query gets the generic IR."""
    return isa.has(feature)


# The AVX2 pmaddwd intrinsic where the host has it: LLVM does not always find pmaddwd in
# the generic even/odd pattern.
_PMADDWD = "llvm.x86.avx2.pmadd.wd" if _host_has("avx2") else None


# The AVX2 byte dots (int8 activations, `block_ir`'s acc over `int8` codes): pmaddubsw
# multiplies unsigned by signed bytes into int16 pair sums, psignb moves signed codes' signs
# onto the activations.
_BYTE_DOTS = _host_has("avx2")


def _x86(builder: ir.IRBuilder, name: str, ret: ir.Type, args) -> ir.Value:
    fn = builder.module.globals.get(name) or ir.Function(
        builder.module, ir.FunctionType(ret, [a.type for a in args]), name)
    return builder.call(fn, list(args))


def _byte_words(builder: ir.IRBuilder, codes: ir.Value, x: ir.Value, signed: bool) -> ir.Value:
    """`<n x i8>` codes (unsigned bytes unless `signed`) times `<n x i8>` signed `x`,
    adjacent products summed: `<n/2 x i16>`, lane j = elements 2j, 2j + 1, exact while
    each pair sum fits int16 (pmaddubsw saturates): |code| <= 128 with activations |x| <=
    127, or the Q6_K group dots' offset activations (<= 255) as the unsigned codes times
    weight codes |x| <= 32. AVX2: psignb (signed codes' signs moved onto `x`) +
    pmaddubsw; elsewhere generic IR."""
    n = codes.type.count
    if _BYTE_DOTS:
        sfx, tail = ("avx2", "") if n == 32 else ("ssse3", ".128")
        if signed:
            x = _x86(builder, "llvm.x86.{}.psign.b{}".format(sfx, tail), codes.type, [x, codes])
            codes = _x86(builder, "llvm.x86.{}.psign.b{}".format(sfx, tail), codes.type,
                         [codes, codes])
        return _x86(builder, "llvm.x86.{}.pmadd.ub.sw{}".format(sfx, tail), _vec(I16, n // 2),
                    [codes, x])
    ext = builder.sext if signed else builder.zext
    prod = builder.mul(ext(codes, _vec(I32, n)), builder.sext(x, _vec(I32, n)))
    pairs = builder.add(builder.shuffle_vector(prod, prod, _const(I32, range(0, n, 2))),
                        builder.shuffle_vector(prod, prod, _const(I32, range(1, n, 2))))
    return builder.trunc(pairs, _vec(I16, n // 2))


def _madd_words(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    """`<16 x i16>` a * b, adjacent products summed: `<8 x i32>` (x86 pmaddwd where the
    CPU has it, else the same sums in generic IR)."""
    if _PMADDWD is not None:
        return _pmaddwd(builder, a, b)
    prod = builder.mul(builder.sext(a, _vec(I32, 16)), builder.sext(b, _vec(I32, 16)))
    return builder.add(builder.shuffle_vector(prod, prod, _const(I32, range(0, 16, 2))),
                       builder.shuffle_vector(prod, prod, _const(I32, range(1, 16, 2))))


def _byte_pairs(builder: ir.IRBuilder, codes: ir.Value, x: ir.Value, signed: bool) -> ir.Value:
    """`_byte_words` folded to `<8 x i32>`: for n = 32 lane j holds elements 4j..4j+3
    (pmaddwd by ones), for n = 16 elements 2j, 2j+1 (a sign extension)."""
    words = _byte_words(builder, codes, x, signed)
    if codes.type.count == 32:
        return _madd_words(builder, words, _const(I16, [1] * 16))
    return builder.sext(words, _vec(I32, 8))


def _asm_ready() -> bool:
    """Inline assembly needs the native asm parser, which numba does not load."""
    try:
        import llvmlite.binding as llvm
        llvm.initialize_native_asmparser()
        return True
    except Exception:  # pragma: no cover - an llvmlite built without it
        return False


# (the parser is needed at every level: `atomics` pauses its spin loops with inline asm)
_ASM = _asm_ready()
_F16C = _host_has("f16c") and _ASM

# AVX2 without AVX-512: the word layouts take the forms that spare the two shuffle pipes
# (`block_ir.nib16_words`, `nib16_qh_words`); an AVX-512 host keeps the mask-register forms
# it was tuned and measured with.
_AVX2_WORDS = _host_has("avx2") and not _host_has("avx512bw") and _ASM


def _reduce_add(builder: ir.IRBuilder, v: ir.Value) -> ir.Value:
    name = "llvm.vector.reduce.add.v{}i32".format(v.type.count)
    fn = builder.module.globals.get(name) or ir.Function(
        builder.module, ir.FunctionType(I32, [v.type]), name)
    return builder.call(fn, [v])
