"""THE table of sampler options: each `SamplerConfig` field with its command-line flag and
its request field (llama-server's names), so `apr run/chat`, `apr serve` and the browser
API take the same options under the same names.

    for option in OPTIONS: parser.add_argument(option.flag, ...)
    config = SamplerConfig(**from_request(body))     # {"dry_multiplier": 0.8, ...}
"""
from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from ..errors import AprError, ErrorCode
from .dry import DEFAULT_BREAKERS
from .sampling import DEFAULT_ORDER


class Option(NamedTuple):
    field: str                  # SamplerConfig attribute
    flag: str                   # command-line flag
    request: str                # request field (llama-server / vLLM name)
    kind: type                  # int, float, or str (a list of strings)
    default: Any
    help: str


OPTIONS: Tuple[Option, ...] = (
    Option("temperature", "--temperature", "temperature", float, 0.0,
           "0 = greedy (default); higher is more random"),
    Option("top_k", "--top-k", "top_k", int, 0, "keep the k most likely tokens (0 = off)"),
    Option("top_p", "--top-p", "top_p", float, 1.0, "nucleus: the smallest set with this mass"),
    Option("min_p", "--min-p", "min_p", float, 0.0, "keep tokens with p >= min_p * p_max"),
    Option("typical_p", "--typical-p", "typical_p", float, 1.0, "locally typical mass (1 = off)"),
    Option("mirostat", "--mirostat", "mirostat", int, 0, "1 = Mirostat, 2 = Mirostat v2"),
    Option("mirostat_tau", "--mirostat-tau", "mirostat_tau", float, 5.0,
           "Mirostat's target surprise (bits)"),
    Option("mirostat_eta", "--mirostat-eta", "mirostat_eta", float, 0.1,
           "Mirostat's learning rate"),
    Option("repetition_penalty", "--repeat-penalty", "repeat_penalty", float, 1.0,
           "divide (multiply) a seen token's positive (negative) logit (1 = off)"),
    Option("presence_penalty", "--presence-penalty", "presence_penalty", float, 0.0,
           "subtract from the logit of every seen token"),
    Option("frequency_penalty", "--frequency-penalty", "frequency_penalty", float, 0.0,
           "subtract this times the count of each seen token"),
    Option("penalty_last_n", "--repeat-last-n", "repeat_last_n", int, 64,
           "tokens of history the penalties look at (-1 = all)"),
    Option("dry_multiplier", "--dry-multiplier", "dry_multiplier", float, 0.0,
           "DRY repetition penalty strength (0 = off)"),
    Option("dry_base", "--dry-base", "dry_base", float, 1.75, "DRY's exponential base"),
    Option("dry_allowed_length", "--dry-allowed-length", "dry_allowed_length", int, 2,
           "repetitions up to this length are not penalised"),
    Option("dry_penalty_last_n", "--dry-penalty-last-n", "dry_penalty_last_n", int, -1,
           "tokens of history DRY looks at (-1 = all)"),
    Option("dry_sequence_breakers", "--dry-sequence-breaker", "dry_sequence_breakers", str,
           DEFAULT_BREAKERS, "a string that ends a repetition (repeatable; default "
           "'\\n' ':' '\"' '*'; 'none' for none)"),
    Option("xtc_probability", "--xtc-probability", "xtc_probability", float, 0.0,
           "XTC: chance of removing the top choices (0 = off)"),
    Option("xtc_threshold", "--xtc-threshold", "xtc_threshold", float, 0.1,
           "XTC: tokens at least this likely count as top choices"),
    Option("samplers", "--samplers", "samplers", str, DEFAULT_ORDER,
           "stage order, ';'-separated (default " + ";".join(DEFAULT_ORDER) + ")"),
)

BY_FIELD = {o.field: o for o in OPTIONS}


def string_list(value: Any, name: str) -> Tuple[str, ...]:
    """A list of strings from a request value or a ';'-separated string."""
    if isinstance(value, str):
        return tuple(part for part in value.split(";") if part)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise AprError(ErrorCode.ARGUMENT, "'{}' must be a list of strings".format(name),
                   field=name)


def from_request(body: Dict[str, Any], skip: Sequence[str] = ()) -> Dict[str, Any]:
    """SamplerConfig keyword arguments from the request fields present in `body`
    (type-checked; ranges are SamplerConfig's); `skip`: fields the caller reads itself."""
    out: Dict[str, Any] = {}
    for option in OPTIONS:
        if option.request in skip or body.get(option.request) is None:
            continue
        value = body[option.request]
        if option.kind is str:
            value = string_list(value, option.request)
        elif option.kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise AprError(ErrorCode.ARGUMENT, "'{}' must be an integer".format(
                    option.request), field=option.request)
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise AprError(ErrorCode.ARGUMENT, "'{}' must be a number".format(option.request),
                           field=option.request)
        out[option.field] = option.kind(value) if option.kind is not str else value
    return out


def from_flags(values: Dict[str, Any]) -> Dict[str, Any]:
    """SamplerConfig keyword arguments from parsed command-line values keyed by field
    (None: not given, the default stays)."""
    out: Dict[str, Any] = {}
    for field, value in values.items():
        if value is None:
            continue
        if field == "samplers":
            value = string_list(value, "--samplers")
        elif field == "dry_sequence_breakers":
            value = () if list(value) == ["none"] else tuple(value)
        out[field] = value
    return out


def parse_logit_bias(items: Optional[List[str]]) -> Tuple[Tuple[int, float], ...]:
    """`--logit-bias ID(+|-)BIAS` values (llama.cpp's form, e.g. 15043+1 or 29871-inf)."""
    out = []
    for item in items or ():
        cut = max(item.rfind("+"), item.rfind("-"))
        try:
            if cut <= 0:
                raise ValueError(item)
            out.append((int(item[:cut]), float(item[cut:])))
        except ValueError:
            raise AprError(ErrorCode.ARGUMENT, "--logit-bias takes TOKEN_ID+BIAS or "
                           "TOKEN_ID-BIAS", value=item)
    return tuple(out)


__all__ = ["OPTIONS", "BY_FIELD", "Option", "from_request", "from_flags", "parse_logit_bias",
           "string_list"]
