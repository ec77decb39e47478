"""apr's WebGPU backend in Chromium (SwiftShader's WebGPU, navigator.gpu from a worker): the
page on http://127.0.0.1 (a secure, cross-origin isolated context: the test server sends
COOP/COEP), Pyodide 0.17, the model's forward pass run by apr_core.gpu.GpuForward through
the shell's GPU worker (web/src/apr_webgpu.py, gpu_client.js, gpu_worker.js).

* SmolLM2: STEPS greedy tokens through WebGPU equal native apr's (the numpy CPU backend on
  the same GGUF), with the prompt of tests/gpu/test_gpu_models.py (picked for a top-2 logit
  gap >= 0.03 in its first 32 steps, so a differing token is a bug, not a tie); the logits
  of the prompt within that test's bound; one submission and one read-back per token from
  the device's counters; the page names the adapter; a reload frees the first copy's
  GPU buffers.
* Qwen2.5-Coder-0.5B Q4_K_M: QWEN_STEPS greedy tokens equal native's, the same counters.
* Without an adapter (Chromium without the WebGPU flags) the same load runs on the CPU
  kernels and says why.
"""
import base64
import shutil

import numpy as np
import pytest

from conftest import CHROMIUM_FLAGS, PageSession

pytestmark = [pytest.mark.native, pytest.mark.real_model]

QUERY = "pyodide=017&numpy=1"
# SwiftShader's WebGPU (a CPU implementation of Vulkan inside Chromium)
WEBGPU_FLAGS = ["--enable-unsafe-webgpu", "--enable-features=Vulkan",
                "--use-webgpu-adapter=swiftshader"]
# Every step reads every weight, so more steps test no other kernel; SwiftShader decodes
# Qwen2.5-0.5B at ~0.15 tok/s (~30 s a step under CI's load)
STEPS = 16
QWEN_STEPS = 6
# tests/gpu/test_gpu_models.py's prompts
PROMPT = "Explain what a CPU does."
QWEN_PROMPT = "Write a Python function that checks whether a number is prime."
LOGIT_BOUND = 1e-3                        # tests/gpu/test_gpu_models.py's bound


def _native_greedy(path, steps, prompt=PROMPT):
    """Native apr's numpy backend on the GGUF: prompt ids, its greedy ids, and the logits
    of the prompt and of each step."""
    from apr_core.runtime.text_model import TextModel
    model = TextModel.load(path)
    ids = model.prompt_ids(prompt, chat=True)
    transformer = model.transformer
    cache = transformer.new_cache(len(ids) + steps)
    prompt_logits = transformer.forward(ids, cache)                  # [T, n_vocab]
    row = prompt_logits[-1]
    tokens, rows = [], []
    for _ in range(steps):
        tokens.append(int(row.argmax()))
        rows.append(row)
        row = transformer.forward([tokens[-1]], cache)[-1]
    return {"ids": ids, "tokens": tokens, "rows": np.stack(rows), "logits": prompt_logits}


@pytest.fixture(scope="module")
def native_greedy(smollm2_path):
    import os
    from conftest import cached
    return cached("native-webgpu-smollm2", (os.path.getsize(smollm2_path), PROMPT, STEPS),
                  lambda: _native_greedy(smollm2_path, STEPS))


@pytest.fixture(scope="module")
def qwen_native(qwen_path, models_dir):
    """(URL in models_dir, native reference) of Qwen2.5-Coder-0.5B Q4_K_M."""
    import os
    import pathlib
    from conftest import cached
    link = pathlib.Path(models_dir) / "qwen.gguf"
    if not link.exists():
        link.symlink_to(qwen_path)
    return "models/qwen.gguf", cached(
        "native-webgpu-qwen", (os.path.getsize(qwen_path), QWEN_PROMPT, QWEN_STEPS),
        lambda: _native_greedy(qwen_path, QWEN_STEPS, QWEN_PROMPT))


@pytest.fixture(scope="module")
def webgpu_browser(browser):
    """A second Chromium, with WebGPU on SwiftShader, from conftest's Playwright."""
    chromium = browser.browser_type.launch(executable_path=shutil.which("chromium"),
                                           args=CHROMIUM_FLAGS + WEBGPU_FLAGS)
    yield chromium
    chromium.close()


@pytest.fixture
def gpu_page(webgpu_browser, site):
    sessions = []

    def factory(query=QUERY):
        sessions.append(PageSession(webgpu_browser, site, query))
        return sessions[-1]
    yield factory
    for session in sessions:
        session.close()


def test_smollm2_greedy_on_webgpu_matches_native(gpu_page, native_greedy):
    session = gpu_page()
    runtime = session.call("() => apr.boot({})")
    assert runtime["isolated"] and runtime["gpu"], runtime        # an adapter, in the worker
    assert "swiftshader" in runtime["gpu"], runtime

    assert runtime["gpu"] in session.page.inner_text("#runtime")

    info = load_on_page(session, "webgpu")
    assert info["kernels"] == "webgpu" and info["adapter"] == runtime["gpu"], info
    assert info["gpu_reason"] is None
    held = session.call("() => apr.memory()")
    assert held["gpu"] > 0.9 * info_weight_bytes(session), held   # the weights are on the GPU

    before = session.call("() => apr.memory()")
    got = session.call("([ids, n]) => apr.greedy(ids, n)", [native_greedy["ids"], STEPS])
    after = session.call("() => apr.memory()")
    check_greedy(got, before, after, native_greedy, STEPS)

    logits = session.call("(ids) => apr.logits(ids)", native_greedy["ids"])
    ours = np.frombuffer(base64.b64decode(logits["f32"]), "<f4").reshape(logits["shape"])
    assert ours.shape == native_greedy["logits"].shape
    assert float(np.abs(ours - native_greedy["logits"]).max()) < LOGIT_BOUND


def check_greedy(got, before, after, native, steps):
    """Greedy ids equal native's (a differing step names native's top-2 gap there), and
    the device's counters moved by one submission and one read-back per token."""
    for step, (ours, theirs) in enumerate(zip(got["tokens"], native["tokens"])):
        top2 = np.sort(native["rows"][step])[-2:]
        assert ours == theirs, "step {}: webgpu {} native {} (native top-2 gap {:.3f})".format(
            step, ours, theirs, top2[1] - top2[0])
    assert len(got["tokens"]) == steps
    # `steps` tokens = one prefill + steps - 1 decode passes: one submission, one read-back each
    assert after["submissions"] - before["submissions"] == steps, (before, after)
    assert after["readbacks"] - before["readbacks"] == steps, (before, after)


def test_qwen_greedy_on_webgpu_matches_native(gpu_page, qwen_native):
    """Q4_K, Q5_0, Q6_K and Q8_0 blocks read on the device, biases, 14 query heads on 2 KV."""
    url, native = qwen_native
    session = gpu_page()
    info = session.call("([u, b]) => apr.load(u, {backend: b})", [url, "webgpu"])
    assert info["kernels"] == "webgpu" and "swiftshader" in info["adapter"], info
    before = session.call("() => apr.memory()")
    got = session.call("([ids, n]) => apr.greedy(ids, n)", [native["ids"], QWEN_STEPS])
    after = session.call("() => apr.memory()")
    check_greedy(got, before, after, native, QWEN_STEPS)


def load_on_page(session, backend, url="models/smollm2.gguf"):
    """Load `url` through the page's form with the backend toggle at `backend`; the model
    line must name where it runs. Returns the load's answer (loaded again: cached)."""
    page = session.page
    page.set_default_timeout(600_000)
    page.select_option("#backend", backend)
    page.fill("#model-url", url)
    page.click("#load-button")
    page.wait_for_function("document.body.dataset.model")
    assert page.evaluate("document.body.dataset.model") == "ready", page.inner_text("#error")
    first = session.call("() => apr.memory()")["gpu"]
    info = session.call("([u, b]) => apr.load(u, {backend: b})", [url, backend])
    # loaded again: the first copy's GPU buffers were freed (not twice the bytes)
    assert session.call("() => apr.memory()")["gpu"] == first
    line = page.inner_text("#model-info")
    if info["adapter"]:
        assert page.evaluate("document.body.dataset.backend") == "webgpu"
        assert "WebGPU ({})".format(info["adapter"]) in line, line
    else:
        assert page.evaluate("document.body.dataset.backend") == "cpu"
        assert "no WebGPU: {}".format(info["gpu_reason"]) in line, line
    return info


def info_weight_bytes(session):
    """Bytes of the loaded model's tensors as stored (what the device holds at least)."""
    summary = session.call("(url) => apr.describe(url, {full: false})", "models/smollm2.gguf")
    return sum(t["stored"] for t in summary["tensors"])


def test_without_an_adapter_the_page_runs_on_the_cpu_and_says_why(open_page, native_greedy):
    """conftest's Chromium has no WebGPU flags: navigator.gpu exists, no adapter does."""
    session = open_page(QUERY)
    runtime = session.call("() => apr.boot({})")
    assert runtime["gpu"] is None and "adapter" in runtime["gpuReason"], runtime
    info = load_on_page(session, "webgpu")
    assert info["kernels"] != "webgpu" and info["adapter"] is None, info
    assert info["gpu_reason"] == runtime["gpuReason"]
    got = session.call("([ids, n]) => apr.greedy(ids, n)", [native_greedy["ids"], 4])
    assert got["tokens"] == native_greedy["tokens"][:4]
