"""Long context on Qwen2.5-Coder-0.5B through the engine (numba backend, the blocked
attention kernel, the paged KV cache) with the KV cache types of `--kv-type`.

- Pass key: a 7,000-token prompt of filler text with "The pass key is 68237. Remember
  it." in the middle, asked for at the end, under `--ctx 8192`: the greedy answer holds
  the key, with f16 (the engine's default) and q8_0 KV. One test per type; each is a
  7,000-token prefill (the slow part), then a few decoded tokens.
- Perplexity (llama.cpp's method, apr_core.runtime.perplexity) on 2,048 tokens of a fixed
  text (tests/data/perplexity_text.txt, a frozen copy of this repository's README) in two
  1,024-token chunks (two of 2,048 took 10 minutes of CI; long prompts are the pass-key
  tests' part), f16 and q8_0 KV, against llama.cpp's own perplexity with the same KV
  types on the same ids (the test's docstring has the numbers). The text is frozen because
  the live README changed the ids with every edit, and llama.cpp's distance from the model
  changes with the text: on one later README, its int8 activations cost its f16
  perplexity 2.2% on the second chunk against apr's float32 numpy path, which apr's numba
  path matched to 1e-5 nats per token.
"""
import math
import os

import pytest

from apr_core.runtime.context_options import ContextOptions
from apr_core.runtime.perplexity import perplexity, token_nll

pytestmark = [pytest.mark.real_model, pytest.mark.native]

KEY = "68237"
FILLER = ("The grass is green. The sky is blue. The sun is yellow. Here we go. There and "
          "back again. ")
PROMPT_TOKENS = 7000
PPL_CHUNK = 1024
PPL_TOKENS = 2 * PPL_CHUNK
TEXT = os.path.join(os.path.dirname(__file__), "..", "data", "perplexity_text.txt")


def load(path, kv_type, ctx=8192):
    from apr_native.engine import EngineOptions, load_engine
    return load_engine(path, EngineOptions(backend="numba", context=ContextOptions(
        ctx=ctx, kv_type=kv_type)))


def pass_key_prompt(model):
    """Chat prompt ids of ~PROMPT_TOKENS tokens with the key sentence in the middle."""
    per = len(model.tokenizer.encode(FILLER * 10)) / 10.0
    half = int((PROMPT_TOKENS - 80) / 2 / per)
    text = ("There is a pass key hidden in the following text. Find it and remember it.\n\n"
            + FILLER * half + "The pass key is {}. Remember it. {} is the pass key. ".format(
                KEY, KEY) + FILLER * half + "\n\nWhat is the pass key?")
    return model.prompt_ids(text, chat=True)


@pytest.mark.parametrize("kv_type", ["f16", "q8_0"])
def test_pass_key_found_at_7000_tokens(qwen_gguf, kv_type):
    engine = load(qwen_gguf, kv_type)
    assert engine.transformer.kv_type == kv_type and engine.pool.kv_type == kv_type
    ids = pass_key_prompt(engine.model)
    assert PROMPT_TOKENS - 150 <= len(ids) <= PROMPT_TOKENS + 150
    text = engine.model.tokenizer.decode(ids)
    assert abs(text.index(KEY) / len(text) - 0.5) < 0.05          # the key sits mid-prompt
    answer = engine.generate(ids, max_tokens=12).text
    print(kv_type, repr(answer))
    assert KEY in answer


def llama_cpp_perplexity(path, ids, n_ctx, bos, kv_type):
    """llama.cpp's perplexity of `ids` (the same chunks, BOS first, second halves
    scored) with its KV cache in `kv_type` (GGML_TYPE_F16 1, GGML_TYPE_Q8_0 8; quantized
    V needs its flash attention)."""
    import numpy as np
    llama_cpp = pytest.importorskip("llama_cpp")
    code = {"f16": 1, "q8_0": 8}[kv_type]
    llm = llama_cpp.Llama(path, n_ctx=n_ctx, n_batch=512, logits_all=True, verbose=False,
                          n_threads=2, type_k=code, type_v=code, flash_attn=True)
    nll = []
    for chunk in range(len(ids) // n_ctx):
        batch = list(ids[chunk * n_ctx:(chunk + 1) * n_ctx])
        batch[0] = bos
        llm.reset()
        llm.eval(batch)
        logits = np.array(llm.scores[n_ctx // 2:n_ctx - 1], np.float64)  # [n_ctx/2 - 1, V]
        nll.append(token_nll(logits, np.array(batch[n_ctx // 2 + 1:])))
    llm.close()
    return math.exp(float(np.concatenate(nll).mean()))


@pytest.mark.oracle
def test_q8_0_kv_perplexity_within_1_percent_of_f16(qwen_gguf):
    """q8_0 KV against f16 KV, apr and llama.cpp on the same 2,048 ids (measured: apr f16
    77.385, q8_0 77.864 (+0.6%); llama.cpp 77.387, 79.307 (+2.5%)). Qwen2.5's keys have
    a few channels near 150 (its K biases): a Q8_0 block holding one quantizes the rest of
    its 32 values in steps of ~1.2, which cost llama.cpp +2.0% perplexity (apr too, +1.9%,
    before its quantized rows were rotated: apr_core.model.kv_types). Rotated, the cost is
    within the 1% the issue asks for, and below llama.cpp's; apr's f16 perplexity is within
    1% of llama.cpp's."""
    engine = load(qwen_gguf, "f16", ctx=PPL_TOKENS)
    with open(TEXT, encoding="utf-8") as f:
        ids = engine.model.tokenizer.encode(f.read())
    assert len(ids) >= PPL_TOKENS
    ids = ids[:PPL_TOKENS]
    bos = engine.model.tokenizer.bos_id
    ours, theirs = {}, {}
    for kv_type in ("f16", "q8_0"):
        engine.transformer.kv_type = kv_type           # the type of its new caches
        assert engine.transformer.new_cache(8).kv_type == kv_type
        ours[kv_type] = perplexity(engine.transformer, ids, PPL_CHUNK, bos_id=bos)["ppl"]
        theirs[kv_type] = llama_cpp_perplexity(qwen_gguf, ids, PPL_CHUNK, bos, kv_type)
    print("apr", ours, "llama.cpp", theirs)
    assert 1.0 < ours["f16"] < 100.0                    # the model reads the text
    assert abs(ours["f16"] / theirs["f16"] - 1.0) < 0.01
    assert abs(ours["q8_0"] / ours["f16"] - 1.0) < 0.01
    assert ours["q8_0"] / ours["f16"] <= theirs["q8_0"] / theirs["f16"]
    assert ours["q8_0"] != ours["f16"]                  # the cache type did change
