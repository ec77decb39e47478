"""Autoregressive generation: a generator that yields one token id at a time.

    for token in generate_step(model, prompt_ids, Sampler(SamplerConfig(seed=1)), 64,
                               stop_ids={eos}):
        print(detokenize([token]), end="")

Prefill runs the whole prompt once (logits for its last position only); each step then
samples, yields, and feeds the token back through the KV cache (seed 004 §14.1). The
generator is lazy: a caller that stops iterating stops the computation.
"""
from __future__ import annotations

from typing import Any, Generator, Iterable, Optional, Sequence

from ..errors import AprError, ErrorCode
from .sampling import Sampler, SamplerConfig


def generate_step(model: Any, prompt_ids: Sequence[int], sampler: Optional[Sampler] = None,
                  max_tokens: int = 128, stop_ids: Iterable[int] = (),
                  cache: Any = None) -> Generator[int, None, str]:
    """Yield up to `max_tokens` new token ids after `prompt_ids`; return why it stopped
    (the generator's return value, `StopIteration.value`): "eos" (a stop id) or "length"
    (`max_tokens`, or the cache is full).

    `model` needs `forward(ids, cache, last_only)` and `new_cache(capacity)` (a
    `Transformer`). `sampler` defaults to greedy. A token in `stop_ids` ends generation and
    is not yielded. Generation also ends, without error, when the cache (by default sized
    for prompt + max_tokens, capped at the model's context) is full. Pass `cache` to
    continue a conversation: `prompt_ids` are then appended after what it holds.
    """
    prompt = [int(t) for t in prompt_ids]
    if not prompt:
        raise AprError(ErrorCode.ARGUMENT, "generation needs at least one prompt token")
    if max_tokens < 0:
        raise AprError(ErrorCode.ARGUMENT, "max_tokens must be >= 0", max_tokens=max_tokens)
    if max_tokens == 0:
        return "length"
    sampler = sampler or Sampler(SamplerConfig(temperature=0.0))
    stops = frozenset(int(t) for t in stop_ids)
    if cache is None:
        cache = model.new_cache(len(prompt) + max_tokens)
    history = list(prompt)
    logits = model.forward(prompt, cache, last_only=True)[-1]         # [n_vocab]
    for step in range(max_tokens):
        token = sampler(logits, history)
        if token in stops:
            return "eos"
        yield token
        history.append(token)
        if step + 1 == max_tokens or cache.length + 1 > cache.capacity:
            return "length"
        logits = model.forward([token], cache)[-1]                   # [n_vocab]
    return "length"


def generate(model: Any, prompt_ids: Sequence[int], sampler: Optional[Sampler] = None,
             max_tokens: int = 128, stop_ids: Iterable[int] = ()) -> list:
    """All of `generate_step`'s tokens as a list."""
    return list(generate_step(model, prompt_ids, sampler, max_tokens, stop_ids))


__all__ = ["generate_step", "generate"]
