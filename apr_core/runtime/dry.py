"""DRY ("Don't Repeat Yourself") repetition penalty, llama.cpp's semantics.

    tokens, penalties = dry_penalties(history, multiplier=0.8, base=1.75, allowed_length=2,
                                      last_n=-1, breakers=frozenset({198}))
    logits[tokens] -= penalties

A token is penalised when putting it next would extend a repetition: if the last `n`
tokens of the window also occur earlier, followed by token t, then choosing t repeats
`n + 1` tokens. For each such t the longest `n` counts; when `n >= allowed_length` its
logit loses `multiplier * base ** (n - allowed_length)` (the exponent capped so the
penalty stays a finite float32). Sequence breakers (tokens whose text contains a breaker
string such as "\\n" or ":") end a repetition: `n` is at most the number of tokens after
the most recent breaker, and a breaker token itself is never penalised.
"""
from __future__ import annotations

import math
from typing import Any, Dict, FrozenSet, Sequence, Tuple

import numpy as np

DEFAULT_BREAKERS = ("\n", ":", "\"", "*")
MAX_BREAKERS, MAX_BREAKER_CHARS = 32, 40    # a request's breakers (llama.cpp: 40 characters)
REMEMBERED_SETS = 8                          # breaker sets remembered per tokenizer
FLOAT32_MAX_LOG = 88.7228391            # log(float32 max): the cap of base ** exponent


def dry_penalties(history: Sequence[int], multiplier: float, base: float,
                  allowed_length: int, last_n: int, breakers: FrozenSet[int]
                  ) -> Tuple[np.ndarray, np.ndarray]:
    """(token ids [k] int64, penalties [k] float64) to subtract from the logits."""
    none = (np.zeros(0, np.int64), np.zeros(0, np.float64))
    if multiplier == 0.0 or base < 1.0 or last_n == 0:
        return none
    window = np.asarray(list(history)[-last_n:] if last_n > 0 else list(history), np.int64)
    size = window.size
    if size <= allowed_length:
        return none
    # tokens after the most recent breaker: no repetition reaches further back
    limit = size
    if breakers:
        is_breaker = np.fromiter((int(t) in breakers for t in window), bool, size)
        found = np.nonzero(is_breaker)[0]
        if found.size:
            limit = size - 1 - int(found[-1])
    if limit < allowed_length:
        return none
    # match[j]: how many tokens ending at j equal the tokens ending at the last one
    ends = np.arange(size - 1)                                     # [size-1] earlier ends
    match = np.zeros(size - 1, np.int64)
    alive = ends
    n = 0
    while alive.size and n < limit:
        ok = alive - n >= 0
        alive = alive[ok]
        same = window[alive - n] == window[size - 1 - n]
        alive = alive[same]
        n += 1
        match[alive] = n
    match = np.minimum(match, limit)
    candidates = window[ends + 1]                                  # what followed each end
    keep = match >= allowed_length
    longest: Dict[int, int] = {}
    for token, length in zip(candidates[keep].tolist(), match[keep].tolist()):
        if token not in breakers and length > longest.get(token, -1):
            longest[token] = length
    if not longest:
        return none
    cap = int(FLOAT32_MAX_LOG / math.log(base)) if base > 1.000001 else 0
    tokens = np.fromiter(longest.keys(), np.int64, len(longest))
    exponents = np.fromiter(longest.values(), np.int64, len(longest)) - allowed_length
    if cap > 0:
        exponents = np.minimum(exponents, cap)
    return tokens, multiplier * np.power(float(base), exponents.astype(np.float64))


def breaker_ids(tokenizer: Any, breakers: Sequence[str]) -> FrozenSet[int]:
    """The ids of the tokens whose text contains one of `breakers` (remembered on the
    tokenizer). llama.cpp also joins a breaker split over several tokens; for
    one-character breakers (the defaults) the two rules are the same."""
    key = tuple(breakers)
    remembered = getattr(tokenizer, "_dry_breakers", None)
    if isinstance(remembered, dict) and key in remembered:
        return remembered[key]
    wanted = [b.encode("utf-8") for b in breakers if b]
    found = frozenset(token for token in range(tokenizer.n_vocab)
                      if any(b in tokenizer.token_bytes(token) for b in wanted))
    try:
        if not isinstance(remembered, dict):
            remembered = {}
            tokenizer._dry_breakers = remembered
        while len(remembered) >= REMEMBERED_SETS:      # client-chosen sets stay bounded
            del remembered[next(iter(remembered))]
        remembered[key] = found
    except AttributeError:            # a tokenizer with __slots__: computed each time
        pass
    return found


__all__ = ["dry_penalties", "breaker_ids", "DEFAULT_BREAKERS", "MAX_BREAKERS",
           "MAX_BREAKER_CHARS"]
