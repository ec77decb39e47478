"""One request's choices as their events arrive: text, logprobs, tool calls, usage.

The scheduler reports per choice a `TokenEvent` for every generated token and a
`FinishEvent` with the generator's finish reason. Here each choice's text goes through its
tool-call filter (with tools), logprobs are collected, and at the end a forced or parsed
call turns the finish reason into "tool_calls".
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from apr_core.runtime.batching.request import FinishEvent, TokenEvent

from .openai_format import ChoiceResult, Json, TokenLogprob, usage
from .output_spec import OutputSpec
from .tool_calls import ToolCallFilter, parse_call


class ChoiceTracker:
    """One choice's state; `token` and `finish` return what to show (stream) now."""

    def __init__(self, index: int, spec: OutputSpec, logprobs: bool) -> None:
        self.index = index
        self.spec = spec
        self.names = [t["name"] for t in spec.tools]
        self.filter = ToolCallFilter(self.names) if spec.tool_choice == "auto" else None
        self.forced = spec.forces_call
        self.parts: List[str] = []              # text shown so far
        self.raw: List[str] = []                # the whole generated text (forced calls)
        self.logprobs: Optional[List[TokenLogprob]] = [] if logprobs else None
        self.result: Optional[ChoiceResult] = None
        self.tokens = 0

    def token(self, event: TokenEvent) -> Tuple[str, Optional[TokenLogprob]]:
        """(text to show, its logprob entry) for one generated token."""
        self.tokens += 1
        entry = None
        if self.logprobs is not None and event.logprob is not None:
            entry = TokenLogprob(event.token_id, event.logprob, list(event.top_logprobs or []))
            self.logprobs.append(entry)
        return self._show(event.text), entry

    def _show(self, text: str) -> str:
        if self.forced:
            self.raw.append(text)
            return ""
        if self.filter is not None:
            text = self.filter.feed(text)
        self.parts.append(text)
        return text

    def finish(self, event: FinishEvent) -> Tuple[str, Optional[List[Json]], str]:
        """(last text to show, tool calls or None, finish reason) when the choice ends."""
        tail = self._show(event.text)
        calls: Optional[List[Json]] = None
        if self.forced:
            call = parse_call("".join(self.raw).strip(), self.names)
            calls = [call] if call is not None else None
            if call is None:            # cut short (max_tokens): show what was written
                tail = "".join(self.raw)
                self.parts.append(tail)
        elif self.filter is not None:
            rest, found = self.filter.finish()
            tail += rest
            self.parts.append(rest)
            calls = found or None
        reason = "tool_calls" if calls else event.finish_reason
        self.result = ChoiceResult(self.index, "".join(self.parts), reason, self.logprobs,
                                   calls)
        return tail, calls, reason


class RequestTracker:
    """All choices of a request plus its usage (prompt counted once, completions summed)."""

    def __init__(self, n: int, spec: OutputSpec, logprobs: bool) -> None:
        self.choices = [ChoiceTracker(i, spec, logprobs) for i in range(n)]
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.finished = 0

    def finish(self, event: FinishEvent) -> Tuple[str, Optional[List[Json]], str]:
        self.prompt_tokens = event.prompt_tokens
        self.cached_tokens = event.cached_tokens
        self.finished += 1
        return self.choices[event.index].finish(event)

    @property
    def completion_tokens(self) -> int:
        return sum(c.tokens for c in self.choices)

    def usage(self) -> Json:
        return usage(self.prompt_tokens, self.completion_tokens, self.cached_tokens)

    def results(self) -> List[ChoiceResult]:
        return [c.result for c in self.choices if c.result is not None]


__all__ = ["ChoiceTracker", "RequestTracker"]
