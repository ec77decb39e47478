"""What shape the answer must take: `response_format`, `tools` and `tool_choice`.

    response_format {"type": "text"}                 free text (the default)
                    {"type": "json_object"}          any JSON object, by constrained decoding
                    {"type": "json_schema",
                     "json_schema": {"name", "schema", "strict"}}   JSON valid for `schema`
    tools           [{"type": "function", "function": {"name", "description", "parameters"}}]
    tool_choice     "none" | "auto" (default with tools) | "required"
                    | {"type": "function", "function": {"name": ...}}

With "required" or a named function the answer is one call, decoded under its schema;
with "auto" the model chooses, and the calls it writes are parsed from its text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from .errors import ApiError
from .fields import Json, bad

MAX_TOOLS = 128
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True)
class OutputSpec:
    json_mode: bool = False                  # the answer is JSON
    json_schema: Optional[Dict[str, Any]] = None   # ... valid for this schema (None: any object)
    tools: Tuple[Dict[str, Any], ...] = ()   # the `function` objects of `tools`
    tool_choice: str = "none"                # none | auto | required | named
    tool_name: Optional[str] = None          # the function a named tool_choice forces

    @property
    def forces_call(self) -> bool:
        return self.tool_choice in ("required", "named")

    def template_tools(self) -> Optional[list]:
        """`tools` as chat templates expect them (OpenAI's shape), or None."""
        if not self.tools or self.tool_choice == "none":
            return None
        return [{"type": "function", "function": f} for f in self.tools]


def _response_format(body: Json) -> Tuple[bool, Optional[Dict[str, Any]]]:
    fmt = body.get("response_format")
    if fmt is None:
        return False, None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return False, None
    if kind == "json_object":
        return True, None
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise bad("response_format", "json_schema needs {'name': ..., 'schema': {...}}")
        return True, schema
    raise bad("response_format", "response_format type must be text, json_object or "
              "json_schema")


def _tools(body: Json) -> Tuple[Dict[str, Any], ...]:
    tools = body.get("tools")
    if tools is None:
        return ()
    if not isinstance(tools, list) or len(tools) > MAX_TOOLS:
        raise bad("tools", "'tools' must be a list of at most {} functions".format(MAX_TOOLS))
    out, names = [], set()
    for i, tool in enumerate(tools):
        param = "tools[{}]".format(i)
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" \
                or not isinstance(function, dict):
            raise bad(param, "each tool must be {'type': 'function', 'function': {...}}")
        name = function.get("name")
        if not isinstance(name, str) or not TOOL_NAME.match(name) or name in names:
            raise bad(param, "a function needs a unique name of letters, digits, _ . -")
        parameters = function.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(parameters, dict):
            raise bad(param, "a function's 'parameters' must be a JSON schema object")
        names.add(name)
        clean = {"name": name, "parameters": parameters}
        if isinstance(function.get("description"), str):
            clean["description"] = function["description"]
        out.append(clean)
    return tuple(out)


def _tool_choice(body: Json, tools: Tuple[Dict[str, Any], ...]) -> Tuple[str, Optional[str]]:
    choice = body.get("tool_choice")
    if choice is None:
        return ("auto" if tools else "none"), None
    if choice in ("none", "auto", "required"):
        if choice != "none" and not tools:
            raise bad("tool_choice", "tool_choice '{}' needs 'tools'".format(choice))
        return choice, None
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise bad("tool_choice", "tool_choice must be none, auto, required or "
                  "{'type': 'function', 'function': {'name': ...}}")
    if name not in {t["name"] for t in tools}:
        raise bad("tool_choice", "tool_choice names '{}', which is not in 'tools'".format(name))
    return "named", name


def output_spec(body: Json) -> OutputSpec:
    json_mode, schema = _response_format(body)
    tools = _tools(body)
    choice, name = _tool_choice(body, tools)
    if json_mode and choice == "auto":
        raise ApiError(400, "response_format JSON with tool_choice 'auto' is not supported; "
                       "use tool_choice 'none' or 'required'", param="tool_choice",
                       code="unsupported_parameter")
    return OutputSpec(json_mode, schema, tools, choice, name)


__all__ = ["OutputSpec", "output_spec"]
