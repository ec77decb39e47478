"""A restored session skips the saved prompt's prefill, measured in one process on the numba
backend (so no start-up cost mixes in): a long conversation's next prompt computed cold by a
fresh engine, and by a fresh engine that first restored the session of the conversation so
far. The restored engine computes only the new turn's rows; its greedy answer equals the
one the saving engine gives when it simply goes on (same prefix-cache hits, same bytes).
Times are printed, not asserted (house rule 6); the row counts are asserted.
"""
import os
import time

import pytest

pytestmark = [pytest.mark.native, pytest.mark.real_model]

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_TOKENS = 16


def text_slice(start, length):
    with open(os.path.join(HERE, "..", "data", "perplexity_text.txt"), encoding="utf-8") as f:
        return f.read()[start:start + length]


def fresh_engine(path):
    """An engine whose kernels have already run a long and a short pass (on text that
    shares no KV block with the conversation)."""
    from apr_native.engine import EngineOptions, load_engine
    engine = load_engine(path, EngineOptions(backend="numba"))
    engine.generate(engine.model.prompt_ids(text_slice(40000, 1500), chat=False),
                    max_tokens=4)
    return engine


def cached_tokens(engine):
    return engine.scheduler.stats["cached_tokens"]


def test_restored_session_computes_only_the_new_turn(qwen_gguf, numba_ready, tmp_path):
    from apr_core.runtime import kv_session
    from apr_native.hub_store import model_sha256

    messages = [{"role": "system", "content": "Answer questions about this README.\n\n"
                 + text_slice(0, 2400)},
                {"role": "user", "content": "What is apr_core?"}]
    saver = fresh_engine(qwen_gguf)
    first_ids = saver.model.chat_ids(messages)
    first = saver.generate(first_ids, max_tokens=MAX_TOKENS)
    messages += [{"role": "assistant", "content": first.text},
                 {"role": "user", "content": "Which command line does apr_native add?"}]
    next_ids = saver.model.chat_ids(messages)
    sha = model_sha256(qwen_gguf)
    state = kv_session.capture(saver.pool, saver.transformer, first_ids + first.token_ids, sha)
    path = str(tmp_path / "readme.aprs")
    kv_session.save(path, state)
    before = cached_tokens(saver)
    went_on = saver.generate(next_ids, max_tokens=MAX_TOKENS)      # never interrupted
    reused_by_saver = cached_tokens(saver) - before

    cold_engine = fresh_engine(qwen_gguf)
    before = cached_tokens(cold_engine)
    cold = cold_engine.generate(next_ids, max_tokens=MAX_TOKENS)
    assert cached_tokens(cold_engine) == before                    # computed every row

    resumed_engine = fresh_engine(qwen_gguf)
    start = time.perf_counter()
    loaded = kv_session.load(path)
    kv_session.check_fits(loaded, sha, resumed_engine.transformer)
    restored = kv_session.restore(resumed_engine.pool, loaded)
    restore_seconds = time.perf_counter() - start
    before = cached_tokens(resumed_engine)
    resumed = resumed_engine.generate(next_ids, max_tokens=MAX_TOKENS)
    reused = cached_tokens(resumed_engine) - before

    assert restored == state.n_tokens > 500
    assert reused == reused_by_saver and 0 < reused <= restored
    assert resumed.token_ids == went_on.token_ids
    print("\nQwen2.5-0.5B, {} prompt tokens: cold prefill {:.3f} s; after restoring a "
          "{}-token session ({:.1f} MiB, loaded and restored in {:.3f} s) only {} rows "
          "computed: prefill {:.3f} s ({:.1f}x less); the cold answer {} the resumed one"
          .format(len(next_ids), cold.prefill_seconds, restored,
                  loaded.nbytes / 1048576.0, restore_seconds, len(next_ids) - reused,
                  resumed.prefill_seconds,
                  cold.prefill_seconds / max(resumed.prefill_seconds, 1e-9),
                  "equals" if cold.token_ids == resumed.token_ids else "differs from"))
