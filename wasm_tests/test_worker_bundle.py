"""`apr compile MODEL --target worker`: the bundle of the real SmolLM2-135M, served by workerd.

workerd (npm `workerd`, Cloudflare's runtime) runs the bundle's JavaScript module worker with
no network, no --experimental flag and no unsafe-eval binding: it boots the embedded Pyodide
0.17 + numpy, runs apr_core on the browser shell's SIMD block kernels, and reads the model
through the R2-style binding over model/. The oracles: `apr run MODEL --raw --json`'s greedy
token ids on three prompts (its text cut at a stop string, its seeded sampling too), the demo
question's answer, and the official `openai` client; config variants bind an API key, or
point MODEL_KEY at an object one bit off the build's (sha256 refused) or at none.
Under CI=true a workerd that cannot boot the bundle fails these tests (no skip, no early
return).
"""
import json
import os
import zipfile

import pytest

from cli_util import apr
from wasm_shared import PROMPT, QUESTION
from workerd_runtime import WorkerdServer, workerd_binary

pytestmark = [pytest.mark.native, pytest.mark.real_model]

TOKENS = 8
PROMPTS = (PROMPT, "Once upon a time", "def fibonacci(n):")
BOOT_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, smollm2_path):
    from apr_native.compile.worker import build
    output = str(tmp_path_factory.mktemp("worker") / "smollm2.worker")
    return output, build(smollm2_path, output)


def apr_run(model, prompt, *options):
    code, out, err = apr("run", model, prompt, "--raw", "--json", *options)
    assert code == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def native_ids(smollm2_path):
    """Greedy token ids of `apr run MODEL PROMPT -n TOKENS --raw --json`, per prompt."""
    return {prompt: apr_run(smollm2_path, prompt, "-n", TOKENS)["token_ids"]
            for prompt in PROMPTS}


def variant(output, name, old, new):
    """workerd/NAME.capnp: the bundle's config with `old` replaced by `new`."""
    with open(os.path.join(output, "workerd", "config.capnp")) as handle:
        config = handle.read()
    assert old in config
    with open(os.path.join(output, "workerd", name + ".capnp"), "w") as handle:
        handle.write(config.replace(old, new))
    return "workerd/{}.capnp".format(name)


@pytest.fixture(scope="module")
def server(bundle):
    """workerd serving the bundle; the first request boots Pyodide and loads the model."""
    output, _ = bundle
    with WorkerdServer(workerd_binary(), output, ["workerd/config.capnp"]) as served:
        assert served.start(), "workerd did not start:\n" + served.stderr
        status, body = served.request("GET", "/health", timeout=BOOT_TIMEOUT_S)
        assert status == 200 and body == {"status": "ok"}, (body, served.log())
        yield served


def test_bundle_layout(bundle, smollm2_path):
    from apr_core.integrity import sha256_file
    output, report = bundle
    with zipfile.ZipFile(os.path.join(output, "python.zip")) as archive:
        manifest = json.loads(archive.read("apr_worker/manifest.json"))
        names = set(archive.namelist())
    assert {"apr_worker/api.py", "apr_worker/js_entry.py", "apr_webkernel.py",
            "apr_core/data/contracts.json"} <= names
    model = manifest["model"]
    assert model["sha256"] == sha256_file(smollm2_path) == report["model"]["sha256"]
    with open(os.path.join(output, "wrangler.toml")) as handle:
        wrangler = handle.read()
    assert 'main = "worker.mjs"' in wrangler and "python_workers" not in wrangler
    with open(os.path.join(output, "workerd", "config.capnp")) as handle:
        config = handle.read()
    # every wasm module arrives precompiled: the runtime, numpy's libraries, the kernels
    for module in ("pyodide/pyodide.asm.wasm", "kernels/matmul_k.wasm",
                   "pyodide/so/lib_python3.8_site-packages_numpy_core__multiarray_umath.wasm"):
        assert '(name = "{}", wasm = embed'.format(module) in config
    assert "unsafeEval" not in config and "python_workers" not in config


def test_completions_equal_apr_run_token_ids(server, native_ids, bundle):
    for prompt in PROMPTS:
        status, body = server.request("POST", "/v1/completions", {
            "prompt": prompt, "max_tokens": TOKENS, "temperature": 0,
            "return_token_ids": True})
        assert status == 200, (body, server.log()[-3000:])
        choice = body["choices"][0]
        assert choice["token_ids"] == native_ids[prompt], prompt
        assert body["system_fingerprint"] == "apr-wasm-simd"   # the shell's SIMD kernels
        assert body["model"] == bundle[1]["model"]["name"]


def test_stop_and_seeded_sampling_match_apr_run(server, smollm2_path):
    greedy = apr_run(smollm2_path, PROMPT, "-n", TOKENS)["text"]
    stop = greedy.split()[2]          # a word inside the answer, not at its start
    assert greedy.find(stop) > 0
    status, body = server.request("POST", "/v1/completions", {
        "prompt": PROMPT, "max_tokens": TOKENS, "stop": [stop]})
    assert status == 200, body
    choice = body["choices"][0]
    assert (choice["text"], choice["finish_reason"]) == (greedy[:greedy.find(stop)], "stop")
    sampled = apr_run(smollm2_path, PROMPT, "-n", 4, "--temperature", 0.9, "--seed", 11)
    for _ in range(2):
        status, body = server.request("POST", "/v1/completions", {
            "prompt": PROMPT, "max_tokens": 4, "temperature": 0.9, "seed": 11,
            "return_token_ids": True})
        assert status == 200, body
        assert body["choices"][0]["token_ids"] == sampled["token_ids"]


def test_chat_answers_the_demo_question(server):
    status, body = server.request("POST", "/v1/chat/completions", {
        "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 24,
        "temperature": 0})
    assert status == 200, body
    assert "Paris" in body["choices"][0]["message"]["content"], body


def test_openai_client_streams_a_chat(server, bundle):
    import openai
    client = openai.OpenAI(base_url="http://127.0.0.1:{}/v1".format(server.port),
                           api_key="unused", max_retries=0, timeout=BOOT_TIMEOUT_S)
    models = client.models.list()
    assert [m.id for m in models.data] == [bundle[1]["model"]["name"]]
    stream = client.chat.completions.create(
        model=bundle[1]["model"]["name"], messages=[{"role": "user", "content": QUESTION}],
        max_tokens=24, temperature=0, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1
    assert "Paris" in text, text
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] in ("stop", "length")
    assert chunks[-1].usage.completion_tokens >= 1


def test_concurrent_requests_answer_as_one_at_a_time(server):
    """Two streams and a completion at once (one interpreter: their turns interleave)."""
    import threading
    requests = [("/v1/chat/completions", {"messages": [{"role": "user", "content": QUESTION}],
                                          "max_tokens": TOKENS, "stream": True}),
                ("/v1/completions", {"prompt": PROMPTS[1], "max_tokens": TOKENS,
                                     "stream": True}),
                ("/v1/completions", {"prompt": PROMPTS[2], "max_tokens": TOKENS})]
    alone = [server.text(path, body) for path, body in requests]
    together = [None] * len(requests)
    threads = [threading.Thread(target=lambda i=i: together.__setitem__(
        i, server.text(*requests[i]))) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert together == alone and all(alone), together


@pytest.mark.parametrize("path,body,status,code", [
    ("/v1/completions", b"{not json", 400, "invalid_json"),
    ("/v1/chat/completions", {"messages": "hello"}, 400, "invalid_value"),
    ("/v1/completions", {"prompt": PROMPT, "max_tokens": 0}, 400, "invalid_value"),
    ("/v1/completions", b"x" * ((1 << 20) + 1), 413, "request_too_large"),
])
def test_bad_requests_get_coded_errors_and_the_worker_goes_on(server, path, body, status,
                                                               code):
    got, answer = server.request("POST", path, body)
    assert got == status and answer["error"]["code"] == code, answer
    assert answer["error"]["message"]
    again, health = server.request("GET", "/health")
    assert again == 200 and health == {"status": "ok"}
    again, models = server.request("GET", "/v1/models")
    assert again == 200 and models["data"]


def test_an_api_key_binding_guards_every_route(bundle):
    """With an API_KEY text binding (a secret on Cloudflare) the worker wants the key."""
    output, _ = bundle
    keyed = variant(output, "keyed", '# (name = "API_KEY", text = "a secret"),',
                    '(name = "API_KEY", text = "k-39"),')
    with WorkerdServer(workerd_binary(), output, [keyed]) as served:
        assert served.start(), served.stderr
        for headers in ({}, {"authorization": "Bearer wrong"}):
            status, body = served.request("GET", "/v1/models", headers=headers)
            assert status == 401 and body["error"]["code"] == "invalid_api_key", body
        status, body = served.request("GET", "/health", timeout=BOOT_TIMEOUT_S,
                                      headers={"authorization": "Bearer k-39"})
        assert status == 200 and body == {"status": "ok"}, (body, served.log()[-3000:])


def test_a_model_object_unlike_the_build_is_refused(bundle):
    """The object's sha256 is checked before use: one bit off -> 500 `checksum`, and a
    missing object -> 500 `io`; the worker answers other requests all along."""
    output, report = bundle
    name = report["model"]["name"]
    with open(os.path.join(output, "model", name), "rb") as handle:
        data = bytearray(handle.read())
    data[len(data) // 2] ^= 1              # same size, one bit off: only the sha256 differs
    with open(os.path.join(output, "model", "corrupt.gguf"), "wb") as handle:
        handle.write(data)
    for key, code in (("corrupt.gguf", "checksum"), ("absent.gguf", "io")):
        config = variant(output, "key-" + code, '    # (name = "API_KEY", text = "a secret"),',
                         '    (name = "MODEL_KEY", text = "{}"),'.format(key))
        with WorkerdServer(workerd_binary(), output, [config]) as served:
            assert served.start(), served.stderr
            status, body = served.request("POST", "/v1/completions", {"prompt": PROMPT},
                                          timeout=BOOT_TIMEOUT_S)
            assert status == 500 and body["error"]["code"] == code, body
            assert served.request("GET", "/health")[0] == 200
