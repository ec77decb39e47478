"""What the worker thread runs for each endpoint, and the events it reports.

A job prepares its own prompt (chat template, tokenizer) in the worker, so the model and
tokenizer are only ever touched by that one thread and a huge prompt never blocks the event
loop. Events: `Delta` per generated piece, then `Outcome` (generation) or `Embeddings`.
"""
from __future__ import annotations

from typing import Any, Callable, List, NamedTuple, Sequence

import numpy as np

from .engine import Job, Work
from .errors import ApiError
from .metrics import Metrics
from .schemas import GenerationParams, Prompt


class Delta(NamedTuple):
    """Text completed by one generated token ("" while a character is incomplete)."""

    text: str


class Outcome(NamedTuple):
    finish_reason: str          # "stop" (EOS or stop string) or "length"
    prompt_tokens: int
    completion_tokens: int


class Embeddings(NamedTuple):
    vectors: List[np.ndarray]   # one [d_model] float32 vector per input
    prompt_tokens: int


def prompt_ids(model: Any, prompt: Prompt) -> List[int]:
    """Token ids of a completion prompt: text (with BOS as the model wants it) or ids
    checked against the vocabulary."""
    if isinstance(prompt, str):
        return model.prompt_ids(prompt)
    n_vocab = model.transformer.config.n_vocab
    if not all(0 <= t < n_vocab for t in prompt):
        raise ApiError(400, "token ids must be in [0, {})".format(n_vocab), param="prompt",
                       code="invalid_value")
    return list(prompt)


def _check_context(model: Any, ids: Sequence[int], param: str) -> None:
    limit = model.transformer.config.max_ctx
    if len(ids) >= limit:
        raise ApiError(400, "the prompt is {} tokens; this model's context is {}".format(
            len(ids), limit), param=param, code="context_length_exceeded")


def generation(prepare: Callable[[Any], List[int]], params: GenerationParams,
               param: str, metrics: Metrics) -> Work:
    """Work that streams a generation for the ids `prepare(model)` returns.

    Generation also ends when the context is full (prompt + max_tokens beyond it)."""
    def work(model: Any, job: Job) -> None:
        ids = prepare(model)
        _check_context(model, ids, param)
        count = 0
        for piece in model.stream(ids, params.sampler(), params.max_tokens, params.stop):
            if job.cancelled:   # the client left: stop at this token
                metrics.cancelled.inc()
                return
            if piece.token_id >= 0:
                count += 1
                metrics.generated_tokens.inc()
            job.emit(Delta(piece.text))
        finish = "length" if count >= params.max_tokens else "stop"
        job.emit(Outcome(finish, len(ids), count))
    return work


def embeddings(inputs: Sequence[Prompt]) -> Work:
    """Work that mean-pools the final hidden states of each input."""
    def work(model: Any, job: Job) -> None:
        vectors, total = [], 0
        for i, item in enumerate(inputs):
            if job.cancelled:
                return
            ids = prompt_ids(model, item)
            _check_context(model, ids, "input")
            hidden = model.transformer.hidden_states(ids)            # [T, d_model]
            vectors.append(hidden.mean(axis=0).astype(np.float32))   # [d_model]
            total += len(ids)
        job.emit(Embeddings(vectors, total))
    return work


__all__ = ["Delta", "Embeddings", "Outcome", "embeddings", "generation", "prompt_ids"]
