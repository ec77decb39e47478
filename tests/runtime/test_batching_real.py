"""Continuous batching on the real models (numba kernels, as `apr serve` runs them):
batched greedy decoding gives every sequence the tokens it gets alone, prefix-cache hits
give the same logits, an exhausted KV budget preempts without changing any output, and
the reported logprobs are the log-softmax of the logits a plain session computes."""
import numpy as np
import pytest

from apr_core.runtime.batching.paged_kv import BlockPool
from apr_core.runtime.batching.request import FinishEvent, GenerationRequest, TokenEvent
from apr_core.runtime.batching.scheduler import Scheduler
from apr_core.runtime.batching.sequence import log_softmax
from apr_core.errors import AprError, ErrorCode
from apr_core.runtime.sampling import SamplerConfig

pytestmark = [pytest.mark.native, pytest.mark.real_model]

QUESTIONS = ["What is the capital of France?", "Name a primary colour.",
             "Write a haiku about the sea.", "What is 17 times 23?",
             "Explain recursion in one sentence to a child who likes trains.",
             "Say hello in Spanish.", "List three prime numbers.",
             "What does a compiler do? Answer briefly, then give an example of one.",
             "Translate 'good morning' into German.", "Why is the sky blue?"]
MAX_TOKENS = 16


@pytest.fixture(scope="module", params=["smollm2", "qwen2.5"])
def engine(request, smollm2_gguf, qwen_gguf):
    from apr_native.engine import EngineOptions, load_engine
    path = smollm2_gguf if request.param == "smollm2" else qwen_gguf
    loaded = load_engine(path, EngineOptions(max_batch=12))
    assert loaded.backend == "numba"
    return loaded


def scheduler_for(engine, blocks, max_batch=12, prefix_cache=True):
    cfg = engine.transformer.config
    pool = BlockPool(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, blocks, 16, prefix_cache,
                     kv_type=engine.transformer.kv_type)       # the engine pool's KV type
    return Scheduler(engine.transformer, engine.model.tokenizer, pool, max_batch=max_batch,
                     min_prefill_rows=engine.scheduler.min_prefill_rows)


def drive(scheduler, requests, join_every=2):
    """Submit one request every `join_every` steps; step to the end -> per request
    (tokens, logprobs, finish events) of choice 0."""
    out = [{"tokens": [], "logprobs": [], "finish": None} for _ in requests]

    def emit_for(i):
        def emit(event):
            if isinstance(event, TokenEvent):
                out[i]["tokens"].append(event.token_id)
                out[i]["logprobs"].append(event.top_logprobs)
            elif isinstance(event, FinishEvent):
                out[i]["finish"] = event
            else:
                raise event.error
        return emit
    pending, step = list(enumerate(requests)), 0
    while pending or scheduler.has_work():
        if pending and step % join_every == 0:
            i, req = pending.pop(0)
            scheduler.submit(req, emit_for(i))
        scheduler.step()
        step += 1
    return out


def chat_request(engine, question, **kw):
    ids = engine.model.prompt_ids(question, chat=True)
    return GenerationRequest(ids, SamplerConfig(temperature=0.0), MAX_TOKENS, **kw)


def test_batched_greedy_tokens_equal_decoding_alone(engine):
    requests = [chat_request(engine, q) for q in QUESTIONS]
    alone = [drive(scheduler_for(engine, 64, max_batch=1), [r])[0]["tokens"]
             for r in requests]
    scheduler = scheduler_for(engine, 400)
    together = drive(scheduler, requests, join_every=2)
    assert scheduler.stats["steps"] < sum(len(a) for a in alone)   # they did share steps
    for i, result in enumerate(together):
        assert result["tokens"] == alone[i], QUESTIONS[i]
    assert scheduler.pool.used == 0


def test_prefix_cache_hits_give_identical_logits(engine):
    """A warm request reads the cold one's blocks and computes only the rest of the
    prompt: its logprobs equal the cold request's bit for bit, and a session computing
    the same rows without any cache. (The scheduler leaves more than 16 rows to compute:
    the numba matmul takes integer dots up to 16 rows and float products above, and
    only one path gives the cold prefill's numbers.)"""
    system = ("You are a careful assistant. Answer in one short sentence, without "
              "lists, and never apologise. ") * 4
    ids = engine.model.prompt_ids("What is the capital of France?", chat=True, system=system)
    req = lambda: GenerationRequest(ids, SamplerConfig(temperature=0.0), 8, logprobs=5)
    scheduler = scheduler_for(engine, 64)
    cold = drive(scheduler, [req()])[0]
    warm = drive(scheduler, [req()])[0]
    cached = warm["finish"].cached_tokens
    assert cold["finish"].cached_tokens == 0
    rows = engine.scheduler.min_prefill_rows              # the backend's uniform rows
    assert rows == engine.transformer.kernels.uniform_rows > 16
    assert cached == (len(ids) - rows) // 16 * 16 >= 16 * 4    # the prompt's full blocks
    assert warm["tokens"] == cold["tokens"]
    assert warm["logprobs"] == cold["logprobs"]
    with engine.session() as session:
        session.forward(ids[:cached])
        logits = session.forward(ids[cached:])
        for token, top in zip(warm["tokens"], warm["logprobs"]):
            lp = log_softmax(logits)                                     # [n_vocab]
            best = np.argsort(-lp, kind="stable")[:5]
            assert top == [(int(t), float(lp[t])) for t in best]
            logits = session.forward([token])


def test_exhausted_kv_budget_preempts_and_changes_no_output(engine):
    requests = [chat_request(engine, q) for q in QUESTIONS[:6]]
    alone = [drive(scheduler_for(engine, 64, max_batch=1), [r])[0]["tokens"]
             for r in requests]
    longest = max(len(r.prompt_ids) for r in requests) + MAX_TOKENS
    blocks = 2 * -(-longest // 16)           # room for about two sequences at a time
    scheduler = scheduler_for(engine, blocks, prefix_cache=False)
    together = drive(scheduler, requests, join_every=1)
    assert scheduler.stats["preempted"] > 0
    assert [r["tokens"] for r in together] == alone
    assert scheduler.pool.used == 0 and scheduler.pool.free == blocks
    with pytest.raises(AprError) as err:     # a prompt larger than the whole budget
        scheduler.submit(GenerationRequest([1] * (blocks * 16 + 1)), lambda e: None)
    assert err.value.code is ErrorCode.MEMORY


def test_logprobs_are_log_softmax_of_the_session_logits(engine):
    """The scheduler's logprobs (chosen token + top 5) are the log-softmax of the logits
    a plain PagedSession (what `apr bench` and `apr canary` drive) computes."""
    req = chat_request(engine, QUESTIONS[0], logprobs=5)
    out = []
    scheduler = scheduler_for(engine, 64)
    scheduler.submit(req, out.append)
    while scheduler.has_work():
        scheduler.step()
    tokens = [e for e in out if isinstance(e, TokenEvent)]
    with engine.session() as session:
        logits = session.forward(req.prompt_ids)
        for event in tokens:
            lp = log_softmax(logits)                                     # [n_vocab]
            assert event.logprob == pytest.approx(lp[event.token_id], abs=1e-9)
            best = np.argsort(-lp, kind="stable")[:5]
            assert [t for t, _ in event.top_logprobs] == [int(t) for t in best]
            np.testing.assert_allclose([v for _, v in event.top_logprobs], lp[best],
                                       rtol=0, atol=1e-9)
            logits = session.forward([event.token_id])
