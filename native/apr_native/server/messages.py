"""Chat messages of a request, checked and shaped for the model's chat template.

Text content is a string or a list of text parts. An assistant turn may carry the
`tool_calls` the server returned earlier (its `arguments` arrive as a JSON string, as
OpenAI sends them, and reach the template as an object, which is what Hugging Face chat
templates such as Qwen2.5's expect); a `tool` turn carries a call's result with its
`tool_call_id`.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Tuple

from .errors import ApiError
from .fields import Json, bad

ROLES = ("system", "developer", "user", "assistant", "tool")


def _content(message: Json, index: int) -> str:
    """A message's text: a string, or a list of `{"type": "text", "text": ...}` parts."""
    param = "messages[{}].content".format(index)
    content = message.get("content")
    if content is None and message.get("role") in ("assistant", "tool"):
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
    raise bad(param, "message content must be a string or a list of text parts")


def _tool_calls(message: Json, index: int) -> List[Dict[str, Any]]:
    """An assistant turn's earlier calls, `arguments` decoded to an object."""
    param = "messages[{}].tool_calls".format(index)
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        raise bad(param, "'tool_calls' must be a list")
    out = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise bad(param, "each tool call needs a function with a name")
        arguments = function.get("arguments", "{}")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except ValueError:
                raise bad(param, "tool call arguments must be a JSON string")
        out.append({"id": call.get("id"), "type": "function",
                    "function": {"name": function["name"], "arguments": arguments}})
    return out


def chat_messages(body: Json) -> Tuple[Json, ...]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad("messages", "'messages' must be a non-empty list")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise bad("messages[{}]".format(i), "each message must be an object")
        role = message.get("role")
        if role not in ROLES:
            raise bad("messages[{}].role".format(i),
                      "role must be one of {}".format(", ".join(ROLES)))
        # "developer" is OpenAI's newer name for the system role.
        shaped: Json = {"role": "system" if role == "developer" else role,
                        "content": _content(message, i)}
        if role == "assistant" and message.get("tool_calls"):
            shaped["tool_calls"] = _tool_calls(message, i)
        for key in ("tool_call_id", "name"):
            if isinstance(message.get(key), str):
                shaped[key] = message[key]
        out.append(shaped)
    return tuple(out)


__all__ = ["ROLES", "chat_messages"]
