"""`hf://` references in Chromium (issue 20, item 6), against tests/fake_hub.py (the Hub's
API on 127.0.0.1, its LFS "CDN" on 127.0.0.2 behind a 302, CORS as huggingface.co sends
it), from the page's own origin: `AprClient.load` and the demo page's URL box resolve the
reference through the Hub's API, stream the file by Range requests into the IndexedDB cache
keyed by the LFS sha256, check it before it is cached or used, and generate the same text
as native apr; a reload reuses the verified copy without a second download; a corrupted
blob is refused and nothing of it is kept."""
import hashlib
import json
import os
import subprocess
import sys
import urllib.request

import pytest

from fake_hub import FakeHub
from synthetic_models import write_gguf_model
from wasm_shared import QUESTION, require

pytestmark = pytest.mark.native

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
SMOL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TINY = "org/tiny-GGUF"
MAX_TOKENS = 12
CATCH = "(ref) => apr.describe(ref).then((info) => ({ok: info}), " \
        "(e) => ({code: e.code, message: e.message, detail: e.detail}))"


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub-tiny")
    write_gguf_model(root / "q8.gguf", quant="Q8_0", seed=1)
    write_gguf_model(root / "q4.gguf", quant="Q4_0", seed=2)
    return root


@pytest.fixture(scope="module")
def hub(tiny, smollm2_path):
    with FakeHub() as server:
        server.add_repo(SMOL, {SMOL_FILE: smollm2_path, "README.md": b"# SmolLM2\n"})
        server.add_repo(TINY, {"tiny-Q8_0.gguf": str(tiny / "q8.gguf"),
                               "tiny-Q4_0.gguf": str(tiny / "q4.gguf"), "README.md": b"tiny"})
        server.add_repo("org/gated", {"tiny-Q8_0.gguf": str(tiny / "q8.gguf")}, gated=True)
        yield server


@pytest.fixture(scope="module")
def hub_site(tmp_path_factory, hub):
    """The shell served from its own origin, its config naming the fake hub as `apr web
    --hf-endpoint` writes it (no model directory: every model comes from the hub)."""
    from apr_native.web_bundle import missing_runtime, prepare_site, site_mounts
    from apr_native.web_server import StaticServer
    for flavor in ("314", "017"):
        reason = missing_runtime(flavor)
        require(reason is None, reason or "")
    site_dir = str(tmp_path_factory.mktemp("hub-site"))
    prepare_site(site_dir, flavor="314", extra={"hfEndpoint": hub.url})
    server = StaticServer(site_mounts(site_dir)).start()
    yield server
    server.stop()


@pytest.fixture
def hub_page(browser, hub_site):
    from conftest import PageSession
    sessions = []

    def factory(query):
        sessions.append(PageSession(browser, hub_site, query))
        return sessions[-1]
    yield factory
    for session in sessions:
        session.close()


def cdn_requests(hub):
    """Requests that reached the LFS host (the blob bytes), preflights included."""
    host = hub.cdn_url.split("//", 1)[1]
    return [r for r in hub.requests if r["host"] == host]


def native_chat(path, max_tokens, options=None):
    """Native apr's answer (numpy kernels, as the page runs); `options`: temperature, seed
    and sampler options under llama-server's names, read by the same option table."""
    from apr_core.runtime.sampler_options import from_request
    from apr_core.runtime.sampling import SamplerConfig
    from apr_core.runtime.engine import Engine
    model = Engine.open(path).model     # as the page's engine: its KV type
    ids = model.chat_ids([{"role": "user", "content": QUESTION}])
    options = dict(options or {"temperature": 0.0})
    seed = options.pop("seed", None)
    config = SamplerConfig(seed=seed, **from_request(options))
    return model.generate(ids, config, max_tokens=max_tokens).text


@pytest.mark.real_model
def test_hf_reference_generates_like_native_and_reuses_the_verified_cache(
        hub_page, hub, smollm2_path):
    sha, size = sha256_of(smollm2_path), os.path.getsize(smollm2_path)
    want = native_chat(smollm2_path, MAX_TOKENS)
    # the exact kernels: the text is compared with native's (the default relaxed SIMD ones
    # round activations as llama.cpp does, which flips this answer's near-tie first token)
    session = hub_page("pyodide=017&numpy=1&kernels=simd-exact")
    assert session.call("apr.boot()")["hfEndpoint"] == hub.url   # from the site config
    session.call("window.seen = {resolved: [], progress: []};"
                 "apr.on('resolved', (r) => seen.resolved.push(r));"
                 "apr.on('progress', (p) => seen.progress.push(p)); 0")
    hub.requests.clear()
    ref = "hf://{}:q4_1".format(SMOL)
    info = session.call("(ref) => apr.load(ref)", ref)
    assert (info["arch"], info["layers"], info["vocab"]) == ("llama", 30, 49152)
    seen = session.call("seen")
    resolved = seen["resolved"]
    assert len(resolved) == 1 and resolved[0]["file"] == SMOL_FILE
    assert resolved[0]["sha256"] == sha and resolved[0]["size"] == size
    assert resolved[0]["commit"] == hub.repos[SMOL].commit
    assert resolved[0]["url"] == "{}/{}/resolve/{}/{}".format(
        hub.url, SMOL, hub.repos[SMOL].commit, SMOL_FILE)
    listed = [r["path"] for r in hub.requests if r["path"].startswith("/api/")]
    assert listed == ["/api/models/{}/revision/main".format(SMOL)]
    blob = hub.downloads(sha)
    assert blob and all(r["range"] for r in blob)     # streamed with Range requests
    assert len(blob) <= 2                              # once (a retry at most), not per read
    last = seen["progress"][-1]
    assert last["phase"] == "download" and last["loaded"] == last["total"] == size
    cached = [r for r in session.call("apr.cacheList()") if r["sha256"] == sha]
    assert len(cached) == 1 and cached[0]["complete"] and cached[0]["size"] == size
    assert cached[0]["model"] == ref

    answer = session.call("apr.chat([{role: 'user', content: %s}], {maxTokens: %d})"
                          % (json.dumps(QUESTION), MAX_TOKENS))
    assert answer["text"] == want and answer["tokens"] > 0
    # sampled, with llama-server's option names: the same seed and options give the
    # native text (same option table, same sampler code)
    options = {"temperature": 0.9, "seed": 11, "top_k": 40, "dry_multiplier": 0.8,
               "dry_allowed_length": 1, "xtc_probability": 0.5, "xtc_threshold": 0.05,
               "samplers": "penalties;dry;top_k;xtc;temperature"}
    sampled = session.call("(o) => apr.chat([{role: 'user', content: %s}], o)"
                           % json.dumps(QUESTION), dict(options, maxTokens=MAX_TOKENS))
    assert sampled["text"] == native_chat(smollm2_path, MAX_TOKENS, options)
    assert sampled["text"] != want

    # A reload (a fresh worker, the same IndexedDB), through the demo page's URL box.
    session.open()
    hub.requests.clear()
    page = session.page
    page.set_default_timeout(600_000)
    page.fill("#model-url", ref)
    page.click("#load-button")
    page.wait_for_function("document.body.dataset.model")
    assert page.evaluate("document.body.dataset.model") == "ready", page.inner_text("#error")
    assert cdn_requests(hub) == []                    # no byte of the blob downloaded again
    assert [r["path"] for r in hub.requests] == ["/api/models/{}/revision/main".format(SMOL)]
    assert SMOL_FILE in page.inner_text("#shard-list")   # the page shows what it resolved
    assert "cached" in page.inner_text("#shard-list")
    answer = session.call("apr.chat([{role: 'user', content: %s}], {maxTokens: %d})"
                          % (json.dumps(QUESTION), MAX_TOKENS))
    assert answer["text"] == want


def test_corrupted_blob_is_refused_and_not_cached(hub_page, hub, tiny):
    from apr_core.formats.open import open_model
    path = str(tiny / "q8.gguf")
    sha = sha256_of(path)
    with open(path, "rb") as handle:
        good = handle.read()
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF                     # same size, one byte off, in tensor data
    session = hub_page("pyodide=314&numpy=0")
    ref = "hf://{}:Q8_0".format(TINY)
    hub.corrupt(sha, bytes(bad))
    try:
        hub.requests.clear()
        got = session.call(CATCH, ref)
        assert got.get("code") == "checksum", got
        assert hub.downloads(sha)                    # it was downloaded, then refused
        assert [r for r in session.call("apr.cacheList()") if r["sha256"] == sha] == []
        assert session.call("apr.call('cacheChunks')") == 0   # no staged chunk left either
    finally:
        hub.corrupted.pop(sha, None)
    got = session.call(CATCH, ref)                   # the good bytes pass the same check
    assert "ok" in got, got
    with open_model(path) as model:
        assert {t["name"]: t["dtype"] for t in got["ok"]["tensors"]} == \
            {t.name: t.dtype.name for t in model.tensors.values()}
    cached = [r for r in session.call("apr.cacheList()") if r["sha256"] == sha]
    assert len(cached) == 1 and cached[0]["complete"]


def test_references_resolve_like_native(hub_page, hub, tiny):
    """The same rules as the CLI (apr_core.refs): :QUANT picks case-insensitively, a path
    with @REVISION names one file at a commit, an ambiguous repo lists its GGUFs, the Hub's
    404s and gated repos are coded errors."""
    session = hub_page("pyodide=314&numpy=0&hfEndpoint=" + hub.url + "/")  # query wins
    commit = hub.repos[TINY].commit
    got = session.call(CATCH, "hf://{}:q4_0".format(TINY))
    assert {t["dtype"] for t in got["ok"]["tensors"]} >= {"Q4_0"}
    got = session.call(CATCH, "hf://{}/tiny-Q8_0.gguf@{}".format(TINY, commit))
    assert {t["dtype"] for t in got["ok"]["tensors"]} >= {"Q8_0"}
    got = session.call(CATCH, "hf://{}".format(TINY))
    assert got["detail"]["code"] == "E011", got
    assert got["detail"]["context"]["available"] == "tiny-Q4_0.gguf, tiny-Q8_0.gguf"
    got = session.call(CATCH, "hf://{}:Q5_K_M".format(TINY))
    assert got["detail"]["code"] == "E011" and "Q5_K_M" in got["message"], got
    got = session.call(CATCH, "hf://org/missing:Q8_0")
    assert got["detail"]["code"] == "E013" and "repository not found" in got["message"], got
    got = session.call(CATCH, "hf://{}/nope.gguf".format(TINY))
    assert got["detail"]["code"] == "E013", got
    got = session.call(CATCH, "hf://org/gated:Q8_0")
    assert got["detail"]["code"] == "E014", got


def test_apr_web_passes_the_hub_endpoint_to_the_page(tmp_path):
    from apr_native.web_bundle import missing_runtime
    require(missing_runtime("017") is None, missing_runtime("017") or "")
    env = dict(os.environ, HF_ENDPOINT="")
    proc = subprocess.Popen([sys.executable, "-m", "apr_native.cli.main", "web", str(tmp_path),
                             "--port", "0", "--json", "--hf-endpoint", "http://hub.test:9/"],
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        lines = []
        while not lines or lines[-1] != "}":
            line = proc.stdout.readline()
            assert line, "apr web exited with {}".format(proc.wait(timeout=10))
            lines.append(line.rstrip("\n"))
        info = json.loads("\n".join(lines))
        assert info["hf_endpoint"] == "http://hub.test:9/"
        with urllib.request.urlopen(info["url"] + "site/config.json") as response:
            assert json.loads(response.read())["hfEndpoint"] == "http://hub.test:9"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
