"""The word forms of the legacy 4- and 5-bit layouts (`block_ir.nib16`, `nib16_qh`) for the
int16 dots: a block's 32 codes as two `<16 x i16>` halves (elements 0-15 and 16-31) ready
for pmaddwd, with no byte unpacking or sign extension left. `block_ir.WORD_LAYOUTS` maps
each byte layout to its word form here.

At AVX2 without AVX-512 (`llvm_ir._AVX2_WORDS`) they spare the two shuffle pipes, which
bound the Q5_0 loop (llvm-mca Zen 3: 6.6-7.1 cycles a block, 33 instructions): the bytes
become words by one `vpshufb` instead of the lane-crossing `vpmovzxbw`, and the fifth bits
are a table lookup instead of a broadcast, an and, a compare and an and per half. One
thread, rows in L2, ns a block: Q4_0 2.46 -> 1.97, Q4_1 2.55 -> 2.10, Q5_0 3.17 -> 2.71,
Q5_1 3.92 -> 2.98. Every form gives the same codes, so every product and sum keeps its
bits.
"""
from __future__ import annotations

from llvmlite import ir

from .llvm_ir import I8, I16, I32, _AVX2_WORDS, _const, _load, _vec


def _lane_mask(builder: ir.IRBuilder, word: ir.Value) -> ir.Value:
    """An iN word as `<N x i1>`: bit j -> lane j (on little-endian targets)."""
    return builder.bitcast(word, _vec(ir.IntType(1), word.type.width))


def _u32(builder: ir.IRBuilder, w: ir.Value, off: ir.Value) -> ir.Value:
    """The (unaligned, little-endian) u32 at byte `off`."""
    return builder.load(builder.bitcast(builder.gep(w, [off]), I32.as_pointer()), align=1)


def _byte_shuffle(builder: ir.IRBuilder, v: ir.Value, picks) -> ir.Value:
    """`<32 x i8>` v's bytes picked within each 128-bit half (`picks[k]` the byte of k's
    half, -1 a zero) as `<16 x i16>`: one vpshufb, kept opaque (inline asm) so that LLVM
    cannot turn it back into the lane-crossing extension it amounts to."""
    mask = _const(I8, [-128 if p < 0 else p % 16 for p in picks])
    asm = ir.InlineAsm(ir.FunctionType(_vec(I8, 32), [_vec(I8, 32)] * 2),
                       "vpshufb $2, $1, $0", "=x,x,x")
    return builder.bitcast(builder.call(asm, [v, mask]), _vec(I16, 16))


def nib16_words(builder, w, args, offset=0):
    """nib16 for the dots, as two `<16 x i16>` halves (elements 0-15 and 16-31) minus
    `offset`: the 16 code bytes as words (word k of the low 128 bits byte k, of the high
    128 bits byte 8 + k), masked or shifted in place, so no byte unpacking or sign
    extension is left before pmaddwd (Q4_0: 2.62 -> 2.21 ns a block on one thread; Q4_1
    unchanged). At AVX2 the words are a vpshufb of the bytes broadcast to both 128-bit
    halves (one shuffle uop) rather than vpmovzxbw (lane-crossing: three cycles of the two
    shuffle pipes at Zen 3), which LLVM picks for the same zero extension."""
    (off,) = args
    raw = _load(builder, builder.gep(w, [off]), 16)
    if _AVX2_WORDS:
        both = builder.shuffle_vector(raw, raw, _const(I32, list(range(16)) * 2))
        words = _byte_shuffle(builder, both, [k // 2 if k % 2 == 0 else -1 for k in range(32)])
    else:
        words = builder.zext(raw, _vec(I16, 16))
    halves = [builder.and_(words, _const(I16, [15] * 16)),
              builder.lshr(words, _const(I16, [4] * 16))]
    if offset:
        halves = [builder.sub(half, _const(I16, [offset] * 16)) for half in halves]
    return halves


def _fifth_bit_words(builder: ir.IRBuilder, offset: int) -> ir.Value:
    """The module's constant table `[256 x <8 x i16>]`: entry b, lane j is 16 - `offset`
    where bit j of b is set, else -`offset` (a qh byte's fifth bits as words, the type's
    offset folded in)."""
    name = "apr_fifth_bit_words_{}".format(offset)
    table = builder.module.globals.get(name)
    if table is None:
        ty = ir.ArrayType(_vec(I16, 8), 256)
        table = ir.GlobalVariable(builder.module, ty, name)
        table.global_constant = True
        table.linkage = "internal"
        table.align = 16
        table.initializer = ir.Constant(ty, [
            _const(I16, [(16 if b >> j & 1 else 0) - offset for j in range(8)])
            for b in range(256)])
    return table


def nib16_qh_words(builder, w, args, offset=0):
    """nib16_qh for the dots, as two `<16 x i16>` halves minus `offset`: nib16_words plus,
    per 8 lanes, the entry of `_fifth_bit_words` its qh byte selects.

    A lookup, not arithmetic: spreading a 16-bit qh half over 16 word lanes took a move,
    a broadcast, an and, a compare, an and and an or per half at AVX2 (11 of a Q5_0
    block's 23 vector uops, llvm-mca Zen 3, most on the two shuffle pipes), where two
    table loads, one insert and one add do it (the offset is in the table). The codes, so
    every product and sum, are the same."""
    off, qh_off = args
    if not _AVX2_WORDS:           # AVX-512 (a mask move and a masked blend a half), generic
        qh = _u32(builder, w, qh_off)
        out = []
        for i, half in enumerate(nib16_words(builder, w, (off,))):
            bits = builder.trunc(builder.lshr(qh, ir.Constant(I32, 16 * i)), I16)
            code = builder.or_(half, builder.select(_lane_mask(builder, bits),
                                                    _const(I16, [16] * 16), _const(I16, [0] * 16)))
            out.append(builder.sub(code, _const(I16, [offset] * 16)) if offset else code)
        return out
    halves = nib16_words(builder, w, (off,))
    table = _fifth_bit_words(builder, offset)
    zero = ir.Constant(I32, 0)
    out = []
    for i, half in enumerate(halves):
        words = []
        for k in (2 * i, 2 * i + 1):
            at = builder.add(qh_off, ir.Constant(qh_off.type, k))
            byte = builder.zext(builder.load(builder.gep(w, [at])), I32)
            words.append(builder.load(builder.gep(table, [zero, byte]), align=16))
        out.append(builder.add(half, builder.shuffle_vector(words[0], words[1],
                                                            _const(I32, range(16)))))
    return out
