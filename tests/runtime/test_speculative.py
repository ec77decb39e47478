"""Speculative decoding on tiny synthetic models (numpy kernels; also runs on Python 3.8):
prompt-lookup drafts, the verification rule's output distribution (chi-square against the
target's softmax, bounds fixed before the draws), the scheduler's speculative steps
(greedy ids as plain decoding, sampled tokens distributed as plain sampling, with lookup
and with a draft model), and the counters."""
import math

import numpy as np
import pytest

from apr_core.errors import AprError
from apr_core.model import Transformer
from apr_core.runtime.batching.paged_kv import BlockPool
from apr_core.runtime.batching.request import FinishEvent, GenerationRequest, TokenEvent
from apr_core.runtime.batching.scheduler import Scheduler
from apr_core.runtime.lookup_draft import lookup_draft
from apr_core.runtime.sampling import Sampler, SamplerConfig, softmax
from apr_core.runtime.speculative import SpeculativeConfig
from apr_core.runtime.verify import verify_token
from letter_vocab import LetterVocab
from synthetic_models import write_gguf_model

N_VOCAB = 8


def chi2_bound(df, z=3.090):
    """The 0.999 quantile of chi-square with `df` degrees of freedom (Wilson-Hilferty)."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


def chi2(counts, expected):
    """Pearson's statistic, cells with expected count < 5 pooled into one."""
    counts, expected = np.asarray(counts, float), np.asarray(expected, float)
    small = expected < 5
    c = np.append(counts[~small], counts[small].sum())
    e = np.append(expected[~small], expected[small].sum())
    keep = e > 0
    return float(((c[keep] - e[keep]) ** 2 / e[keep]).sum()), int(keep.sum()) - 1


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A target and a different (weaker) draft over the same 8-token vocabulary."""
    d = tmp_path_factory.mktemp("spec")
    write_gguf_model(d / "t.gguf", arch="qwen2", quant="Q8_0", seed=3, n_vocab=N_VOCAB)
    write_gguf_model(d / "d.gguf", arch="qwen2", quant="Q8_0", seed=11, n_vocab=N_VOCAB)
    return Transformer.from_path(str(d / "t.gguf")), Transformer.from_path(str(d / "d.gguf"))


Vocab = LetterVocab


def run(model, prompt, sampler, max_tokens, spec=None, rows=1):
    cfg = model.config
    pool = BlockPool(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, 64, 4)
    sched = Scheduler(model, Vocab(), pool, 1, 64, rows)
    events = []
    sched.submit(GenerationRequest(prompt, sampler, max_tokens, speculative=spec),
                 events.append)
    while sched.has_work():
        sched.step()
    tokens = [e.token_id for e in events if isinstance(e, TokenEvent)]
    finish = [e for e in events if isinstance(e, FinishEvent)][0]
    return tokens, finish, pool


# ---------------------------------------------------------------- drafting

def test_lookup_draft_follows_the_most_recent_longest_match():
    # suffix [1, 2] occurs at 0 (then 3, 4) and at 5 (then 9): the most recent wins
    assert lookup_draft([1, 2, 3, 4, 0, 1, 2, 9, 7, 1, 2], 3) == [9, 7, 1]
    # the 3-gram [7, 1, 2] beats the more recent 2-gram match
    assert lookup_draft([7, 1, 2, 5, 6, 1, 2, 8, 7, 1, 2], 2) == [5, 6]
    assert lookup_draft([1, 2, 3], 4) == []                    # nothing repeats
    assert lookup_draft([5, 6, 5], 4) == [6, 5]                 # unigram, up to the end
    assert lookup_draft([5, 6, 5], 4, ngram_min=2) == []
    assert lookup_draft([5, 6, 5], 0) == []


def test_config_is_validated(models):
    with pytest.raises(AprError):
        SpeculativeConfig("nope")
    with pytest.raises(AprError):
        SpeculativeConfig("lookup", draft_max=0)
    with pytest.raises(AprError):
        SpeculativeConfig("draft")                               # no draft model
    SpeculativeConfig("draft", draft_model=models[1])


# ---------------------------------------------------------------- the verification rule

LOGITS = np.array([2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, 3.0])
DRAWS = 20000


@pytest.mark.parametrize("q", [None, softmax(np.array([0.0, 3.0, 0.0, 0.0, 1.0, 0.0, 2.0,
                                                        -2.0]))], ids=["lookup", "draft"])
def test_verified_token_is_distributed_as_the_target(q):
    """Draft 0 (one-hot q) or a draft drawn from q: the emitted token ~ softmax(LOGITS)."""
    p = softmax(LOGITS)
    sampler = Sampler(SamplerConfig(temperature=1.0, seed=1234))
    draft_rng = np.random.RandomState(99)
    counts = np.zeros(N_VOCAB)
    kept = 0
    for _ in range(DRAWS):
        draft = 1 if q is None else int(draft_rng.choice(N_VOCAB, p=q))
        token, was_kept = verify_token(sampler, LOGITS, [], draft, q)
        counts[token] += 1
        kept += was_kept
    stat, df = chi2(counts, DRAWS * p)
    assert df == N_VOCAB - 1 and stat < chi2_bound(df), (stat, counts, DRAWS * p)
    assert 0 < kept < DRAWS                                  # both branches ran
    if q is None:                                            # kept with probability p[1]
        assert abs(kept / DRAWS - p[1]) < 4 * math.sqrt(p[1] * (1 - p[1]) / DRAWS)


def test_greedy_verification_keeps_only_the_argmax():
    sampler = Sampler(SamplerConfig(temperature=0.0))
    assert verify_token(sampler, LOGITS, [], 7) == (7, True)
    assert verify_token(sampler, LOGITS, [], 0) == (7, False)
    assert verify_token(sampler, LOGITS, [], None) == (7, False)


# ---------------------------------------------------------------- the scheduler

PROMPT = [0, 1, 2, 3, 4, 5, 6, 7, 1, 2, 3]


@pytest.mark.parametrize("mode", ["lookup", "draft"])
def test_greedy_ids_equal_plain_decoding(models, mode):
    target, draft = models
    spec = SpeculativeConfig(mode, draft_max=4,
                             draft_model=draft if mode == "draft" else None)
    greedy = SamplerConfig(temperature=0.0)
    plain, _, _ = run(target, PROMPT, greedy, 40)
    fast, finish, pool = run(target, PROMPT, greedy, 40, spec)
    assert fast == plain and len(plain) == 40
    s = finish.speculative
    assert s["drafted_tokens"] > s["accepted_tokens"]             # rejected drafts
    if mode == "lookup":          # (the other random model's greedy guesses all miss)
        assert s["accepted_tokens"] > 0 and s["decode_passes"] < 39
    assert s["decoded_tokens"] == 39
    assert pool.free == pool.n_blocks                              # every block came back


def test_the_target_as_its_own_draft_is_always_accepted(models):
    target, _ = models
    tokens, finish, _ = run(target, PROMPT, SamplerConfig(temperature=0.0), 21,
                            SpeculativeConfig("draft", draft_max=4, draft_model=target))
    s = finish.speculative
    assert s["acceptance_rate"] == 1.0 and s["decode_passes"] == 4   # 20 tokens, 5 a pass


def test_rows_cap_holds_drafts_below_the_backends_uniform_rows(models):
    target, _ = models
    plain, _, _ = run(target, PROMPT, SamplerConfig(temperature=0.0), 29)
    capped, finish, _ = run(target, PROMPT, SamplerConfig(temperature=0.0), 29,
                            SpeculativeConfig("draft", draft_model=target), rows=5)
    assert capped == plain
    assert finish.speculative["tokens_per_pass"] == 4.0       # pending + 3 drafts a pass


@pytest.mark.parametrize("mode", ["lookup", "draft"])
def test_sampled_tokens_are_distributed_as_plain_sampling(models, mode):
    """Many seeds: the first two tokens (the second one verified against a draft) against
    p(t1) * p(t2 | t1) from the target's own logits."""
    target, draft = models
    spec = SpeculativeConfig(mode, draft_max=2,
                             draft_model=draft if mode == "draft" else None)
    p1 = softmax(target.forward(PROMPT)[-1])                          # [V]
    joint = np.array([p1[a] * softmax(target.forward(PROMPT + [a])[-1])
                      for a in range(N_VOCAB)])                        # [V, V]
    n = 1500
    counts = np.zeros((N_VOCAB, N_VOCAB))
    drafted = accepted = 0
    for seed in range(n):
        tokens, finish, _ = run(target, PROMPT, SamplerConfig(temperature=1.0, seed=seed),
                                3, spec)
        counts[tokens[0], tokens[1]] += 1
        drafted += finish.speculative["drafted_tokens"]
        accepted += finish.speculative["accepted_tokens"]
    stat, df = chi2(counts.ravel(), n * joint.ravel())
    assert df >= 20 and stat < chi2_bound(df), (stat, df)
    assert drafted >= n and 0 < accepted < drafted        # every step drafted; both branches


# ---------------------------------------------------------------- the KV cache after rollback

def test_greedy_ids_equal_plain_decoding_up_to_the_end_of_the_context(models):
    """The synthetic models' context is 64 tokens: drafts are cut at its end and both runs
    stop there with "length"."""
    target, _ = models
    greedy = SamplerConfig(temperature=0.0)
    plain, plain_end, _ = run(target, PROMPT, greedy, 200)
    for spec in (SpeculativeConfig("lookup", draft_max=8),
                 SpeculativeConfig("draft", draft_max=8, draft_model=target)):
        fast, finish, pool = run(target, PROMPT, greedy, 200, spec)
        assert fast == plain and len(PROMPT) + len(plain) == target.config.max_ctx
        assert finish.finish_reason == plain_end.finish_reason == "length"
        assert pool.free == pool.n_blocks


def _pool_arrays(pool):
    return [a.copy() for a in pool.k + pool.v]          # each [n_kv, slots, hd]


@pytest.fixture(scope="module")
def target_hd32(tmp_path_factory):
    """backend -> the target's kind of model with head_dim 32 (whole Q8_0 / Q4_0 blocks per
    row), built on first use (numba only where the native tests run)."""
    d = tmp_path_factory.mktemp("spec32")
    write_gguf_model(d / "t.gguf", arch="qwen2", quant="Q8_0", seed=3, n_vocab=N_VOCAB,
                     n_heads=2, n_kv_heads=1)
    built = {}

    def on(backend):
        if backend not in built:
            kernels = None
            if backend == "numba":
                from apr_native import backends
                kernels = backends.select("numba")
            built[backend] = Transformer.from_path(str(d / "t.gguf"), kernels=kernels)
        return built[backend]
    return on


NUMBA = pytest.mark.native


@pytest.mark.parametrize("kv_type,backend", [
    ("f32", None), ("f16", "numpy"), ("q8_0", "numpy"), ("q4_0", "numpy"),
    pytest.param("q8_0", "numba", marks=NUMBA), pytest.param("q4_0", "numba", marks=NUMBA)])
def test_rollback_leaves_the_paged_cache_as_if_never_drafted(models, target_hd32, kv_type,
                                                             backend):
    """One decode step whose draft (3 tokens) is rejected at its first token: the pool
    differs from before the step only at the pending token's slot (what a plain decode
    step writes); the three draft slots hold their bytes from before (zeros), and the
    block the draft alone needed is free again. For every KV type: a row is one position
    (apr_core.model.kv_types), so quantized blocks roll back byte for byte too."""
    target = models[0] if backend is None else target_hd32(backend)
    cfg = target.config
    pool = BlockPool(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, 64, 4, kv_type=kv_type)
    sched = Scheduler(target, Vocab(), pool, 1, 64)
    events = []
    sched.submit(GenerationRequest(PROMPT, SamplerConfig(temperature=0.0), 40,
                                   speculative=SpeculativeConfig("lookup", draft_max=3)),
                 events.append)
    def no_draft(tokens, limit):             # one token per step until the step under test
        speculator.draft, speculator.q = [], None
        return []
    for _ in range(200):                    # (bounded: a finished sequence fails, not hangs)
        if sched.running and sched.running[0].generated >= 2 \
                and len(sched.running[0].tokens) % 4 == 3:   # the draft runs into a new block
            break
        assert sched.running or not events, "the sequence ended before the step under test"
        if sched.running:
            speculator = sched.running[0].speculator
            speculator.propose = no_draft
        sched.step()
    else:
        pytest.fail("no step reached a block's last slot")
    seq = sched.running[0]
    pending = seq.computed                                   # its position
    right = int(np.argmax(target.forward(seq.tokens)[-1]))   # what greedy decoding picks

    def wrong_draft(tokens, limit):
        seq.speculator.draft, seq.speculator.q = [(right + 1) % N_VOCAB, 0, 1], None
        return seq.speculator.draft
    seq.speculator.propose = wrong_draft
    before, free = _pool_arrays(pool), pool.free
    blocks = list(seq.blocks)
    sched.step()
    assert seq.tokens[-1] == right and seq.computed == pending + 1
    slot = blocks[pending // 4] * 4 + pending % 4
    for old, new in zip(before, _pool_arrays(pool)):
        changed = np.nonzero((old != new).any(axis=(0, 2)))[0]
        assert changed.tolist() == [slot]
    assert seq.blocks == blocks and pool.free == free      # draft rows' block released


def test_contiguous_cache_truncation_is_byte_exact(models):
    """The draft model's own cache: store 7 positions, cut back to 4 -> the bytes of a cache
    that only ever stored the first 4."""
    target, _ = models
    ids = PROMPT[:7]
    long_cache, short_cache = target.new_cache(), target.new_cache()
    target.forward(ids[:4], long_cache)
    target.forward(ids[4:], long_cache)
    target.forward(ids[:4], short_cache)
    long_cache.truncate(4)
    assert long_cache.length == short_cache.length == 4
    assert [a.tobytes() for a in long_cache.k + long_cache.v] == \
        [a.tobytes() for a in short_cache.k + short_cache.v]
    with pytest.raises(AprError):
        long_cache.truncate(5)
