"""Speculative verification of one drafted token: keep it or replace it, exactly.

    token, kept = verify_token(sampler, logits, history, draft=1234, q=None)

Greedy: the draft is kept when it is the token the sampler picks, else the sampler's pick
replaces it, so the ids are those of plain decoding. Sampling (Leviathan et al. 2023,
Chen et al. 2023): with the target's distribution `p` and the draft's `q`, the draft `d`
is kept with probability min(1, p[d] / q[d]); otherwise a token is drawn from the
residual max(0, p - q), renormalised. The token that comes out is distributed as `p`
whatever `q` is. A deterministic draft (prompt lookup) has a one-hot `q` (q=None here):
the rule keeps `d` with probability p[d] and otherwise draws from `p` without `d`.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

from .sampling import Sampler


def verify_token(sampler: Sampler, logits: np.ndarray, history: Sequence[int],
                 draft: Optional[int], q: Optional[np.ndarray] = None) -> Tuple[int, bool]:
    """(token to emit, whether it is `draft`) for `logits [n_vocab]` after `history`.

    `draft` None: no draft at this position (the bonus token after a fully kept draft):
    a plain sample. `q [n_vocab]`: the distribution the draft was drawn from (None: the
    draft was chosen deterministically)."""
    if draft is None or sampler.config.temperature <= 0.0:
        token = sampler(logits, history)                   # what plain decoding does
        return token, token == draft
    p = sampler.distribution(logits, history)              # [n_vocab] float64
    q_draft = 1.0 if q is None else float(q[draft])
    if q_draft > 0.0 and sampler.rng.random_sample() * q_draft < p[draft]:
        return int(draft), True
    if q is None:
        residual = p.copy()
        residual[draft] = 0.0
    else:
        residual = np.maximum(p - q, 0.0)                  # [n_vocab]
    if not residual.sum() > 0.0:      # p == q (then the draft was kept): float round-off
        residual = p
    return sampler.draw(residual), False


__all__ = ["verify_token"]
