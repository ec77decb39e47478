"""`apr serve` as a serving engine, on Qwen2.5-Coder-0.5B with the official `openai`
client: concurrent streams batched together answer what each answers alone; tools,
structured output, logprobs, n/seed, stop strings and ids, logit_bias; a client that
leaves frees its KV blocks.

Oracles: the same server answering one request at a time (batching must not change a
greedy answer), `jsonschema` (structured output and tool arguments validate), and an
in-process `Engine` session over the same file (logprobs are its log-softmax).
"""
import asyncio
import json
import time

import numpy as np
import pytest

pytestmark = [pytest.mark.native, pytest.mark.real_model]

openai = pytest.importorskip("openai", reason="the openai client is a dev dependency")
jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is a dev dependency")

from server_util import running_server  # noqa: E402

API_KEY = "k-openai"
MODEL = "qwen"
QUESTIONS = ["What is the capital of France?", "Name a primary colour.",
             "Write a haiku about the sea.", "What is 17 times 23?",
             "Explain recursion in one sentence to a child who likes trains.",
             "Say hello in Spanish.", "List three prime numbers.",
             "What does a compiler do? Answer briefly, then give an example of one."]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string"},
                                  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}
CLOCK = {"type": "function", "function": {
    "name": "get_time", "description": "The local time in a time zone",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string"}},
                   "required": ["zone"], "additionalProperties": False}}}


@pytest.fixture(scope="module")
def server(qwen_gguf, tmp_path_factory):
    pytest.importorskip("uvicorn", reason="uvicorn is a native dependency")
    log = tmp_path_factory.mktemp("server") / "stderr.txt"
    args = [qwen_gguf, "--model-id", MODEL, "--max-batch", "8", "--max-tokens", "4096"]
    with running_server(args[0], args[1:], log, API_KEY) as running:
        yield running


@pytest.fixture(scope="module")
def local(qwen_gguf):
    from apr_native.engine import load_engine
    return load_engine(qwen_gguf)


def ask(client, question, **kw):
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": question}], **kw)


def test_concurrent_streams_equal_their_lone_answers(server):
    client = server.client()
    alone = [ask(client, q, max_tokens=16, temperature=0).choices[0].message.content
             for q in QUESTIONS]

    async def one(aclient, i):
        await asyncio.sleep(0.15 * i)           # join the running batch at different steps
        stream = await aclient.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": QUESTIONS[i]}],
            max_tokens=16, temperature=0, stream=True)
        return "".join([c.choices[0].delta.content or "" async for c in stream
                        if c.choices])

    async def everyone():
        aclient = server.async_client()
        return await asyncio.gather(*(one(aclient, i) for i in range(len(QUESTIONS))))
    steps = server.metric("apr_engine_steps_total")
    together = asyncio.run(everyone())
    assert together == alone
    # 8 x 16 tokens took far fewer forward passes than 128: they were batched
    assert server.metric("apr_engine_steps_total") - steps < 0.5 * 16 * len(QUESTIONS)


def test_tool_call_auto_then_the_result_through_the_template(server):
    client = server.client()
    messages = [{"role": "user", "content": "What's the weather like in Paris today?"}]
    reply = client.chat.completions.create(model=MODEL, messages=messages,
                                           tools=[WEATHER, CLOCK], temperature=0,
                                           max_tokens=100)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, WEATHER["function"]["parameters"])
    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id,
                     "content": json.dumps({"temperature": 21, "unit": "celsius"})})
    follow = client.chat.completions.create(model=MODEL, messages=messages,
                                            tools=[WEATHER, CLOCK], temperature=0,
                                            max_tokens=60)
    assert follow.choices[0].finish_reason in ("stop", "length")
    # the tool's result reached the prompt: it is longer by the whole exchange
    assert follow.usage.prompt_tokens > reply.usage.prompt_tokens + 20


@pytest.mark.parametrize("choice", ["required", {"type": "function",
                                                 "function": {"name": "get_time"}}])
def test_forced_tool_call_validates_streamed_or_not(server, choice):
    client = server.client()
    kw = dict(model=MODEL, tools=[WEATHER, CLOCK], tool_choice=choice, temperature=0.7,
              seed=5, max_tokens=120,
              messages=[{"role": "user", "content": "What time is it in Tokyo?"}])
    reply = client.chat.completions.create(**kw)
    assert reply.choices[0].finish_reason == "tool_calls"
    (call,) = reply.choices[0].message.tool_calls
    if isinstance(choice, dict):
        assert call.function.name == "get_time"
    tool = {"get_weather": WEATHER, "get_time": CLOCK}[call.function.name]
    jsonschema.validate(json.loads(call.function.arguments), tool["function"]["parameters"])
    chunks = list(client.chat.completions.create(stream=True, **kw))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    streamed = [t for d in deltas for t in (d.tool_calls or [])]
    assert [(t.function.name, t.function.arguments) for t in streamed] == [
        (call.function.name, call.function.arguments)]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                      "age": {"type": "integer", "minimum": 0,
                                              "maximum": 120}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {
        "colours": {"type": "array", "items": {"enum": ["red", "green", "blue"]},
                    "minItems": 1, "maxItems": 3},
        "primary": {"type": "boolean"}}, "required": ["colours", "primary"]},
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_json_schema_response_parses_and_validates(server, schema):
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema,
                                                  "strict": True}}
    reply = ask(server.client(), "Describe a person (or colours) as JSON.", max_tokens=120,
                temperature=0.8, seed=1, response_format=fmt)
    assert reply.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(reply.choices[0].message.content), schema)


def test_json_object_mode(server):
    reply = ask(server.client(), "Give the name and the country of France's capital as a "
                "JSON object.", max_tokens=200, temperature=0,
                response_format={"type": "json_object"})
    assert reply.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(reply.choices[0].message.content), dict)


def test_logprobs_are_the_log_softmax_of_the_engine_logits(server, local):
    from apr_core.runtime.batching.sequence import log_softmax
    question = "Which planet is known as the red planet? ({})".format(time.time())
    reply = ask(server.client(), question, max_tokens=8, temperature=0, logprobs=True,
                top_logprobs=5)
    entries = reply.choices[0].logprobs.content
    assert len(entries) == reply.usage.completion_tokens == 8
    ids = local.model.prompt_ids(question, chat=True)
    tok = local.model.tokenizer
    with local.session() as session:
        logits = session.forward(ids)
        for entry in entries:
            lp = log_softmax(logits)                                     # [n_vocab]
            best = np.argsort(-lp, kind="stable")[:5]
            assert [t.bytes for t in entry.top_logprobs] == [
                list(tok.token_bytes(int(t))) for t in best]
            np.testing.assert_allclose([t.logprob for t in entry.top_logprobs], lp[best],
                                       rtol=0, atol=1e-6)
            chosen = int(best[0])                                        # greedy
            assert entry.bytes == list(tok.token_bytes(chosen))
            assert entry.logprob == pytest.approx(lp[chosen], abs=1e-6)
            logits = session.forward([chosen])


def test_n_choices_with_a_seed_repeat(server):
    # ignore_eos (vLLM's field): a sampled end of turn cannot cut a choice short
    kw = dict(max_tokens=12, temperature=1.0, seed=11, n=3, extra_body={"ignore_eos": True})
    first = ask(server.client(), "Tell me a fun fact.", **kw)
    again = ask(server.client(), "Tell me a fun fact.", **kw)
    texts = [c.message.content for c in first.choices]
    assert [c.index for c in first.choices] == [0, 1, 2]
    assert texts == [c.message.content for c in again.choices]
    assert len(set(texts)) > 1                       # each choice samples on its own
    assert first.usage.completion_tokens == 36       # every choice ran to max_tokens
    assert [c.finish_reason for c in first.choices] == ["length"] * 3
    assert again.usage.prompt_tokens_details.cached_tokens > 0


def test_stop_strings_ids_and_logit_bias(server, local):
    client = server.client()
    base = ask(client, QUESTIONS[0], max_tokens=12, temperature=0)
    text = base.choices[0].message.content
    word = text.split()[2]
    cut = ask(client, QUESTIONS[0], max_tokens=12, temperature=0, stop=[word])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].message.content == text[:text.index(word)]
    ids = local.generate(local.model.prompt_ids(QUESTIONS[0], chat=True), max_tokens=12).token_ids
    stopped = ask(client, QUESTIONS[0], max_tokens=12, temperature=0,
                  extra_body={"stop_token_ids": [ids[3]]})
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.usage.completion_tokens == ids.index(ids[3])
    banned = ask(client, QUESTIONS[0], max_tokens=3, temperature=0,
                 logit_bias={str(ids[0]): -100}, logprobs=True)
    assert banned.choices[0].logprobs.content[0].bytes != list(
        local.model.tokenizer.token_bytes(ids[0]))
    limited = ask(client, QUESTIONS[0], max_completion_tokens=2, temperature=0)
    assert limited.usage.completion_tokens == 2 and limited.choices[0].finish_reason == "length"


def test_a_client_that_leaves_frees_its_blocks(server):
    body = {"model": MODEL, "prompt": "1, 2, 3, 4, 5,", "max_tokens": 4000, "stream": True,
            "temperature": 0, "ignore_eos": True}
    with server.http.stream("POST", "/v1/completions", json=body) as response:
        lines = response.iter_lines()
        for _ in range(5):
            next(line for line in lines if line.startswith("data: "))
        assert server.metric("apr_kv_blocks_used") > 0
        assert server.metric("apr_running_sequences") == 1
    deadline = time.monotonic() + 60
    while server.metric("apr_running_sequences") or server.metric("apr_kv_blocks_used"):
        assert time.monotonic() < deadline, "the abandoned stream still holds KV blocks"
        time.sleep(0.1)
    total = server.metric("apr_kv_blocks_total")
    assert server.metric("apr_kv_blocks_free") == total
