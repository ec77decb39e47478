"""Request bodies of the OpenAI API, checked field by field into frozen dataclasses.

Every check names the offending field (`param`), so a client sees *which* value was wrong:
wrong JSON types and out-of-range numbers (`max_tokens`, `temperature`, `n`, ...) are 400s
here, before a request reaches the model queue. Unknown fields are ignored, as OpenAI's API
does, because clients send extras such as `user`. vLLM's and llama-server's common
extensions (`top_k`, `min_p`, `repetition_penalty`, `stop_token_ids`, `ignore_eos`) are
accepted too. Sampling fields a request leaves out take the server's defaults (the
model's recommendation, `apr serve --temp ...`, else llama-server's; see
apr_core/runtime/sampling_defaults.py), never an unfiltered temperature 1.0. Messages
and the output fields (`response_format`, `tools`) have their own modules.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from apr_core.errors import AprError
from apr_core.runtime.batching.request import MAX_TOP_LOGPROBS
from apr_core.runtime.sampler_options import from_request
from apr_core.runtime.sampling import SamplerConfig
from apr_core.runtime.sampling_defaults import BUILT_IN_VALUES

from .fields import Json, bad, flag, integer, is_int, number, unsupported
from .messages import chat_messages
from .output_spec import OutputSpec, output_spec

MAX_STOPS = 4                   # OpenAI's limit on `stop` strings
MAX_EMBEDDING_INPUTS = 256      # inputs per /v1/embeddings request
MAX_N = 16                      # choices per request
MAX_LOGIT_BIAS = 300            # entries of `logit_bias` (OpenAI's limit)

Prompt = Union[str, List[int]]

# The sampling fields read with OpenAI's (vLLM's for the extensions) ranges, by
# SamplerConfig field = request name: (low, high). `apr serve`'s default flags take the same.
SAMPLING_RANGES: Dict[str, Tuple[float, float]] = {
    "temperature": (0.0, 2.0), "top_p": (0.0, 1.0), "top_k": (0, 1 << 20),
    "min_p": (0.0, 1.0), "repetition_penalty": (0.01, 10.0),
    "presence_penalty": (-2.0, 2.0), "frequency_penalty": (-2.0, 2.0)}
_UNSET = SamplerConfig()        # a field's value when neither request nor defaults give one


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
    n: int = 1
    logprobs: Optional[int] = None          # None: off; k: the chosen token + k alternatives
    logit_bias: Tuple[Tuple[int, float], ...] = ()
    stop_ids: Tuple[int, ...] = ()          # `stop_token_ids` (vLLM's extension)
    ignore_eos: bool = False                # (vLLM's and llama-server's extension)
    top_k: int = 0                          # (extension)
    min_p: float = 0.0                      # (extension)
    repetition_penalty: float = 1.0         # (extension)
    # llama-server's sampler fields (typical_p, mirostat*, repeat_penalty, repeat_last_n,
    # dry_*, xtc_*, samplers): (SamplerConfig field, value) from THE option table
    sampling: Tuple[Tuple[str, Any], ...] = ()

    def sampler(self) -> SamplerConfig:
        # top_p -> 0 keeps only the most likely token: that is greedy decoding.
        greedy = self.temperature == 0.0 or self.top_p == 0.0
        fields = dict(temperature=0.0 if greedy else self.temperature,
                      top_p=1.0 if greedy else self.top_p, seed=self.seed,
                      top_k=self.top_k, min_p=self.min_p,
                      repetition_penalty=self.repetition_penalty,
                      presence_penalty=self.presence_penalty,
                      frequency_penalty=self.frequency_penalty)
        fields.update(self.sampling)        # llama-server's repeat_penalty wins over vLLM's
        return SamplerConfig(**fields)


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: Tuple[Json, ...]      # {"role": str, "content": str, ...tool fields}
    params: GenerationParams
    output: OutputSpec              # response_format, tools and tool_choice


@dataclass(frozen=True)
class CompletionRequest:
    model: str
    prompt: Prompt                  # text, or token ids
    params: GenerationParams
    output: OutputSpec


@dataclass(frozen=True)
class EmbeddingRequest:
    model: str
    inputs: Tuple[Prompt, ...]
    encoding_format: str            # "float" or "base64"


# ---------------------------------------------------------------------------- field checks

def _model(body: Json) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad("model", "'model' must be a non-empty string")
    return model


def _stop(body: Json) -> Tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise bad("stop", "'stop' must be a string or a list of strings")
    if len(stops) > MAX_STOPS:
        raise bad("stop", "at most {} stop strings".format(MAX_STOPS))
    return tuple(s for s in stops if s)


def _token_ids(body: Json, key: str) -> Tuple[int, ...]:
    value = body.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(is_int(t) and t >= 0 for t in value):
        raise bad(key, "'{}' must be a list of token ids".format(key))
    return tuple(value)


def _logit_bias(body: Json) -> Tuple[Tuple[int, float], ...]:
    """OpenAI's `{"token id as a string": bias in [-100, 100]}`."""
    value = body.get("logit_bias")
    if value is None:
        return ()
    if not isinstance(value, dict) or len(value) > MAX_LOGIT_BIAS:
        raise bad("logit_bias", "'logit_bias' must be an object of at most {} token ids"
                  .format(MAX_LOGIT_BIAS))
    out = []
    for key, bias in value.items():
        if not str(key).isdigit() or isinstance(bias, bool) \
                or not isinstance(bias, (int, float)) or not -100 <= bias <= 100:
            raise bad("logit_bias", "'logit_bias' maps token ids to numbers in [-100, 100]")
        out.append((int(key), float(bias)))
    return tuple(out)


def _max_tokens(body: Json, cap: int) -> int:
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None \
        else "max_tokens"
    value = body.get(key)
    if value is None:
        return cap
    if not is_int(value):
        raise bad(key, "'{}' must be an integer".format(key))
    if not 1 <= value <= cap:
        raise bad(key, "'{}' must be between 1 and {} (this server's cap)".format(key, cap))
    return value


def _chat_logprobs(body: Json) -> Optional[int]:
    """Chat: `logprobs: true` with `top_logprobs` (0..20) alternatives."""
    if not flag(body, "logprobs"):
        if body.get("top_logprobs") is not None:
            raise bad("top_logprobs", "'top_logprobs' needs 'logprobs': true")
        return None
    return integer(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS)


def _completion_logprobs(body: Json) -> Optional[int]:
    """Completions: `logprobs: k` (0..5 in OpenAI's API; up to 20 here)."""
    if body.get("logprobs") is None:
        return None
    return integer(body, "logprobs", 0, 0, MAX_TOP_LOGPROBS)


def generation_params(body: Json, max_tokens_cap: int, logprobs: Optional[int],
                      defaults: Mapping[str, Any] = BUILT_IN_VALUES) -> GenerationParams:
    """The sampling and length fields shared by chat and completions; a sampling field the
    body leaves out takes its value from `defaults` (SamplerConfig field -> value: the
    server's effective defaults, `sampling_defaults.resolve`)."""
    seed = body.get("seed")
    if seed is not None and not is_int(seed):
        raise bad("seed", "'seed' must be an integer")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad("stream_options", "'stream_options' must be an object")
    stream = flag(body, "stream")
    include_usage = flag(options or {}, "include_usage")

    def sampled(key: str) -> Any:
        low, high = SAMPLING_RANGES[key]
        read = integer if key == "top_k" else number
        return read(body, key, defaults.get(key, getattr(_UNSET, key)), low, high)

    params = GenerationParams(
        max_tokens=_max_tokens(body, max_tokens_cap),
        temperature=sampled("temperature"), top_p=sampled("top_p"),
        stop=_stop(body), seed=seed,
        presence_penalty=sampled("presence_penalty"),
        frequency_penalty=sampled("frequency_penalty"),
        stream=stream, include_usage=include_usage,
        n=integer(body, "n", 1, 1, MAX_N), logprobs=logprobs,
        logit_bias=_logit_bias(body), stop_ids=_token_ids(body, "stop_token_ids"),
        ignore_eos=flag(body, "ignore_eos"),
        top_k=sampled("top_k"), min_p=sampled("min_p"),
        repetition_penalty=sampled("repetition_penalty"),
        sampling=_sampling(body, defaults))
    try:
        params.sampler()                     # every range checked before anything is queued
    except AprError as err:
        raise bad("sampling", err.message)
    return params


# fields read above with OpenAI's ranges; the option table reads the rest
_OPENAI_SAMPLING = ("temperature", "top_p", "top_k", "min_p", "presence_penalty",
                    "frequency_penalty")


def _sampling(body: Json, defaults: Mapping[str, Any]) -> Tuple[Tuple[str, Any], ...]:
    """The option table's fields: the request's, else the defaults' (those not read
    above, e.g. a model's recommended `penalty_last_n`)."""
    fields = {key: value for key, value in defaults.items() if key not in SAMPLING_RANGES}
    try:
        fields.update(from_request(body, skip=_OPENAI_SAMPLING))
    except AprError as err:
        raise bad(str(err.context.get("field", "sampling")), err.message)
    return tuple(sorted(fields.items()))


# ---------------------------------------------------------------------------- endpoints

def chat_request(body: Json, max_tokens_cap: int,
                 defaults: Mapping[str, Any] = BUILT_IN_VALUES) -> ChatRequest:
    """POST /v1/chat/completions (`defaults`: see `generation_params`)."""
    params = generation_params(body, max_tokens_cap, _chat_logprobs(body), defaults)
    return ChatRequest(_model(body), chat_messages(body), params, output_spec(body))


def _prompt(value: Any, param: str) -> Prompt:
    """A text, or a non-empty list of token ids (range-checked against the vocabulary
    later, where the model is known)."""
    if isinstance(value, str) and value:
        return value
    if isinstance(value, list) and value and all(is_int(t) for t in value):
        return list(value)
    raise bad(param, "'{}' must be a non-empty string or list of token ids".format(param))


def completion_request(body: Json, max_tokens_cap: int,
                       defaults: Mapping[str, Any] = BUILT_IN_VALUES) -> CompletionRequest:
    """POST /v1/completions (one prompt: a string, token ids, or a list holding one;
    `defaults`: see `generation_params`)."""
    unsupported(body, "echo", (None, False))
    unsupported(body, "suffix", (None, ""))
    unsupported(body, "best_of", (None, 1))
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    params = generation_params(body, max_tokens_cap, _completion_logprobs(body), defaults)
    output = output_spec(body)
    if output.tools:
        raise bad("tools", "'tools' belong to /v1/chat/completions")
    return CompletionRequest(_model(body), _prompt(prompt, "prompt"), params, output)


def embedding_request(body: Json) -> EmbeddingRequest:
    """POST /v1/embeddings: `input` is a string, token ids, or a list of either."""
    value = body.get("input")
    if isinstance(value, list) and value and all(isinstance(v, (str, list)) for v in value):
        items = value
    else:
        items = [value]
    if len(items) > MAX_EMBEDDING_INPUTS:
        raise bad("input", "at most {} inputs per request".format(MAX_EMBEDDING_INPUTS))
    fmt = body.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise bad("encoding_format", "'encoding_format' must be 'float' or 'base64'")
    unsupported(body, "dimensions")
    return EmbeddingRequest(_model(body), tuple(_prompt(v, "input") for v in items), fmt)


__all__ = ["ChatRequest", "CompletionRequest", "EmbeddingRequest", "GenerationParams",
           "SAMPLING_RANGES", "chat_request", "completion_request", "embedding_request", "generation_params"]
