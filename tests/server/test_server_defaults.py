"""`apr serve` as a new user starts it, through the installed `apr` command: requests with no
sampling fields (what the official `openai` client sends by default) get sane defaults,
GET /props and /v1/models report them with their sources, and the log on stderr names the
listening URL and has one line per request (text, or one JSON object per line).

`apr serve demo` takes the demo's entry in apr's model table (greedy: the model's first
token on the demo question is a near-tie, so sampling at llama-server's temperature 0.8
opens in French on some seeds); the same file served by path carries no recommendation
and gets llama-server's defaults, under the operator's flags.
"""
import json
import os
import re
import sys
import time

import pytest

pytestmark = [pytest.mark.native, pytest.mark.real_model]

openai = pytest.importorskip("openai", reason="the openai client is a dev dependency")

from server_util import running_server  # noqa: E402

API_KEY = "k-defaults"
QUESTION = "What is the capital of France?"
INSTALLED_APR = [os.path.join(os.path.dirname(sys.executable), "apr")]
READY_NOTE = "; the API is under /v1, GET /ready answers 200 once it is loaded"
REQUEST_LINE = re.compile(r"^apr serve: 127\.0\.0\.1 (\S+) (\S+) (\d+)"
                          r"(?: prompt_tokens=(\d+) completion_tokens=(\d+))? [0-9.]+ s$")


@pytest.fixture(scope="module")
def demo(smollm2_gguf, tmp_path_factory):
    pytest.importorskip("uvicorn", reason="uvicorn is a native dependency")
    log = tmp_path_factory.mktemp("demo") / "stderr.txt"
    with running_server("demo", [], log, API_KEY, command=INSTALLED_APR) as server:
        server.log = log
        yield server


@pytest.fixture(scope="module")
def by_path(smollm2_gguf, tmp_path_factory):
    """The demo's file served by path, JSON log, two defaults set by flags."""
    pytest.importorskip("uvicorn", reason="uvicorn is a native dependency")
    log = tmp_path_factory.mktemp("by-path") / "stderr.txt"
    args = ["--model-id", "smol", "--log-format", "json", "--top-k", "20",
            "--repeat-penalty", "1.1"]
    with running_server(smollm2_gguf, args, log, API_KEY, command=INSTALLED_APR) as server:
        server.log = log
        yield server


def lines(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read().splitlines()


def wait_for_lines(path, select, count, timeout=60.0):
    """The selected log lines once there are `count` of them (a line is written when its
    response has been sent, so it may land just after the client has the answer)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [line for line in lines(path) if select(line)]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def ask(server, model, **kw):
    return server.client().chat.completions.create(
        model=model, messages=[{"role": "user", "content": QUESTION}], **kw)


def test_demo_answers_paris_for_ten_seeds_without_sampling_fields(demo):
    answers, seconds = [], []
    for seed in range(10):
        start = time.perf_counter()
        reply = ask(demo, "demo", seed=seed)        # no temperature, top_p, max_tokens
        seconds.append(time.perf_counter() - start)
        answers.append(reply.choices[0].message.content)
    print("answers:", answers, "seconds:", [round(s, 2) for s in seconds])
    assert all("Paris" in answer for answer in answers), answers


def test_props_and_models_report_the_defaults_and_their_sources(demo):
    expected = {"params": {"min_p": 0.05, "repeat_penalty": 1.0, "temperature": 0.0,
                           "top_k": 40, "top_p": 0.95},
                "sources": {"min_p": "built-in", "repeat_penalty": "built-in",
                            "temperature": "model-table", "top_k": "built-in",
                            "top_p": "built-in"}}
    assert demo.http.get("/props", headers={"Authorization": ""}).status_code == 401
    props = demo.http.get("/props").json()
    settings = props["default_generation_settings"]
    assert {k: settings[k] for k in ("params", "sources")} == expected
    assert settings["max_tokens"] == 512 and settings["n_ctx"] == 8192
    assert props["model"] == "demo"
    card = demo.http.get("/v1/models").json()["data"][0]
    assert card["meta"]["sampling_defaults"] == expected


def test_start_log_names_the_url_and_the_defaults(demo):
    log = lines(demo.log)
    assert log[0] == "apr serve: listening on {} (model demo){}".format(demo.base, READY_NOTE)
    loaded = [line for line in log if line.startswith("apr serve: loaded demo in ")]
    assert len(loaded) == 1
    assert loaded[0].endswith("sampling defaults: min_p=0.05 (built-in), repeat_penalty=1.0 "
                              "(built-in), temperature=0.0 (model-table), top_k=40 "
                              "(built-in), top_p=0.95 (built-in)")


def test_one_log_line_per_request_with_its_tokens(demo):
    def chat_lines(line):
        return " POST /v1/chat/completions " in line
    before = len([line for line in lines(demo.log) if chat_lines(line)])
    replies = [ask(demo, "demo", max_tokens=n, temperature=0) for n in (3, 5)]
    demo.client().models.list()
    found = wait_for_lines(demo.log, chat_lines, before + 2)[before:]
    assert len(found) == 2
    for line, reply in zip(found, replies):
        method, path, status, prompt, completion = REQUEST_LINE.match(line).groups()
        assert (method, path, status) == ("POST", "/v1/chat/completions", "200")
        assert (int(prompt), int(completion)) == (reply.usage.prompt_tokens,
                                                  reply.usage.completion_tokens)
    models = wait_for_lines(demo.log, lambda line: " GET /v1/models " in line, 1)
    assert REQUEST_LINE.match(models[-1]).groups()[2:] == ("200", None, None)
    # the readiness probe was polled while loading: probes are not logged
    logged = [REQUEST_LINE.match(line) for line in lines(demo.log)]
    assert not [m for m in logged if m is not None and m.group(2) == "/ready"]


def test_json_log_is_one_object_per_line_with_the_request_fields(by_path):
    reply = ask(by_path, "smol", max_tokens=4, temperature=0)
    requests = wait_for_lines(by_path.log, lambda line: '"event":"request"' in line, 1)
    events = [json.loads(line) for line in lines(by_path.log)]     # every line is JSON
    assert events[0]["event"] == "listening"
    assert events[0]["url"] == by_path.base and events[0]["model"] == "smol"
    loaded = [e for e in events if e["event"] == "loaded"]
    assert len(loaded) == 1 and loaded[0]["model"] == "smol"
    assert loaded[0]["sampling_defaults"]["sources"]["top_k"] == "flags"
    request = json.loads(requests[-1])
    assert {k: request[k] for k in ("client", "method", "path", "status", "prompt_tokens",
                                    "completion_tokens")} == {
        "client": "127.0.0.1", "method": "POST", "path": "/v1/chat/completions",
        "status": 200, "prompt_tokens": reply.usage.prompt_tokens,
        "completion_tokens": reply.usage.completion_tokens}
    assert isinstance(request["seconds"], float) and request["time"].endswith("Z")


def test_a_file_without_recommendation_gets_llama_servers_defaults_under_the_flags(by_path):
    settings = by_path.http.get("/props").json()["default_generation_settings"]
    assert settings["params"] == {"min_p": 0.05, "repeat_penalty": 1.1, "temperature": 0.8,
                                  "top_k": 20, "top_p": 0.95}
    assert settings["sources"] == {"min_p": "built-in", "repeat_penalty": "flags",
                                   "temperature": "built-in", "top_k": "flags",
                                   "top_p": "built-in"}


def test_a_port_in_use_is_one_coded_line(smollm2_gguf, capsys):
    pytest.importorskip("uvicorn", reason="uvicorn is a native dependency")
    import socket
    from apr_native.cli.main import main
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert main(["serve", "demo", "--port", str(port)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "E007" in err[0]
    assert "cannot listen on 127.0.0.1:{}: Address already in use".format(port) in err[0]
