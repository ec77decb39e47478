"""Tool calls in a model's text (`ToolCallFilter`) and the call schema, without a model."""
import json

import pytest

pytestmark = [pytest.mark.native]

from apr_native.server.tool_calls import (ToolCallFilter, call_schema,  # noqa: E402
                                          with_instructions)

NAMES = ["get_weather", "get_time"]


def run(pieces):
    f = ToolCallFilter(NAMES)
    shown = "".join(f.feed(p) for p in pieces)
    rest, calls = f.finish()
    return shown + rest, [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                          for c in calls]


def pieces(text, size=3):
    return [text[i:i + size] for i in range(0, len(text), size)]


def test_tagged_calls_after_content():
    text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": ' \
           '"Paris"}}\n</tool_call>\n<tool_call>{"name": "get_time", "arguments": ' \
           '{"zone": "CET"}}</tool_call>'
    shown, calls = run(pieces(text))
    assert shown == "Let me check.\n"
    assert calls == [("get_weather", {"city": "Paris"}), ("get_time", {"zone": "CET"})]


@pytest.mark.parametrize("text", [
    '{"name": "get_time", "arguments": {"zone": "UTC"}}',
    '  ```json\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n```',
    '[{"name": "get_time", "arguments": "{\\"zone\\": \\"UTC\\"}"}]',
])
def test_bare_and_fenced_calls(text):
    assert run(pieces(text, 2)) == ("", [("get_time", {"zone": "UTC"})])


@pytest.mark.parametrize("text", [
    "The weather is fine; <tool_ca is not a tag",
    '{"city": "Paris"}',                                     # JSON, but not a call
    '{"name": "launch_rockets", "arguments": {}}',           # not a known function
    '<tool_call>{"name": "get_time", "arguments": 5}</tool_call>',
    "<tool_call>{not json",
])
def test_anything_else_stays_content(text):
    assert run(pieces(text)) == (text, [])


def test_call_schema_ties_arguments_to_the_name():
    tools = [{"name": "a", "parameters": {"type": "object"}},
             {"name": "b", "parameters": {"type": "object", "required": ["x"]}}]
    both = call_schema(tools, None)
    assert [o["properties"]["name"] for o in both["anyOf"]] == [{"const": "a"}, {"const": "b"}]
    only = call_schema(tools, "b")
    assert only["properties"]["arguments"] == {"type": "object", "required": ["x"]}


def test_instructions_join_an_existing_system_message():
    tools = [{"name": "a", "parameters": {"type": "object"}}]
    out = with_instructions([{"role": "system", "content": "Be brief."},
                             {"role": "user", "content": "hi"}], tools)
    assert out[0]["content"].startswith("Be brief.\n\n") and '"name": "a"' in out[0]["content"]
    assert with_instructions([{"role": "user", "content": "hi"}], tools)[0]["role"] == "system"
