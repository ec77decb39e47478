"""A JSON schema as a `TokenConstraint`: the tokens that keep the output valid, per step.

JSON is written the way `json.dumps` writes it (", " and ": " separators, no other white
space), so a model can neither loop on white space nor end with something that does not
parse; once the value is complete, only the end-of-generation tokens remain allowed (or
nothing: `done()`), and the choice ends.
"""
from __future__ import annotations

import json
from typing import Any, Dict, Optional

import numpy as np

from apr_core.runtime.batching.request import TokenConstraint
from apr_core.errors import AprError, ErrorCode

from .vocabulary import ll_tokenizer

JSON_STYLE = {"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": False}
ANY_OBJECT: Dict[str, Any] = {"type": "object"}


class GrammarConstraint(TokenConstraint):
    """One choice's llguidance matcher; `allowed()` -> bool `[n_vocab]`."""

    def __init__(self, matcher: Any, n_vocab: int, finish_reason: str) -> None:
        self.matcher = matcher
        self.n_vocab = n_vocab
        self.finish_reason = finish_reason

    def allowed(self) -> np.ndarray:
        bits = np.frombuffer(self.matcher.compute_bitmask(), np.uint8)
        return np.unpackbits(bits, bitorder="little")[:self.n_vocab].astype(bool)

    def advance(self, token_id: int) -> None:
        if not self.matcher.consume_token(int(token_id)):
            raise AprError(ErrorCode.VALIDATION, "constrained decoding took a token its "
                           "grammar refuses", token_id=token_id,
                           detail=self.matcher.get_error())

    def done(self) -> bool:
        return self.matcher.is_stopped()

    def fork(self) -> "GrammarConstraint":
        return GrammarConstraint(self.matcher.deep_copy(), self.n_vocab, self.finish_reason)


def json_constraint(tokenizer: Any, schema: Optional[Dict[str, Any]] = None,
                    finish_reason: str = "stop") -> GrammarConstraint:
    """Output valid for `schema` (None: any JSON object). AprError(ARGUMENT) for a schema
    llguidance cannot compile, with its reason."""
    import llguidance
    lltok = ll_tokenizer(tokenizer)
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            json.dumps(schema if schema is not None else ANY_OBJECT), overrides=JSON_STYLE)
    except (ValueError, TypeError) as err:
        raise AprError(ErrorCode.ARGUMENT, "not a JSON schema: {}".format(err))
    matcher = llguidance.LLMatcher(lltok, grammar, log_level=0)
    if matcher.is_error():
        raise AprError(ErrorCode.ARGUMENT, "JSON schema not supported: {}".format(
            matcher.get_error()))
    return GrammarConstraint(matcher, lltok.vocab_size, finish_reason)


__all__ = ["GrammarConstraint", "json_constraint", "JSON_STYLE"]
