"""apr's greedy decode against llama.cpp's logits on the same tokens (llama-cpp-python):
the comparison test_llama_cpp_parity.py explains and the LoRA tests reuse.

    tokens, ours = apr_greedy(text_model, ids, steps)
    theirs = llama_cpp_logits(path, ids, tokens, lora_path=...)
    assert clear_steps_agree(tokens, ours, theirs) >= steps // 2
"""
import numpy as np
import pytest

LOGIT_TOL = 0.6     # centered logits of apr's TOP likeliest tokens (llama.cpp's int8 activations)
TOP = 20


def llama_cpp_logits(path, ids, continuation, **options):
    """llama.cpp's next-token logits after `ids` and after each token of `continuation`
    (`len(continuation)` rows, float32 `[n_vocab]`); `options` go to `Llama` (e.g.
    `lora_path`)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(path, n_ctx=512, logits_all=False, verbose=False, n_threads=2,
                          **options)
    rows = []
    llm.eval(ids)
    for token in continuation:
        rows.append(np.ctypeslib.as_array(llm._ctx.get_logits(),
                                          shape=(llm.n_vocab(),)).copy())
        llm.eval([token])
    llm.close()
    return rows


def apr_greedy(model, ids, steps):
    transformer = model.transformer
    cache = transformer.new_cache(len(ids) + steps)
    row = transformer.forward(ids, cache, last_only=True)[-1]         # [n_vocab]
    tokens, logits = [], []
    for _ in range(steps):
        token = int(row.argmax())
        tokens.append(token)
        logits.append(row)
        row = transformer.forward([token], cache)[-1]
    return tokens, logits


def clear_steps_agree(tokens, ours, theirs):
    """At every step llama.cpp's logits of apr's TOP likeliest tokens lie within LOGIT_TOL
    of apr's (after removing their mean shift), and where apr's top-2 gap is over twice
    that, llama.cpp picks apr's token. Returns how many steps were that clear."""
    clear = 0
    for step, (mine, ref) in enumerate(zip(ours, theirs)):
        top = np.argsort(mine)[-TOP:]                                 # apr's likeliest
        moved = ref[top] - mine[top]
        worst = np.abs(moved - moved.mean()).max()
        assert worst <= LOGIT_TOL, "step {}: llama.cpp's logits differ by {:.3f}".format(
            step, worst)
        gap = mine[top[-1]] - mine[top[-2]]
        if gap > 2 * LOGIT_TOL:
            clear += 1
            assert int(ref.argmax()) == tokens[step], (
                "step {}: apr {} (gap {:.3f}) vs llama.cpp {}".format(
                    step, tokens[step], gap, int(ref.argmax())))
    return clear
