"""Perplexity of a model on a text, computed the way llama.cpp's `llama-perplexity` does.

The tokens (with BOS first when the tokenizer adds one) are cut into whole chunks of
`n_ctx`; each chunk is run from an empty cache with its first token replaced by BOS, and
only the second half of each chunk is scored, so every scored token has at least
`n_ctx / 2` tokens of context. PPL = exp(mean negative log-likelihood); the uncertainty is
llama.cpp's: PPL times the standard error of the mean NLL.

    result = perplexity(model.transformer, ids, n_ctx=512, bos_id=tokenizer.bos_id)
    result["ppl"], result["ppl_stderr"], result["tokens_scored"]
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from ..errors import AprError, ErrorCode


def token_nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Negative log-likelihood of each target: `logits [n, n_vocab]`, `targets [n]` -> `[n]`
    float64 (log-softmax in float64: a float32 logsumexp over 150k logits loses digits)."""
    rows = logits.astype(np.float64)                                  # [n, n_vocab]
    top = rows.max(axis=1, keepdims=True)                             # [n, 1]
    log_z = top[:, 0] + np.log(np.exp(rows - top).sum(axis=1))        # [n]
    return log_z - rows[np.arange(rows.shape[0]), targets]


def perplexity(transformer: Any, ids: Sequence[int], n_ctx: int,
               bos_id: Optional[int] = None, max_chunks: Optional[int] = None,
               on_chunk: Optional[Callable[[int, int, float], None]] = None) -> Dict[str, Any]:
    """llama.cpp's perplexity of `ids` (the whole text, tokenized) with chunks of `n_ctx`.

    `on_chunk(done, total, running_ppl)` is called after each chunk. AprError(ARGUMENT)
    when the text holds fewer than two chunks' worth of tokens (llama.cpp refuses too).
    """
    tokens = np.asarray(ids, np.int64).reshape(-1)
    if n_ctx < 4:
        raise AprError(ErrorCode.ARGUMENT, "perplexity needs a context of at least 4 tokens",
                       n_ctx=n_ctx)
    if tokens.size < 2 * n_ctx:
        raise AprError(ErrorCode.ARGUMENT, "text too short: perplexity needs at least two "
                       "chunks of tokens", tokens=int(tokens.size), n_ctx=n_ctx,
                       needed=2 * n_ctx)
    n_chunks = tokens.size // n_ctx
    if max_chunks is not None:
        n_chunks = min(n_chunks, max(1, int(max_chunks)))
    first = n_ctx // 2
    nll: List[np.ndarray] = []
    total = 0.0                      # running NLL sum (every chunk scores as many tokens)
    for chunk in range(n_chunks):
        batch = tokens[chunk * n_ctx:(chunk + 1) * n_ctx].copy()       # [n_ctx]
        if bos_id is not None:
            batch[0] = bos_id
        hidden = transformer.hidden_states(batch, transformer.new_cache(n_ctx))  # [n_ctx, d]
        # Position j predicts token j + 1; positions first .. n_ctx-2 are scored.
        logits = transformer.lm_head.matmul(hidden[first:n_ctx - 1])   # [n_ctx-1-first, V]
        nll.append(token_nll(logits, tokens[chunk * n_ctx + first + 1:(chunk + 1) * n_ctx]))
        total += float(nll[-1].sum())
        if on_chunk is not None:
            on_chunk(chunk + 1, n_chunks, math.exp(total / ((chunk + 1) * nll[-1].size)))
    values = np.concatenate(nll)                                      # [scored]
    mean = float(values.mean())
    spread = float(values.var() / (values.size - 1)) if values.size > 1 else 0.0
    ppl = math.exp(mean)
    return {"ppl": ppl, "ppl_stderr": ppl * math.sqrt(spread), "nll": mean,
            "tokens_scored": int(values.size), "chunks": n_chunks, "n_ctx": n_ctx,
            "tokens": int(tokens.size)}


__all__ = ["perplexity", "token_nll"]
