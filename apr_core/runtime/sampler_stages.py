"""Sampler stages that draw on the RNG or keep state: XTC and Mirostat v1 (llama.cpp's
semantics), beside the pure filters of `sampling.py`.

    z = xtc_filter(z, probability=0.5, threshold=0.1, rng=rng)   # logits [n] -> [n]
    token, mu = mirostat_v1(z, mu, tau=5.0, eta=0.1, draw=sampler.draw)
"""
from __future__ import annotations

from typing import Callable, Tuple

import numpy as np

MIROSTAT_M = 100            # tokens Mirostat v1 estimates the Zipf exponent from

NEG_INF = -np.inf


def softmax(logits: np.ndarray) -> np.ndarray:
    """`[n] -> [n]` float64 probabilities (-inf logits get 0)."""
    z = np.asarray(logits, np.float64)
    z = z - np.max(z)
    e = np.exp(z)
    return e / e.sum()


def xtc_filter(logits: np.ndarray, probability: float, threshold: float,
               rng: np.random.RandomState, min_keep: int = 1) -> np.ndarray:
    """Exclude Top Choices: with chance `probability`, of the tokens whose probability is
    at least `threshold`, remove all but the least likely one (when there are two or
    more, and at least `min_keep` tokens stay). The draw is taken whenever the stage is
    on, so the RNG stream does not depend on the logits."""
    z = np.array(logits, np.float64)
    if probability <= 0.0 or threshold > 0.5 or np.count_nonzero(z > NEG_INF) < 2:
        return z
    if rng.random_sample() > probability:
        return z
    probs = softmax(z)
    order = np.argsort(-probs, kind="stable")                  # most likely first
    above = int(np.count_nonzero(probs[order] >= threshold))
    alive = int(np.count_nonzero(probs > 0.0))
    last = above - 1                                           # least likely above it
    if last > 0 and alive - last >= min_keep:
        z[order[:last]] = NEG_INF
    return z


def mirostat_v1(logits: np.ndarray, mu: float, tau: float, eta: float,
                draw: Callable[[np.ndarray], int], m: int = MIROSTAT_M
                ) -> Tuple[int, float]:
    """Mirostat v1: estimate the Zipf exponent s from the top `m` probabilities, keep the
    top k that makes the expected surprise 2**mu, draw, and move mu by `eta` times the
    observed surprise's distance from `tau`. Returns (token, new mu)."""
    n_vocab = logits.shape[-1]
    probs = softmax(logits)
    order = np.argsort(-probs, kind="stable")
    p = probs[order]                                           # sorted, descending
    top = min(m - 1, p.size - 1)
    i = np.arange(top, dtype=np.float64)
    t = np.log((i + 2.0) / (i + 1.0))                          # [top]
    with np.errstate(divide="ignore", invalid="ignore"):
        b = np.log(p[:top] / p[1:top + 1])
    b = np.where(np.isfinite(b), b, 0.0)
    s_hat = float((t * b).sum() / (t * t).sum()) if top > 0 else 1.0
    eps = s_hat - 1.0
    with np.errstate(all="ignore"):
        k = ((eps * 2.0 ** mu) / (1.0 - float(n_vocab) ** -eps)) ** (1.0 / s_hat)
    k = int(k) if np.isfinite(k) else 1
    k = min(max(k, 1), p.size)
    kept = np.zeros(p.size, np.float64)
    kept[order[:k]] = probs[order[:k]]
    kept /= kept.sum()
    token = draw(kept)
    observed = -np.log2(kept[token])
    return token, mu - eta * (observed - tau)


__all__ = ["softmax", "xtc_filter", "mirostat_v1", "MIROSTAT_M"]
