"""The int8-activation decode dots (`isa.int8_dots`: one token's matvecs over Q4_K/Q6_K
weights at the AVX2 level, or any type when $APR_DOTS=int8) against their numpy replay
(int8_replay.py), bit for bit, on synthetic blocks of the types apr's real models use most
(Q4_K, Q6_K, Q8_0, Q4_0, Q4_1): the kernel alone, and one token's matvec through a pool
that has the int8 path on; the same dots for many tokens at once (a prompt, a speculative
verification pass: `kquant_token_rows`), each token bit-identical to its replay alone;
and the per-type default (`test_selection`). The quality test
(next-token KL to the exact path no larger than llama.cpp's) is test_int8_quality.py.
"""
import numpy as np
import pytest

pytest.importorskip("numba")

from apr_core import dtypes                                      # noqa: E402
from apr_core.errors import AprError                             # noqa: E402
from apr_core.quant.api import quantize                          # noqa: E402
from apr_native import isa                                        # noqa: E402
from apr_native.kernels import cpu, pool                         # noqa: E402
from apr_native.kernels.blocks.block_rows import dot_rows        # noqa: E402
from apr_native.kernels.blocks.block_table import (BLOCKS, KRUN, QBLOCK,  # noqa: E402
                                                   quantize_x8)
from apr_native.kernels.blocks.kquant_token_rows import int8_token_rows  # noqa: E402

import int8_replay                                               # noqa: E402

pytestmark = pytest.mark.native
TYPES = ("Q4_K", "Q6_K", "Q8_0", "Q4_0", "Q4_1")
SHAPE = (11, 512)


def _weight(name, seed, tokens=1, shape=SHAPE):
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(shape).astype(np.float32)
    values[0, :40] = 0.0                         # a zero run: scale-0 paths
    values[-1] *= 1e-3                           # tiny scales
    data = np.frombuffer(quantize(values, dtypes.BY_NAME[name]), np.uint8)
    x = rng.standard_normal((tokens, shape[1])).astype(np.float32)
    x[:, :32] *= 40.0                            # a loud run
    x[:, 64:96] = 0.0                            # a silent run
    x[tokens // 2, 256:512] = 0.0                # a silent K-quant block
    return data, x


def _replay(name, data, rows, x):
    """Each token of `x [T, in]` alone through the replay -> `[T, rows]`."""
    return np.stack([int8_replay.matvec(name, data, rows, t) for t in x])


def _same_bits(got, want):
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), np.abs(got - want).max()


@pytest.mark.parametrize("run", [QBLOCK, KRUN])
def test_int8_quantizer_equals_the_replay(run):
    x = np.random.default_rng(1).standard_normal((1, 512)).astype(np.float32) * 3
    x[0, 32:64] = 0.0
    x[0, 256:] = 0.0                             # a silent K-quant block
    xq, xd, xs = quantize_x8(x, run)
    want = int8_replay.quantize8(x[0], run)
    assert np.array_equal(xq[0], want[0])
    assert np.abs(xq).max() <= 127
    assert np.array_equal(xd[0].view(np.uint32), want[1].view(np.uint32))
    assert np.array_equal(xs[0].view(np.uint32), want[2].view(np.uint32))


@pytest.mark.parametrize("name", TYPES)
def test_int8_dots_equal_the_replay(name):
    data, x = _weight(name, seed=len(name) + ord(name[1]))
    kind, block, size = BLOCKS[name]
    nb = SHAPE[1] // block
    xq, xd, xs = quantize_x8(x, KRUN if name in int8_replay.KQUANTS else QBLOCK)
    y = np.empty((1, SHAPE[0]), np.float32)
    dot_rows(kind, data, 0, 0, SHAPE[0], nb, nb * size, xq, xd, xs, y, 0)
    want = int8_replay.matvec(name, data, SHAPE[0], x[0])
    assert np.array_equal(y[0].view(np.uint32), want.view(np.uint32)), np.abs(y[0] - want).max()


@pytest.mark.parametrize("threads", [1, 2])
def test_one_token_matvec_on_an_int8_pool_equals_the_replay(threads):
    workers = pool.Pool(threads - 1)
    workers.task[pool.ACT8] = 1
    before = pool.bind(workers)
    try:
        for name in ("Q4_K", "Q6_K"):
            data, x = _weight(name, seed=7)
            kind, nb, row_bytes = cpu.layout(name, SHAPE)
            got = np.empty((1, SHAPE[0]), np.float32)
            pool.dots_one(*workers.shared, kind, data, SHAPE[0], nb, row_bytes, x, got, 5)
            want = int8_replay.matvec(name, data, SHAPE[0], x[0])
            assert np.array_equal(got[0].view(np.uint32), want.view(np.uint32))
    finally:
        pool.bind(before)
        workers.stop()


@pytest.mark.parametrize("name", ("Q4_K", "Q6_K", "Q8_0"))
def test_many_tokens_equal_each_token_alone(name):
    """Groups of 8 and 4 tokens, the tokens past them, and rows split anywhere: every
    token's outputs have the bits of its own one-token replay (Q8_0: `dot_rows` itself)."""
    shape = (13, 1024)
    data, x = _weight(name, seed=3, tokens=23, shape=shape)
    kind, nb, row_bytes = cpu.layout(name, shape)
    want = _replay(name, data, shape[0], x)
    for tokens in (2, 4, 5, 8, 12, 23):
        xq, xd, xs = quantize_x8(x[:tokens], KRUN if name in int8_replay.KQUANTS else QBLOCK)
        got = np.full((tokens, shape[0]), np.nan, np.float32)
        for r0, r1 in ((0, 5), (5, 6), (6, 13)):
            int8_token_rows(kind, data, 0, r0, r1, nb, row_bytes, xq, xd, xs, got, r0)
        _same_bits(got, want[:tokens])


def test_q6_k_extreme_codes_and_activations_keep_their_bits():
    """Q6_K codes at -32 and 31 only, group scales at -128 and 127 and activation codes at
    +-127: the group dots take the activations offset (x + 128, up to 255, pmaddubsw's
    widest pairs) and take the codes' excess off again; any slip in that excess, or a
    saturated pair, would change the bits."""
    rng = np.random.default_rng(5)
    rows, n = 6, 512
    blocks = rng.choice(np.array([0, 255], np.uint8), (rows * 2, 210))  # ql, qh: 0 or ~0
    blocks[0::6, :192], blocks[1::6, :192] = 0, 255                      # all -32, all 31
    blocks[:, 192:208] = rng.choice(np.array([128, 127], np.uint8), (rows * 2, 16))
    blocks[0::6, 192:208], blocks[1::6, 192:208] = 128, 127
    blocks[:, 208:210] = np.full(rows * 2, 0.5, np.float16).view(np.uint8).reshape(-1, 2)
    data = blocks.reshape(-1)
    x = rng.choice(np.array([-1.0, 1.0], np.float32), (13, n))          # codes +-127
    x[0], x[1] = 1.0, -1.0
    xq, xd, xs = quantize_x8(x, KRUN)
    assert np.abs(xq).min() == 127
    kind, nb, row_bytes = cpu.layout("Q6_K", (rows, n))
    got = np.full((13, rows), np.nan, np.float32)
    int8_token_rows(kind, data, 0, 0, rows, nb, row_bytes, xq, xd, xs, got, 0)
    _same_bits(got, _replay("Q6_K", data, rows, x))


@pytest.mark.parametrize("threads", [1, 2])
def test_prompts_on_an_int8_pool_equal_the_replay(threads):
    """With ACT8 set, a prompt's projections (`pool.products`, T above the dots' limit),
    a verification pass (`pool.dots`, few tokens) and a gated MLP (`pool.glu`) take the
    int8 dots: each token equals its one-token replay."""
    workers = pool.Pool(threads - 1)
    workers.task[pool.ACT8] = 1
    before = pool.bind(workers)
    try:
        for name in ("Q4_K", "Q6_K"):
            data, x = _weight(name, seed=11, tokens=cpu.DOT_MAX_TOKENS + 9)
            kind, nb, row_bytes = cpu.layout(name, SHAPE)
            want = _replay(name, data, SHAPE[0], x)
            got = np.empty((x.shape[0], SHAPE[0]), np.float32)
            pool.products_one(*workers.shared, kind, data, SHAPE[0], nb, row_bytes, x, got, 3)
            _same_bits(got, want)
            got = np.empty((5, SHAPE[0]), np.float32)
            pool.dots_one(*workers.shared, kind, data, SHAPE[0], nb, row_bytes, x[:5], got, 3)
            _same_bits(got, want[:5])
            table = np.array([(kind, data.ctypes.data, SHAPE[0], nb, row_bytes)] * 2, np.int64)
            gate, up, out = (np.empty((3, SHAPE[0]), np.float32) for _ in range(3))
            pool.glu(*workers.shared, table, x[:3], gate, up, out, 2)
            _same_bits(gate, want[:3])
            _same_bits(up, want[:3])
    finally:
        pool.bind(before)
        workers.stop()


def test_selection(monkeypatch):
    """The default (test_dot_select.py holds what each kernel call gets of it): int8 for
    Q4_K/Q6_K at the AVX2 level, exact for the legacy types, for a mix, and elsewhere;
    $APR_DOTS forces either for every type."""
    monkeypatch.delenv(isa.DOTS_ENV, raising=False)
    assert not isa.int8_dots()                 # no weight types: the exact dots
    for legacy in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"):
        assert not isa.int8_dots((legacy,))
    assert not isa.int8_dots(("Q4_K", "Q8_0"))   # one task mixing them: exact
    assert isa.int8_dots(("Q4_K", "Q6_K")) == isa.int8_level()
    monkeypatch.setenv(isa.ENV, "generic")
    assert not isa.int8_level() and not isa.int8_dots(("Q4_K",))
    if "avx2" in isa.available():
        monkeypatch.setenv(isa.ENV, "avx2")
        assert isa.int8_level() and isa.int8_dots(("Q4_K", "Q6_K"))
        assert not isa.int8_dots(("Q4_1",))
    if "avx512" in isa.available():
        monkeypatch.setenv(isa.ENV, "avx512")   # not measured there: exact
        assert not isa.int8_dots(("Q4_K",))
    monkeypatch.setenv(isa.DOTS_ENV, "exact")
    assert not isa.int8_dots(("Q4_K", "Q6_K"))
    monkeypatch.setenv(isa.DOTS_ENV, "int8")
    assert isa.int8_dots() and isa.int8_dots(("Q8_0",))
    monkeypatch.setenv(isa.DOTS_ENV, "fast")
    with pytest.raises(AprError):
        isa.int8_dots(("Q4_K",))
