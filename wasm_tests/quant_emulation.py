"""The activation side shared by the block kernels' float32 replays (test_quant_kernel.py,
kquant_emulation.py): activation-like inputs and the kernel's split of x into two int16 terms
(quantize_x of web/src/kernels/matmul_k.c), step by step in float32."""
import numpy as np


def activations(tokens, cols, seed):
    """Activation-like x `[T, cols]`: normal values, a few large outliers, one all-zero block."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((tokens, cols)).astype(np.float32)
    x[:, rng.integers(0, cols, 4)] *= 40
    x[0, 32:64] = 0
    return x


def split_activations(x):
    """x `[T, cols]` -> xh, xl `[T, nb, 32]` (integers, as float64), dx, sum(x) `[T, nb]`."""
    f32 = np.float32
    xb = x.reshape(x.shape[0], -1, 32)
    amax = np.abs(xb).max(axis=2)
    inv = np.zeros_like(amax)
    np.divide(f32(32767), amax, out=inv, where=amax > 0)
    xs = xb * inv[..., None]                                         # float32
    xh = np.rint(xs)
    xl = np.rint((xs - xh) * f32(32768))
    total = np.add.accumulate(xb, axis=2, dtype=f32)[..., -1]       # column order, float32
    return xh.astype(np.float64), xl.astype(np.float64), amax / f32(32767), total
