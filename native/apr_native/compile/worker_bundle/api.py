"""The HTTP API of a worker bundle: OpenAI's completions, chat completions and model list.

    GET  /v1/models              the model, as `apr serve` lists it
    GET  /v1/models/{id}         its card
    POST /v1/completions         {"prompt", "max_tokens" (16), "temperature" (0: greedy),
                                 "stop", "seed", "top_p", "top_k", ...}: the prompt
                                 completed as given (no chat template), OpenAI's shape:
                                 choices[0].text, finish_reason, usage
                                 ("return_token_ids": true adds choices[0].token_ids)
    POST /v1/chat/completions    {"messages", "max_tokens" | "max_completion_tokens" (256),
                                 the same sampler fields}: through the model's chat template
                                 ("stream": true on either: server-sent events as `apr serve`
                                 sends them, "stream_options": {"include_usage": true})
    GET  /health                 {"status": "ok"} without loading the model

Every refusal is `{"error": {"message", "type", "param", "code"}}` with an HTTP status, as
`apr serve` and OpenAI send it. `handle` is plain Python over (method, url, body text,
env), so the entry point only converts between it and the runtime's Request/Response.

This file is apr_native/compile/worker_bundle/api.py; in the bundle it is
`apr_worker/api.py` (with `openai_format.py`, apr serve's response shapes, beside it).
"""
from __future__ import annotations

import json
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple
from urllib.parse import unquote, urlsplit

from apr_core.errors import AprError, ErrorCode
from apr_worker import store
from apr_worker.openai_format import ChoiceResult, Completion, model_card, model_list, usage

DEFAULT_MAX_TOKENS = 16         # OpenAI's default for /v1/completions
MAX_TOKENS_CAP = 512            # per request, as `apr serve` caps it
MAX_BODY = 1 << 20              # bytes of request body
MAX_STOPS = 4
ERROR_TYPES = {400: "invalid_request_error", 404: "invalid_request_error",
               405: "invalid_request_error", 413: "invalid_request_error",
               500: "server_error"}
# request fields this worker does not implement, with the values that mean "not asked for"
UNSUPPORTED = {"n": (None, 1), "best_of": (None, 1), "echo": (None, False),
               "logprobs": (None, False), "suffix": (None, ""), "tools": (None, [])}
DEFAULT_CHAT_MAX_TOKENS = 256   # chat requests without max_tokens / max_completion_tokens
ROLES = ("system", "user", "assistant")
_CLIENT_CODES = (ErrorCode.ARGUMENT, ErrorCode.UNSUPPORTED, ErrorCode.VALIDATION,
                 ErrorCode.MEMORY)
_STARTED = int(time.time())

Json = Dict[str, Any]


class ApiError(Exception):
    """A refused request: HTTP `status`, a one-line `message`, the offending `param`."""

    def __init__(self, status: int, message: str, param: Optional[str] = None,
                 code: Optional[str] = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    def body(self) -> Json:
        return {"error": {"message": self.message,
                          "type": ERROR_TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.code}}


def from_apr_error(err: AprError) -> ApiError:
    """Bad input found by apr_core -> 400; anything else (the model object missing or
    damaged, ...) is the worker's fault -> 500. `code` names apr's error category."""
    status = 400 if err.code in _CLIENT_CODES else 500
    param = err.context.get("field")
    return ApiError(status, str(err),      # "E007 IO: message (context)"
                    param=param if isinstance(param, str) else None,
                    code=err.code.category.lower())


async def handle(method: str, url: str, body: str, env: Any) -> Tuple[int, Any]:
    """(HTTP status, JSON body) for one request; a streamed answer's body is an iterator
    of server-sent events."""
    try:
        return 200, await _route(method.upper(), unquote(urlsplit(url).path), body, env)
    except ApiError as err:
        return err.status, err.body()
    except AprError as err:
        refused = from_apr_error(err)
        return refused.status, refused.body()


async def _route(method: str, path: str, body: str, env: Any) -> Any:
    path = path.rstrip("/") or "/"
    routes = {"/v1/completions": "POST", "/v1/chat/completions": "POST", "/v1/models": "GET",
              "/health": "GET"}
    wanted = routes.get(path, "GET" if path.startswith("/v1/models/") else None)
    if wanted is None:
        raise ApiError(404, "no route {}: this worker answers POST /v1/completions, POST "
                       "/v1/chat/completions and GET /v1/models".format(path), code="not_found")
    if method != wanted:
        raise ApiError(405, "{} takes {}, not {}".format(path, wanted, method),
                       code="method_not_allowed")
    if path == "/health":
        return {"status": "ok"}
    model_id = store.manifest()["model"]["name"]
    if path == "/v1/models":
        return model_list(model_id, _STARTED, _meta())
    if path.startswith("/v1/models/"):
        if path[len("/v1/models/"):] != model_id:
            raise ApiError(404, "model '{}' not found".format(path[len("/v1/models/"):]),
                           param="model", code="model_not_found")
        return model_card(model_id, _STARTED, _meta())
    if path == "/v1/chat/completions":
        return await chat(parse_body(body), env, model_id)
    return await complete(parse_body(body), env, model_id)


def _meta() -> Json:
    info = store.manifest()
    return {"format": info["model"].get("format"), "size": info["model"].get("size"),
            "sha256": info["model"].get("sha256"), "apr_version": info.get("apr_version")}


def parse_body(body: str) -> Json:
    if len(body) > MAX_BODY:
        raise ApiError(413, "request body larger than {} bytes".format(MAX_BODY),
                       code="request_too_large")
    try:
        parsed = json.loads(body or "")
    except ValueError as err:
        raise ApiError(400, "the body is not JSON: {}".format(err), code="invalid_json")
    if not isinstance(parsed, dict):
        raise ApiError(400, "the body must be a JSON object", code="invalid_json")
    return parsed


def _bad(param: str, message: str) -> ApiError:
    return ApiError(400, message, param=param, code="invalid_value")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def prompt_of(body: Json) -> Any:
    """The prompt: a string, a list holding one string, or a list of token ids."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
        return [int(t) for t in prompt]
    raise _bad("prompt", "'prompt' must be a string, a list of one string, or a "
               "non-empty list of token ids")


def max_tokens_of(body: Json, default: int = DEFAULT_MAX_TOKENS) -> int:
    value = body.get("max_tokens")
    if value is None:
        value = body.get("max_completion_tokens")
    if value is None:
        return default
    if not _is_int(value) or not 1 <= value <= MAX_TOKENS_CAP:
        raise _bad("max_tokens", "'max_tokens' must be an integer from 1 to {}".format(
            MAX_TOKENS_CAP))
    return value


def stops_of(body: Json) -> List[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or len(stops) > MAX_STOPS or \
            not all(isinstance(s, str) and s for s in stops):
        raise _bad("stop", "'stop' must be a non-empty string or a list of up to {} of "
                   "them".format(MAX_STOPS))
    return stops


def sampler_of(body: Json) -> Any:
    """SamplerConfig from the request's sampler fields (apr's one table of them, plus
    `seed`), greedy unless `temperature` says otherwise."""
    from apr_core.runtime.sampler_options import from_request
    from apr_core.runtime.sampling import SamplerConfig
    temperature = body.get("temperature")
    if temperature is not None and (isinstance(temperature, bool) or not isinstance(
            temperature, (int, float)) or not 0 <= temperature <= 2):
        raise _bad("temperature", "'temperature' must be a number from 0 to 2")
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise _bad("seed", "'seed' must be an integer")
    fields = from_request(body, skip=("temperature",))
    fields.update(temperature=float(temperature or 0.0), seed=seed)
    return SamplerConfig(**fields)


def check_supported(body: Json) -> None:
    for key, allowed in UNSUPPORTED.items():
        if body.get(key) not in allowed:
            raise ApiError(400, "'{}' is not supported by this worker".format(key),
                           param=key, code="unsupported_parameter")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _bad("stream", "'stream' must be true or false")


def messages_of(body: Json) -> List[Json]:
    """The conversation: a non-empty list of {"role", "content"} with string content (or
    OpenAI's list of text parts)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", "'messages' must be a non-empty list")
    out = []
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise _bad("messages", "each message needs a role among {}".format(ROLES))
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content
                              if isinstance(part, dict) and part.get("type") == "text")
        if not isinstance(content, str):
            raise _bad("messages", "a message's content must be a string")
        out.append({"role": message["role"], "content": content})
    return out


async def complete(body: Json, env: Any, model_id: str) -> Any:
    """One text completion in OpenAI's shape (the model is loaded by the first call)."""
    check_supported(body)
    prompt, max_tokens = prompt_of(body), max_tokens_of(body)
    engine = await store.engine(env)
    ids = engine.model.prompt_ids(prompt) if isinstance(prompt, str) else prompt
    n_vocab = engine.transformer.config.n_vocab
    if any(not 0 <= t < n_vocab for t in ids):
        raise _bad("prompt", "token ids must be in [0, {})".format(n_vocab))
    return _answer("text", body, engine, ids, max_tokens, model_id)


async def chat(body: Json, env: Any, model_id: str) -> Any:
    """One chat completion: the messages through the model's chat template."""
    check_supported(body)
    messages, max_tokens = messages_of(body), max_tokens_of(body, DEFAULT_CHAT_MAX_TOKENS)
    engine = await store.engine(env)
    ids = engine.model.chat_ids(messages)
    return _answer("chat", body, engine, ids, max_tokens, model_id)


def _answer(kind: str, body: Json, engine: Any, ids: List[int], max_tokens: int,
            model_id: str) -> Any:
    """The whole response, or (stream: true) an iterator of server-sent events."""
    stops, sampler = stops_of(body), sampler_of(body)
    completion = Completion(kind, model_id, engine.model.tokenizer.token_bytes,
                            engine.backend)
    if body.get("stream"):
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        return events(completion, engine.stream(ids, sampler, max_tokens, stops), len(ids),
                      include_usage)
    result = engine.generate(ids, sampler, max_tokens, stops)
    answer = completion.response([ChoiceResult(0, result.text, result.finish_reason)],
                                 usage(len(ids), len(result.token_ids)))
    if body.get("return_token_ids") is True:     # vLLM's extension: the generated ids
        answer["choices"][0]["token_ids"] = list(result.token_ids)
    return answer


def _event(body: Json) -> str:
    return "data: {}\n\n".format(json.dumps(body))


def events(completion: Any, pieces: Iterator[Any], prompt_tokens: int,
           include_usage: bool) -> Iterator[str]:
    """Server-sent events as `apr serve` streams them: the role, one chunk per piece of
    text, the finish reason, usage when asked for, then [DONE]."""
    for chunk in completion.first_chunks(1):
        yield _event(chunk)
    count = 0
    while True:
        try:
            piece = next(pieces)
        except StopIteration as done:
            finish = done.value or "length"
            break
        count += piece.token_id >= 0
        if piece.text:
            yield _event(completion.chunk(0, piece.text))
    yield _event(completion.chunk(0, None, finish=finish))
    if include_usage:
        yield _event(completion.usage_chunk(usage(prompt_tokens, count)))
    yield "data: [DONE]\n\n"


__all__ = ["ApiError", "handle", "complete", "chat", "events", "parse_body", "from_apr_error"]
