"""What a request becomes before it reaches the engine: prompt ids (chat template,
tokenizer), the generation request with its constraint, and the embeddings work.

`prepare` runs in a worker thread (`asyncio.to_thread`), never on the event loop and never
in the engine thread, so a long prompt's tokenization or a schema's compilation holds up
neither other requests nor the running batch. It only reads the model's tokenizer and
template; the weights and the KV cache stay with the engine thread.
"""
from __future__ import annotations

from typing import Any, Callable, List, NamedTuple, Sequence

import numpy as np

from apr_core.runtime.batching.request import GenerationRequest

from .errors import ApiError
from .output_spec import OutputSpec
from .schemas import GenerationParams, Prompt
from .tool_calls import call_schema, template_knows_tools, with_instructions


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


def chat_ids(model: Any, messages: Sequence[dict], spec: OutputSpec) -> List[int]:
    """The conversation through the model's template, with the tools it may call (told
    by the template itself when it knows tools, else by a system message)."""
    tools = spec.template_tools()
    if tools and not template_knows_tools(model.chat_template):
        return model.chat_ids(with_instructions(messages, spec.tools))
    return model.chat_ids(messages, tools=tools) if tools else model.chat_ids(messages)


def _check_context(model: Any, ids: Sequence[int], param: str) -> None:
    limit = model.transformer.config.max_ctx
    if len(ids) >= limit:
        raise ApiError(400, "the prompt is {} tokens; this model's context is {}".format(
            len(ids), limit), param=param, code="context_length_exceeded")


def _constraint(model: Any, spec: OutputSpec) -> Any:
    """Constrained decoding for a forced tool call or a JSON response, else None."""
    if not (spec.forces_call or spec.json_mode):
        return None
    from ..structured import json_constraint
    if spec.forces_call:
        return json_constraint(model.tokenizer, call_schema(spec.tools, spec.tool_name),
                               finish_reason="tool_calls")
    return json_constraint(model.tokenizer, spec.json_schema)


def generation(model: Any, prepare: Callable[[Any], List[int]], params: GenerationParams,
               spec: OutputSpec, param: str) -> GenerationRequest:
    """The scheduler's request for the ids `prepare(model)` returns."""
    ids = prepare(model)
    _check_context(model, ids, param)
    return GenerationRequest(
        ids, params.sampler(), params.max_tokens, params.stop, frozenset(params.stop_ids),
        params.logprobs, dict(params.logit_bias), _constraint(model, spec), params.n,
        params.ignore_eos)


def embeddings(inputs: Sequence[Prompt]) -> Callable[[Any], Embeddings]:
    """Engine-thread work that mean-pools the final hidden states of each input."""
    def work(model: Any) -> Embeddings:
        vectors, total = [], 0
        for item in inputs:
            ids = prompt_ids(model, item)
            _check_context(model, ids, "input")
            hidden = model.transformer.hidden_states(ids)            # [T, d_model]
            vectors.append(hidden.mean(axis=0).astype(np.float32))   # [d_model]
            total += len(ids)
        return Embeddings(vectors, total)
    return work


__all__ = ["Embeddings", "chat_ids", "embeddings", "generation", "prompt_ids"]
