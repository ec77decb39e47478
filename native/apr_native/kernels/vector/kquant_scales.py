"""Block scales of the K-quant dots as vectors (numba intrinsics, LLVM IR): a Q4_K/Q5_K
block's eight 6-bit scales and mins, a Q6_K block's sixteen int8 group scales, each
decoded once per block and multiplied by the activation scales as 8-lane float32 vectors
(for the multi-token dots only by d and dmin: `k4_products`).

Why: decoded per 32-element run, with scalar bit operations, int-to-float conversions
and multiplies, they cost more than the run's integer dot (one thread, ns per 32
weights: Q4_K 4.01 -> 2.50, Q5_K 4.26 -> 2.65, Q6_K 3.87 -> 3.52). The products are the
float32 products the scalar decoding made, in the same order.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .llvm_ir import F32, I8, I32, _const, _load, _ptr, _splat, _vec
from .block_ir import f32x8


def _k4_codes(builder, raw):
    """The eight 6-bit scales and mins of a Q4_K/Q5_K block as two `<8 x i8>`, from
    `raw` (`<16 x i8>` loaded at its 12 scale bytes; ggml's get_scale_min_k4 layout)."""
    def pick(lanes):                                   # <8 x i8> of raw bytes
        return builder.shuffle_vector(raw, raw, _const(I32, lanes))

    def bits(v, shift, masks):
        if shift:
            v = builder.lshr(v, _const(I8, [shift] * 8))
        return builder.and_(v, _const(I8, masks))

    low = [63] * 4 + [15] * 4
    # j < 4: sc = b[j] & 63, mn = b[j+4] & 63
    # j >= 4: sc = (b[j+4] & 15) | (b[j-4] >> 6) << 4, mn = b[j+4] >> 4 | (b[j] >> 6) << 4
    upper = builder.shl(bits(pick([0] * 4 + [0, 1, 2, 3]), 6, [0] * 4 + [3] * 4),
                        _const(I8, [4] * 8))
    sc = builder.or_(bits(pick([0, 1, 2, 3, 8, 9, 10, 11]), 0, low), upper)
    upper = builder.shl(bits(pick([0] * 4 + [4, 5, 6, 7]), 6, [0] * 4 + [3] * 4),
                        _const(I8, [4] * 8))
    mn_lanes = pick([4, 5, 6, 7, 8, 9, 10, 11])
    mn = builder.or_(builder.or_(bits(mn_lanes, 0, [63] * 4 + [0] * 4),
                                 bits(mn_lanes, 4, [0] * 4 + [15] * 4)), upper)
    return sc, mn


def _k4_min_terms(context, builder, sig, dmin, dmin_at, xs, xs_at, xo, mn):
    """`(dmin mn_j) xs.flat[xo + j]` as `<8 x float>` (`dmin`, `xs` the arguments at
    `dmin_at`, `xs_at` of the intrinsic's signature `sig`, `mn` the mins' `<8 x i8>`)."""
    dmin = _splat(builder, context.cast(builder, dmin, sig.args[dmin_at], types.float32), 8)
    xs = _load(builder, _ptr(context, builder, sig.args[xs_at], xs, xo), 8, F32)
    return builder.fmul(builder.fmul(dmin, builder.uitofp(mn, _vec(F32, 8))), xs)


@intrinsic
def k4_scales8(typingctx, w, p, d, dmin, xd, xs, xo, out):
    """The 8 sub-block scales and mins of a Q4_K/Q5_K block, as vectors.

    `w[p:p+12]` holds eight 6-bit scales sc_j and mins mn_j (ggml's get_scale_min_k4
    layout); writes `out[j] = (d sc_j) xd.flat[xo + j]` for j < 8 and returns the f32x8
    of `(dmin mn_j) xs.flat[xo + j]`, the same float32 products the scalar decoding
    made, in one pass of byte shuffles instead of eight of scalar bit operations and
    conversions (the 16 bytes loaded from `p` stay inside the block)."""
    def codegen(context, builder, signature, args):
        w, p, d, dmin, xd, xs, xo, out = args
        sc, mn = _k4_codes(builder, _load(builder, _ptr(context, builder, signature.args[0],
                                                        w, p), 16))
        xd = _load(builder, _ptr(context, builder, signature.args[4], xd, xo), 8, F32)
        d = context.cast(builder, d, signature.args[2], types.float32)
        scales = builder.fmul(builder.fmul(_splat(builder, d, 8),
                                           builder.uitofp(sc, _vec(F32, 8))), xd)
        o_ptr = _ptr(context, builder, signature.args[7], out, ir.Constant(I32, 0))
        builder.store(scales, builder.bitcast(o_ptr, _vec(F32, 8).as_pointer()), align=4)
        return _k4_min_terms(context, builder, signature, dmin, 3, xs, 5, xo, mn)
    return f32x8(w, p, d, dmin, xd, xs, xo, out), codegen


@intrinsic
def k4_mins8(typingctx, w, p, dmin, xs, xo):
    """`k4_scales8`'s returned min terms alone (the int8 dots apply the scales as
    integers, `kquant_bytes`)."""
    def codegen(context, builder, signature, args):
        w, p, dmin, xs, xo = args
        _, mn = _k4_codes(builder, _load(builder, _ptr(context, builder, signature.args[0],
                                                       w, p), 16))
        return _k4_min_terms(context, builder, signature, dmin, 2, xs, 3, xo, mn)
    return f32x8(w, p, dmin, xs, xo), codegen


@intrinsic
def q6_scales16(typingctx, w, p, d, xd, xo, out):
    """The 16 group scales of a Q6_K block, as vectors: `w[p:p+16]` holds its int8 group
    scales sc_g (16 elements each, so groups 2r and 2r + 1 share run r's activation
    scale); writes `out[g] = (xd.flat[xo + g // 2] d) sc_g`, the float32 products the
    scalar decoding made, for g < 16."""
    def codegen(context, builder, signature, args):
        w, p, d, xd, xo, out = args
        raw = _load(builder, _ptr(context, builder, signature.args[0], w, p), 16)
        runs = _load(builder, _ptr(context, builder, signature.args[3], xd, xo), 8, F32)
        d = _splat(builder, context.cast(builder, d, signature.args[2], types.float32), 8)
        o_ptr = builder.bitcast(_ptr(context, builder, signature.args[5], out,
                                     ir.Constant(I32, 0)), _vec(F32, 8).as_pointer())
        for half in range(2):
            run = builder.shuffle_vector(runs, runs, _const(I32, [4 * half + g // 2
                                                                  for g in range(8)]))
            codes = builder.shuffle_vector(raw, raw, _const(I32, range(8 * half, 8 * half + 8)))
            scales = builder.fmul(builder.fmul(run, d), builder.sitofp(codes, _vec(F32, 8)))
            builder.store(scales, builder.gep(o_ptr, [ir.Constant(I32, half)]), align=4)
        return context.get_dummy_value()
    return types.void(w, p, d, xd, xo, out), codegen


@intrinsic
def k4_products(typingctx, w, p, d, dmin, out):
    """`out[j] = d sc_j` and `out[8 + j] = dmin mn_j` (j < 8) for the Q4_K/Q5_K block
    whose scale bytes are at `w[p:p+12]`: the float32 products `k4_scales8` forms before
    it multiplies them by a token's scales (the multi-token dots apply them to many)."""
    def codegen(context, builder, signature, args):
        w, p, d, dmin, out = args
        sc, mn = _k4_codes(builder, _load(builder, _ptr(context, builder, signature.args[0],
                                                        w, p), 16))
        o_ptr = builder.bitcast(_ptr(context, builder, signature.args[4], out,
                                     ir.Constant(I32, 0)), _vec(F32, 8).as_pointer())
        for i, (scale, codes) in enumerate(((d, sc), (dmin, mn))):
            scale = context.cast(builder, scale, signature.args[2 + i], types.float32)
            value = builder.fmul(_splat(builder, scale, 8), builder.uitofp(codes, _vec(F32, 8)))
            builder.store(value, builder.gep(o_ptr, [ir.Constant(I32, i)]), align=4)
        return context.get_dummy_value()
    return types.void(w, p, d, dmin, out), codegen
