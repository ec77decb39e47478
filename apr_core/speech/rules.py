"""The per-step logit rules of Whisper decoding (CTranslate2's logits processors for
Whisper, in the order it applies them): suppressed tokens, blank suppression at the first
step, and the timestamp rules. See `decoding.py` for what each rule means."""
from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np


class Rules(NamedTuple):
    """What constrains each step's logits (token ids from the model's generation block)."""

    suppress: np.ndarray            # ids suppressed at every step
    suppress_begin: np.ndarray      # ids suppressed at the first step (blank, eot)
    timestamps: bool                # apply the timestamp rules
    eot: int
    no_timestamps: int
    timestamp_begin: int
    timestamp_end: int              # last timestamp id (vocabulary size - 1)
    max_initial_timestamp: int      # last allowed id for the first timestamp


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """[B, V] -> [B, V] in float64 (-inf stays -inf)."""
    shifted = logits.astype(np.float64)
    shifted -= shifted.max(axis=-1, keepdims=True)
    total = np.exp(shifted).sum(axis=-1, keepdims=True)
    shifted -= np.log(total)
    return shifted


def _logsumexp(x: np.ndarray) -> float:
    top = x.max()
    return float(top + np.log(np.exp(x - top).sum())) if np.isfinite(top) else float(top)


def constrain(logits: np.ndarray, sequences: Sequence[Sequence[int]], step: int,
              rules: Rules) -> np.ndarray:
    """Apply the rules to `logits` [B, V] (in place: disabled ids become -inf) for rows
    whose generated tokens so far are `sequences`; returns the log probabilities [B, V]."""
    neg = -np.inf
    logits[:, rules.suppress] = neg
    if step == 0 and rules.suppress_begin.size:
        logits[:, rules.suppress_begin] = neg
    if not rules.timestamps:
        return log_softmax(logits)
    begin, end = rules.timestamp_begin, rules.timestamp_end
    check = []
    for row, seq in enumerate(sequences):
        logits[row, rules.no_timestamps] = neg
        if step == 0:
            logits[row, :begin] = neg                       # start with a timestamp...
            logits[row, rules.max_initial_timestamp + 1:end + 1] = neg   # ...an early one
            continue
        last = seq[step - 1]
        if last >= begin:
            penultimate = seq[step - 2] if step - 1 > 0 else last
            if penultimate >= begin:                        # a pair just closed: text next
                logits[row, begin:end + 1] = neg
            else:                                           # an open pair: close it or end
                logits[row, :rules.eot] = neg
                logits[row, begin:last] = neg
                check.append(row)
        else:
            check.append(row)
            for token in reversed(seq[:step]):              # timestamps never go back
                if token >= begin:
                    logits[row, begin:token + 1] = neg
                    break
    log_probs = log_softmax(logits)
    for row in check:       # a row whose rule fires is normalised again without its text
        text_best = log_probs[row, :begin].max()
        if _logsumexp(log_probs[row, begin:end + 1]) > text_best:
            logits[row, :begin] = neg
            log_probs[row] = log_softmax(logits[row:row + 1])[0]
    return log_probs


__all__ = ["Rules", "constrain", "log_softmax"]
