"""Chat templates: render a conversation into the prompt text a model was trained on.

With jinja2 importable, the model's own template (GGUF `tokenizer.chat_template` or
tokenizer_config.json's `chat_template`) is rendered the way HF transformers does it: a
sandboxed environment with trim_blocks/lstrip_blocks and loop controls, `raise_exception`,
`strftime_now`, and a `tojson` that keeps non-ASCII text. Without jinja2 (Pyodide offline,
minimal installs) the template is *recognised* and a built-in renderer produces the same
text for ordinary conversations: ChatML (Qwen, SmolLM), Llama-2, Llama-3, Mistral, Gemma.
A ChatML template's default system prompt is read out of the template text, so e.g. a
Qwen2.5 prompt without a system message still gets "You are Qwen, ...".
"""
from __future__ import annotations

import json
import re
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from ..errors import AprError, ErrorCode
from .chat_sandbox import DEFAULT_LIMITS, Limits, guard_filter, render_bounded
from .chat_sandbox import environment as sandbox_environment

Message = Mapping[str, Any]

BUILTIN_TEMPLATES = ("chatml", "llama2", "llama3", "mistral", "gemma")

# Marker -> built-in family, checked in order (Llama-2 before Mistral: both use [INST]).
_MARKERS = (("<|im_start|>", "chatml"), ("<|start_header_id|>", "llama3"),
            ("<start_of_turn>", "gemma"), ("<<SYS>>", "llama2"), ("[INST]", "mistral"))
# A literal default system prompt inside a ChatML template: '<|im_start|>system\n...<|im_end|>'
# (a pattern string: compiled on first use, re caches it).
_CHATML_DEFAULT_SYSTEM = \
    r"<\|im_start\|>system(?:\\n|\n)([^'\"{}<>+\\]*(?:\\n[^'\"{}<>+\\]*)*)<\|im_end\|>"


def detect_template(template: Optional[str]) -> Optional[str]:
    """The built-in family a template string (or a family name) corresponds to, if any."""
    if template is None:
        return "chatml"
    if template.strip().lower() in BUILTIN_TEMPLATES:
        return template.strip().lower()
    for marker, family in _MARKERS:
        if marker in template:
            return family
    return None


def render_chat(messages: Sequence[Message], template: Optional[str] = None,
                add_generation_prompt: bool = True, bos_token: str = "",
                eos_token: str = "", limits: Optional[Limits] = None,
                **extra: Any) -> str:
    """Prompt text for `messages` ([{"role": ..., "content": ...}, ...]).

    `template` is a Jinja chat template, a built-in name (`BUILTIN_TEMPLATES`) or None
    (ChatML). Extra keyword arguments (tools, documents, enable_thinking, ...) reach the
    Jinja template as variables; built-in renderers ignore them except `tools`, which they
    refuse rather than silently drop. A Jinja render runs under `limits` (default
    `DEFAULT_LIMITS`); past one it raises E008 naming the limit.
    """
    messages = [_check_message(m, i) for i, m in enumerate(messages)]
    is_name = template is None or template.strip().lower() in BUILTIN_TEMPLATES
    if not is_name:
        environment = _jinja_environment()
        if environment is not None:
            return _render_jinja(environment, template, messages, add_generation_prompt,
                                 bos_token, eos_token, extra, limits)
    family = detect_template(template)
    if family is None:
        raise AprError(ErrorCode.UNSUPPORTED, "chat template not recognised and jinja2 is "
                       "not installed (pip install jinja2)", template=(template or "")[:80])
    if extra.get("tools"):
        raise AprError(ErrorCode.UNSUPPORTED, "tool definitions need the model's Jinja "
                       "template (pip install jinja2)", family=family)
    default_system = None
    if family == "chatml" and template and not is_name:
        found = re.search(_CHATML_DEFAULT_SYSTEM, template)
        if found:
            default_system = found.group(1).replace("\\n", "\n")
    return _BUILTIN[family](messages, add_generation_prompt, bos_token, eos_token,
                            default_system)


def _check_message(message: Message, index: int) -> Dict[str, Any]:
    if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
        raise AprError(ErrorCode.ARGUMENT, "chat message needs a string 'role'", index=index)
    return dict(message)


def _text(message: Message) -> str:
    """A message's content as text: OpenAI-style content parts are joined."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        return "".join(p.get("text", "") for p in content
                       if isinstance(p, Mapping) and p.get("type", "text") == "text")
    return str(content)


# -- Jinja --------------------------------------------------------------------------------

_environment: Any = None
_compiled: "OrderedDict[str, Any]" = OrderedDict()
_COMPILED_KEPT = 16             # templates kept compiled (a server renders one or two)


def _jinja_environment() -> Any:
    """HF's chat-template environment inside the bounded sandbox (`chat_sandbox`), or None
    without jinja2 (imported on every call so a blocked import is noticed)."""
    global _environment
    env = sandbox_environment()
    if env is None:
        return None
    if _environment is not env:
        env.filters["tojson"] = guard_filter("tojson", _tojson)
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        _environment = env
    return _environment


def _tojson(value: Any, ensure_ascii: bool = False, indent: Optional[int] = None,
            separators: Any = None, sort_keys: bool = False) -> str:
    # Jinja's own tojson escapes HTML characters and sorts keys; chat templates expect
    # plain JSON (the HF behaviour).
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    import datetime     # (only for templates that print the date)
    return datetime.datetime.now().strftime(fmt)


class _TemplateRaised(Exception):
    pass


def _raise_exception(message: str) -> None:
    raise _TemplateRaised(message)


def _input_chars(messages: List[Dict[str, Any]], extra: Dict[str, Any]) -> int:
    """How much text the caller handed the template (its output may grow with it)."""
    try:
        return len(json.dumps([messages, extra], default=str))
    except (TypeError, ValueError, RecursionError):
        return 0


def _compile(environment: Any, template: str) -> Any:
    compiled = _compiled.get(template)
    if compiled is None:
        compiled = environment.from_string(template)
        _compiled[template] = compiled
        while len(_compiled) > _COMPILED_KEPT:
            _compiled.popitem(last=False)
    return compiled


def _render_jinja(environment: Any, template: str, messages: List[Dict[str, Any]],
                  add_generation_prompt: bool, bos_token: str, eos_token: str,
                  extra: Dict[str, Any], limits: Optional[Limits]) -> str:
    import jinja2
    variables = dict(extra, messages=messages, add_generation_prompt=add_generation_prompt,
                     bos_token=bos_token, eos_token=eos_token)
    try:
        return render_bounded(_compile(environment, template), variables,
                                           limits or DEFAULT_LIMITS,
                                           _input_chars(messages, extra))
    except AprError:
        raise
    except _TemplateRaised as exc:
        raise AprError(ErrorCode.ARGUMENT, "chat template rejected the conversation: "
                       + str(exc)) from exc
    except jinja2.TemplateError as exc:
        raise AprError(ErrorCode.FORMAT, "chat template failed to render",
                       error=str(exc)) from exc
    except (MemoryError, RecursionError, OverflowError) as exc:
        # Allocations past the address-space limit, endless macro recursion, huge numbers.
        raise AprError(ErrorCode.MEMORY, "chat template exceeded a limit: {}".format(
            type(exc).__name__), limit="memory" if isinstance(exc, MemoryError)
            else "recursion" if isinstance(exc, RecursionError) else "size") from None
    except Exception as exc:    # whatever a template's own code raised (TypeError, ...)
        raise AprError(ErrorCode.FORMAT, "chat template failed to render",
                       error="{}: {}".format(type(exc).__name__, exc)) from None


# -- built-in renderers --------------------------------------------------------------------

def _split_system(messages: List[Dict[str, Any]]):
    if messages and messages[0]["role"] == "system":
        return _text(messages[0]), messages[1:]
    return None, messages


def _check_alternation(messages: List[Dict[str, Any]], family: str) -> None:
    for index, message in enumerate(messages):
        if (message["role"] == "user") != (index % 2 == 0):
            raise AprError(ErrorCode.ARGUMENT, "conversation roles must alternate "
                           "user/assistant/user/...", template=family, index=index)


def _chatml(messages, add_generation_prompt, bos, eos, default_system) -> str:
    parts = []
    if default_system is not None and (not messages or messages[0]["role"] != "system"):
        parts.append("<|im_start|>system\n" + default_system + "<|im_end|>\n")
    for message in messages:
        parts.append("<|im_start|>" + message["role"] + "\n" + _text(message) + "<|im_end|>\n")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def _llama3(messages, add_generation_prompt, bos, eos, default_system) -> str:
    parts = [bos]
    for message in messages:
        parts.append("<|start_header_id|>" + message["role"] + "<|end_header_id|>\n\n"
                     + _text(message).strip() + "<|eot_id|>")
    if add_generation_prompt:
        parts.append("<|start_header_id|>assistant<|end_header_id|>\n\n")
    return "".join(parts)


def _llama2(messages, add_generation_prompt, bos, eos, default_system) -> str:
    system, turns = _split_system(messages)
    _check_alternation(turns, "llama2")
    parts = []
    for index, message in enumerate(turns):
        content = _text(message)
        if index == 0 and system is not None:
            content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content
        if message["role"] == "user":
            parts.append(bos + "[INST] " + content.strip() + " [/INST]")
        else:
            parts.append(" " + content.strip() + " " + eos)
    return "".join(parts)


def _mistral(messages, add_generation_prompt, bos, eos, default_system) -> str:
    system, turns = _split_system(messages)
    _check_alternation(turns, "mistral")
    parts = [bos]
    for index, message in enumerate(turns):
        content = _text(message)
        if index == 0 and system is not None:
            content = system + "\n\n" + content
        if message["role"] == "user":
            parts.append("[INST] " + content + " [/INST]")
        else:
            parts.append(content + eos)
    return "".join(parts)


def _gemma(messages, add_generation_prompt, bos, eos, default_system) -> str:
    system, turns = _split_system(messages)
    _check_alternation(turns, "gemma")
    parts = [bos]
    for index, message in enumerate(turns):
        role = "model" if message["role"] == "assistant" else message["role"]
        prefix = system + "\n\n" if index == 0 and system is not None else ""
        parts.append("<start_of_turn>" + role + "\n" + prefix + _text(message).strip()
                     + "<end_of_turn>\n")
    if add_generation_prompt:
        parts.append("<start_of_turn>model\n")
    return "".join(parts)


_BUILTIN: Dict[str, Callable[..., str]] = {
    "chatml": _chatml, "llama3": _llama3, "llama2": _llama2, "mistral": _mistral,
    "gemma": _gemma,
}
