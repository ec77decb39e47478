"""The real SmolLM2 model in Chromium + Pyodide 0.17 (numpy 1.17.5, no BLAS): dequantization,
logits and greedy tokens equal native (issue 7, test 4), and the demo page after a chat turn
(test 6)."""
import base64
import os

import numpy as np
import pytest

from wasm_shared import (GREEDY, LOGIT_TOLERANCE, QUESTION, assert_greedy_ties_aside, gap_error,
                         next_token_kl)

pytestmark = [pytest.mark.native, pytest.mark.real_model]
QUERY = "pyodide=017&numpy=1"
# Greedy steps the relaxed kernels must reproduce before native's top-2 gap falls under their
# gap error (a near-tie they may flip): all of them. Measured: gap error 0.0034, native's
# smallest gap of the GREEDY steps 0.220 (step 6).
GREEDY_COMPARED = GREEDY


@pytest.mark.parametrize("kernels", ["simd-exact", "simd", "numpy"])
def test_smollm2_in_pyodide_017_matches_native(open_page, native, kernels):
    """With the shell's exact WebAssembly SIMD matmul and numpy's kernels: logits within
    LOGIT_TOLERANCE; with the default, relaxed SIMD over activations rounded to int16 codes:
    next-token distributions no further from native's than llama.cpp's (KL, every position).
    Greedy tokens identical with each."""
    session = open_page(QUERY + "&kernels=" + kernels)
    precision = session.call("apr.boot({})")["precision"]
    assert precision == {"simd-exact": "exact", "simd": "relaxed", "numpy": None}[kernels]
    info = session.call("apr.load('models/smollm2.gguf', {kvType: 'f32'})")
    assert (info["arch"], info["layers"], info["vocab"]) == ("llama", 30, 49152)
    assert info["kernels"] == ("numpy" if kernels == "numpy" else "wasm-simd")

    assert session.call("apr.dequantDigests()") == native["digests"]

    got = session.call("(ids) => apr.logits(ids)", native["ids"])
    logits = np.frombuffer(base64.b64decode(got["f32"]), "<f4").reshape(got["shape"])
    assert logits.shape == native["logits"].shape
    greedy = session.call("([ids, n]) => apr.greedy(ids, n)", [native["ids"], GREEDY])
    if kernels == "simd":
        ours = next_token_kl(native["logits"], logits)
        theirs = next_token_kl(native["logits"], native["llama_cpp"])
        assert ours.max() <= theirs.max(), (ours, theirs)
        error = gap_error(native["logits"], logits)
        assert_greedy_ties_aside(greedy["tokens"], native["greedy"], native["gaps"], error,
                                 GREEDY_COMPARED)
        print("relaxed: max logit difference", float(np.abs(logits - native["logits"]).max()),
              "KL", ours.max(), "llama.cpp KL", theirs.max(), "gap error", error)
    else:
        assert float(np.abs(logits - native["logits"]).max()) <= LOGIT_TOLERANCE
        assert greedy["tokens"] == native["greedy"]


def artifacts_dir():
    base = os.environ.get("APR_ARTIFACTS") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "apr", "artifacts")
    os.makedirs(base, exist_ok=True)
    return base


def test_demo_page_chat_turn_screenshot(open_page, native):
    """The demo page's chat turn on its default kernels (relaxed SIMD in Chromium) answers
    the France question as native apr does, "Paris" (SmolLM2's first answer token is a 0.08
    near-tie: activations rounded to one int8 term, as llama.cpp rounds them, flipped it to
    "L'Étoile, la ...")."""
    session = open_page(QUERY)
    assert session.call("apr.boot({})")["precision"] == "relaxed"
    page = session.page
    page.set_default_timeout(600_000)
    page.fill("#model-url", "models/smollm2.apr")
    page.click("#load-button")
    page.wait_for_function("document.body.dataset.model")
    assert page.evaluate("document.body.dataset.model") == "ready", page.inner_text("#error")
    assert page.is_visible("#chat")

    session.call("window.tokens = []; apr.on('token', (t) => tokens.push(t.text)); 0")
    page.fill("#prompt", QUESTION)
    page.click("#send")
    page.wait_for_function("document.body.dataset.chat === 'done'")
    assert page.is_hidden("#error")
    bubbles = page.locator(".msg.assistant")
    answer = bubbles.last.inner_text()
    tokens = session.call("tokens")
    assert len(tokens) >= 3  # streamed piece by piece, not in one block
    assert "".join(tokens) == answer == native["chat"]
    assert "Paris" in answer
    assert page.locator(".msg.user").last.inner_text() == QUESTION
    assert "tokens/s" in page.inner_text("#speed")

    shot = os.path.join(artifacts_dir(), "demo_chat.png")
    page.screenshot(path=shot, full_page=True)
    with open(shot, "rb") as handle:
        assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
    print("demo screenshot: " + shot)


def test_demo_page_inspects_a_local_file_with_stats(open_page, models_dir):
    from apr_core import stats
    from apr_core.formats.open import open_model
    path = os.path.join(models_dir, "layers-single.apr")
    with open_model(path) as model:
        expected = {t.name: stats.tensor_stats(t.name, stats.tensor_values(t),
                                               t.dtype.name).to_dict()
                    for t in model.lazy_tensors()}
    session = open_page(QUERY)
    page = session.page
    session.call("window.statRows = []; apr.on('stats', (s) => statRows.push(s)); 0")
    page.click("[data-tab=inspect]")
    page.set_input_files("#file", path)
    page.wait_for_function("statRows.length === {}".format(len(expected)), timeout=300_000)
    assert page.locator("#tensor-table tbody tr").count() == len(expected)
    assert "apr2" in page.inner_text("#summary")
    assert "SmolLM2 layers 0-1" in page.inner_text("#meta-table")
    got = {row["name"]: row for row in session.call("statRows")}
    assert sorted(got) == sorted(expected)
    for name, want in expected.items():
        row = got[name]
        for key in ("count", "nan", "inf", "zeros"):
            assert row[key] == want[key], (name, key)
        for key in ("min", "max", "mean", "std", "l2"):  # float64 sums, any summation order
            assert row[key] == pytest.approx(want[key], rel=1e-9, abs=1e-12), (name, key)
    shot = os.path.join(artifacts_dir(), "demo_inspect.png")
    page.screenshot(path=shot, full_page=False)


REPEAT = ("Repeat this sentence exactly, twice: the quick brown fox jumps over the lazy dog "
          "while the cat sleeps on the warm mat.")


@pytest.mark.parametrize("kernels", ["simd", "numpy"])
def test_speculative_chat_in_the_browser_gives_the_same_text(open_page, kernels):
    """`apr.chat(messages, {speculate: "lookup"})` runs the engine's scheduler in the
    worker with prompt-lookup drafts: the same greedy text as plain decoding, fewer
    forward passes than tokens (the counters come back with the answer)."""
    session = open_page(QUERY + "&kernels=" + kernels)
    session.call("apr.load('models/smollm2.gguf')")
    ask = "(o) => apr.chat([{role: 'user', content: %r}], o)" % REPEAT
    plain = session.call(ask, {"maxTokens": 48})
    fast = session.call(ask, {"maxTokens": 48, "speculate": "lookup", "draftMax": 6})
    assert fast["text"] == plain["text"] and fast["tokens"] == plain["tokens"]
    s = fast["speculative"]
    assert plain["speculative"] is None and s["mode"] == "lookup"
    assert s["accepted_tokens"] > 0 and s["decode_passes"] < s["decoded_tokens"]
    print(kernels, "plain", plain["decode_tok_s"], "lookup", fast["decode_tok_s"],
          "tokens/pass", s["tokens_per_pass"])


def _native_kv_run(path, kv_type, ids):
    """Native apr with `--kv-type kv_type`: its KV report and GREEDY greedy tokens."""
    from apr_core.runtime.context_options import ContextOptions
    from apr_core.runtime.engine import Engine, EngineOptions
    from apr_core.runtime.generate import generate_step
    engine = Engine.open(path, EngineOptions(context=ContextOptions(kv_type=kv_type)))
    return engine.kv_report(), list(generate_step(engine.transformer, ids, max_tokens=GREEDY))


def test_the_kv_type_option_of_the_page_is_the_native_one(open_page, native, smollm2_path):
    """`apr.load(url, {kvType})` stores the KV cache as `--kv-type` does natively: the same
    bytes per position and the same greedy tokens as native apr with that type; f16 by
    default, as natively; an unknown type is E011 before a weight is placed."""
    session = open_page(QUERY + "&kernels=simd-exact")
    default = session.call("apr.load('models/smollm2.gguf')")
    assert default["kv_type"] == "f16"
    for kv_type in ("q8_0", "q4_0"):
        info = session.call("(t) => apr.load('models/smollm2.gguf', {kvType: t})", kv_type)
        report, tokens = _native_kv_run(smollm2_path, kv_type, native["ids"])
        assert (info["kv_type"], info["kv_bytes_per_token"]) == (kv_type,
                                                                report["bytes_per_token"])
        assert info["kv_bytes_per_token"] < default["kv_bytes_per_token"]
        greedy = session.call("([ids, n]) => apr.greedy(ids, n)", [native["ids"], GREEDY])
        assert greedy["tokens"] == tokens, kv_type
    got = session.call("() => apr.load('models/smollm2.gguf', {kvType: 'q3'}).then(() => null,"
                       " (e) => e.detail)")
    assert got is not None and got["code"] == "E011", got
