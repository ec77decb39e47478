"""Shared by the WASM tests: what they must reproduce of native apr on SmolLM2, how closely,
and how a missing prerequisite is handled."""
import os

import pytest

PROMPT = "The capital of France is"
QUESTION = "What is the capital of France?"
GREEDY = 8
# WASM numpy has no BLAS, so sums run in another order: logits agree to rounding only.
LOGIT_TOLERANCE = 1e-3


def llama_cpp_logits(path, ids):
    """llama.cpp's logits `[len(ids), vocab]` at every position of `ids` (llama-cpp-python,
    2 threads): the yardstick for kernels that round activations as llama.cpp does."""
    import numpy as np
    try:
        import llama_cpp
    except ImportError:
        require(False, "llama-cpp-python (the oracle) is missing")
    llm = llama_cpp.Llama(path, n_ctx=256, logits_all=True, verbose=False, n_threads=2)
    llm.eval(list(ids))
    return np.array(llm.scores[:len(ids)], np.float32)


def next_token_kl(reference, other):
    """KL(softmax(reference) || softmax(other)) per position `[T]`, float64."""
    import numpy as np
    a = reference.astype(np.float64)
    b = other.astype(np.float64)
    log_p = a - a.max(-1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(-1, keepdims=True))
    log_q = b - b.max(-1, keepdims=True)
    log_q -= np.log(np.exp(log_q).sum(-1, keepdims=True))
    return (np.exp(log_p) * (log_p - log_q)).sum(-1)


def require(condition, reason):
    """Skip locally, fail in CI: the WASM requirement must not vanish into silent skips."""
    if condition:
        return
    if os.environ.get("CI"):
        pytest.fail("wasm_tests prerequisite missing in CI: " + reason)
    pytest.skip(reason)


def top2_gaps(transformer, ids, tokens):
    """Native's top-2 logit gap at each of the greedy steps that produced `tokens` after
    `ids` (full forward passes; float32)."""
    import numpy as np
    gaps, history = [], list(ids)
    for token in tokens:
        top = np.sort(transformer.forward(history)[-1])
        gaps.append(float(top[-1] - top[-2]))
        history.append(int(token))
    return gaps


def gap_error(reference, other, top=10):
    """The most `other` moves the gap between any two of `reference`'s `top` candidates, over
    the positions of two logit arrays `[T, vocab]`: the error that decides a greedy step."""
    import numpy as np
    worst = 0.0
    for row, moved in zip(reference, other):
        ids = np.argsort(row)[-top:]
        shift = moved[ids].astype(np.float64) - row[ids]
        worst = max(worst, float(shift.max() - shift.min()))
    return worst


def assert_greedy_ties_aside(got, want, gaps, error, least):
    """Greedy tokens equal native's, ties aside: up to the first step where native's top-2
    gap is under `error` (`gap_error` measured on the prompt: the most the kernels moved a
    gap among the leading candidates), which that error can flip; after a flip the
    histories differ, so nothing after it is compared. At least `least` steps (>= 1, each
    model's from its measured gaps) must be compared; returns how many were, and prints it."""
    assert least >= 1
    compared = len(want)
    for step, (mine, theirs, gap) in enumerate(zip(got, want, gaps)):
        if gap < error:
            compared = step
            break
        assert mine == theirs, (step, got, want, gaps, error)
    print("greedy steps compared: {} of {} (at least {}; gap error {:.4f}, native gaps {})"
          .format(compared, len(want), least, error, ["{:.3f}".format(g) for g in gaps]))
    assert compared >= least, ("too few greedy steps compared", compared, least, gaps, error)
    return compared
