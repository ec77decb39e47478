"""Token sampling: logit bias, penalties, DRY, truncation filters, XTC, temperature and a
seedable random draw.

    sampler = Sampler(SamplerConfig(temperature=0.7, top_p=0.9, seed=42))
    token = sampler(logits, history)        # logits [n_vocab], history: token ids so far

The chain runs in `config.samplers` order (llama.cpp's `--samplers`; default
penalties -> dry -> top_k -> tfs_z -> typ_p -> top_p -> min_p -> xtc -> temperature),
after the logit bias, then draws. Truncation filters placed before "temperature" judge
probabilities at temperature 1. Temperature <= 0 is greedy: the argmax after the bias,
penalties and DRY. Mirostat (v1 or v2) replaces the truncation stages when enabled
(bias, penalties and DRY still apply, then temperature, then Mirostat). Each filter is a
pure function over logits returning a copy with the removed tokens at -inf, so they can be
tested and combined one by one; every filter keeps at least one token.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, FrozenSet, Optional, Sequence, Tuple

import numpy as np

from ..errors import AprError, ErrorCode
from .dry import (DEFAULT_BREAKERS, MAX_BREAKER_CHARS, MAX_BREAKERS, breaker_ids,
                  dry_penalties)
from .sampler_stages import mirostat_v1, softmax, xtc_filter

# stage names (llama.cpp's) -> their canonical name here
STAGES = {"penalties": "penalties", "dry": "dry", "top_k": "top_k", "tfs_z": "tfs_z",
          "typ_p": "typ_p", "typical_p": "typ_p", "top_p": "top_p", "min_p": "min_p",
          "xtc": "xtc", "temperature": "temperature", "temp": "temperature"}
DEFAULT_ORDER = ("penalties", "dry", "top_k", "tfs_z", "typ_p", "top_p", "min_p", "xtc",
                 "temperature")


@dataclass(frozen=True)
class SamplerConfig:
    """Sampling parameters; the defaults switch every filter and penalty off."""

    temperature: float = 1.0
    top_k: int = 0                  # keep the k most likely tokens (0 = off)
    top_p: float = 1.0              # nucleus: smallest set with probability >= top_p
    min_p: float = 0.0              # keep tokens with p >= min_p * p_max
    typical_p: float = 1.0          # locally typical sampling mass
    tfs_z: float = 1.0              # tail-free sampling mass (1 = off)
    mirostat: int = 0               # 0 off, 1 = Mirostat, 2 = Mirostat v2
    mirostat_tau: float = 5.0       # target surprise (bits)
    mirostat_eta: float = 0.1       # learning rate
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_last_n: int = 64        # history window for penalties (-1 = all)
    seed: Optional[int] = None
    dry_multiplier: float = 0.0     # DRY (dry.py): 0 = off
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = -1    # -1 = the whole history
    dry_sequence_breakers: Tuple[str, ...] = DEFAULT_BREAKERS
    xtc_probability: float = 0.0    # XTC (sampler_stages.py): 0 = off
    xtc_threshold: float = 0.1
    logit_bias: Tuple[Tuple[int, float], ...] = ()     # (token id, added to its logit)
    samplers: Tuple[str, ...] = DEFAULT_ORDER

    def __post_init__(self) -> None:
        unknown = [name for name in self.samplers if name not in STAGES]
        if unknown or len(set(self.samplers)) != len(self.samplers):
            raise AprError(ErrorCode.ARGUMENT, "unknown or repeated sampler stage",
                           stages=list(self.samplers), known=sorted(STAGES))
        if self.top_k < 0 or not 0.0 <= self.min_p <= 1.0 or not 0.0 < self.top_p <= 1.0 \
                or not 0.0 < self.typical_p <= 1.0 or not 0.0 < self.tfs_z <= 1.0 \
                or self.mirostat not in (0, 1, 2) or self.repetition_penalty <= 0.0 \
                or self.penalty_last_n < -1 or self.dry_multiplier < 0.0 \
                or self.dry_base < 1.0 or self.dry_allowed_length < 0 \
                or self.dry_penalty_last_n < -1 or not 0.0 <= self.xtc_probability <= 1.0 \
                or not 0.0 <= self.xtc_threshold <= 1.0 \
                or len(self.dry_sequence_breakers) > MAX_BREAKERS \
                or any(len(b) > MAX_BREAKER_CHARS for b in self.dry_sequence_breakers):
            raise AprError(ErrorCode.ARGUMENT, "sampler parameter out of range",
                           config=repr(self))
        object.__setattr__(self, "samplers", tuple(STAGES[n] for n in self.samplers))


NEG_INF = -np.inf


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
    out = np.full(np.shape(logits), NEG_INF)
    out[keep] = np.asarray(logits, np.float64)[keep]
    return out


def _sorted_probs(logits: np.ndarray):
    probs = softmax(logits)
    order = np.argsort(-probs, kind="stable")                      # most likely first
    return probs, order, probs[order]


def top_k_filter(logits: np.ndarray, k: int) -> np.ndarray:
    """Keep the `k` highest logits (ties broken by lower id); k <= 0 keeps all. A
    partition, not a sort: linear in the vocabulary (a 152k-token sort took ~12 ms)."""
    if k <= 0 or k >= logits.shape[-1]:
        return np.array(logits, np.float64)
    z = np.asarray(logits, np.float64)
    kth = np.partition(z, z.size - k)[z.size - k]               # the k-th highest value
    above = np.nonzero(z > kth)[0]
    ties = np.nonzero(z == kth)[0][:k - above.size]             # lowest ids first
    return _mask_outside(logits, np.concatenate([above, ties]))


def _most_likely_first(probs: np.ndarray, mass: float):
    """(order, running sums): a most-likely-first prefix of the stable sort of `probs`
    (ties by lower id) long enough for its running sum to reach `mass`, or the whole sort.
    The prefix is every token at least as likely as the m-th most likely (m = 64, 512,
    ...), so ties at its end are all in it, and a running sum over a prefix is the whole
    sort's: sorting 64 values instead of a 152k vocabulary."""
    m = 64
    while m < probs.size:
        cut = np.partition(probs, probs.size - m)[probs.size - m]
        head = np.nonzero(probs >= cut)[0]
        order = head[np.argsort(-probs[head], kind="stable")]
        sums = np.cumsum(probs[order])
        if sums[-1] >= mass:
            return order, sums
        m *= 8
    order = np.argsort(-probs, kind="stable")
    return order, np.cumsum(probs[order])


def top_p_filter(logits: np.ndarray, p: float) -> np.ndarray:
    """Keep the smallest most-likely set whose probability reaches `p`."""
    if p >= 1.0:
        return np.array(logits, np.float64)
    order, sums = _most_likely_first(softmax(logits), p)
    n_keep = int(np.searchsorted(sums, p, side="left")) + 1
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


def _survivors(ids: Optional[np.ndarray], z: np.ndarray
               ) -> Tuple[Optional[np.ndarray], np.ndarray]:
    """(ids, z) without z's -inf entries (`ids`: the ids of z's entries, None for all of
    them), or as they are when none or all are -inf."""
    alive = z > NEG_INF
    if not alive.any() or alive.all():
        return ids, z
    return (np.nonzero(alive)[0] if ids is None else ids[alive]), z[alive]


class Sampler:
    """Stateful sampler: the RNG (seeded by `config.seed`) and Mirostat's running mu.
    `breakers`: the ids of DRY's sequence-breaker tokens (`dry.breaker_ids`)."""

    def __init__(self, config: Optional[SamplerConfig] = None,
                 breakers: FrozenSet[int] = frozenset()) -> None:
        self.config = config or SamplerConfig()
        self.breakers = breakers
        self._rng: Optional[np.random.RandomState] = None
        self.mu = 2.0 * self.config.mirostat_tau

    @property
    def rng(self) -> np.random.RandomState:
        """The RNG seeded by `config.seed`, made at the first draw (a greedy run never
        imports numpy.random: part of every start)."""
        if self._rng is None:
            self._rng = np.random.RandomState(self.config.seed)
        return self._rng

    @classmethod
    def for_tokenizer(cls, config: SamplerConfig, tokenizer: Any) -> "Sampler":
        """A sampler whose DRY stage knows `tokenizer`'s sequence-breaker tokens."""
        return cls(config, breaker_ids(tokenizer, config.dry_sequence_breakers)
                   if config.dry_multiplier else frozenset())

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
        if c.mirostat == 1:
            token, self.mu = mirostat_v1(z / c.temperature, self.mu, c.mirostat_tau,
                                         c.mirostat_eta, self.draw)
            return token
        ids, probs = self._candidates(z)
        token = self.draw(probs)
        return token if ids is None else int(ids[token])

    @property
    def stateless(self) -> bool:
        """True when a draw depends only on the logits, the history and the RNG's one draw
        (not on Mirostat's running mu or XTC's extra draw), so `distribution` describes
        it exactly."""
        c = self.config
        return c.temperature <= 0.0 or (c.mirostat == 0 and c.xtc_probability <= 0.0)

    def distribution(self, logits: np.ndarray, history: Sequence[int] = ()) -> np.ndarray:
        """`[n_vocab]` float64: the probabilities `__call__` draws from (one-hot at the
        argmax when greedy); what speculative verification compares a draft against."""
        if not self.stateless:
            raise AprError(ErrorCode.UNSUPPORTED, "Mirostat's and XTC's draws have no "
                           "fixed distribution")
        z = self._penalised(logits, history)
        if self.config.temperature <= 0.0:
            probs = np.zeros(z.size, np.float64)
            probs[greedy(z)] = 1.0
            return probs
        return self._filtered_probs(z)

    def _penalised(self, logits: np.ndarray, history: Sequence[int]) -> np.ndarray:
        """Logit bias, then the penalties and DRY stages in chain order."""
        c = self.config
        z = np.array(logits, np.float64).reshape(-1)
        for token, bias in c.logit_bias:
            if not 0 <= token < z.size:
                raise AprError(ErrorCode.ARGUMENT, "logit bias for a token id outside the "
                               "vocabulary", token=token, n_vocab=z.size)
            z[token] += bias
        for stage in c.samplers:
            if stage == "penalties" and (c.repetition_penalty != 1.0 or c.presence_penalty
                                         or c.frequency_penalty):
                z = apply_penalties(z, history, c.repetition_penalty, c.presence_penalty,
                                    c.frequency_penalty, c.penalty_last_n)
            elif stage == "dry" and c.dry_multiplier > 0.0:
                tokens, penalties = dry_penalties(history, c.dry_multiplier, c.dry_base,
                                                  c.dry_allowed_length,
                                                  c.dry_penalty_last_n, self.breakers)
                z[tokens] -= penalties
        return z

    def _filtered_probs(self, z: np.ndarray) -> np.ndarray:
        """The truncation stages and temperature in chain order -> probabilities `[n]`."""
        ids, probs = self._candidates(z)
        if ids is None:
            return probs
        whole = np.zeros(z.size, np.float64)
        whole[ids] = probs
        return whole

    def _candidates(self, z: np.ndarray) -> Tuple[Optional[np.ndarray], np.ndarray]:
        """`_filtered_probs` as (the surviving ids, ascending, their probabilities), or
        (None, probabilities `[n]`) when nothing was dropped.

        Once a stage has dropped tokens the later ones run on the survivors alone (in id
        order, so "lower id" tie rules hold): with top-k 40 first (llama-server's chain)
        the other stages sort 40 values, not the vocabulary (Qwen2.5's 152k: ~30 ms a
        token before), and `draw`'s running sum over them is the one over the whole
        vector (the dropped tokens add exact zeros). Dropped tokens have probability 0
        in every stage but tail-free sampling, whose curvature reads the zero tail: with
        it on the vector stays whole."""
        c = self.config
        temperature = 1.0
        compact = c.tfs_z >= 1.0
        ids, z = _survivors(None, z) if compact else (None, z)  # -inf from bias or DRY
        for stage in c.samplers:
            if stage == "top_k":
                z = top_k_filter(z, c.top_k)
            elif stage == "tfs_z":
                z = tail_free_filter(z, c.tfs_z)
            elif stage == "typ_p":
                z = typical_filter(z, c.typical_p)
            elif stage == "top_p":
                z = top_p_filter(z, c.top_p)
            elif stage == "min_p":
                z = min_p_filter(z, c.min_p)
            elif stage == "xtc" and c.xtc_probability > 0.0:
                z = xtc_filter(z, c.xtc_probability, c.xtc_threshold, self.rng)
            else:
                if stage == "temperature" and temperature == 1.0:
                    temperature = c.temperature
                    z = z / temperature
                continue                            # nothing dropped: nothing to compact
            if compact:
                ids, z = _survivors(ids, z)
        return ids, softmax(z)

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


__all__ = ["SamplerConfig", "Sampler", "softmax", "greedy", "apply_penalties", "STAGES",
           "DEFAULT_ORDER",
           "top_k_filter", "top_p_filter", "min_p_filter", "typical_filter",
           "tail_free_filter"]
