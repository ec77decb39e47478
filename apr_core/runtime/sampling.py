"""Token sampling: penalties, truncation filters and a seedable random draw.

    sampler = Sampler(SamplerConfig(temperature=0.7, top_p=0.9, seed=42))
    token = sampler(logits, history)        # logits [n_vocab], history: token ids so far

The chain follows llama.cpp's default order (seed 004 §14.5): penalties -> top-k ->
tail-free -> typical -> top-p -> min-p -> temperature -> draw. Truncation filters judge
probabilities at temperature 1 and temperature shapes only what survives; temperature
<= 0 is greedy (argmax after penalties). Mirostat v2 replaces the truncation filters when
enabled. Each filter is a pure function over logits returning a copy with the removed
tokens at -inf, so they can be tested and combined one by one; every filter keeps at
least one token.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from ..errors import AprError, ErrorCode


@dataclass(frozen=True)
class SamplerConfig:
    """Sampling parameters; the defaults switch every filter and penalty off."""

    temperature: float = 1.0
    top_k: int = 0                  # keep the k most likely tokens (0 = off)
    top_p: float = 1.0              # nucleus: smallest set with probability >= top_p
    min_p: float = 0.0              # keep tokens with p >= min_p * p_max
    typical_p: float = 1.0          # locally typical sampling mass
    tfs_z: float = 1.0              # tail-free sampling mass (1 = off)
    mirostat: int = 0               # 0 off, 2 = Mirostat v2
    mirostat_tau: float = 5.0       # target surprise (bits)
    mirostat_eta: float = 0.1       # learning rate
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_last_n: int = 64        # history window for penalties (-1 = all)
    seed: Optional[int] = None

    def __post_init__(self) -> None:
        if self.top_k < 0 or not 0.0 <= self.min_p <= 1.0 or not 0.0 < self.top_p <= 1.0 \
                or not 0.0 < self.typical_p <= 1.0 or not 0.0 < self.tfs_z <= 1.0 \
                or self.mirostat not in (0, 2) or self.repetition_penalty <= 0.0:
            raise AprError(ErrorCode.ARGUMENT, "sampler parameter out of range",
                           config=repr(self))


NEG_INF = -np.inf


def softmax(logits: np.ndarray) -> np.ndarray:
    """`[n] -> [n]` float64 probabilities (-inf logits get 0)."""
    z = np.asarray(logits, np.float64)
    z = z - np.max(z)
    e = np.exp(z)
    return e / e.sum()


def greedy(logits: np.ndarray) -> int:
    """The most likely token (the lowest id on ties)."""
    return int(np.argmax(logits))


def apply_penalties(logits: np.ndarray, history: Sequence[int], repetition: float = 1.0,
                    presence: float = 0.0, frequency: float = 0.0,
                    last_n: int = 64) -> np.ndarray:
    """Penalise tokens seen in the last `last_n` history entries (llama.cpp semantics):
    a positive logit is divided by `repetition`, a negative one multiplied by it; then
    `count * frequency + presence` is subtracted. Returns a float64 copy."""
    out = np.array(logits, np.float64)
    window = list(history)
    if last_n >= 0:
        window = window[max(0, len(window) - last_n):] if last_n else []
    if not window:
        return out
    tokens, counts = np.unique(np.asarray(window, np.int64), return_counts=True)
    if tokens[0] < 0 or tokens[-1] >= out.size:
        raise AprError(ErrorCode.ARGUMENT, "history token outside the vocabulary",
                       n_vocab=out.size, min=int(tokens[0]), max=int(tokens[-1]))
    seen = out[tokens]
    if repetition != 1.0:
        seen = np.where(seen > 0, seen / repetition, seen * repetition)
    out[tokens] = seen - counts * frequency - presence
    return out


def _mask_outside(logits: np.ndarray, keep: np.ndarray) -> np.ndarray:
    out = np.array(logits, np.float64)
    drop = np.ones(out.shape, bool)
    drop[keep] = False
    out[drop] = NEG_INF
    return out


def _sorted_probs(logits: np.ndarray):
    probs = softmax(logits)
    order = np.argsort(-probs, kind="stable")                      # most likely first
    return probs, order, probs[order]


def top_k_filter(logits: np.ndarray, k: int) -> np.ndarray:
    """Keep the `k` highest logits (ties broken by lower id); k <= 0 keeps all."""
    if k <= 0 or k >= logits.shape[-1]:
        return np.array(logits, np.float64)
    order = np.argsort(-np.asarray(logits, np.float64), kind="stable")
    return _mask_outside(logits, order[:k])


def top_p_filter(logits: np.ndarray, p: float) -> np.ndarray:
    """Keep the smallest most-likely set whose probability reaches `p`."""
    if p >= 1.0:
        return np.array(logits, np.float64)
    _, order, sorted_p = _sorted_probs(logits)
    n_keep = int(np.searchsorted(np.cumsum(sorted_p), p, side="left")) + 1
    return _mask_outside(logits, order[:min(n_keep, order.size)])


def min_p_filter(logits: np.ndarray, min_p: float) -> np.ndarray:
    """Keep tokens whose probability is at least `min_p` times the top probability."""
    if min_p <= 0.0:
        return np.array(logits, np.float64)
    probs = softmax(logits)
    return _mask_outside(logits, np.nonzero(probs >= min_p * probs.max())[0])


def typical_filter(logits: np.ndarray, mass: float) -> np.ndarray:
    """Locally typical sampling: keep the tokens whose surprise is closest to the entropy
    until their probability reaches `mass`."""
    if mass >= 1.0:
        return np.array(logits, np.float64)
    probs = softmax(logits)
    with np.errstate(divide="ignore", invalid="ignore"):
        logp = np.where(probs > 0, np.log(probs), NEG_INF)
        entropy = -np.sum(np.where(probs > 0, probs * logp, 0.0))
        distance = np.abs(-logp - entropy)                         # inf for p == 0
    order = np.argsort(distance, kind="stable")
    n_keep = int(np.searchsorted(np.cumsum(probs[order]), mass, side="left")) + 1
    return _mask_outside(logits, order[:min(n_keep, order.size)])


def tail_free_filter(logits: np.ndarray, z: float) -> np.ndarray:
    """Tail-free sampling: cut the sorted distribution where the normalised absolute
    second derivative of its probabilities has accumulated `z`."""
    if z >= 1.0 or logits.shape[-1] < 3:
        return np.array(logits, np.float64)
    _, order, sorted_p = _sorted_probs(logits)
    curvature = np.abs(np.diff(sorted_p, n=2))                     # [n - 2]
    total = curvature.sum()
    if total <= 0.0:
        return np.array(logits, np.float64)
    cumulative = np.cumsum(curvature / total)
    n_keep = int(np.searchsorted(cumulative, z, side="right")) + 1
    return _mask_outside(logits, order[:max(1, min(n_keep, order.size))])


class Sampler:
    """Stateful sampler: the RNG (seeded by `config.seed`) and Mirostat's running mu."""

    def __init__(self, config: Optional[SamplerConfig] = None) -> None:
        self.config = config or SamplerConfig()
        self.rng = np.random.RandomState(self.config.seed)
        self.mu = 2.0 * self.config.mirostat_tau

    def draw(self, probs: np.ndarray) -> int:
        """Inverse-CDF draw from `probs` (need not be normalised) with this sampler's RNG."""
        cumulative = np.cumsum(probs)
        u = self.rng.random_sample() * cumulative[-1]
        return int(min(np.searchsorted(cumulative, u, side="right"), probs.size - 1))

    def __call__(self, logits: np.ndarray, history: Sequence[int] = ()) -> int:
        """Pick the next token from `logits [n_vocab]` given the token `history`."""
        c = self.config
        z = self._penalised(logits, history)
        if c.temperature <= 0.0:
            return greedy(z)
        if c.mirostat == 2:
            return self._mirostat_v2(z / c.temperature)
        return self.draw(self._filtered_probs(z))

    @property
    def stateless(self) -> bool:
        """True when a draw depends only on the logits, the history and the RNG (not on
        Mirostat's running mu), so `distribution` describes it exactly."""
        return self.config.mirostat == 0 or self.config.temperature <= 0.0

    def distribution(self, logits: np.ndarray, history: Sequence[int] = ()) -> np.ndarray:
        """`[n_vocab]` float64: the probabilities `__call__` draws from (one-hot at the
        argmax when greedy); what speculative verification compares a draft against."""
        if not self.stateless:
            raise AprError(ErrorCode.UNSUPPORTED, "Mirostat's draw has no fixed distribution")
        z = self._penalised(logits, history)
        if self.config.temperature <= 0.0:
            probs = np.zeros(z.size, np.float64)
            probs[greedy(z)] = 1.0
            return probs
        return self._filtered_probs(z)

    def _penalised(self, logits: np.ndarray, history: Sequence[int]) -> np.ndarray:
        c = self.config
        z = np.asarray(logits, np.float64).reshape(-1)
        if c.repetition_penalty != 1.0 or c.presence_penalty or c.frequency_penalty:
            z = apply_penalties(z, history, c.repetition_penalty, c.presence_penalty,
                                c.frequency_penalty, c.penalty_last_n)
        return z

    def _filtered_probs(self, z: np.ndarray) -> np.ndarray:
        c = self.config
        z = top_k_filter(z, c.top_k)
        z = tail_free_filter(z, c.tfs_z)
        z = typical_filter(z, c.typical_p)
        z = top_p_filter(z, c.top_p)
        z = min_p_filter(z, c.min_p)
        return softmax(z / c.temperature)

    def _mirostat_v2(self, z: np.ndarray) -> int:
        """Mirostat v2: drop tokens more surprising than mu bits, draw, then move mu
        towards the target surprise tau by the observed error."""
        c = self.config
        probs = softmax(z)
        with np.errstate(divide="ignore"):
            surprise = -np.log2(probs)
        keep = surprise <= self.mu
        keep[int(np.argmax(probs))] = True
        kept = np.where(keep, probs, 0.0)
        kept /= kept.sum()
        token = self.draw(kept)
        observed = -np.log2(kept[token])
        self.mu -= c.mirostat_eta * (observed - c.mirostat_tau)
        return token


__all__ = ["SamplerConfig", "Sampler", "softmax", "greedy", "apply_penalties",
           "top_k_filter", "top_p_filter", "min_p_filter", "typical_filter",
           "tail_free_filter"]
