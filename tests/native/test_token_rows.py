"""Multi-token integer dots (apr_native/kernels/token_rows.py) against the one-token kernel
(`block_rows.dot_rows`, itself checked against numpy in test_numba_kernels.py): for
every block type, every token of a multi-row call must get exactly the bits a call with
that token alone gives -- speculative verification relies on it for greedy ids equal to
plain decoding's. Blocks are random bytes with extreme f16 scales (zero, subnormal,
tiny, the largest finite half, negative), activations with loud, silent and tiny runs;
rows from 1 to past the register group (`token_rows.GROUP`), directly and through the
pool (one and two threads, chunks that cut rows unevenly), alone, grouped and as the
gated MLP's task."""
import numpy as np
import pytest

pytest.importorskip("numba")

from apr_core import dtypes                                      # noqa: E402
from apr_core.model.weights import Linear                        # noqa: E402
from apr_native import backends                                  # noqa: E402
from apr_native.kernels import cpu, pool
from apr_native.kernels.blocks import block_rows
from apr_native.kernels.layer import fused_layers
from apr_native.kernels.blocks import token_rows  # noqa: E402
from apr_native.kernels.blocks.block_table import BLOCKS, quantize_x         # noqa: E402

pytestmark = pytest.mark.native

TYPES = cpu.SUPPORTED
# Byte offsets of each block type's f16 scale fields (ggml-common.h block layouts).
F16_FIELDS = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,),
              "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}
EXTREME_HALVES = np.array([0.0, 2.0 ** -24, 6.1e-5, 1e-3, 0.5, 1.0, 7.5, 300.0, 65504.0,
                           -2.0, -65504.0], np.float16)


def random_blocks(name, rows, n_in, seed):
    """`rows` rows of `n_in` weights of type `name`: random bytes (every code pattern,
    every K-quant scale bit), their f16 scales drawn from EXTREME_HALVES."""
    assert name in F16_FIELDS and set(F16_FIELDS) == set(TYPES)
    _, block, size = BLOCKS[name]
    rng = np.random.default_rng(seed)
    nblocks = rows * n_in // block
    data = rng.integers(0, 256, (nblocks, size), dtype=np.uint8)
    for offset in F16_FIELDS[name]:
        halves = rng.choice(EXTREME_HALVES, nblocks)
        data[:, offset:offset + 2] = halves.view(np.uint8).reshape(nblocks, 2)
    return data.reshape(-1)


def activations(tokens, n_in, seed):
    """`[tokens, n_in]` float32 with a loud run, a silent run and a tiny row."""
    x = np.random.default_rng(seed).standard_normal((tokens, n_in)).astype(np.float32)
    x[0, :32] *= 1e4
    x[-1, 32:64] = 0.0
    if tokens > 2:
        x[1] *= 1e-6
    return x


def bits(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def one_token_rows(kind, w, rows, nb, row_bytes, x):
    """`dot_rows` called for each token alone -> `[T, rows]`."""
    out = np.empty((x.shape[0], rows), np.float32)
    for t in range(x.shape[0]):
        y = np.empty((1, rows), np.float32)
        block_rows.dot_rows(kind, w, 0, 0, rows, nb, row_bytes, *quantize_x(x[t:t + 1]), y, 0)
        out[t] = y[0]
    return out


@pytest.mark.parametrize("name", TYPES)
def test_every_token_gets_its_one_token_bits(name):
    kind, block, size = BLOCKS[name]
    rows, n_in = 11, 512
    w = random_blocks(name, rows, n_in, seed=kind)
    nb, row_bytes = n_in // block, n_in // block * size
    x = activations(37, n_in, seed=kind + 100)
    alone = one_token_rows(kind, w, rows, nb, row_bytes, x)           # [37, rows]
    assert np.isfinite(alone).all() and np.abs(alone).max() > 0
    for tokens in list(range(1, token_rows.GROUP + 2)) + [33, 37]:
        layout = token_rows.pair_layout(*quantize_x(x[:tokens]))
        y = np.full((tokens, 3 + rows - 2), np.nan, np.float32)
        # rows 2..10 into columns 3.., as a pool chunk addresses them
        token_rows.dot_token_rows(kind, w, 0, 2, rows, nb, row_bytes, *layout, y, 3)
        assert np.array_equal(bits(y[:, 3:]), bits(alone[:tokens, 2:])), (name, tokens)
        assert np.isnan(y[:, :3]).all()                              # nothing else written


def test_pair_layout_holds_the_quantized_activations():
    x = activations(5, 96, seed=1)
    xq, xd, xs = quantize_x(x)
    xp, xdt, xst = token_rows.pair_layout(xq, xd, xs)
    slots = token_rows.padded_tokens(5)
    assert slots == 8 and xdt.shape == xst.shape == (3, 8)
    grid = xp.reshape(3, slots // 2, 2, 2, 16)           # run, pair, half, token, element
    for t in range(5):
        for q in range(3):
            run = np.concatenate([grid[q, t // 2, 0, t % 2], grid[q, t // 2, 1, t % 2]])
            assert np.array_equal(run, xq[t, 32 * q:32 * q + 32])
    assert np.array_equal(xdt[:, :5], xd.T) and np.array_equal(xst[:, :5], xs.T)
    assert not grid[:, 2, :, 1].any() and not grid[:, 3].any() and not xdt[:, 5:].any()
    assert [token_rows.padded_tokens(t) for t in (1, 2, 3, 9, 16, 17, 40)] == \
        [2, 2, 4, 16, 16, 32, 48]


def linear(name, rows, n_in, seed):
    dtype = dtypes.BY_NAME[name]
    return Linear(name, random_blocks(name, rows, n_in, seed), dtype, (rows, n_in))


@pytest.mark.parametrize("name", TYPES)
def test_pool_matmul_rows_equal_decode_steps(name, pool_threads):
    """`numba_matmul` with T <= DOT_MAX_TOKENS rows gives each row a decode step's bits,
    through the pair layout (the task's SLOTS word says which layout ran)."""
    lin = linear(name, 97, 512, seed=3)                  # 97 rows: uneven chunks
    x = activations(cpu.DOT_MAX_TOKENS, 512, seed=4)
    steps = np.concatenate([cpu.numba_matmul(lin.data, lin.dtype, lin.shape, x[t:t + 1], 0)
                            for t in range(x.shape[0])])
    assert pool_threads.task[pool.SLOTS] == 0
    for tokens in (2, 3, 5, 8, 9, cpu.DOT_MAX_TOKENS):
        got = cpu.numba_matmul(lin.data, lin.dtype, lin.shape, x[:tokens], 0)
        assert pool_threads.task[pool.SLOTS] == token_rows.padded_tokens(tokens)
        assert np.array_equal(bits(got), bits(steps[:tokens])), (name, tokens)


@pytest.mark.parametrize("name", ["Q4_K", "Q6_K", "Q8_0"])
def test_int8_codes_give_every_row_a_decode_steps_bits(name, pool_threads):
    """With the pool's ACT8 word set (int8 codes: the K-quant default at the AVX2 level,
    `dot_select`), a verification pass and a prompt past DOT_MAX_TOKENS (which otherwise
    takes float products) give each row an int8 decode step's bits (K-quants: groups of
    8 and 4 tokens over chunks of 4 blocks, `kquant_token_rows`; others `dot_rows`)."""
    lin = linear(name, 97, 1536, seed=5)
    x = activations(cpu.DOT_MAX_TOKENS + 23, 1536, seed=6)
    pool_threads.task[pool.ACT8] = 1
    try:
        steps = np.concatenate([cpu.numba_matmul(lin.data, lin.dtype, lin.shape,
                                                 x[t:t + 1], 0) for t in range(x.shape[0])])
        for tokens in (2, 3, 4, 8, 9, 13, cpu.DOT_MAX_TOKENS + 1, x.shape[0]):
            got = cpu.numba_matmul(lin.data, lin.dtype, lin.shape, x[:tokens], 0)
            assert np.array_equal(bits(got), bits(steps[:tokens])), (name, tokens)
    finally:
        pool_threads.task[pool.ACT8] = 0


@pytest.mark.parametrize("names", [("Q5_0", "Q5_0", "Q8_0"), ("Q4_1", "Q4_K", "Q6_K")])
def test_group_and_glu_rows_equal_decode_steps(names, pool_threads):
    """The projections a layer runs as one task (q, k, v of mixed types; gate and up
    with SiLU) give each row a decode step's bits."""
    n_in = 512
    qkv = [linear(n, r, n_in, seed=i) for i, (n, r) in enumerate(zip(names, (64, 17, 33)))]
    gate, up = (linear(names[-1], 75, n_in, seed=s) for s in (7, 8))
    x = activations(7, n_in, seed=5)
    assert cpu.weight_table(qkv) is not None and cpu.weight_table((gate, up)) is not None
    many_qkv = cpu.numba_matmul_group(qkv, x)
    many_glu = fused_layers.matmul_glu(gate, up, x, "silu")
    for t in range(x.shape[0]):
        for got, want in zip(many_qkv, cpu.numba_matmul_group(qkv, x[t:t + 1])):
            assert np.array_equal(bits(got[t:t + 1]), bits(want))
        want = fused_layers.matmul_glu(gate, up, x[t:t + 1], "silu")
        assert np.array_equal(bits(many_glu[t:t + 1]), bits(want)), t


def test_verification_takes_every_row_the_kernels_keep_exact():
    """The scheduler verifies at most the rows that compute as decoding does: the
    backend's uniform_rows is the first row count that switches to float products."""
    kernels = backends.select("numba")
    assert kernels.uniform_rows == cpu.DOT_MAX_TOKENS + 1 >= token_rows.GROUP + 1


def test_the_dots_use_the_wide_integer_instructions_the_host_has():
    """The block dots lower to zmm pmaddwd where the instruction level (the host's, or
    $APR_ISA's) has AVX-512 BW, and the pair sums fold into vpdpwssd (VNNI: int16 pairs
    multiplied and accumulated in one instruction) where it has AVX-512 VNNI, and to
    none of them where it lacks them; vpdpbusd would need 8-bit activations."""
    from numba import njit
    from apr_native import isa
    from apr_native.kernels.vector import pair_ir
    kind, block, size = BLOCKS["Q5_0"]
    w = random_blocks("Q5_0", 4, 256, seed=9)
    xp, xdt, xst = token_rows.pair_layout(*quantize_x(activations(16, 256, seed=9)))
    y = np.empty((16, 4), np.float32)
    fresh = njit(token_rows._group_rows.py_func)      # compiled here: the cache keeps no asm

    @njit
    def sixteen_tokens(w, nb, row_bytes, xp, xdt, xst, y):
        z = pair_ir.zero16()
        fresh(kind, w, 0, 0, 4, nb, row_bytes, xp, xdt, xst, y, 0, 0, 16,
              (z, z, z, z, z, z, z, z), np.empty(16, np.float32), np.empty(128, np.float32),
              np.empty(16, np.float32))
    sixteen_tokens(w, 256 // block, 256 // block * size, xp, xdt, xst, y)
    asm = "\n".join(fresh.inspect_asm().values())
    assert "vpmaddwd" in asm or not isa.has("avx2")
    assert ("ymm" in asm) == isa.has("avx")          # the generic level: SSE2 only
    assert ("zmm" in asm) == isa.has("avx512bw")
    assert ("vpdpwssd" in asm) == isa.has("avx512vnni")
