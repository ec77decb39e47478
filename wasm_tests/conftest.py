"""Shared fixtures for the browser and WASI tests, built once per session.

* `models_dir`: a directory served at /models/ holding
  - `layers.apr`: real SmolLM2 tensors (two transformer blocks) sharded into >= 3 LZ4 shards,
    and `layers-single.apr`, the same as one file,
  - `smollm2.apr`: the whole SmolLM2 model sharded into 3 LZ4 shards (the demo's chat model),
  - `smollm2.gguf`: the original GGUF.
* `site`: the web shell, both Pyodide copies and an apr_core wheel, served with Range support
  by `apr_native.web_server.StaticServer` (which also counts bytes per URL).
* `browser`: Debian's Chromium driven by Playwright; `open_page(query)` gives a fresh
  context (fresh IndexedDB) with the demo page booted.

Missing prerequisites skip these tests locally but fail them under CI (CI=true), so a broken
setup can never turn the WASM requirement into silent skips.
"""
import hashlib
import importlib.util
import os
import shutil
import sys

import pytest

from wasm_shared import GREEDY, PROMPT, QUESTION, llama_cpp_logits, require, top2_gaps

if sys.version_info < (3, 10):  # the Python 3.8 run covers apr_core only
    collect_ignore_glob = ["test_*.py"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run",
                  "--js-flags=--expose-gc"]  # memory tests collect a forgotten model now
BOOT_TIMEOUT_MS = 180_000


def _located(name, label):
    from apr_native.real_models import locate
    from apr_core.errors import AprError
    try:
        return str(locate(name))
    except AprError as err:
        require(False, "{} GGUF unavailable: {}".format(label, err))


@pytest.fixture(scope="session")
def smollm2_path():
    return _located("demo", "SmolLM2")


@pytest.fixture(scope="session")
def qwen_path():
    return _located("qwen2.5-coder-0.5b", "Qwen2.5")


def cached(name, inputs, build):
    """`build()`'s result, pickled under $APR_CACHE/wasm_tests keyed by `inputs` and the
    sources of apr_core, apr_native and these tests (so any change to the code or to how a
    reference is computed recomputes it); a file lock makes parallel test workers compute
    it only once."""
    import fcntl
    import pickle
    digest = hashlib.sha256(repr(inputs).encode())
    # Native results depend on apr_core and on the kernels apr_native registers.
    for package in (os.path.join(ROOT, "apr_core"), os.path.join(ROOT, "native", "apr_native"),
                    os.path.join(ROOT, "wasm_tests")):
        for folder, dirs, files in sorted(os.walk(package)):
            dirs.sort()
            for file in sorted(files):
                if file.endswith((".py", ".json")):
                    digest.update(os.path.relpath(os.path.join(folder, file), ROOT).encode())
                    with open(os.path.join(folder, file), "rb") as handle:
                        digest.update(handle.read())
    base = os.environ.get("APR_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "apr")
    folder = os.path.join(base, "wasm_tests")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "{}-{}.pkl".format(name, digest.hexdigest()[:16]))
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(path):
            with open(path, "rb") as handle:
                return pickle.load(handle)
        value = build()
        with open(path + ".tmp", "wb") as handle:
            pickle.dump(value, handle)
        os.replace(path + ".tmp", path)
        return value


@pytest.fixture(scope="session")
def native(smollm2_path):
    """Native apr on the same GGUF: dequantized tensors, logits and greedy tokens (computed
    once per apr_core version, see `cached`)."""
    inputs = (os.path.getsize(smollm2_path), PROMPT, QUESTION, GREEDY)
    return cached("native-smollm2", inputs, lambda: _native_reference(smollm2_path))


def _native_reference(smollm2_path):
    import numpy as np
    from apr_core.formats.open import open_model
    from apr_core.runtime.generate import generate_step
    from apr_core.runtime.engine import Engine
    from apr_core.runtime.text_model import TextModel
    from apr_core.quant.api import dequantize_raw
    with open_model(smollm2_path) as gguf:
        digests = {name: hashlib.sha256(np.ascontiguousarray(
            dequantize_raw(gguf.read_raw(name)), dtype="<f4").tobytes()).hexdigest()
            for name in gguf.tensors}
    # the arithmetic, compared within LOGIT_TOLERANCE: float32 KV (the page loads with
    # kvType "f32"; an f16 cache turns the last-bit differences of two kernels into f16
    # roundings of keys, ~5e-3 in the logits)
    model = TextModel.load(smollm2_path)
    ids = model.prompt_ids(PROMPT)
    engine_model = Engine.open(smollm2_path).model      # as the page's engine: f16 KV
    chat = engine_model.generate(engine_model.chat_ids(
        [{"role": "user", "content": QUESTION}]), max_tokens=96)
    greedy = list(generate_step(model.transformer, ids, max_tokens=GREEDY))
    return {"digests": digests, "ids": ids, "logits": model.transformer.forward(ids),
            "greedy": greedy, "gaps": top2_gaps(model.transformer, ids, greedy),
            "generate": model.generate(ids, max_tokens=GREEDY).token_ids, "chat": chat.text,
            "llama_cpp": llama_cpp_logits(smollm2_path, ids)}


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory, smollm2_path):
    from apr_core.conversion.convert import convert
    from apr_core.formats.open import open_model
    from apr_core.formats.apr2_writer import write_apr2
    from apr_core.formats.shards import write_sharded
    out = tmp_path_factory.mktemp("models")
    with open_model(smollm2_path) as gguf:
        names = [n for n in gguf.tensors if n.startswith(("blk.0.", "blk.1."))]
        tensors = [gguf.read_raw(n) for n in names + ["output_norm.weight"]]
        meta = {"general.name": "SmolLM2 layers 0-1", "general.architecture": "llama",
                "note": "Grüße, 模型 🚀", "nested": {"list": [1, 2.5, None, True], "n": -3},
                "vocab_preview": gguf.metadata["tokenizer.ggml.tokens"][:2000]}
    write_sharded(str(out / "layers.apr"), tensors, meta, max_shard_size=2 << 20,
                  compression="lz4")
    write_apr2(str(out / "layers-single.apr"), tensors, meta, compression="lz4")
    # Another model with other shards (uncompressed), for eviction between models.
    write_sharded(str(out / "layers-raw.apr"), tensors, meta, max_shard_size=3 << 20)
    convert(smollm2_path, str(out / "smollm2.apr"), "apr", compression="lz4",
            max_shard_size=40 << 20)
    os.symlink(smollm2_path, str(out / "smollm2.gguf"))
    return str(out)


@pytest.fixture(scope="session")
def site(tmp_path_factory, models_dir):
    from apr_native.web_bundle import missing_runtime, prepare_site, site_mounts
    from apr_native.web_server import StaticServer
    for flavor in ("314", "017"):
        reason = missing_runtime(flavor)
        require(reason is None, reason or "")
    site_dir = str(tmp_path_factory.mktemp("site"))
    prepare_site(site_dir, flavor="314", models=[{"name": "SmolLM2-135M", "url": "models/smollm2.apr"}])
    server = StaticServer(site_mounts(site_dir, models_dir)).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def browser():
    require(importlib.util.find_spec("playwright") is not None, "playwright not installed")
    require(shutil.which("chromium") is not None, "chromium not installed")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as play:
        chromium = play.chromium.launch(executable_path=shutil.which("chromium"),
                                        args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


class PageSession:
    """A browser context (its own IndexedDB) with the demo page loaded and Python booted."""

    def __init__(self, browser, site, query):
        self.site = site
        self.query = query
        self.context = browser.new_context(viewport={"width": 1200, "height": 900})
        self.page = self.context.new_page()
        self.log = []
        self.page.on("console", lambda m: self.log.append(m.text))
        self.page.on("pageerror", lambda e: self.log.append("pageerror: {}".format(e)))
        self.open()

    def open(self):
        """(Re)load the page in this context and wait for the runtime to boot."""
        self.page.goto(self.site.url("/index.html?" + self.query))
        self.page.wait_for_function("document.body.dataset.runtime", timeout=BOOT_TIMEOUT_MS)
        state = self.page.evaluate("document.body.dataset.runtime")
        assert state == "ready", "runtime failed to boot: {}\n{}".format(
            self.page.inner_text("#error"), "\n".join(self.log[-20:]))

    def call(self, expression, arg=None, timeout_ms=600_000):
        """Evaluate a promise-returning expression (`apr` is the page's client)."""
        self.page.set_default_timeout(timeout_ms)
        return self.page.evaluate(expression, arg)

    def close(self):
        self.context.close()


@pytest.fixture
def open_page(browser, site):
    sessions = []

    def factory(query="pyodide=314&numpy=0"):
        sessions.append(PageSession(browser, site, query))
        return sessions[-1]
    yield factory
    for session in sessions:
        session.close()
