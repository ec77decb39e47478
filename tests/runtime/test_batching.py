"""apr_core.runtime.batching on tiny synthetic models (numpy kernels; also runs on Python 3.8):
the block pool's accounting and prefix index, a batch step equal to running each
sequence alone, and the scheduler's admission, preemption, forking and cancellation."""
import numpy as np
import pytest

from apr_core.runtime.batching.batch_kv import BatchKV
from apr_core.runtime.batching.paged_kv import BlockPool, block_bytes
from apr_core.runtime.batching.request import (ErrorEvent, FinishEvent, GenerationRequest,
                                       TokenConstraint, TokenEvent)
from apr_core.runtime.batching.scheduler import Scheduler
from apr_core.runtime.batching.session import PagedSession
from apr_core.errors import AprError, ErrorCode
from apr_core.runtime.generate import generate
from apr_core.model import Transformer
from apr_core.runtime.sampling import SamplerConfig
from letter_vocab import LetterVocab
from synthetic_models import write_gguf_model


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "m.gguf"
    write_gguf_model(path, arch="qwen2", quant="Q8_0")
    return Transformer.from_path(str(path))


Vocab = LetterVocab


def pool_for(model, blocks, block_size=4, prefix_cache=True):
    cfg = model.config
    return BlockPool(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, blocks, block_size,
                     prefix_cache)


def run(scheduler, requests, join_every=1):
    """Submit `requests` one every `join_every` steps; step until done -> per request
    (token ids, finish reasons by choice)."""
    tokens = [dict() for _ in requests]
    finish = [dict() for _ in requests]

    def emit_for(i):
        def emit(event):
            if isinstance(event, TokenEvent):
                tokens[i].setdefault(event.index, []).append(event.token_id)
            elif isinstance(event, FinishEvent):
                finish[i][event.index] = event.finish_reason
            else:
                raise event.error
        return emit
    pending = list(enumerate(requests))
    step = 0
    while pending or scheduler.has_work():
        if pending and step % join_every == 0:
            i, req = pending.pop(0)
            scheduler.submit(req, emit_for(i))
        scheduler.step()
        step += 1
    return tokens, finish


PROMPTS = [[1, 5, 9, 2, 7, 3], [4, 4, 8], [2, 9, 7, 1, 1, 3, 5, 8, 6, 2, 4, 3, 9, 1],
           [7], [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], [8, 8, 1, 2], [6, 2, 6, 2, 6, 2, 6, 2, 6],
           [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9]]


# ------------------------------------------------------------------------------ block pool

def test_pool_budget_refcounts_and_prefix_lru(model):
    cfg = model.config
    per = block_bytes(cfg, 4)
    pool = BlockPool.for_model(cfg, 3 * per + per // 2, block_size=4)
    assert pool.n_blocks == 3 and pool.free == 3
    with pytest.raises(AprError) as err:
        BlockPool.for_model(cfg, per - 1, block_size=4)
    assert err.value.code is ErrorCode.MEMORY
    a, b, c = pool.allocate(), pool.allocate(), pool.allocate()
    assert pool.allocate() is None and pool.used == 3
    key_a = pool.chain_hash(None, [1, 2, 3, 4])
    key_b = pool.chain_hash(key_a, [5, 6, 7, 8])
    assert key_b != pool.chain_hash(None, [5, 6, 7, 8])      # chained: the prefix counts
    pool.register(a, key_a)
    pool.register(b, key_b)
    pool.share(a)
    pool.release(a)
    assert pool.free == 0                                    # a still has a user
    pool.release_all([a, b, c])
    assert pool.free == 3 and pool.cached == 2
    assert pool.lookup(key_b) == b and pool.cached == 1      # taken back out of the free list
    fresh = pool.allocate()                                  # c: never cached, first
    assert fresh == c
    evicted = pool.allocate()                                # then the oldest cached: a
    assert evicted == a and pool.lookup(key_a) is None
    with pytest.raises(RuntimeError):
        pool.release(a)
        pool.release(a)


# ------------------------------------------------------------------------------ one step

@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_batch_step_equals_each_sequence_alone(model, block_size):
    """Three sequences at different positions in one forward pass: the logits of each
    equal a forward over its own contiguous cache (numpy: the same arithmetic)."""
    pool = pool_for(model, 64, block_size)
    seqs, expected = [], []
    for prompt in ([1, 5, 9, 2, 7, 3], [4, 4, 8], [2, 9, 7, 1, 1, 3, 5, 8, 6]):
        session = PagedSession(model, pool)
        session.forward(prompt[:-2])
        seqs.append(session)
        cache = model.new_cache(32)
        expected.append(model.forward(prompt, cache)[-2:])          # [2, n_vocab]
    # blocks handed out interleaved, so tables are not contiguous
    segments = [(s.blocks, s.length, 2) for s in seqs]
    for s in seqs:
        while len(s.blocks) * block_size < s.length + 2:
            s.blocks.append(pool.allocate())
    step = BatchKV(pool, segments)
    ids = [t for prompt in ([1, 5, 9, 2, 7, 3], [4, 4, 8], [2, 9, 7, 1, 1, 3, 5, 8, 6])
           for t in prompt[-2:]]
    logits = model.forward_rows(ids, step, list(range(6)))
    np.testing.assert_allclose(logits, np.concatenate(expected), rtol=0, atol=1e-5)


def test_batch_rejects_a_segment_without_blocks(model):
    pool = pool_for(model, 8)
    with pytest.raises(AprError):
        BatchKV(pool, [([pool.allocate()], 3, 2)])                  # 5 positions, 1 block of 4


# ------------------------------------------------------------------------------ scheduler

def alone(model, prompt, n):
    return generate(model, prompt, max_tokens=n)


def test_joining_sequences_get_the_tokens_they_get_alone(model):
    scheduler = Scheduler(model, Vocab(), pool_for(model, 200), max_batch=4, step_tokens=8)
    reqs = [GenerationRequest(p, max_tokens=12) for p in PROMPTS]
    tokens, finish = run(scheduler, reqs, join_every=2)
    for i, prompt in enumerate(PROMPTS):
        assert tokens[i][0] == alone(model, prompt, 12), i
        assert finish[i] == {0: "length"}
    assert scheduler.pool.used == 0


def test_kv_budget_exhaustion_preempts_and_recomputes(model):
    """12 blocks of 4 positions for 8 sequences of up to 19 + 10 positions: sequences are
    preempted, recomputed, and still give their own tokens; every block comes back."""
    pool = pool_for(model, 12, prefix_cache=False)
    scheduler = Scheduler(model, Vocab(), pool, max_batch=8, step_tokens=16)
    reqs = [GenerationRequest(p, max_tokens=10) for p in PROMPTS]
    tokens, finish = run(scheduler, reqs)
    assert scheduler.stats["preempted"] > 0
    for i, prompt in enumerate(PROMPTS):
        assert tokens[i][0] == alone(model, prompt, 10), i
    assert pool.used == 0 and pool.free == 12


def test_a_lone_sequence_that_outgrows_the_budget_ends_with_length(model):
    scheduler = Scheduler(model, Vocab(), pool_for(model, 3), max_batch=2)
    tokens, finish = run(scheduler, [GenerationRequest([1, 2, 3], max_tokens=50)])
    # 12 cache slots hold the prompt and 9 fed-back tokens; the 10th sampled token needs no slot
    assert finish[0] == {0: "length"} and len(tokens[0][0]) == 12 - 3 + 1
    with pytest.raises(AprError) as err:                 # a prompt beyond the whole budget
        scheduler.submit(GenerationRequest(list(range(1, 13)) * 2), lambda e: None)
    assert err.value.code is ErrorCode.MEMORY


def test_prefix_cache_hit_gives_the_logits_of_recomputing(model):
    """A second sequence with the same 8-token prefix takes its two blocks from the cache
    and its logits equal those of computing the prefix again with the same step split."""
    pool = pool_for(model, 16)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]
    with PagedSession(model, pool) as first:
        first.forward(prompt[:8])
        keys, parent = [], None
        for i in range(2):
            parent = pool.chain_hash(parent, prompt[4 * i:4 * i + 4])
            pool.register(first.blocks[i], parent)
            keys.append(parent)
    assert pool.cached == 2
    scheduler = Scheduler(model, Vocab(), pool)
    seen = []
    state = scheduler.submit(GenerationRequest(prompt, max_tokens=1, logprobs=0), seen.append)
    while scheduler.has_work():
        scheduler.step()
    assert state.choices[0].cached_tokens == 8 and pool.hits == 2
    with PagedSession(model, pool_for(model, 16, prefix_cache=False)) as fresh:
        fresh.forward(prompt[:8])
        want = fresh.forward(prompt[8:])                    # [n_vocab]
    z = want.astype(np.float64) - want.max()
    token = int(np.argmax(want))
    assert seen[0].token_id == token
    assert seen[0].logprob == pytest.approx(z[token] - np.log(np.exp(z).sum()), abs=1e-9)


def test_n_choices_share_the_prompt_blocks(model):
    pool = pool_for(model, 40)
    scheduler = Scheduler(model, Vocab(), pool)
    prompt = PROMPTS[2]                                     # 14 tokens: 3 full blocks + 2
    seen = []
    state = scheduler.submit(GenerationRequest(prompt, max_tokens=5, n=3), seen.append)
    scheduler.step()                                        # prefill, fork, first tokens
    shared = state.choices[0].blocks[:3]
    assert all(c.blocks[:3] == shared for c in state.choices)
    assert all(pool.refcount[b] == 3 for b in shared)
    assert len({c.blocks[3] for c in state.choices}) == 3   # the partial block: copied
    while scheduler.has_work():
        scheduler.step()
    by_choice = {}
    for event in seen:
        if isinstance(event, TokenEvent):
            by_choice.setdefault(event.index, []).append(event.token_id)
    want = alone(model, prompt, 5)
    assert by_choice == {0: want, 1: want, 2: want}         # greedy: all the same
    assert pool.used == 0


def test_seeded_choices_differ_and_repeat(model):
    cfg = SamplerConfig(temperature=1.5, seed=7)

    def sample():
        scheduler = Scheduler(model, Vocab(), pool_for(model, 40))
        tokens, _ = run(scheduler, [GenerationRequest(PROMPTS[0], cfg, 8, n=3)])
        return tokens[0]
    first, again = sample(), sample()
    assert first == again
    assert len({tuple(v) for v in first.values()}) > 1


def test_cancel_frees_blocks_and_stops_events(model):
    pool = pool_for(model, 40)
    scheduler = Scheduler(model, Vocab(), pool)
    seen = []
    state = scheduler.submit(GenerationRequest(PROMPTS[7], max_tokens=30), seen.append)
    for _ in range(3):
        scheduler.step()
    assert pool.used > 0
    scheduler.cancel(state)
    assert pool.used == 0 and not scheduler.has_work()
    count = len(seen)
    scheduler.step()
    assert len(seen) == count


class OnlyEven(TokenConstraint):
    """Allows even ids; done after three tokens."""
    finish_reason = "tool_calls"

    def __init__(self, n_vocab):
        self.n_vocab, self.count = n_vocab, 0

    def allowed(self):
        mask = np.zeros(self.n_vocab, bool)
        mask[::2] = True
        return mask

    def advance(self, token_id):
        assert token_id % 2 == 0
        self.count += 1

    def done(self):
        return self.count >= 3

    def fork(self):
        return OnlyEven(self.n_vocab)


def test_constraint_masks_and_ends_with_its_reason(model):
    scheduler = Scheduler(model, Vocab(), pool_for(model, 40))
    req = GenerationRequest(PROMPTS[0], max_tokens=20, n=2,
                            constraint=OnlyEven(model.config.n_vocab),
                            logit_bias={0: -100.0})
    tokens, finish = run(scheduler, [req])
    assert finish[0] == {0: "tool_calls", 1: "tool_calls"}
    for ids in tokens[0].values():
        assert len(ids) == 3 and all(t % 2 == 0 and t != 0 for t in ids)


def test_stop_ids_and_bad_requests(model):
    scheduler = Scheduler(model, Vocab(), pool_for(model, 40))
    first = alone(model, PROMPTS[0], 10)
    at = next(i for i in range(1, 10) if first[i] not in first[:i])   # a first occurrence
    tokens, finish = run(scheduler, [GenerationRequest(PROMPTS[0], max_tokens=10,
                                                       stop_ids=frozenset([first[at]]))])
    assert tokens[0][0] == first[:at] and finish[0] == {0: "stop"}
    for bad in ([], [model.config.n_vocab], [-1]):
        with pytest.raises(AprError):
            scheduler.submit(GenerationRequest(bad), lambda e: None)
    with pytest.raises(AprError):
        scheduler.submit(GenerationRequest([1] * model.config.max_ctx), lambda e: None)


def test_long_prompt_is_prefilled_in_chunks_while_others_decode(model):
    """step_tokens 8: a 60-token prompt takes several steps, and the sequence already
    decoding gets a token in every one of them."""
    scheduler = Scheduler(model, Vocab(), pool_for(model, 60), max_batch=2, step_tokens=8)
    decoded = []
    scheduler.submit(GenerationRequest([1, 2, 3], max_tokens=40),
                     lambda e: decoded.append(e) if isinstance(e, TokenEvent) else None)
    scheduler.step()
    long_events = []
    long_prompt = [int(t) for t in np.random.RandomState(0).randint(1, 60, 60)]
    scheduler.submit(GenerationRequest(long_prompt, max_tokens=2), long_events.append)
    steps_until_first = 0
    while not any(isinstance(e, TokenEvent) for e in long_events):
        before = len(decoded)
        scheduler.step()
        steps_until_first += 1
        assert len(decoded) == before + 1
    assert steps_until_first >= 60 // 8
    while scheduler.has_work():
        scheduler.step()
    assert [e.token_id for e in long_events if isinstance(e, TokenEvent)] == \
        alone(model, long_prompt, 2)


def test_a_failing_step_fails_its_requests_not_the_scheduler(model, monkeypatch):
    scheduler = Scheduler(model, Vocab(), pool_for(model, 40))
    seen = []
    scheduler.submit(GenerationRequest(PROMPTS[0], max_tokens=4), seen.append)

    def broken(*args):
        raise ValueError("kernel blew up")
    monkeypatch.setattr(model, "forward_rows", broken)
    scheduler.step()
    assert isinstance(seen[-1], ErrorEvent) and scheduler.pool.used == 0
    monkeypatch.undo()
    tokens, _ = run(scheduler, [GenerationRequest(PROMPTS[1], max_tokens=3)])
    assert tokens[0][0] == alone(model, PROMPTS[1], 3)
