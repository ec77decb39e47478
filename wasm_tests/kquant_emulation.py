"""The float32 arithmetic of the shell's block kernels (web/src/kernels/matmul_k.c, exact, and
matmul_r.c, relaxed SIMD over activations rounded to int16 codes held as two int8 terms)
replayed in numpy, from the GGUF block layouts as ggml's reference `dequantize_row_*` loops
read them (not from the kernel):
integer codes, per-sub-block scales and mins, then the kernel's steps in its order.
wasm_tests/test_kquant_kernel.py holds the kernel to this bit for bit, and this to gguf-py's
dequantization within a derived bound.
"""
import numpy as np

from quant_emulation import split_activations

f32 = np.float32
# dtype name -> (kind code of apr_webkernel.QUANTIZED, bytes per block, columns per block)
LAYOUT = {"Q4_0": (10, 18, 32), "Q4_1": (1, 20, 32), "Q8_0": (2, 34, 32), "Q5_0": (3, 22, 32), "Q5_1": (4, 24, 32), "Q2_K": (5, 84, 256),
          "Q3_K": (6, 110, 256), "Q4_K": (7, 144, 256), "Q5_K": (8, 176, 256),
          "Q6_K": (9, 210, 256)}
OFFSET = ("Q4_1", "Q5_1")  # w = d q + m (the K-quants subtract their mins)
# Where each type keeps its f16 scales (offsets in a block)
HALVES = {"Q4_0": (0,), "Q4_1": (0, 2), "Q8_0": (0,), "Q5_0": (0,), "Q5_1": (0, 2), "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2),
          "Q5_K": (0, 2), "Q6_K": (208,)}


def _half(blocks, at):
    return np.ascontiguousarray(blocks[..., at:at + 2]).view("<f2")[..., 0].astype(f32)


def _bits(values, count):
    """Bit i of each value -> [..., count] (0/1), i = 0..count-1."""
    return (values[..., None].astype(np.int64) >> np.arange(count)) & 1


def _q4_q8(blocks, name):
    """Q4_0 / Q4_1 / Q8_0 `[rows, nb, width]` -> codes `[rows, nb, 32]`, scale, min."""
    d = _half(blocks, 0)[..., None]
    if name == "Q8_0":
        return blocks[..., 2:].view(np.int8).astype(np.int64), d, None
    qs = blocks[..., 4 if name == "Q4_1" else 2:].astype(np.int64)       # [rows, nb, 16]
    codes = np.concatenate([qs & 15, qs >> 4], axis=-1)
    if name == "Q4_0":
        return codes - 8, d, None
    return codes, d, _half(blocks, 2)[..., None]


def _q5(blocks, with_min):
    """Q5_0 / Q5_1 `[rows, nb, width]` -> codes `[rows, nb, 32]`, scale, min `[rows, nb, 1]`."""
    qs = blocks[..., 8 if with_min else 6:].astype(np.int64)                # [rows, nb, 16]
    at = 4 if with_min else 2
    qh = np.ascontiguousarray(blocks[..., at:at + 4]).view("<u4")[..., 0]
    codes = np.concatenate([qs & 15, qs >> 4], axis=-1) | (_bits(qh, 32) << 4)
    if not with_min:
        codes = codes - 16
    d = _half(blocks, 0)[..., None]
    return codes, d, (_half(blocks, 2)[..., None] if with_min else np.zeros_like(d))


def _scale_min_k4(packed):
    """Q4_K/Q5_K 12 packed bytes `[..., 12]` -> scales, mins `[..., 8]` (get_scale_min_k4)."""
    q = packed.astype(np.int64)
    scale = np.concatenate([q[..., 0:4] & 63, (q[..., 8:12] & 15) | ((q[..., 0:4] >> 6) << 4)], -1)
    mins = np.concatenate([q[..., 4:8] & 63, (q[..., 8:12] >> 4) | ((q[..., 4:8] >> 6) << 4)], -1)
    return scale, mins


def _q45_k(blocks, five):
    """Q4_K / Q5_K superblocks `[rows, ns, width]` -> codes `[rows, ns * 8, 32]` and scale,
    min `[rows, ns * 8, 1]`: chunk c's low nibbles are sub-block 2c, its high nibbles 2c+1."""
    rows, ns = blocks.shape[:2]
    qs = blocks[..., 48 if five else 16:].astype(np.int64).reshape(rows, ns, 4, 32)
    codes = np.stack([qs & 15, qs >> 4], axis=3).reshape(rows, ns, 8, 32)
    if five:
        qh = blocks[..., 16:48].astype(np.int64)                             # [rows, ns, 32]
        codes = codes | (((qh[:, :, None, :] >> np.arange(8)[:, None]) & 1) << 4)
    scale, mins = _scale_min_k4(blocks[..., 4:16])
    d, dmin = _half(blocks, 0)[..., None], _half(blocks, 2)[..., None]
    return (codes.reshape(rows, ns * 8, 32), (d * scale.astype(f32)).reshape(rows, -1, 1),
            (dmin * mins.astype(f32)).reshape(rows, -1, 1))


def _q6_k(blocks):
    """Q6_K `[rows, ns, 210]` -> codes `[rows, ns * 8, 32]`, scales `[rows, ns * 8, 2]`."""
    rows, ns = blocks.shape[:2]
    ql = blocks[..., :128].astype(np.int64).reshape(rows, ns, 2, 64)
    qh = blocks[..., 128:192].astype(np.int64).reshape(rows, ns, 2, 32)
    parts = [(ql[..., :32] & 15) | ((qh & 3) << 4), (ql[..., 32:] & 15) | (((qh >> 2) & 3) << 4),
             (ql[..., :32] >> 4) | (((qh >> 4) & 3) << 4), (ql[..., 32:] >> 4) | (((qh >> 6) & 3) << 4)]
    codes = np.stack(parts, axis=3).reshape(rows, ns * 8, 32) - 32          # l + 32 g
    scales = blocks[..., 192:208].view(np.int8).astype(f32)                 # [rows, ns, 16]
    return codes, (_half(blocks, 208)[..., None] * scales).reshape(rows, -1, 2), None


def _q3_scales(packed):
    """Q3_K's 12 packed bytes -> sixteen 6-bit scales minus 32 (the kmask unpacking)."""
    q = packed.astype(np.int64)
    low = np.concatenate([q[..., 0:8] & 15, q[..., 0:8] >> 4], -1)
    high = np.concatenate([(q[..., 8:12] >> shift) & 3 for shift in (0, 2, 4, 6)], -1)
    return (low | (high << 4)) - 32


def _q23_k(blocks, three):
    """Q2_K / Q3_K `[rows, ns, width]` -> codes `[rows, ns * 8, 32]`, scales and mins
    `[rows, ns * 8, 2]`: block 4n + j takes bits 2j..2j+1 of qs[32n..32n+31]."""
    rows, ns = blocks.shape[:2]
    qs = blocks[..., 32 if three else 16:][..., :64].astype(np.int64).reshape(rows, ns, 2, 1, 32)
    codes = (qs >> (2 * np.arange(4))[:, None]) & 3                         # [rows, ns, 2, 4, 32]
    if three:
        hmask = blocks[..., :32].astype(np.int64)[:, :, None, None, :]
        bit = (np.arange(2)[:, None] * 4 + np.arange(4))[..., None]          # 4n + j
        codes = codes - 4 * (1 - ((hmask >> bit) & 1))
        scale = _half(blocks, 108)[..., None] * _q3_scales(blocks[..., 96:108]).astype(f32)
        return codes.reshape(rows, ns * 8, 32), scale.reshape(rows, -1, 2), None
    packed = blocks[..., :16].astype(np.int64)
    scale = _half(blocks, 80)[..., None] * (packed & 15).astype(f32)
    mins = _half(blocks, 82)[..., None] * (packed >> 4).astype(f32)
    return codes.reshape(rows, ns * 8, 32), scale.reshape(rows, -1, 2), mins.reshape(rows, -1, 2)


def codes_and_scales(data, name, shape):
    """GGUF bytes of a `shape` weight -> codes `[rows, nb, 32]` (int64), scales and mins
    `[rows, nb, sub]` float32 (sub = 1 or 2 sub-blocks per 32 columns; mins None if none)."""
    _, width, cols = LAYOUT[name]
    rows = shape[0]
    blocks = np.asarray(data, np.uint8).reshape(rows, shape[1] // cols, width)
    if name in ("Q4_0", "Q4_1", "Q8_0"):
        return _q4_q8(blocks, name)
    if name in ("Q5_0", "Q5_1"):
        codes, scale, mins = _q5(blocks, name == "Q5_1")
        return codes, scale, (mins if name == "Q5_1" else None)
    if name in ("Q4_K", "Q5_K"):
        return _q45_k(blocks, name == "Q5_K")
    if name == "Q6_K":
        return _q6_k(blocks)
    return _q23_k(blocks, name == "Q3_K")


def dequantized(data, name, shape):
    """The weights as the codes and scales say: scale * q - min (+ min for Q5_1) float64."""
    codes, scale, mins = codes_and_scales(data, name, shape)
    rows, nb, _ = codes.shape
    sub = scale.shape[-1]
    w = codes.reshape(rows, nb, sub, -1) * scale.astype(np.float64)[..., None]
    if mins is not None:
        w = w + (1 if name in OFFSET else -1) * mins.astype(np.float64)[..., None]
    return w.reshape(shape)


def int8_activations(x):
    """matmul_r.c's quantize_x8: x `[T, cols]` -> c = 256 q1 + q2 `[T, nb, 32]` (integers,
    q1 = nearest(x * 127 / max|x|) in -127..127, q2 = nearest of its residual times 256, at
    most 127; as float64), d = (max|x| / 127) / 256 `[T, nb]` (x ~ d c) and the sums of the
    rounded x, f32(sum c) * d, `[T, nb, 2]` over columns 0..15 and 16..31 and `[T, nb]` over
    all 32 (float32)."""
    xb = x.reshape(x.shape[0], -1, 32)
    amax = np.abs(xb).max(axis=2)
    inv = np.zeros_like(amax)
    np.divide(f32(127), amax, out=inv, where=amax > 0)
    xs = xb * inv[..., None]                                         # float32
    q1 = np.rint(xs)
    q2 = np.minimum(np.rint((xs - q1) * f32(256)), 127)                # exact float32 steps
    c = q1 * 256 + q2                                                # exact integers
    d = (amax / f32(127)) * f32(2.0 ** -8)
    isum = c.reshape(c.shape[0], -1, 2, 16).sum(axis=3)               # exact integers
    halves = isum.astype(f32) * d[..., None]
    total = isum.sum(axis=2).astype(f32) * d
    return c.astype(np.float64), d, halves, total


def emulate(data, name, shape, x, relaxed=False):
    """The kernel's float32 steps: y `[T, rows]` (matmul_k.c; matmul_r.c with `relaxed`)."""
    codes, scale, mins = codes_and_scales(data, name, shape)
    rows, nb, _ = codes.shape
    sub = scale.shape[-1]
    tokens = x.shape[0]
    part = lambda a: a.reshape(a.shape[0], nb, sub, 32 // sub).astype(np.int64)  # noqa: E731
    if relaxed:   # the mins meet the rounded x's sums; sums below 2^28, rounded to float32
        qx, dx, halves, total = int8_activations(x)                        # [T, nb, 32] ...
        s = np.einsum("rbsk,tbsk->trbs", part(codes), part(qx)).astype(f32)
        sums = total[..., None] if sub == 1 else halves
    else:
        xh, xl, dx, total = split_activations(x)                           # [T, nb, 32] ...
        ih = np.einsum("rbsk,tbsk->trbs", part(codes), part(xh)).astype(f32)  # exact integers
        il = np.einsum("rbsk,tbsk->trbs", part(codes), part(xl)).astype(f32)
        s = ih + il * f32(2.0 ** -15)                                      # [T, rows, nb, sub]
        sums = total[..., None] if sub == 1 else \
            np.add.accumulate(x.reshape(tokens, nb, 2, 16), axis=3, dtype=f32)[..., -1]
    acc = np.zeros((tokens, rows), f32)
    macc = np.zeros((tokens, rows), f32)
    for b in range(nb):
        for h in range(sub):
            acc = acc + s[:, :, b, h] * (scale[None, :, b, h] * dx[:, None, b])
            if mins is not None:
                macc = macc + mins[None, :, b, h] * sums[:, None, b, h]
    if mins is None:
        return acc
    return acc + macc if name in OFFSET else acc - macc


def random_blocks(name, rows, cols, seed):
    """Random GGUF blocks of `name` (every bit pattern of codes and packed scales is a valid
    block) with f16 scales of activation-like size, as uint8 bytes."""
    _, width, per = LAYOUT[name]
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (rows, cols // per, width), dtype=np.uint8)
    for at in HALVES[name]:
        halves = rng.uniform(1e-4, 2e-2, blocks.shape[:2]).astype("<f2")
        blocks[..., at:at + 2] = halves[..., None].view(np.uint8)
    return blocks.reshape(-1)
