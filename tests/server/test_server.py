"""`apr serve` end to end: the real server in a subprocess on a free loopback port, driven by
the official `openai` client (and raw HTTP for what a well-behaved client never sends).

Oracles: `apr run demo PROMPT --chat` (and with `--raw` for /v1/completions) run as a
separate process with the same greedy settings; the streamed text must equal the
non-streamed text; embeddings must equal the mean of `Transformer.hidden_states` computed in
this process. One server serves the whole module (loading the model costs seconds); it runs
`--dequantize` on both sides of every comparison because dense weights decode ~10x faster
in numpy, which keeps this module to about a minute.
"""
import contextlib
import json
import os
import re
import subprocess
import threading
import time

import numpy as np
import pytest

pytestmark = [pytest.mark.native, pytest.mark.real_model]

openai = pytest.importorskip("openai", reason="the openai client is a dev dependency")
httpx = pytest.importorskip("httpx", reason="httpx is a dev dependency")

from server_util import APR, running_server  # noqa: E402

API_KEY = "test-key-123"
QUESTION = "What is the capital of France?"
SHORT_PROMPT = "The capital of France is"
MAX_QUEUE = 2
MAX_BATCH = 2
# Tokens of a generation that must outlast what a test does meanwhile (several seconds even
# at 100 tok/s; the server's --max-tokens allows it).
LONG = 2048
MAX_BODY = 65536


def alive(server):
    """The server still answers a real (short) generation."""
    reply = server.client().completions.create(
        model="demo", prompt=SHORT_PROMPT, max_tokens=2, temperature=0)
    return "Paris" in reply.choices[0].text


@pytest.fixture(scope="module")
def server(smollm2_gguf, tmp_path_factory):
    pytest.importorskip("uvicorn", reason="uvicorn is a native dependency")
    log = tmp_path_factory.mktemp("server") / "stderr.txt"
    args = ["--dequantize", "--max-queue", str(MAX_QUEUE), "--max-batch", str(MAX_BATCH),
            "--max-body", str(MAX_BODY), "--max-tokens", str(LONG)]
    with running_server("demo", args, log, API_KEY) as running:
        yield running


def cli_run(*args):
    """`apr run demo ARGS --dequantize`: stdout without its final newline."""
    done = subprocess.run(APR + ["run", "demo", *args, "--dequantize"], capture_output=True,
                          text=True, env=dict(os.environ, APR_QUIET="1"), timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("\n")
    return done.stdout[:-1]


@pytest.fixture(scope="module")
def chat_reply(server):
    return server.client().chat.completions.create(
        model="demo", messages=[{"role": "user", "content": QUESTION}], max_tokens=12,
        temperature=0)


# ---------------------------------------------------------------------------- openai client

def test_chat_answers_paris_and_equals_apr_run(chat_reply):
    text = chat_reply.choices[0].message.content
    assert "Paris" in text
    assert chat_reply.choices[0].message.role == "assistant"
    assert chat_reply.model == "demo"
    oracle = json.loads(cli_run(QUESTION, "--chat", "-n", "12", "--json"))
    assert text == oracle["text"]
    assert chat_reply.choices[0].finish_reason == oracle["finish_reason"]
    usage = chat_reply.usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        oracle["prompt_tokens"], oracle["completion_tokens"])
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_chat_stream_equals_non_stream(server, chat_reply):
    stream = server.client().chat.completions.create(
        model="demo", messages=[{"role": "user", "content": QUESTION}], max_tokens=12,
        temperature=0, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == chat_reply.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == chat_reply.choices[0].finish_reason
    assert all(f is None for f in finishes[:-1])
    usage, first = chunks[-1].usage, chat_reply.usage
    assert chunks[-1].choices == [] and (usage.prompt_tokens, usage.completion_tokens) == (
        first.prompt_tokens, first.completion_tokens)
    # the same prompt again: its full KV blocks come from the prefix cache, less the rows
    # the backend recomputes so that a hit gives a cold request's numbers (uniform_rows)
    from apr_native import backends
    rows = backends.select(httpx.get(server.base + "/health").json()["backend"]).uniform_rows
    assert usage.prompt_tokens_details.cached_tokens == \
        max(first.prompt_tokens - rows, 0) // 16 * 16


def test_completions_equal_apr_run(server):
    prompt = SHORT_PROMPT
    client = server.client()
    reply = client.completions.create(model="demo", prompt=prompt, max_tokens=6,
                                      temperature=0)
    assert reply.object == "text_completion"
    text = reply.choices[0].text
    assert text == cli_run(prompt, "--raw", "-n", "6")     # completions: no template
    assert "Paris" in text
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="demo", prompt=prompt, max_tokens=6, temperature=0, stream=True))
    assert streamed == text


def test_llama_server_sampler_fields_equal_apr_run_flags(server):
    """Same seed, same sampler options -> the same text from apr serve (request fields,
    llama-server's names) and apr run (flags from the same option table)."""
    reply = server.client().chat.completions.create(
        model="demo", messages=[{"role": "user", "content": QUESTION}], max_tokens=16,
        temperature=0.9, seed=11, extra_body={
            "top_k": 40, "dry_multiplier": 0.8, "dry_allowed_length": 1,
            "xtc_probability": 0.5, "xtc_threshold": 0.05, "repeat_last_n": 32,
            "repeat_penalty": 1.1, "samplers": "penalties;dry;top_k;xtc;temperature"})
    oracle = json.loads(cli_run(
        QUESTION, "--chat", "-n", "16", "--json", "--temperature", "0.9", "--seed", "11",
        "--top-k", "40", "--dry-multiplier", "0.8", "--dry-allowed-length", "1",
        "--xtc-probability", "0.5", "--xtc-threshold", "0.05", "--repeat-last-n", "32",
        "--repeat-penalty", "1.1", "--samplers", "penalties;dry;top_k;xtc;temperature"))
    assert reply.choices[0].message.content == oracle["text"]
    greedy = json.loads(cli_run(QUESTION, "--chat", "-n", "16", "--json"))
    assert oracle["token_ids"] != greedy["token_ids"]              # the options did apply


def test_models_list(server):
    models = server.client().models.list()
    assert [m.id for m in models.data] == ["demo"]
    assert server.client().models.retrieve("demo").id == "demo"
    with pytest.raises(openai.NotFoundError):
        server.client().models.retrieve("gpt-4")


def test_embeddings_are_mean_pooled_hidden_states(server, smollm2_gguf):
    from apr_core.runtime.text_model import TextModel
    model = TextModel.load(smollm2_gguf, dequantize_at_load=True)
    texts = ["Paris is in France.", "hello"]
    reply = server.client().embeddings.create(model="demo", input=texts)  # base64 on the wire
    floats = server.client().embeddings.create(model="demo", input=texts[1],
                                               encoding_format="float")
    ids = [model.prompt_ids(t) for t in texts]
    assert reply.usage.prompt_tokens == sum(len(i) for i in ids)
    for item, token_ids in zip(reply.data, ids):
        hidden = model.transformer.hidden_states(token_ids)          # [T, d_model]
        logits = model.transformer.forward(token_ids)                # [T, n_vocab]
        # the hidden states are exactly what the LM head reads
        np.testing.assert_allclose(model.transformer.lm_head.matmul(hidden), logits,
                                   rtol=1e-5, atol=1e-4)
        # the server's numba kernels take integer dots for prompts of up to 16 rows (and an
        # f16 KV cache): against numpy's float products, test_numba_parity.py's bound
        assert np.abs(np.asarray(item.embedding) - hidden.mean(axis=0)).max() < 1e-2
    np.testing.assert_allclose(floats.data[0].embedding, reply.data[1].embedding, rtol=1e-6)


def test_unknown_model_is_404(server):
    with pytest.raises(openai.NotFoundError) as err:
        server.client().chat.completions.create(
            model="gpt-4", messages=[{"role": "user", "content": "hi"}], max_tokens=1)
    assert err.value.body["code"] == "model_not_found"


def test_api_key_required(server):
    response = httpx.get(server.base + "/v1/models")
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
    bad = openai.OpenAI(base_url=server.base + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    health = httpx.get(server.base + "/health").json()
    assert health["status"] == "ok" and health["backend"] in ("numpy", "numba", "cuda")
    assert httpx.get(server.base + "/ready").json()["status"] == "ready"


def test_metrics_count_requests_and_tokens(server, chat_reply):
    text = server.http.get("/metrics").text
    assert re.search(r'^apr_http_requests_total\{path="/v1/chat/completions",status="200"\} '
                     r'[1-9]', text, re.M)
    assert server.metric("apr_completion_tokens_total") >= chat_reply.usage.completion_tokens
    assert server.metric("apr_model_ready") == 1
    assert "apr_time_to_first_token_seconds_bucket" in text
    assert "apr_http_request_duration_seconds_bucket" in text


# ---------------------------------------------------------------------------- bad input

def error_of(response, status):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error


CHAT = {"model": "demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


@pytest.mark.parametrize("body, param", [
    ({**CHAT, "max_tokens": -5}, "max_tokens"),
    ({**CHAT, "max_tokens": 0}, "max_tokens"),
    ({**CHAT, "max_tokens": 100000}, "max_tokens"),
    ({**CHAT, "max_tokens": "8"}, "max_tokens"),
    ({**CHAT, "max_tokens": 2.5}, "max_tokens"),
    ({**CHAT, "temperature": "hot"}, "temperature"),
    ({**CHAT, "temperature": 3}, "temperature"),
    ({**CHAT, "top_p": -1}, "top_p"),
    ({**CHAT, "stream": "yes"}, "stream"),
    ({**CHAT, "stop": [1, 2]}, "stop"),
    ({**CHAT, "n": 0}, "n"),
    ({**CHAT, "n": 1000}, "n"),
    ({**CHAT, "logit_bias": {"x": 1}}, "logit_bias"),
    ({**CHAT, "logit_bias": {"5": 500}}, "logit_bias"),
    ({**CHAT, "top_logprobs": 3}, "top_logprobs"),
    ({**CHAT, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({**CHAT, "response_format": {"type": "xml"}}, "response_format"),
    ({**CHAT, "response_format": {"type": "json_schema"}}, "response_format"),
    ({**CHAT, "tool_choice": "required"}, "tool_choice"),
    ({**CHAT, "tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools[0]"),
    ({**CHAT, "tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": {"type": "function", "function": {"name": "g"}}}, "tool_choice"),
    ({**CHAT, "stop_token_ids": [-1]}, "stop_token_ids"),
    ({**CHAT, "seed": "x"}, "seed"),
    ({**CHAT, "messages": "hi"}, "messages"),
    ({**CHAT, "messages": []}, "messages"),
    ({**CHAT, "messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
    ({**CHAT, "messages": [{"role": "user", "content": 7}]}, "messages[0].content"),
    ({**CHAT, "model": 3}, "model"),
    ({"model": "demo", "prompt": 42}, "prompt"),
    ({**CHAT, "dry_multiplier": "x"}, "dry_multiplier"),
    ({**CHAT, "mirostat": 1.5}, "mirostat"),
    ({**CHAT, "samplers": [3]}, "samplers"),
    ({**CHAT, "samplers": ["top_k", "bogus"]}, "sampling"),
    ({**CHAT, "dry_base": 0.5}, "sampling"),
    ({**CHAT, "xtc_probability": 2}, "sampling"),
])
def test_wrong_fields_are_400_naming_the_field(server, body, param):
    path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
    error = error_of(server.http.post(path, json=body), 400)
    assert error["param"] == param and error["type"] == "invalid_request_error"


@pytest.mark.parametrize("raw", [b"{bad json", b"", b"[1, 2]", b"\xff\xfe\x00",
                                 b"[" * 30000 + b"]" * 30000])
def test_malformed_json_is_400(server, raw):
    response = server.http.post("/v1/chat/completions", content=raw,
                                headers={"content-type": "application/json"})
    assert error_of(response, 400)["code"] == "invalid_json"


def test_huge_body_is_413_declared_or_chunked(server):
    big = json.dumps({**CHAT, "messages": [{"role": "user", "content": "x" * MAX_BODY}]})
    assert error_of(server.http.post("/v1/chat/completions", content=big), 413)[
        "code"] == "request_too_large"

    def chunks():               # no Content-Length: the cap must hold while reading
        for i in range(0, len(big), 8192):
            yield big[i:i + 8192].encode()
    assert error_of(server.http.post("/v1/chat/completions", content=chunks()), 413)[
        "code"] == "request_too_large"


def test_token_id_prompt_outside_vocab_is_400(server):
    body = {"model": "demo", "prompt": [1, 2, 10 ** 9], "max_tokens": 1}
    assert error_of(server.http.post("/v1/completions", json=body), 400)["param"] == "prompt"


def test_unknown_route_and_method(server):
    assert error_of(server.http.get("/v1/nothing"), 404)["code"] == "not_found"
    error_of(server.http.get("/v1/chat/completions"), 405)


def _long_stream(server):
    """A streaming completion that would run for minutes if nobody stopped it."""
    body = {"model": "demo", "prompt": "1, 2, 3, 4, 5,", "max_tokens": LONG, "stream": True,
            "temperature": 0}
    return server.http.stream("POST", "/v1/completions", json=body)


def test_disconnect_mid_stream_cancels_generation(server):
    generated = server.metric("apr_generated_tokens_total")
    cancelled = server.metric("apr_cancelled_generations_total")
    with _long_stream(server) as response:
        assert response.status_code == 200
        first = next(line for line in response.iter_lines() if line.startswith("data: "))
        assert json.loads(first[6:])["object"] == "text_completion"
    # the connection is closed: the server must stop that generation and serve the next
    assert alive(server)
    assert server.metric("apr_cancelled_generations_total") == cancelled + 1
    # had the abandoned generation run on, it alone would have made LONG tokens
    assert server.metric("apr_generated_tokens_total") - generated < LONG
    assert server.metric("apr_queue_depth") == 0


def test_disconnect_before_a_non_streamed_answer_cancels_it(server):
    cancelled = server.metric("apr_cancelled_generations_total")
    body = {"model": "demo", "prompt": "1, 2, 3, 4, 5,", "max_tokens": LONG, "temperature": 0}
    # the client gives up long before LONG tokens can be ready and closes its connection
    with pytest.raises(httpx.ReadTimeout):
        server.http.post("/v1/completions", json=body, timeout=httpx.Timeout(120, read=3))
    assert alive(server)
    assert server.metric("apr_cancelled_generations_total") == cancelled + 1


def test_full_queue_is_429_and_server_recovers(server):
    """MAX_BATCH streams run, MAX_QUEUE more wait for admission; the next one is refused."""
    with contextlib.ExitStack() as running:
        for _ in range(MAX_BATCH):
            stream = running.enter_context(_long_stream(server))
            lines = stream.iter_lines()    # a dropped line iterator may close the stream
            running.callback(lambda lines=lines: lines)
            assert next(line for line in lines if line.startswith("data: "))
        waiting = []        # fill the queue behind the running jobs

        def wait_in_queue():
            try:
                with _long_stream(server) as response:
                    waiting.append(response.status_code)
                    next(response.iter_lines(), None)
            except httpx.TransportError:
                pass
        threads = [threading.Thread(target=wait_in_queue, daemon=True)
                   for _ in range(MAX_QUEUE)]
        for thread in threads:
            thread.start()
        while server.metric("apr_queue_depth") < MAX_BATCH + MAX_QUEUE:
            assert all(t.is_alive() for t in threads), waiting   # queued, not refused
            time.sleep(0.05)
        refused = server.http.post("/v1/chat/completions", json=CHAT)
        assert error_of(refused, 429)["code"] == "queue_full"
        assert refused.headers["retry-after"] == "1"
    # closing the running streams lets the queued ones run; they read one line and leave
    for thread in threads:
        thread.join(timeout=600)
    assert waiting == [200] * MAX_QUEUE
    assert alive(server)
    assert server.process.poll() is None
