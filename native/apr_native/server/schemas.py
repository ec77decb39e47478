"""Request bodies of the OpenAI API, checked field by field into frozen dataclasses.

Every check names the offending field (`param`), so a client sees *which* value was wrong:
wrong JSON types, out-of-range numbers (`max_tokens`, `temperature`, ...) and features
this server does not implement (`n > 1`, `logprobs`, `tools`) are all 400s here, before a
request reaches the model queue. Unknown fields are ignored, as OpenAI's API does, because
clients send extras such as `user`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

from apr_core.sampling import SamplerConfig

from .errors import ApiError

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_STOPS = 4                   # OpenAI's limit on `stop` strings
MAX_EMBEDDING_INPUTS = 256      # inputs per /v1/embeddings request

Json = Dict[str, Any]
Prompt = Union[str, List[int]]


@dataclass(frozen=True)
class GenerationParams:
    """What every generating endpoint shares."""

    max_tokens: int
    temperature: float
    top_p: float
    stop: Tuple[str, ...]
    seed: Optional[int]
    presence_penalty: float
    frequency_penalty: float
    stream: bool
    include_usage: bool

    def sampler(self) -> SamplerConfig:
        # top_p -> 0 keeps only the most likely token: that is greedy decoding.
        greedy = self.temperature == 0.0 or self.top_p == 0.0
        return SamplerConfig(temperature=0.0 if greedy else self.temperature,
                             top_p=1.0 if greedy else self.top_p, seed=self.seed,
                             presence_penalty=self.presence_penalty,
                             frequency_penalty=self.frequency_penalty)


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: Tuple[Json, ...]      # {"role": str, "content": str}
    params: GenerationParams


@dataclass(frozen=True)
class CompletionRequest:
    model: str
    prompt: Prompt                  # text, or token ids
    params: GenerationParams


@dataclass(frozen=True)
class EmbeddingRequest:
    model: str
    inputs: Tuple[Prompt, ...]
    encoding_format: str            # "float" or "base64"


# ---------------------------------------------------------------------------- field checks

def _bad(param: str, message: str) -> ApiError:
    return ApiError(400, message, param=param, code="invalid_value")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(body: Json, key: str, default: float, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(key, "'{}' must be a number".format(key))
    if not low <= value <= high:
        raise _bad(key, "'{}' must be between {} and {}".format(key, low, high))
    return float(value)


def _flag(body: Json, key: str) -> bool:
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _bad(key, "'{}' must be a boolean".format(key))
    return value


def _unsupported(body: Json, key: str, allowed: Tuple[Any, ...] = (None,)) -> None:
    if body.get(key) not in allowed:
        raise ApiError(400, "'{}' is not supported by this server".format(key), param=key,
                       code="unsupported_parameter")


def _model(body: Json) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model", "'model' must be a non-empty string")
    return model


def _stop(body: Json) -> Tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise _bad("stop", "'stop' must be a string or a list of strings")
    if len(stops) > MAX_STOPS:
        raise _bad("stop", "at most {} stop strings".format(MAX_STOPS))
    return tuple(s for s in stops if s)


def _max_tokens(body: Json, cap: int) -> int:
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None \
        else "max_tokens"
    value = body.get(key)
    if value is None:
        return cap
    if not _is_int(value):
        raise _bad(key, "'{}' must be an integer".format(key))
    if not 1 <= value <= cap:
        raise _bad(key, "'{}' must be between 1 and {} (this server's cap)".format(key, cap))
    return value


def generation_params(body: Json, max_tokens_cap: int) -> GenerationParams:
    """The sampling and length fields shared by chat and completions."""
    n = body.get("n")
    if n is not None and (not _is_int(n) or n != 1):
        raise ApiError(400, "only n=1 is supported", param="n", code="unsupported_parameter")
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise _bad("seed", "'seed' must be an integer")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise _bad("stream_options", "'stream_options' must be an object")
    include_usage = _flag(options or {}, "include_usage")
    return GenerationParams(
        max_tokens=_max_tokens(body, max_tokens_cap),
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0),
        stop=_stop(body), seed=seed,
        presence_penalty=_number(body, "presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=_number(body, "frequency_penalty", 0.0, -2.0, 2.0),
        stream=_flag(body, "stream"), include_usage=include_usage)


# ---------------------------------------------------------------------------- endpoints

def _content(message: Json, index: int) -> str:
    """A message's text: a string, or a list of `{"type": "text", "text": ...}` parts."""
    param = "messages[{}].content".format(index)
    content = message.get("content")
    if content is None and message.get("role") == "assistant":
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" \
                    or not isinstance(part.get("text"), str):
                raise ApiError(400, "only text content parts are supported", param=param,
                               code="unsupported_content")
            texts.append(part["text"])
        return "".join(texts)
    raise _bad(param, "message content must be a string or a list of text parts")


def _messages(body: Json) -> Tuple[Json, ...]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", "'messages' must be a non-empty list")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _bad("messages[{}]".format(i), "each message must be an object")
        role = message.get("role")
        if role not in ROLES:
            raise _bad("messages[{}].role".format(i),
                       "role must be one of {}".format(", ".join(ROLES)))
        # "developer" is OpenAI's newer name for the system role.
        out.append({"role": "system" if role == "developer" else role,
                    "content": _content(message, i)})
    return tuple(out)


def chat_request(body: Json, max_tokens_cap: int) -> ChatRequest:
    """POST /v1/chat/completions."""
    _unsupported(body, "logprobs", (None, False))
    _unsupported(body, "tools", (None, []))
    fmt = body.get("response_format")
    if fmt is not None and fmt != {"type": "text"}:
        raise ApiError(400, "only response_format {'type': 'text'} is supported",
                       param="response_format", code="unsupported_parameter")
    return ChatRequest(_model(body), _messages(body), generation_params(body, max_tokens_cap))


def _prompt(value: Any, param: str) -> Prompt:
    """A text, or a non-empty list of token ids (range-checked against the vocabulary
    later, where the model is known)."""
    if isinstance(value, str) and value:
        return value
    if isinstance(value, list) and value and all(_is_int(t) for t in value):
        return list(value)
    raise _bad(param, "'{}' must be a non-empty string or list of token ids".format(param))


def completion_request(body: Json, max_tokens_cap: int) -> CompletionRequest:
    """POST /v1/completions (one prompt: a string, token ids, or a list holding one)."""
    _unsupported(body, "echo", (None, False))
    _unsupported(body, "logprobs", (None,))
    _unsupported(body, "suffix", (None, ""))
    _unsupported(body, "best_of", (None, 1))
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    return CompletionRequest(_model(body), _prompt(prompt, "prompt"),
                             generation_params(body, max_tokens_cap))


def embedding_request(body: Json) -> EmbeddingRequest:
    """POST /v1/embeddings: `input` is a string, token ids, or a list of either."""
    value = body.get("input")
    if isinstance(value, list) and value and all(isinstance(v, (str, list)) for v in value):
        items = value
    else:
        items = [value]
    if len(items) > MAX_EMBEDDING_INPUTS:
        raise _bad("input", "at most {} inputs per request".format(MAX_EMBEDDING_INPUTS))
    fmt = body.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise _bad("encoding_format", "'encoding_format' must be 'float' or 'base64'")
    _unsupported(body, "dimensions")
    return EmbeddingRequest(_model(body), tuple(_prompt(v, "input") for v in items), fmt)


__all__ = ["ChatRequest", "CompletionRequest", "EmbeddingRequest", "GenerationParams",
           "chat_request", "completion_request", "embedding_request", "generation_params"]
