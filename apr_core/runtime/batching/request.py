"""What a caller asks the batching scheduler for, and the events it gets back.

    req = GenerationRequest(prompt_ids, SamplerConfig(temperature=0), max_tokens=64,
                            stop=("\n\n",), logprobs=5)
    handle = scheduler.submit(req, emit)       # emit(event) is called for every event

Events of one request, in order, per choice `index` (0 .. n-1):
    TokenEvent  one generated token (its text may be "" while a character or a possible
                stop string is incomplete; the text is never split inside a character)
    FinishEvent the choice ended: finish_reason "stop" (EOS/EOG, stop string or stop id),
                "length" (max_tokens or the context is full) or the constraint's own reason
                (e.g. "tool_calls")
and, when the request cannot run at all, one ErrorEvent (no FinishEvent then).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Tuple

from ..sampling import SamplerConfig
from ..speculative import SpeculativeConfig

MAX_TOP_LOGPROBS = 20


class TokenConstraint:
    """Constrained decoding of one choice (a grammar, a JSON schema ...). The scheduler
    calls `allowed()` before each sampling and `advance(token)` after it.

    `allowed()` -> a bool mask `[n_vocab]` of the tokens that may come next, or None when
    any token may. When `done()` is true the choice ends with `finish_reason`, without
    sampling further (the grammar is complete and admits nothing more)."""

    finish_reason = "stop"

    def allowed(self) -> Any:                          # np.ndarray [n_vocab] bool | None
        return None

    def advance(self, token_id: int) -> None:
        pass

    def done(self) -> bool:
        return False

    def fork(self) -> "TokenConstraint":
        """An independent copy in the same state (for `n` > 1)."""
        raise NotImplementedError


@dataclass
class GenerationRequest:
    """One completion request: `n` choices after the same prompt."""

    prompt_ids: Sequence[int]
    sampler: SamplerConfig = field(default_factory=lambda: SamplerConfig(temperature=0.0))
    max_tokens: int = 128
    stop: Tuple[str, ...] = ()              # stop strings (not part of the returned text)
    stop_ids: FrozenSet[int] = frozenset()  # extra token ids that end a choice
    logprobs: Optional[int] = None          # None: off; k >= 0: chosen token + k alternatives
    logit_bias: Dict[int, float] = field(default_factory=dict)   # added to the logits
    constraint: Optional[TokenConstraint] = None                 # cloned per choice
    n: int = 1
    ignore_eos: bool = False
    speculative: Optional[SpeculativeConfig] = None   # draft and verify (speculative.py)


@dataclass
class TokenEvent:
    index: int                              # which choice
    token_id: int
    text: str                               # text this token completes
    logprob: Optional[float] = None         # log-softmax of the model's logits
    top_logprobs: Optional[List[Tuple[int, float]]] = None   # most likely first


@dataclass
class FinishEvent:
    index: int
    finish_reason: str                      # "stop" | "length" | constraint's reason
    text: str                               # held-back text released at the end ("" mostly)
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0                  # prompt tokens served from the prefix cache
    speculative: Optional[Dict[str, Any]] = None   # speculative.speculative_stats, if used


@dataclass
class ErrorEvent:
    error: Exception


__all__ = ["GenerationRequest", "TokenConstraint", "TokenEvent", "FinishEvent",
           "ErrorEvent", "MAX_TOP_LOGPROBS"]
