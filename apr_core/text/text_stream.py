"""Generated token ids -> text, with stop strings held back until they are decided.

    stream = TextStream(tokenizer, stops=["\\n\\n"])
    for token in tokens:
        text, stopped = stream.add(token)     # text safe to show now
        if stopped: break                     # a stop string matched (not included)
    tail = stream.finish()                    # what was held back, at the end

Text goes through `StreamingDetokenizer`, so no broken UTF-8 is emitted, and a suffix
that could be the start of a stop string is held back until the next tokens decide it.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

from .tokenizer import StreamingDetokenizer, Tokenizer


class TextStream:
    """One generation's detokenizer and stop-string matcher."""

    def __init__(self, tokenizer: Tokenizer, stops: Sequence[str] = ()) -> None:
        self.stops = [s for s in stops if s]
        self.detok = StreamingDetokenizer(tokenizer)
        self.held = ""          # not yet emitted: may be the start of a stop string
        self.stopped = False

    def add(self, token_id: int) -> Tuple[str, bool]:
        """(text to emit now, whether a stop string has now matched)."""
        self.held += self.detok.add(token_id)
        return self._release()

    def _release(self) -> Tuple[str, bool]:
        cut = first_stop(self.held, self.stops)
        if cut is not None:
            text, self.held, self.stopped = self.held[:cut], "", True
            return text, True
        safe = len(self.held) - longest_stop_prefix(self.held, self.stops)
        text, self.held = self.held[:safe], self.held[safe:]
        return text, False

    def finish(self) -> str:
        """The rest at the end of generation (up to a stop string that matches now)."""
        if self.stopped:
            return ""
        self.held += self.detok.flush()
        cut = first_stop(self.held, self.stops)
        text, self.held = (self.held if cut is None else self.held[:cut]), ""
        return text


def first_stop(text: str, stops: Sequence[str]) -> Optional[int]:
    found = [text.find(s) for s in stops if s in text]
    return min(found) if found else None


def longest_stop_prefix(text: str, stops: Sequence[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of a stop string."""
    best = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:n]):
                best = n
                break
    return best


__all__ = ["TextStream", "first_stop", "longest_stop_prefix"]
