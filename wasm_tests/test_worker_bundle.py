"""`apr compile MODEL --target worker`: the bundle of the real SmolLM2-135M, run three ways.

1. Its Python entry point (src/worker.py, apr_core vendored beside it) under Pyodide 0.17
   + numpy in Chromium, with a stand-in `workers` module (worker_standin/workers.py) and
   the bundle's own R2-style binding (workerd/r2_disk.mjs) over the model file served by
   HTTP: POST /v1/completions answers what native `apr run MODEL PROMPT -n N --raw` answers
   (greedy: same text, token counts, finish reason), stops at a stop string, and refuses
   bad requests with coded JSON errors.
2. The bundle's config in workerd (npm `workerd`) as a Python worker. workerd fetches
   Cloudflare's Pyodide bundle when a Python worker starts, so offline it stops before
   serving ("Request for Pyodide bundle failed"); unless that file is in the directory
   named by $APR_WORKERD_PYODIDE_CACHE, the test asserts exactly that failure (and says so
   in its output); with the file, the worker must answer like native apr.
3. The same config's JavaScript entry point (`probe`) in workerd: the config, the
   manifest and the MODEL binding over model/ load and answer GET /v1/models.
"""
import glob
import json
import os

import pytest

from cli_util import apr
from wasm_shared import PROMPT, require
from workerd_runtime import WorkerdServer, workerd_binary

pytestmark = [pytest.mark.native, pytest.mark.real_model]

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENS = 12
PYODIDE_CACHE_ENV = "APR_WORKERD_PYODIDE_CACHE"
OFFLINE_REASON = "Request for Pyodide bundle failed"
PAGE_TIMEOUT_MS = 900_000

# Runs in Pyodide: one request through the bundle's entry point, answered as JSON text.
HANDLE = """
import json, sys, js
for folder in ("/standin", "/worker"):
    if folder not in sys.path:
        sys.path.insert(0, folder)
from worker import Default
env, method, path, body = json.loads(js.aprArgs)
response = await Default(None, getattr(js.aprEnvs, env)).fetch(
    js.aprRequest(method, path, body))
json.dumps({"status": response.status, "headers": response.headers,
            "body": json.loads(response.body)})
"""

# Boots Pyodide 0.17 with numpy, copies the bundle's src/ into its file system, binds
# MODEL to the bundle's R2-style binding over HTTP (envs: `r2`; `unbound` without MODEL;
# `absent` and `corrupt` naming other objects), then answers each request in order.
RUN_PAGE = """
async ({files, requests, handle}) => {
  window.languagePluginUrl = "/pyodide/017/";
  await new Promise((ok, fail) => {
    const script = document.createElement("script");
    script.src = "/pyodide/017/pyodide.js";
    script.onload = ok;
    script.onerror = () => fail(new Error("cannot load pyodide.js"));
    document.head.appendChild(script);
  });
  await languagePluginLoader;
  await pyodide.loadPackage(["numpy"]);
  const FS = pyodide._module.FS;
  const put = async (url, path) => {
    const response = await fetch(url);
    if (!response.ok) throw new Error(`HTTP ${response.status} for ${url}`);
    const parts = path.split("/").slice(1, -1);
    for (let i = 1; i <= parts.length; i++) {
      const dir = "/" + parts.slice(0, i).join("/");
      if (!FS.analyzePath(dir).exists) FS.mkdir(dir);
    }
    FS.writeFile(path, new Uint8Array(await response.arrayBuffer()));
  };
  for (const file of files) await put("/bundle/src/" + file, "/worker/" + file);
  await put("/standin/workers.py", "/standin/workers.py");
  const r2 = await import("/bundle/workerd/r2_disk.mjs");
  const files_service = {fetch: (url, init) => fetch("/bundle/model" + new URL(url).pathname, init)};
  const bucket = r2.default({files: files_service});
  window.aprEnvs = {r2: {MODEL: bucket}, unbound: {},
                    absent: {MODEL: bucket, MODEL_KEY: "absent.gguf"},
                    corrupt: {MODEL: bucket, MODEL_KEY: "corrupt.gguf"}};
  window.aprRequest = (method, path, body) =>
    new Request(location.origin + path, body === null ? {method} : {method, body});
  const answers = [];
  for (const request of requests) {
    window.aprArgs = JSON.stringify(request);
    answers.push(JSON.parse(await pyodide.runPythonAsync(handle)));
  }
  return answers;
}
"""


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, smollm2_path):
    from apr_native.compile.worker import build
    output = str(tmp_path_factory.mktemp("worker") / "smollm2.worker")
    report = build(smollm2_path, output)
    return output, report


@pytest.fixture(scope="module")
def native_run(smollm2_path):
    """What `apr run MODEL PROMPT -n TOKENS --raw` answers (greedy): the oracle."""
    code, out, err = apr("run", smollm2_path, PROMPT, "-n", TOKENS, "--raw", "--json")
    assert code == 0, err
    return json.loads(out)


def completion_facts(body):
    choice = body["choices"][0]
    return {"text": choice["text"], "finish_reason": choice["finish_reason"],
            "prompt_tokens": body["usage"]["prompt_tokens"],
            "completion_tokens": body["usage"]["completion_tokens"]}


def native_facts(run):
    return {"text": run["text"], "finish_reason": run["finish_reason"],
            "prompt_tokens": run["prompt_tokens"],
            "completion_tokens": run["completion_tokens"]}


def stop_string(text):
    """A stop string that first occurs inside `text` (not at its start)."""
    words = text.split()
    assert len(words) >= 3, "the native answer is too short to pick a stop string: " + text
    stop = words[2]
    assert text.find(stop) > 0
    return stop


@pytest.fixture(scope="module")
def pyodide_answers(browser, bundle, native_run):
    """The bundle's entry point under Pyodide 0.17 in Chromium, answering REQUESTS."""
    from apr_native.web_bundle import missing_runtime, site_mounts
    from apr_native.web_server import StaticServer
    require(missing_runtime("017") is None, missing_runtime("017") or "")
    output, _ = bundle
    src = os.path.join(output, "src")
    files = sorted(os.path.relpath(path, src).replace(os.sep, "/")
                   for path in glob.glob(os.path.join(src, "**", "*"), recursive=True)
                   if os.path.isfile(path))
    stop = stop_string(native_run["text"])
    name = bundle[1]["model"]["name"]
    with open(os.path.join(output, "model", name), "rb") as handle:
        data = bytearray(handle.read())
    data[len(data) // 2] ^= 1              # same size, one bit off: only the sha256 differs
    with open(os.path.join(output, "model", "corrupt.gguf"), "wb") as handle:
        handle.write(data)
    completion = ["POST", "/v1/completions"]
    requests = {
        # first, while no model is loaded: loads that must fail (and are not cached)
        "unbound": ["unbound"] + completion + [json.dumps({"prompt": PROMPT})],
        "absent": ["absent"] + completion + [json.dumps({"prompt": PROMPT})],
        "corrupt": ["corrupt"] + completion + [json.dumps({"prompt": PROMPT})],
        "models": ["r2", "GET", "/v1/models", None],
        "card": ["r2", "GET", "/v1/models/" + name, None],
        "health": ["r2", "GET", "/health", None],
        "no_model": ["r2", "GET", "/v1/models/other-model", None],
        "greedy": ["r2"] + completion + [json.dumps({"prompt": PROMPT, "max_tokens": TOKENS})],
        "stop": ["r2"] + completion + [json.dumps(
            {"prompt": [PROMPT], "max_tokens": TOKENS, "stop": [stop], "temperature": 0})],
        "seeded": ["r2"] + completion + [json.dumps(
            {"prompt": PROMPT, "max_tokens": 4, "temperature": 0.9, "seed": 11})],
        "seeded_again": ["r2"] + completion + [json.dumps(
            {"prompt": PROMPT, "max_tokens": 4, "temperature": 0.9, "seed": 11})],
        "bad_max_tokens": ["r2"] + completion + [json.dumps(
            {"prompt": PROMPT, "max_tokens": 0})],
        "bad_json": ["r2"] + completion + ["{not json"],
        "bad_top_k": ["r2"] + completion + [json.dumps({"prompt": PROMPT, "top_k": "many"})],
        "stream": ["r2"] + completion + [json.dumps({"prompt": PROMPT, "stream": True})],
        "wrong_method": ["r2", "GET", "/v1/completions", None],
        "no_route": ["r2", "GET", "/v2/anything", None],
    }
    mounts = site_mounts(str(output))       # the Pyodide copies; "/" is replaced below
    mounts.update({"/": output, "/bundle/": output,
                   "/standin/": os.path.join(HERE, "worker_standin")})
    server = StaticServer(mounts).start()
    context = browser.new_context()
    try:
        page = context.new_page()
        log = []
        page.on("console", lambda message: log.append(message.text))
        page.goto(server.url("/standin/page.html"))
        page.set_default_timeout(PAGE_TIMEOUT_MS)
        try:
            answers = page.evaluate(RUN_PAGE, {"files": files, "handle": HANDLE,
                                               "requests": list(requests.values())})
        except Exception as exc:
            raise AssertionError("{}\n{}".format(exc, "\n".join(log[-30:])))
    finally:
        context.close()
        server.stop()
    return dict(zip(requests, answers)), stop


def test_bundle_layout(bundle, smollm2_path):
    from apr_core.integrity import sha256_file
    output, report = bundle
    with open(os.path.join(output, "src", "apr_worker", "manifest.json")) as handle:
        manifest = json.load(handle)
    model = manifest["model"]
    assert model["name"] == model["key"] == os.path.basename(smollm2_path)
    assert model["sha256"] == sha256_file(smollm2_path) == report["model"]["sha256"]
    assert model["size"] == os.path.getsize(smollm2_path)
    with open(os.path.join(output, "model", model["name"]), "rb") as copy, \
            open(smollm2_path, "rb") as original:
        assert copy.read() == original.read()
    with open(os.path.join(output, "wrangler.toml")) as handle:
        wrangler = handle.read()
    assert 'main = "src/worker.py"' in wrangler and '"python_workers"' in wrangler
    assert 'binding = "MODEL"' in wrangler
    # every file of src/ is a module of the workerd config, the entry point first
    with open(os.path.join(output, "workerd", "config.capnp")) as handle:
        config = handle.read()
    listed = [line.split('"')[1] for line in config.splitlines()
              if "pythonModule = embed" in line or ", data = embed" in line]
    src = os.path.join(output, "src")
    on_disk = sorted(os.path.relpath(p, src).replace(os.sep, "/") for p in glob.glob(
        os.path.join(src, "**", "*"), recursive=True) if os.path.isfile(p))
    assert listed[0] == "worker.py" and sorted(listed) == on_disk
    assert "apr_core/data/contracts.json" in listed


def test_pyodide_worker_answers_like_apr_run(pyodide_answers, native_run, bundle):
    answers, _ = pyodide_answers
    greedy = answers["greedy"]
    assert greedy["status"] == 200, greedy
    assert greedy["headers"]["content-type"].startswith("application/json")
    body = greedy["body"]
    assert body["object"] == "text_completion" and len(body["choices"]) == 1
    assert completion_facts(body) == native_facts(native_run)
    assert body["model"] == bundle[1]["model"]["name"]
    models, card = answers["models"], answers["card"]
    assert models["status"] == 200 and card["status"] == 200
    assert [m["id"] for m in models["body"]["data"]] == [bundle[1]["model"]["name"]]
    assert card["body"] == models["body"]["data"][0]
    assert card["body"]["meta"]["sha256"] == bundle[1]["model"]["sha256"]
    assert answers["health"] == {"status": 200, "headers": greedy["headers"],
                                 "body": {"status": "ok"}}


def test_pyodide_worker_stops_and_samples(pyodide_answers, native_run, smollm2_path):
    answers, stop = pyodide_answers
    stopped = answers["stop"]["body"]["choices"][0]
    assert stopped["text"] == native_run["text"][:native_run["text"].find(stop)]
    assert stopped["finish_reason"] == "stop"
    # seeded sampling: what `apr run --temperature 0.9 --seed 11` draws, twice over
    code, out, err = apr("run", smollm2_path, PROMPT, "-n", 4, "--raw", "--json",
                         "--temperature", 0.9, "--seed", 11)
    assert code == 0, err
    sampled = json.loads(out)
    assert sampled["text"] != native_run["text"][:len(sampled["text"])]   # not greedy
    for name in ("seeded", "seeded_again"):
        assert answers[name]["status"] == 200, answers[name]
        assert completion_facts(answers[name]["body"]) == native_facts(sampled)


@pytest.mark.parametrize("name,status,param,code", [
    ("unbound", 500, None, "io"),
    ("absent", 500, None, "io"),
    ("corrupt", 500, None, "checksum"),
    ("bad_max_tokens", 400, "max_tokens", "invalid_value"),
    ("bad_json", 400, None, "invalid_json"),
    ("bad_top_k", 400, "top_k", "argument"),        # apr_core's sampler table refuses it
    ("stream", 400, "stream", "unsupported_parameter"),
    ("wrong_method", 405, None, "method_not_allowed"),
    ("no_route", 404, None, "not_found"),
    ("no_model", 404, "model", "model_not_found"),
])
def test_pyodide_worker_refuses_with_coded_errors(pyodide_answers, name, status, param, code):
    answer = pyodide_answers[0][name]
    assert answer["status"] == status
    error = answer["body"]["error"]
    assert (error["param"], error["code"]) == (param, code)
    assert error["message"]
    assert error["type"] == ("server_error" if status == 500 else "invalid_request_error")


def test_python_worker_in_workerd(bundle, native_run, record_property, capsys, tmp_path):
    """The Python worker in workerd: the completion when the Pyodide bundle is available
    (in $APR_WORKERD_PYODIDE_CACHE), else the documented offline failure, exactly."""
    binary = workerd_binary()
    output, report = bundle
    cache = os.environ.get(PYODIDE_CACHE_ENV) or str(tmp_path / "pyodide-cache")
    os.makedirs(cache, exist_ok=True)
    has_bundle = bool(glob.glob(os.path.join(cache, "pyodide_*.capnp.bin")))
    with WorkerdServer(binary, output, ["workerd/config.capnp", "config", "--experimental",
                                        "--pyodide-bundle-disk-cache-dir", cache]) as server:
        serving = server.start()
        if has_bundle:
            assert serving, "workerd did not start with the Pyodide bundle present:\n" + \
                server.stderr
        if not serving:
            assert server.exit_code != 0
            assert OFFLINE_REASON in server.stderr, server.stderr
            assert ".capnp.bin" in server.stderr, server.stderr
            reason = server.stderr.strip().splitlines()[-1]
            record_property("workerd_python_worker", "not run: " + reason)
            with capsys.disabled():
                print("\nworkerd could not start the Python worker (no Pyodide bundle in "
                      "{}): {}".format(cache, reason))
            return
        status, body = server.request("POST", "/v1/completions",
                                      {"prompt": PROMPT, "max_tokens": TOKENS})
        assert status == 200, body
        assert completion_facts(body) == native_facts(native_run)
        record_property("workerd_python_worker", "ran")


def test_javascript_probe_in_workerd(bundle, smollm2_path):
    """The bundle's config, manifest and R2-style MODEL binding, loaded by workerd."""
    binary = workerd_binary()
    output, report = bundle
    with WorkerdServer(binary, output, ["workerd/config.capnp", "probe"]) as server:
        assert server.start(), server.stderr
        status, body = server.request("GET", "/v1/models")
        assert status == 200, body
        missing_status, missing = server.request("GET", "/v1/nothing")
    card = body["data"][0]
    assert card["id"] == os.path.basename(smollm2_path)
    with open(smollm2_path, "rb") as handle:
        magic = handle.read(4).decode("ascii")
    assert card["meta"]["model_object"] == {"key": card["id"], "size": os.path.getsize(
        smollm2_path), "magic": magic}
    assert card["meta"]["sha256"] == report["model"]["sha256"]
    assert missing_status == 404 and missing == {"error": {"message": "the probe answers GET /v1/models only, not "
                                 "/v1/nothing", "type": "invalid_request_error",
                                 "param": None, "code": "not_found"}}
