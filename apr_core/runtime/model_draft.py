"""Drafting with a small model that shares the target's tokenizer.

    drafter = ModelDrafter(small_transformer, SamplerConfig(temperature=0.0))
    ids, q = drafter.propose(tokens, 4)     # 4 guesses and the distributions they came from

The draft model keeps its own contiguous KV cache over the tokens it has seen. Before each
proposal the cache is cut back to the longest prefix it shares with the sequence (what
verification rejected is forgotten) and the rest of the sequence is fed in one pass; then
it decodes its guesses one token at a time with the target's sampler settings, so `q` is
the distribution each guess was really drawn from (one-hot when greedy).
"""
from __future__ import annotations

import dataclasses
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from .sampling import Sampler, SamplerConfig


class ModelDrafter:
    """A draft model's state for one sequence."""

    def __init__(self, model: Any, sampler: SamplerConfig) -> None:
        self.model = model
        # its own RNG stream: the draws that pick a draft must be independent of the
        # verifier's acceptance draws, or the output distribution would be skewed
        seed = None if sampler.seed is None else (sampler.seed + 0x5EED) % (1 << 32)
        self.sampler = Sampler(dataclasses.replace(sampler, seed=seed))
        self.cache = model.new_cache()
        self.seen: List[int] = []        # the tokens whose K and V `cache` holds

    def propose(self, tokens: Sequence[int], count: int
                ) -> Tuple[List[int], Optional[List[np.ndarray]]]:
        """Up to `count` guesses after `tokens` and their distributions `[n_vocab]` each
        (None when greedy: every `q` is one-hot)."""
        tokens = [int(t) for t in tokens]
        count = min(count, self.cache.capacity - len(tokens))
        if count <= 0:
            return [], None
        keep = _common_prefix(self.seen, tokens)
        if keep == len(tokens):             # the last token's logits are needed again
            keep -= 1
        self.cache.truncate(keep)
        del self.seen[keep:]
        logits = self.model.forward(tokens[keep:], self.cache, last_only=True)[-1]  # [n_vocab]
        self.seen.extend(tokens[keep:])
        greedy = self.sampler.config.temperature <= 0.0
        history = list(tokens)
        drafts: List[int] = []
        dists: List[np.ndarray] = []
        for i in range(count):
            q = self.sampler.distribution(logits, history)                 # [n_vocab]
            token = int(np.argmax(q)) if greedy else self.sampler.draw(q)
            drafts.append(token)
            dists.append(q)
            history.append(token)
            if i + 1 < count:
                logits = self.model.forward([token], self.cache)[-1]       # [n_vocab]
                self.seen.append(token)
        return drafts, None if greedy else dists


def _common_prefix(a: List[int], b: List[int]) -> int:
    """How many leading ids `a` and `b` share: list comparisons (C loops), halving the
    span where they first differ (after a rejected draft, near the end)."""
    lo, hi = 0, min(len(a), len(b))           # a[:lo] == b[:lo]; is a[:hi] == b[:hi]?
    if a[:hi] == b[:hi]:
        return hi
    while hi - lo > 1:                        # a[:hi] != b[:hi]
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


__all__ = ["ModelDrafter"]
