"""Checking a chat template when the model loads, instead of on every request.

`probe_template` renders a probe conversation (system, user, assistant, user; then a tool
call and its result where the template knows tools) under the render budget. A template
that cannot render, breaks the sandbox's rules or exceeds the budget raises its `AprError`
at once, so `apr serve` can refuse to start rather than answer 500 forever. A template
that *rejects* a conversation shape on purpose (`raise_exception`, e.g. "roles must
alternate" for a system message) is not broken: the probe tries the next shape.
"""
from __future__ import annotations

import time
from typing import Any, Dict, List, Optional

from ..errors import AprError, ErrorCode
from .chat import detect_template, render_chat
from .chat_sandbox import Limits

PROBE_TEXT = "Probe message 7f3a"
_SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
_USER = {"role": "user", "content": "Hello."}
_ASSISTANT = {"role": "assistant", "content": "Hello! How can I help?"}
_LAST = {"role": "user", "content": PROBE_TEXT}
# Conversation shapes, most demanding first.
PROBES = ([_SYSTEM, _USER, _ASSISTANT, _LAST], [_USER, _ASSISTANT, _LAST], [_LAST])
PROBE_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"}}, "required": ["city"]}}}]
TOOL_CONVERSATION = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{
        "id": "call_0a1b2c3d4", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "call_0a1b2c3d4", "name": "get_weather",
     "content": "sunny, 21 C"},
    _LAST]


def knows_tools(template: Optional[str]) -> bool:
    """Whether a Jinja template reads the `tools` variable (built-in renderers do not)."""
    return bool(template) and "tools" in template and not _is_builtin_name(template)


def _is_builtin_name(template: str) -> bool:
    from .chat import BUILTIN_TEMPLATES
    return template.strip().lower() in BUILTIN_TEMPLATES


def probe_template(template: Optional[str], bos_token: str = "", eos_token: str = "",
                   limits: Optional[Limits] = None) -> Dict[str, Any]:
    """Render the probe conversations with `template`; raise the template's `AprError`
    when it is broken. Returns what was learned: the shape it accepted, whether tools
    rendered, the built-in it matches, the seconds it took."""
    start = time.perf_counter()
    accepted: Optional[List[Dict[str, Any]]] = None
    rejection = ""
    for conversation in PROBES:
        try:
            text = render_chat(conversation, template, True, bos_token, eos_token, limits)
        except AprError as err:
            if err.code is not ErrorCode.ARGUMENT:
                raise _probe_error(err)
            rejection = str(err)
            continue
        if PROBE_TEXT not in text:
            raise AprError(ErrorCode.FORMAT, "chat template drops the user's message: its "
                           "output for the probe conversation does not contain it",
                           output=text[:120])
        accepted = conversation
        break
    if accepted is None:
        raise AprError(ErrorCode.FORMAT, "chat template rejects every probe conversation",
                       error=rejection)
    tools, tools_error = False, None
    if knows_tools(template):
        # Templates differ in the tool shapes they expect, so only a runaway render (E008)
        # condemns the template here; other failures mean "no tools with this shape".
        try:
            render_chat(TOOL_CONVERSATION, template, True, bos_token, eos_token, limits,
                        tools=PROBE_TOOLS)
            tools = True
        except AprError as err:
            if err.code is ErrorCode.MEMORY:
                raise _probe_error(err)
            tools_error = str(err)
    return {"system": accepted[0]["role"] == "system", "turns": len(accepted),
            "tools": tools, "tools_error": tools_error, "matches": detect_template(template),
            "seconds": round(time.perf_counter() - start, 4)}


def _probe_error(err: AprError) -> AprError:
    """The render's error, kept with its code and context, said to come from the probe."""
    return AprError(err.code, "chat template is unusable: " + err.message, **err.context)


def describe_template(template: Optional[str], bos_token: str = "", eos_token: str = ""
                      ) -> Dict[str, Any]:
    """What `apr inspect` says about a model's template: whether there is one, the family
    its markers show, the built-in renderer that gives byte-identical prompts on the
    probe conversations (None if none does) and whether it passes the probe."""
    from .chat import BUILTIN_TEMPLATES
    if not template:
        return {"present": False, "chars": 0, "family": None, "builtin": None, "check": None}
    info: Dict[str, Any] = {"present": True, "chars": len(template),
                            "family": detect_template(template), "builtin": None}
    try:
        probe_template(template, bos_token, eos_token)
        info["check"] = "ok"
    except AprError as err:
        info["check"] = str(err)
        return info
    for name in BUILTIN_TEMPLATES:
        if _renders_like(template, name, bos_token, eos_token):
            info["builtin"] = name
            break
    return info


def _renders_like(template: str, name: str, bos_token: str, eos_token: str) -> bool:
    for conversation in PROBES:
        for generation_prompt in (True, False):
            try:
                ours = render_chat(conversation, name, generation_prompt, bos_token, eos_token)
            except AprError:
                ours = None
            try:
                theirs = render_chat(conversation, template, generation_prompt, bos_token,
                                     eos_token)
            except AprError:
                theirs = None
            if ours != theirs:
                return False
    return True


__all__ = ["probe_template", "describe_template", "knows_tools", "PROBES", "PROBE_TOOLS",
           "TOOL_CONVERSATION"]
