"""Prompt-lookup drafting: guess the next tokens by finding the text so far in itself.

    draft = lookup_draft(tokens, max_tokens=8)     # [] when no n-gram repeats

When a model copies its input (editing a function, quoting, filling a template), the
last few tokens have usually appeared before, and what followed them then is a good
guess of what follows now. The guess is free (no model runs), and speculative
verification keeps only what the target model would have produced anyway, so a bad guess
costs a few extra rows in one forward pass, never a different output.
"""
from __future__ import annotations

from typing import List, Sequence

import numpy as np

DEFAULT_NGRAM_MAX = 4       # longest suffix searched for (longer = more specific)
DEFAULT_NGRAM_MIN = 1       # shortest suffix accepted as a match


def lookup_draft(tokens: Sequence[int], max_tokens: int, ngram_max: int = DEFAULT_NGRAM_MAX,
                 ngram_min: int = DEFAULT_NGRAM_MIN) -> List[int]:
    """Up to `max_tokens` ids that followed the most recent earlier occurrence of the
    longest suffix of `tokens` (from `ngram_max` down to `ngram_min` tokens) that occurs
    earlier; [] when none does."""
    n_total = len(tokens)
    if max_tokens <= 0 or n_total < 2:
        return []
    ids = np.asarray(tokens, np.int64)                                 # [L]
    for n in range(min(ngram_max, n_total - 1), max(ngram_min, 1) - 1, -1):
        suffix = ids[n_total - n:]                                     # [n]
        # start positions s < L - n where ids[s:s+n] == suffix (the suffix itself excluded)
        starts = np.nonzero(ids[:n_total - n] == suffix[0])[0]         # [m]
        for offset in range(1, n):
            if starts.size == 0:
                break
            starts = starts[ids[starts + offset] == suffix[offset]]
        if starts.size:
            follow = int(starts[-1]) + n                               # most recent match
            return [int(t) for t in ids[follow:follow + max_tokens]]
    return []


__all__ = ["lookup_draft", "DEFAULT_NGRAM_MAX", "DEFAULT_NGRAM_MIN"]
