"""The blocked (flash-style) attention kernel (apr_native.kernels.attention.paged_attention)
against the numpy reference (apr_core.model.layers.attention, float64 scores), and the KV
cache types' numba store/load against apr_core's quantizers.

The bound (per output element of query row t, head h; u = 2^-24, L visible keys, n_b key
blocks of the kernel, s_j the exact scaled scores, m their max, p_j the exact softmax):
- kernel scores: q is scaled in float32 (u) and dotted in a float32 FMA chain over hd
  terms, so |s^_j - s_j| <= D = (hd + 2) u max_j sum_i |scale q_i k_ji|; a softmax of
  scores each moved by at most D moves every p_j by at most p_j (e^(2D) - 1);
- kernel softmax: s^_j - m rounds (u |s_j - m| in the exponent), exp is within 1 ulp (2u),
  each of <= n_b rescales rounds the sum and the output once each (2u), the sum and the
  V sum run over L terms in float32 (L u each), the final division 1 u;
- reference: probabilities rounded to float32 (u) and a float32 V sum (L u).
Together: |got - ref| <= sum_j p_j |v_j| (e^(2D) - 1 + u |s_j - m| + (3 L + 4 n_b + 8) u).

Quantized caches hold y = H x per run of 32 (H the Walsh-Hadamard matrix, H H = 32 I); the
reference decodes k = fl(H y) / 32, the kernel instead dots y with q' = fl(H q) / 32 and
rotates its output sum o' of the stored values w back, fl(H o') / 32. A 5-level butterfly
of 32 terms errs by at most 5u times the sum of their magnitudes, so with runs B,
Y_j = sum_B |scale q_B|_1 |y_jB|_1 / 32 and W_jB = |w_jB|_1 / 32:
- scores: |s^_j - s_j| <= D = (hd + 14) u max_j Y_j (the FMA chain over |q'_i y_i| <= the
  runs' products / 32, q's butterfly 5u, the reference's 5u, two roundings of q');
- output element d of run B: each stored feature's error (the bound above, with |w_jd'|
  for |v_j|) reaches d through H / 32, and both sides' butterflies add 5u each:
  |got - ref| <= sum_j p_j W_jB (e^(2D) - 1 + u |s_j - m| + (3 L + 4 n_b + 8) u + 10.5 u).
"""
import numpy as np
import pytest

pytest.importorskip("numba")

from numba import njit                                            # noqa: E402

from apr_core.model import fused, kv_types                        # noqa: E402
from apr_native.kernels.attention import paged_attention
from apr_native.kernels.layer import fused_layers  # noqa: E402
from apr_native.kernels.attention.kv_rows import decode_row, kind_code      # noqa: E402

pytestmark = pytest.mark.native

U = 2.0 ** -24
KB = paged_attention.KB
# (heads, kv heads, head_dim): SmolLM2-135M, Qwen2.5-0.5B, Gemma-3-270M
SHAPES = {"smollm2": (9, 3, 64), "qwen2.5": (14, 2, 64), "gemma3": (4, 1, 256)}


def blocked_bound(q, k, v, q_pos, scale, window):
    """The module docstring's bound, `[T, H * hd]`, for float32 keys/values `k, v
    [n_kv, L, hd]` (decoded)."""
    t_count, heads, hd = q.shape
    n_kv, n_keys, _ = k.shape
    kd, vd = k.astype(np.float64), np.abs(v.astype(np.float64))
    out = np.empty((t_count, heads, hd))
    j = np.arange(n_keys)[None, :]
    p = np.asarray(q_pos)[:, None]
    ok = (j <= p) & ((window == 0) | (p - j < max(window, 1)))
    visible = ok.sum(axis=1)                                          # [T]
    blocks = visible // KB + 2
    for h in range(heads):
        kv = h // (heads // n_kv)
        qs = q[:, h].astype(np.float64) * scale                       # [T, hd]
        s = np.where(ok, qs @ kd[kv].T, -np.inf)                      # [T, L]
        big = (np.abs(qs) @ np.abs(kd[kv]).T)                         # [T, L]
        d = (hd + 2) * U * np.where(ok, big, 0).max(axis=1)           # [T]
        m = s.max(axis=1, keepdims=True)
        e = np.exp(s - m)
        pr = e / e.sum(axis=1, keepdims=True)                          # [T, L]
        gap = np.where(ok, np.abs(s - m), 0)
        per_key = (np.expm1(2 * d) + (3 * visible + 4 * blocks + 8) * U)[:, None] + U * gap
        out[:, h] = (pr * per_key) @ vd[kv]
    return out.reshape(t_count, heads * hd)


def hadamard():
    """The 32 x 32 Walsh-Hadamard matrix (float64), Sylvester's order (kv_types.rotate)."""
    h = np.ones((1, 1))
    while h.shape[0] < kv_types.ROTATION:
        h = np.block([[h, h], [h, -h]])
    return h


def rotated_bound(q, ky, wy, q_pos, scale, window):
    """The module docstring's bound for quantized caches, `[T, H * hd]`, from the stored
    (rotated) keys and values `ky, wy [n_kv, L, hd]` (`kv_types.decode(rotated=True)`)."""
    t_count, heads, hd = q.shape
    n_kv, n_keys, _ = ky.shape
    runs = hd // kv_types.ROTATION
    hd_matrix = np.kron(np.eye(runs), hadamard()) / kv_types.ROTATION   # [hd, hd]
    kd = ky.astype(np.float64) @ hd_matrix                            # exact H y / 32
    run_abs = lambda a: np.abs(a).reshape(a.shape[:-1] + (runs, -1)).sum(-1)   # noqa: E731
    ky_runs, wy_runs = run_abs(ky.astype(np.float64)), run_abs(wy.astype(np.float64))
    out = np.empty((t_count, heads, hd))
    j = np.arange(n_keys)[None, :]
    p = np.asarray(q_pos)[:, None]
    ok = (j <= p) & ((window == 0) | (p - j < max(window, 1)))
    visible = ok.sum(axis=1)
    blocks = visible // KB + 2
    for h in range(heads):
        kv = h // (heads // n_kv)
        qs = q[:, h].astype(np.float64) * scale                       # [T, hd]
        s = np.where(ok, qs @ kd[kv].T, -np.inf)                      # [T, L]
        big = run_abs(qs) @ ky_runs[kv].T / kv_types.ROTATION         # [T, L]  Y_j
        d = (hd + 14) * U * np.where(ok, big, 0).max(axis=1)          # [T]
        m = s.max(axis=1, keepdims=True)
        e = np.exp(s - m)
        pr = e / e.sum(axis=1, keepdims=True)                          # [T, L]
        gap = np.where(ok, np.abs(s - m), 0)
        per_key = (np.expm1(2 * d) + (3 * visible + 4 * blocks + 8 + 10.5) * U)[:, None] \
            + U * gap
        per_run = (pr * per_key) @ wy_runs[kv] / kv_types.ROTATION     # [T, runs]
        out[:, h] = np.repeat(per_run, kv_types.ROTATION, axis=1)
    return out.reshape(t_count, heads * hd)


def cache_of(kind, values):
    """A cache array of `kind` holding `values [L, n_kv, hd]` at positions 0.. (and a few
    free positions after them)."""
    n_keys, n_kv, hd = values.shape
    cache = kv_types.allocate(kind, n_kv, n_keys + 3, hd)
    kv_types.store(cache, hd, slice(0, n_keys), values)
    return cache


CASES = [
    (1, 1, 0), (1, 37, 0), (1, 3000, 0),    # decode: first step, short, split-K
    (9, 40, 0), (9, 40, 4), (1, 37, 8),      # prefill after a prefix, sliding windows
    (70, KB * 3 + 5, 0),                     # rows over 3 tiles, keys not a multiple of KB
    (33, KB + 1, 0), (40, 300, 50),          # one key past a block; window across tiles
]


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("tokens,n_keys,window", CASES)
def test_blocked_kernel_within_bound(shape, tokens, n_keys, window, pool_threads):
    heads, n_kv, hd = SHAPES[shape]
    rng = np.random.default_rng(n_keys + tokens)
    q = (rng.standard_normal((tokens, heads, hd)) * 4).astype(np.float32)
    k = (rng.standard_normal((n_kv, n_keys + 3, hd)) * 4).astype(np.float32)
    v = rng.standard_normal((n_kv, n_keys + 3, hd)).astype(np.float32)
    q_pos = np.arange(n_keys - tokens, n_keys)
    args = (q, k, v, n_keys, q_pos, hd ** -0.5, window)
    ref = fused.cached_attention(*args)
    got = fused_layers.attention(*args)
    assert got.shape == ref.shape == (tokens, heads * hd)
    err = np.abs(got.astype(np.float64) - ref)
    bound = blocked_bound(q, k[:, :n_keys], v[:, :n_keys], q_pos, hd ** -0.5, window)
    assert (err <= bound).all(), (err - bound).max()
    if window:       # the window matters: without it the result differs
        wide = fused.cached_attention(q, k, v, n_keys, q_pos, hd ** -0.5, 0)
        assert np.abs(wide - ref).max() > 1e-3


@pytest.mark.parametrize("kind", ["f16", "q8_0", "q4_0"])
@pytest.mark.parametrize("tokens,n_keys,window", [(1, 3000, 0), (40, 300, 50)])
def test_blocked_kernel_on_quantized_caches(kind, tokens, n_keys, window, pool_threads):
    """The kernel decodes the stored rows itself: the same bound against the reference
    over the same cache (which decodes through apr_core's dequantizers)."""
    heads, n_kv, hd = SHAPES["qwen2.5"]
    rng = np.random.default_rng(7)
    q = (rng.standard_normal((tokens, heads, hd)) * 4).astype(np.float32)
    k = cache_of(kind, (rng.standard_normal((n_keys, n_kv, hd)) * 4).astype(np.float32))
    v = cache_of(kind, rng.standard_normal((n_keys, n_kv, hd)).astype(np.float32))
    q_pos = np.arange(n_keys - tokens, n_keys)
    ref = fused.cached_attention(q, k, v, n_keys, q_pos, hd ** -0.5, window)
    got = fused_layers.attention(q, k, v, n_keys, q_pos, hd ** -0.5, window)
    if kind == "f16":
        kd = kv_types.load(k, hd, slice(0, n_keys))
        vd = kv_types.load(v, hd, slice(0, n_keys))
        bound = blocked_bound(q, kd, vd, q_pos, hd ** -0.5, window)
    else:                                         # rotated rows: the kernel never unrotates
        ky = kv_types.decode(kind, k[:, :n_keys], hd, rotated=True)
        wy = kv_types.decode(kind, v[:, :n_keys], hd, rotated=True)
        bound = rotated_bound(q, ky, wy, q_pos, hd ** -0.5, window)
    assert (np.abs(got.astype(np.float64) - ref) <= bound).all()


def scattered_tables(lengths, rows, order, block, columns):
    """`(tables [R, columns] int32, q_pos [R])` for sequences of `lengths` keys computing
    their last `rows` positions, their blocks taken in turn from `order`."""
    tables, q_pos, first = [], [], 0
    for length, count in zip(lengths, rows):
        table = np.zeros(columns, np.int32)
        used = -(-length // block)
        table[:used] = order[first:first + used]
        first += used
        tables += [table] * count
        q_pos += list(range(length - count, length))
    return np.array(tables), np.array(q_pos, np.int64)


def test_paged_rows_of_several_sequences(pool_threads):
    """A batch step: rows of three sequences with scattered blocks of 16 slots, each
    attending to its own keys only."""
    heads, n_kv, hd = SHAPES["smollm2"]
    rng = np.random.default_rng(3)
    block, n_blocks = 16, 64
    k_pool = (rng.standard_normal((n_kv, block * n_blocks, hd)) * 3).astype(np.float32)
    v_pool = rng.standard_normal((n_kv, block * n_blocks, hd)).astype(np.float32)
    order = rng.permutation(n_blocks).astype(np.int32)
    lengths, rows = [200, 45, 130], [1, 45, 7]           # decode, whole prompt, a chunk
    tables, q_pos = scattered_tables(lengths, rows, order, block, 16)
    q = (rng.standard_normal((len(q_pos), heads, hd)) * 3).astype(np.float32)
    ref = fused.attention_paged(q, k_pool, v_pool, tables, block, q_pos, hd ** -0.5, 0)
    got = fused_layers.attention_paged(q, k_pool, v_pool, tables, block, q_pos, hd ** -0.5, 0)
    start = 0
    for length, count in zip(lengths, rows):
        slots = fused.sequence_slots(tables[start], block, length)
        rows_ = slice(start, start + count)
        bound = blocked_bound(q[rows_], k_pool[:, slots], v_pool[:, slots], q_pos[rows_],
                              hd ** -0.5, 0)
        assert (np.abs(got[rows_].astype(np.float64) - ref[rows_]) <= bound).all()
        start += count


@pytest.mark.parametrize("shape", ["smollm2", "qwen2.5"])
@pytest.mark.parametrize("rows", [[1] * 12, [5, 40, 17, 2]], ids=["decoding", "prompts"])
def test_a_sequence_gets_its_own_bits_in_a_batch(shape, rows, pool_threads):
    """A batch step's rows of each sequence are bit for bit what that sequence's rows
    give alone: 12 decoding sequences (one-row tiles take a lone decode row's packed
    lanes, not the lanes of 12 rows), and prompt chunks of several sequences (unpacked
    lanes, the same arithmetic at any width). Keys stay under 2 x SPLIT_KEYS, where no
    tile's keys are split."""
    heads, n_kv, hd = SHAPES[shape]
    rng = np.random.default_rng(11)
    block, n_blocks = 16, 13 * 64
    k_pool = (rng.standard_normal((n_kv, block * n_blocks, hd)) * 3).astype(np.float16)
    v_pool = rng.standard_normal((n_kv, block * n_blocks, hd)).astype(np.float16)
    order = rng.permutation(n_blocks).astype(np.int32)
    lengths = [int(n) for n in rng.integers(40, 2 * paged_attention.SPLIT_KEYS, len(rows))]
    tables, q_pos = scattered_tables(lengths, rows, order, block,
                                     -(-2 * paged_attention.SPLIT_KEYS // block))
    q = (rng.standard_normal((len(q_pos), heads, hd)) * 3).astype(np.float32)
    scale = hd ** -0.5
    batch = fused_layers.attention_paged(q, k_pool, v_pool, tables, block, q_pos, scale, 0)
    start = 0
    for count in rows:
        own = slice(start, start + count)
        alone = fused_layers.attention_paged(q[own], k_pool, v_pool, tables[own], block,
                                             q_pos[own], scale, 0)
        np.testing.assert_array_equal(batch[own], alone)
        start += count


# ------------------------------------------------------------------ KV types


@njit(cache=True)
def _decode_rows(kind, rows, hd, out):
    """Every row of `rows [n, row_bytes]` decoded by the kernel's `decode_row`."""
    for r in range(rows.shape[0]):
        decode_row(kind, rows[r], 0, hd, out, r * hd)


@pytest.mark.parametrize("kind", kv_types.NAMES)
@pytest.mark.parametrize("hd", [64, 256])
def test_kv_store_and_load_bit_exact(kind, hd):
    """The numba store (RoPE + store) writes exactly apr_core's encoding (its quantize
    for q8_0 / q4_0), the kernel's row decoder gives exactly apr_core's dequantize."""
    rng = np.random.default_rng(hd)
    t_count, n_kv = 9, 2
    k = (rng.standard_normal((t_count, n_kv, hd)) * rng.uniform(0.01, 40, (1, n_kv, 1))
         ).astype(np.float32)
    k[0, 0, :7] = 0.0                                  # zeros and an all-zero block
    k[1, 1, :32] = 0.0
    v = rng.standard_normal((t_count, n_kv, hd)).astype(np.float32)
    q = np.zeros((t_count, 4, hd), np.float32)
    ours_k, ours_v = (kv_types.allocate(kind, n_kv, 16, hd) for _ in range(2))
    fused_layers.rope_store(q, k, v, None, None, 0, False, ours_k, ours_v, 3)
    want_k, want_v = (kv_types.allocate(kind, n_kv, 16, hd) for _ in range(2))
    want_k[:, 3:3 + t_count] = kv_types.encode(kind, k.transpose(1, 0, 2))
    want_v[:, 3:3 + t_count] = kv_types.encode(kind, v.transpose(1, 0, 2))
    assert ours_k.view(np.uint8).tobytes() == want_k.view(np.uint8).tobytes()
    assert ours_v.view(np.uint8).tobytes() == want_v.view(np.uint8).tobytes()
    rows = ours_k.view(np.uint8).reshape(n_kv * 16, -1)
    got = np.empty(n_kv * 16 * hd, np.float32)
    _decode_rows(kind_code(ours_k, hd), rows, hd, got)
    ref = kv_types.decode(kind, ours_k, hd, rotated=True).reshape(-1)      # as stored
    assert got.tobytes() == ref.tobytes()
    if kind != "f32":       # a lossy type: it does round
        assert not np.array_equal(kv_types.load(ours_k, hd, slice(3, 12)),
                                  k.transpose(1, 0, 2))


def test_kv_type_sizes_and_errors():
    from apr_core.errors import AprError
    assert [kv_types.row_bytes(n, 64) for n in kv_types.NAMES] == [256, 128, 68, 36]
    with pytest.raises(AprError):
        kv_types.get("q8_0", 48)            # not whole blocks of 32
    with pytest.raises(AprError):
        kv_types.get("q5_k", 64)
