"""One choice of a request as the scheduler tracks it: its tokens, its KV blocks, and the
per-choice state of sampling (RNG, constraint, text stream).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, List, Optional

import numpy as np

from ..sampling import Sampler
from ..speculative import Speculator
from ...text.text_stream import TextStream
from .request import GenerationRequest

Emit = Callable[[Any], None]


class RequestState:
    """A submitted request: its choices, how many have finished, where events go."""

    def __init__(self, request: GenerationRequest, emit: Emit, request_id: int) -> None:
        self.request = request
        self.emit = emit
        self.id = request_id
        self.choices: List["Sequence"] = []
        self.finished = 0
        self.forked = request.n <= 1
        self.cancelled = False

    @property
    def done(self) -> bool:
        return self.cancelled or self.finished >= self.request.n


class Sequence:
    """One choice: `tokens` = prompt + generated so far; positions `0 .. computed-1` have
    their K and V in `blocks` (the block table); `keys[i]` is the prefix-cache key of full
    block i once registered."""

    def __init__(self, state: RequestState, index: int, tokenizer: Any,
                 tokens: List[int], sampler: Optional[Sampler] = None) -> None:
        req = state.request
        self.state = state
        self.index = index
        self.tokens = tokens
        self.n_prompt = len(req.prompt_ids)
        self.computed = 0
        self.blocks: List[int] = []
        self.keys: List[bytes] = []
        self.cached_tokens = 0          # prompt positions that came from the prefix cache
        self.generated = 0
        config = req.sampler
        if index and config.seed is not None:   # n > 1 with a seed: distinct, repeatable
            config = dataclasses.replace(config, seed=config.seed + index)
        self.sampler = sampler or Sampler.for_tokenizer(config, tokenizer)
        self.text = TextStream(tokenizer, req.stop)
        self.constraint = req.constraint if index == 0 or req.constraint is None \
            else req.constraint.fork()
        # speculation needs a sampler whose draw has a fixed distribution and no grammar
        # state to roll back
        self.speculator = Speculator(req.speculative, config) \
            if req.speculative is not None and self.constraint is None \
            and self.sampler.stateless else None
        self.finished = False

    @property
    def draft(self) -> List[int]:
        """Tokens drafted after `tokens` for the coming step (speculative decoding)."""
        return self.speculator.draft if self.speculator is not None else []

    @property
    def to_compute(self) -> int:
        """Positions whose K and V are still to be computed before the next sample (the
        draft's included)."""
        return len(self.tokens) + len(self.draft) - self.computed

    def pending(self, count: int) -> List[int]:
        """The next `count` ids to run: uncomputed tokens, then the draft."""
        end = self.computed + count
        tokens = self.tokens[self.computed:end]
        return tokens + self.draft[:end - len(self.tokens)] if end > len(self.tokens) \
            else tokens

    @property
    def decoding(self) -> bool:
        return self.to_compute == 1 and self.generated > 0

    def reset_kv(self) -> None:
        """Forget the KV (after preemption: everything is recomputed on readmission)."""
        self.computed = 0
        self.blocks = []
        self.keys = []
        if self.speculator is not None:
            self.speculator.end_pass()

    def mask_logits(self, logits: np.ndarray, eog_ids: Any) -> np.ndarray:
        """`logits [n_vocab]` float64 with logit_bias added and forbidden tokens (by the
        constraint, or EOG under ignore_eos) at -inf."""
        req = self.state.request
        z = np.array(logits, np.float64)
        for token, bias in req.logit_bias.items():
            if 0 <= token < z.size:
                z[token] += bias
        if req.ignore_eos:
            z[[t for t in eog_ids if 0 <= t < z.size]] = -np.inf
        if self.constraint is not None:
            allowed = self.constraint.allowed()
            if allowed is not None:        # tokens past the mask's end are not allowed
                keep = np.zeros(z.size, bool)
                allowed = np.asarray(allowed, bool)[:z.size]
                keep[:allowed.size] = allowed
                z[~keep] = -np.inf
        return z


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """`[n] -> [n]` float64 log-probabilities."""
    z = np.asarray(logits, np.float64)
    z = z - z.max()
    return z - np.log(np.exp(z).sum())


__all__ = ["RequestState", "Sequence", "log_softmax", "Emit"]
