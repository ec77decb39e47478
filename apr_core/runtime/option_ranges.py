"""THE table of allowed ranges of the generation options: the sampler fields (by their
`SamplerConfig` name) and `max_tokens`. The command line refuses a value outside its range
before loading anything (`apr run -n -5`, `--temperature -1`, `--top-p 1.5`), naming the
range:

    RANGES["top_p"].contains(1.5)      # False
    str(RANGES["top_p"])               # '> 0 and <= 1'

`SamplerConfig` checks the same bounds on every config it builds (tests hold the two
equal); temperature is refused below 0 here, where a config would read it as greedy.
A field absent from the table takes any value of its type.
"""
from __future__ import annotations

from typing import Dict, NamedTuple, Optional

# The largest -n / max_tokens a command accepts (also `apr serve`'s per-request cap).
MAX_TOKENS = 1 << 20


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


class Range(NamedTuple):
    """low <= value <= high; `low_open`: low itself is refused too. None: unbounded."""
    low: Optional[float]
    high: Optional[float] = None
    low_open: bool = False

    def contains(self, value: float) -> bool:
        if value != value:                        # NaN is in no range
            return False
        if self.low is not None and (
                value < self.low or (self.low_open and value == self.low)):
            return False
        return self.high is None or value <= self.high

    def __str__(self) -> str:
        if self.low is None:
            return "any" if self.high is None else "<= " + _number(self.high)
        if self.low_open:
            low = "> " + _number(self.low)
            return low if self.high is None else low + " and <= " + _number(self.high)
        if self.high is None:
            return ">= " + _number(self.low)
        return "{}..{}".format(_number(self.low), _number(self.high))


RANGES: Dict[str, Range] = {
    "max_tokens": Range(1, MAX_TOKENS),
    "temperature": Range(0.0),
    "top_k": Range(0),
    "top_p": Range(0.0, 1.0, low_open=True),
    "min_p": Range(0.0, 1.0),
    "typical_p": Range(0.0, 1.0, low_open=True),
    "mirostat": Range(0, 2),
    "repetition_penalty": Range(0.0, low_open=True),
    "penalty_last_n": Range(-1),
    "dry_multiplier": Range(0.0),
    "dry_base": Range(1.0),
    "dry_allowed_length": Range(0),
    "dry_penalty_last_n": Range(-1),
    "xtc_probability": Range(0.0, 1.0),
    "xtc_threshold": Range(0.0, 1.0),
}

__all__ = ["MAX_TOKENS", "RANGES", "Range"]
