"""The WGSL matmul and embedding kernels over stored blocks of every supported dtype,
against the numpy definition: `apr_core.quant.dequantize` of the same bytes.

Bound for a matmul output y = sum_i w_i x_i (u = 2^-24, float32 unit roundoff). The GPU
forms each decoded weight with the reference's float32 operations, except that it may
fuse `d * q + m` (types with a min) into one rounding: a weight differs from the
reference's by at most 2u * (|d q| + |m|) <= 2u * 2 * bmax, bmax the block's largest
|w| (|m| = |w at q=0| and |d q| <= |w_q - w_0|). Its float32 sums have depth at most
K + units + log2(threads) < K + 40 additions, each adding at most u * (running |sum|),
so |y_gpu - y_exact| <= (K + 40) u sum_i |w_i| |x_i| + 4u sum_i bmax_i |x_i|; the test
uses (K + 40) u sum_i (|w_i| + 4 bmax_i) |x_i| with y_exact in float64.
"""
import numpy as np
import pytest

from apr_core import dtypes
from apr_core.gpu.wgsl_decode import SUPPORTED
from apr_core.gpu.wgsl_kernels import MAX_X, ROWS_WG
from apr_core.quant import dequantize, quantize

from gpu_harness import device, run_kernel, step_words

pytestmark = pytest.mark.native

U = 2.0 ** -24
EXACT = ("F32", "F16", "BF16", "Q4_0", "Q5_0", "Q8_0", "Q6_K", "Q3_K")   # no d*q+m to fuse


@pytest.fixture(scope="module")
def dev():
    return device()


def weights(name, rows, k, seed):
    """`rows x k` random weights stored as `name`: (bytes, float32 reference, block max)."""
    rng = np.random.RandomState(seed)
    values = (rng.standard_normal((rows, k)) * rng.uniform(0.01, 2.0, (rows, 1))
              ).astype(np.float32)
    values[0, :] += 3.0                      # a row with a large min (Q4_1, Q4_K ...)
    data = np.frombuffer(quantize(values, name), np.uint8)
    ref = dequantize(data, name, (rows, k)).astype(np.float32)
    block = dtypes.BY_NAME[name].block_size if dtypes.BY_NAME[name].quantized else 1
    bmax = np.abs(ref.reshape(rows, -1, block)).max(axis=2, keepdims=True)
    return data, ref, np.broadcast_to(bmax, (rows, k // block, block)).reshape(rows, k)


def matmul_values(rows, k, x_stride, x_off, y_stride, y_off, has_bias, row_bytes, b_off):
    return {"n_rows": rows, "k": k, "units": -(-k // 32), "row_bytes": row_bytes,
            "rows_src": 0, "row_start": 0, "row_cap": 1 << 30, "x_stride": x_stride,
            "x_off": x_off, "y_stride": y_stride, "y_off": y_off, "has_bias": has_bias,
            "b_off": b_off}


@pytest.mark.parametrize("row_threads", [1, 32])
@pytest.mark.parametrize("name", SUPPORTED)
def test_matmul_matches_dequantized_reference(dev, name, row_threads):
    k = 100 if not dtypes.BY_NAME[name].quantized else 512   # floats: a partial unit
    rows, t = 70, 11                          # a partial workgroup of rows, a partial tile
    data, w, bmax = weights(name, rows, k, seed=len(name))
    rng = np.random.RandomState(1)
    x_off, y_off = 4, 3
    x = rng.standard_normal((t, k + 8)).astype(np.float32)      # [T, 4 + k + 4]
    b_off = 2                                 # this part's rows start at bias row 2
    bias = rng.standard_normal(rows + b_off).astype(np.float32)
    y = np.full((t, rows + 5), 7.0, np.float32)                   # columns outside stay 7
    kind = "matmul_rows" if row_threads == 1 else "matmul"
    wgs = -(-rows // ROWS_WG) if row_threads == 1 else rows
    out = run_kernel(dev, kind, "{}:{}".format(kind, name),
                     matmul_values(rows, k, k + 8, x_off, rows + 5, y_off, 1,
                                   dtypes.BY_NAME[name].nbytes((k,)), b_off),
                     {"w": data, "x": x, "y": y, "b": bias},
                     ["step", "w", "x", "y", "b"], (min(wgs, MAX_X), 1, -(-t // 8)),
                     step_words(t))["y"]
    xs = x[:, x_off:x_off + k].astype(np.float64)                 # [T, k]
    exact = xs @ w.astype(np.float64).T + bias[b_off:b_off + rows]  # [T, rows]
    bound = (k + 40) * U * (np.abs(xs) @ (np.abs(w) + 4 * bmax).T.astype(np.float64)) + \
        U * np.abs(exact)
    got = out[:, y_off:y_off + rows]
    assert np.all(np.abs(got - exact) <= bound), np.max(np.abs(got - exact) / bound)
    assert np.all(out[:, :y_off] == 7.0) and np.all(out[:, y_off + rows:] == 7.0)


@pytest.mark.parametrize("name", SUPPORTED)
def test_embedding_rows_are_the_dequantized_rows(dev, name):
    k = 96 if not dtypes.BY_NAME[name].quantized else 256
    rows = 40
    data, w, bmax = weights(name, rows, k, seed=3)
    ids = np.array([5, 0, 39, 5, 17], np.int64)                  # repeats, both ends
    lo = 2                                                        # a part of rows 2..39
    words = step_words(len(ids))
    words[words[3]:words[3] + len(ids)] = ids
    row_bytes = dtypes.BY_NAME[name].nbytes((k,))
    x = np.full((len(ids), k), 9.0, np.float32)
    out = run_kernel(dev, "embed", "embed:" + name,
                     {"n_rows": rows - lo, "row_lo": lo, "k": k, "units": -(-k // 32),
                      "row_bytes": row_bytes, "scale": 1.0},
                     {"w": data[lo * row_bytes:], "x": x}, ["step", "w", "x"],
                     (len(ids), 1, 1), words)["x"]
    for i, token in enumerate(ids):
        if token < lo:
            assert np.all(out[i] == 9.0)                 # another part's row: untouched
        elif name in EXACT:
            assert np.array_equal(out[i], w[token]), name
        else:
            assert np.all(np.abs(out[i] - w[token]) <= 4 * U * bmax[token]), name
