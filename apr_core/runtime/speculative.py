"""Speculative decoding: what to draft, and the per-sequence state of drafting.

    spec = SpeculativeConfig("lookup", draft_max=8)
    request = GenerationRequest(ids, sampler, max_tokens, speculative=spec)

The batching scheduler (the one generation path of the `Engine`) asks a sequence's
`Speculator` for a draft before a decode step, runs the pending token and the draft as
one multi-row pass (the prefill-style kernels), and checks the rows in order with
`verify.verify_token`: the first token that is not the draft ends the step, and the KV of
the rejected rows is forgotten (the sequence's computed length moves back; blocks only
rejected rows used are released). Greedy output ids equal plain decoding's; sampled
output has plain sampling's distribution.

Drafts come from the text so far (`lookup_draft`: prompt lookup, no model) or from a
small model with the same tokenizer (`model_draft.ModelDrafter`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from ..errors import AprError, ErrorCode
from .lookup_draft import DEFAULT_NGRAM_MAX, DEFAULT_NGRAM_MIN, lookup_draft
from .model_draft import ModelDrafter
from .sampling import Sampler, SamplerConfig
from .verify import verify_token

MODES = ("lookup", "draft")


@dataclass(frozen=True)
class SpeculativeConfig:
    """How to draft. `draft_max`: most tokens drafted per step (a backend whose kernels
    change with the row count also caps it, see `Scheduler`); `draft_min`: a shorter
    draft is dropped (the step decodes one token as usual)."""

    mode: str = "lookup"                  # lookup | draft
    draft_max: int = 16
    draft_min: int = 0
    ngram_max: int = DEFAULT_NGRAM_MAX    # lookup: longest suffix searched for
    ngram_min: int = DEFAULT_NGRAM_MIN    # lookup: shortest suffix that counts
    draft_model: Any = field(default=None, compare=False, repr=False)   # mode "draft"

    def __post_init__(self) -> None:
        if self.mode not in MODES or self.draft_max < 1 or self.draft_min < 0 \
                or not 1 <= self.ngram_min <= self.ngram_max:
            raise AprError(ErrorCode.ARGUMENT, "speculative decoding parameter out of range",
                           mode=self.mode, draft_max=self.draft_max, draft_min=self.draft_min,
                           ngram=(self.ngram_min, self.ngram_max))
        if (self.mode == "draft") != (self.draft_model is not None):
            raise AprError(ErrorCode.ARGUMENT, "mode 'draft' needs a draft model (and only "
                           "it takes one)", mode=self.mode)


class Speculator:
    """One sequence's drafting state and counters."""

    def __init__(self, config: SpeculativeConfig, sampler: SamplerConfig) -> None:
        self.config = config
        self.drafter = ModelDrafter(config.draft_model, sampler) \
            if config.mode == "draft" else None
        self.draft: List[int] = []                    # the draft being verified
        self.q: Optional[List[np.ndarray]] = None     # its distributions (None: one-hot)
        self.drafted = 0                              # tokens drafted, all steps
        self.accepted = 0                             # of which kept
        self.passes = 0                               # decode passes (drafted or not)
        self.tokens = 0                               # tokens those passes produced

    def propose(self, tokens: Sequence[int], limit: int) -> List[int]:
        """Draft at most `limit` tokens after `tokens` (kept as `self.draft`)."""
        c = self.config
        count = min(limit, c.draft_max)
        draft: List[int] = []
        q = None
        if count >= max(1, c.draft_min):
            if self.drafter is None:
                draft = lookup_draft(tokens, count, c.ngram_max, c.ngram_min)
            else:
                draft, q = self.drafter.propose(tokens, count)
        if len(draft) < c.draft_min:
            draft, q = [], None
        self.draft, self.q = draft, q
        return draft

    def verify(self, sampler: Sampler, logits: np.ndarray, history: Sequence[int],
               row: int) -> Any:
        """(token, kept) for row `row` of the step: the draft's token `row` checked
        against `logits [n_vocab]` (past the draft's end: a plain sample)."""
        draft = self.draft[row] if row < len(self.draft) else None
        q = self.q[row] if self.q is not None and draft is not None else None
        return verify_token(sampler, logits, history, draft, q)

    def start_pass(self) -> None:
        """A decode pass over the pending token and `self.draft` ran."""
        self.passes += 1
        self.drafted += len(self.draft)

    def record(self, kept: bool) -> None:
        """The pass produced one more token (`kept`: it was the draft's)."""
        self.tokens += 1
        self.accepted += kept

    def end_pass(self) -> None:
        """The draft is used up (verified, or its rows were dropped)."""
        self.draft, self.q = [], None

    def stats(self) -> Dict[str, Any]:
        """Counters for `--json` / `--verbose`."""
        return speculative_stats(self.config.mode, self.drafted, self.accepted, self.passes,
                                 self.tokens)


def speculative_stats(mode: str, drafted: int, accepted: int, passes: int,
                      tokens: int) -> Dict[str, Any]:
    """The report of a generation: acceptance rate and tokens per decode forward pass."""
    return {"mode": mode, "drafted_tokens": drafted, "accepted_tokens": accepted,
            "acceptance_rate": round(accepted / drafted, 4) if drafted else None,
            "decode_passes": passes, "decoded_tokens": tokens,
            "tokens_per_pass": round(tokens / passes, 4) if passes else None}


__all__ = ["SpeculativeConfig", "Speculator", "speculative_stats", "MODES"]
