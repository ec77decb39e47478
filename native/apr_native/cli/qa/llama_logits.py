"""The logits check of `apr qa`: apr's next-token logits along the golden sequence (its
prompt and greedy answer, teacher-forced) against llama.cpp's (llama-cpp-python) on the
same GGUF file and the same token ids.

llama.cpp quantizes activations to 8 bits inside its quantized matmuls, so its logits are
not apr's float32 ones, and among unlikely tokens they differ by up to ~1 logit. What a
user sees is the distribution: measured here on SmolLM2-135M and Qwen2.5-0.5B (this
golden prompt raw, two chat prompts, 17 positions each), the KL divergence of llama.cpp's
next-token distribution from apr's was at most 0.011 per position; with a subtle bug (RoPE
positions halved: `--rope-scaling linear --rope-scale 2`) its maximum along the golden
sequence was 0.77 on Qwen2.5 and 7.1 on SmolLM2. So every position must stay within
`MAX_KL`, and where apr's top-2 logit gap exceeds `CLEAR_GAP`, llama.cpp must pick the
same next token.
"""
from __future__ import annotations

from typing import Any, Sequence, Tuple

import numpy as np

from apr_core.formats.detect import GGUF

from . import FAIL, PASS, SKIP, Check

MAX_KL = 0.05            # nats, per position (measured <= 0.011)
CLEAR_GAP = 1.2          # logits: far beyond a flip by 8-bit rounding (seen below 0.1)
MAX_ANSWER_TOKENS = 16   # answer tokens compared after the prompt's last position


def llama_cpp_rows(path: str, ids: Sequence[int]) -> np.ndarray:
    """llama.cpp's logits at every position of `ids`: `[len(ids), n_vocab]` float32."""
    import llama_cpp
    llm = llama_cpp.Llama(path, n_ctx=len(ids) + 8, n_batch=max(len(ids), 8),
                          logits_all=True, verbose=False)
    try:
        llm.eval(list(ids))
        return np.array(llm.scores[:len(ids)], np.float32)          # [T, n_vocab]
    finally:
        llm.close()


def kl_divergence(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """KL(p_apr || p_llama.cpp) per row of two `[R, n_vocab]` logit arrays -> `[R]`."""
    def log_softmax(rows: np.ndarray) -> np.ndarray:
        rows = rows.astype(np.float64)                                   # [R, V]
        rows = rows - rows.max(axis=1, keepdims=True)
        return rows - np.log(np.exp(rows).sum(axis=1, keepdims=True))
    mine, ref = log_softmax(ours), log_softmax(theirs)                   # [R, V]
    return (np.exp(mine) * (mine - ref)).sum(axis=1)                     # [R]


def compare(ours: np.ndarray, theirs: np.ndarray) -> Tuple[np.ndarray, int, int]:
    """(KL per position, positions where apr's top-2 gap is clear, of those the ones where
    llama.cpp's top token is apr's)."""
    kl = kl_divergence(ours, theirs)
    ranked = np.sort(ours, axis=1)                                       # [R, V]
    clear = ranked[:, -1] - ranked[:, -2] > CLEAR_GAP                    # [R]
    same = ours.argmax(axis=1) == theirs.argmax(axis=1)                  # [R]
    return kl, int(clear.sum()), int((clear & same).sum())


def logits_check(path: str, fmt: str, engine: Any, prompt_ids: Sequence[int],
                 answer_ids: Sequence[int]) -> Check:
    """apr vs llama.cpp along `prompt_ids + answer_ids` (the golden sequence)."""
    if fmt != GGUF:
        return Check("logits", SKIP, "llama.cpp reads GGUF files only; this is {}".format(fmt))
    try:
        import llama_cpp  # noqa: F401  (the import is the availability test)
    except ImportError:
        return Check("logits", SKIP, "llama-cpp-python is not installed (pip install "
                     "llama-cpp-python)")
    if not prompt_ids:
        return Check("logits", SKIP, "needs the golden sequence (see golden)")
    ids = list(prompt_ids) + list(answer_ids[:MAX_ANSWER_TOKENS])
    rows = list(range(len(prompt_ids) - 1, len(ids)))     # each predicts the next token
    transformer = engine.transformer
    ours = transformer.forward_rows(ids, transformer.new_cache(len(ids)), rows)  # [R, V]
    try:
        theirs = llama_cpp_rows(path, ids)[rows]                                    # [R, V]
    except (ValueError, RuntimeError, OSError) as err:
        return Check("logits", FAIL, "llama.cpp cannot evaluate the file: {}".format(err))
    if theirs.shape != ours.shape:
        return Check("logits", FAIL, "llama.cpp's vocabulary is {}, apr's {}".format(
            theirs.shape[1], ours.shape[1]))
    kl, clear, agree = compare(ours, theirs)
    detail = "{} positions: KL(apr || llama.cpp) max {:.4f}, mean {:.4f} (limit {}); " \
        "llama.cpp's top token agrees at {}/{} clear positions".format(
            len(rows), float(kl.max()), float(kl.mean()), MAX_KL, agree, clear)
    if not (np.isfinite(kl).all() and kl.max() <= MAX_KL) or agree < clear:
        return Check("logits", FAIL, detail)
    return Check("logits", PASS, detail)


__all__ = ["logits_check", "compare", "kl_divergence", "llama_cpp_rows", "MAX_KL"]
