"""Tool calls in the model's text, and the tools in its prompt.

Models trained for tools (Qwen2.5, Hermes, Llama 3.1 ...) learn them from their own chat
template, which receives `tools`. Their answer carries each call as
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (the Hermes convention Qwen2.5's
template teaches); a template that ignores `tools` gets the same instructions in a system
message, so any chat model is told how to call.

`ToolCallFilter` watches the text of a choice in `auto` mode: text before a call streams as
content; from `<tool_call>` on it is held and parsed into calls when the choice ends. Small
models often drop the tags and answer with the bare object (or a list of them, or either
in a markdown code fence), so an answer that opens with `{`, `[` or a fence is held too and becomes calls if it parses as calls to
known functions (else it is released as content at the end). A forced call (`required` or a named function) is decoded under a JSON schema, so its whole
text is one `{"name", "arguments"}` object.
"""
from __future__ import annotations

import json
import re
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple

OPEN, CLOSE = "<tool_call>", "</tool_call>"
FENCE = re.compile(r"^```[A-Za-z]*\s*\n(.*?)\n?```$", re.S)     # ```json ... ```


def call_schema(tools: Sequence[Dict[str, Any]], name: Optional[str]) -> Dict[str, Any]:
    """JSON schema of one call `{"name": ..., "arguments": {...}}` to one of `tools` (or to
    `name`): the arguments must validate against that function's parameters."""
    options = [{"type": "object",
                "properties": {"name": {"const": t["name"]}, "arguments": t["parameters"]},
                "required": ["name", "arguments"], "additionalProperties": False}
               for t in tools if name is None or t["name"] == name]
    return options[0] if len(options) == 1 else {"anyOf": options}


def instructions(tools: Sequence[Dict[str, Any]]) -> str:
    """The system text that tells a model without a tool-aware template how to call."""
    listed = "\n".join(json.dumps({"type": "function", "function": t}, ensure_ascii=False)
                       for t in tools)
    return ("You may call one or more functions to assist with the user query.\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            "<tools>\n" + listed + "\n</tools>\n\nFor each function call, return a json "
            "object with function name and arguments within <tool_call></tool_call> XML "
            "tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-"
            "object>}\n</tool_call>")


def with_instructions(messages: Sequence[Dict[str, Any]], tools: Sequence[Dict[str, Any]]
                      ) -> List[Dict[str, Any]]:
    """`messages` with the tool instructions added to (or as) the system message."""
    out = [dict(m) for m in messages]
    text = instructions(tools)
    if out and out[0]["role"] == "system":
        out[0]["content"] = (out[0]["content"] + "\n\n" + text).strip()
    else:
        out.insert(0, {"role": "system", "content": text})
    return out


def template_knows_tools(template: Optional[str]) -> bool:
    return bool(template) and "tools" in template


def openai_call(name: str, arguments: Any) -> Dict[str, Any]:
    """One entry of a message's `tool_calls` (arguments as a JSON string, as OpenAI's)."""
    return {"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
            "function": {"name": name,
                         "arguments": json.dumps(arguments, ensure_ascii=False)}}


def parse_call(text: str, known: Sequence[str]) -> Optional[Dict[str, Any]]:
    """A `{"name", "arguments"}` object naming a known function -> an OpenAI call."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("name") not in known:
        return None
    arguments = data.get("arguments", data.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return openai_call(data["name"], arguments)


class ToolCallFilter:
    """Splits one choice's text into content and `<tool_call>` blocks (auto mode)."""

    def __init__(self, known: Sequence[str]) -> None:
        self.known = list(known)
        self.held = ""              # text not shown yet: a possible or a begun call
        self.in_calls = False
        self.bare = False           # the answer opened with JSON: maybe untagged calls
        self.started = False        # some non-space text has been seen

    def feed(self, text: str) -> str:
        """Content to show now for the new `text`."""
        self.held += text
        if self.in_calls or self.bare:
            return ""
        if not self.started:
            if not self.held.strip():
                return ""           # leading white space: wait for the first word
            self.started = True
            if self.held.lstrip()[0] in "{[`":
                self.bare = True
                return ""
        at = self.held.find(OPEN)
        if at >= 0:
            shown, self.held, self.in_calls = self.held[:at], self.held[at:], True
            return shown
        keep = _partial_suffix(self.held, OPEN)
        shown = self.held[:len(self.held) - keep]
        self.held = self.held[len(self.held) - keep:]
        return shown

    def finish(self) -> Tuple[str, List[Dict[str, Any]]]:
        """(content still held, the calls) at the end of the choice. Text that does not
        parse as a call to a known function is returned as content."""
        if self.bare:
            calls = self._bare_calls(self.held.strip())
            held, self.held = self.held, ""
            return ("", calls) if calls else (held, [])
        if not self.in_calls:
            held, self.held = self.held, ""
            return held, []
        calls, rest = [], self.held
        while rest.startswith(OPEN):
            end = rest.find(CLOSE)
            body = rest[len(OPEN):end if end >= 0 else len(rest)]
            call = parse_call(body.strip(), self.known)
            if call is None:
                break
            calls.append(call)
            rest = rest[end + len(CLOSE):].lstrip() if end >= 0 else ""
        if not calls:
            return self.held, []
        return rest, calls


    def _bare_calls(self, text: str) -> List[Dict[str, Any]]:
        fenced = FENCE.match(text)
        if fenced:
            text = fenced.group(1)
        try:
            data = json.loads(text)
        except ValueError:
            return []
        items = data if isinstance(data, list) else [data]
        calls = [parse_call(json.dumps(item), self.known) for item in items]
        return calls if calls and all(c is not None for c in calls) else []


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of `text` that begins `marker`."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


__all__ = ["ToolCallFilter", "call_schema", "instructions", "openai_call", "parse_call",
           "template_knows_tools", "with_instructions"]
