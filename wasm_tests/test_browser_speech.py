"""The speech page (web/speech.html) in Chromium + Pyodide 0.17: a Whisper APR file loads
in the worker, a WAV picked with the file input is decoded by WebAudio to mono 16 kHz, and
the transcript equals native apr's `transcribe` on the very samples the page sent
(word-equal; the page's projections run at stored size on the shell's WebAssembly SIMD
block kernels and their helper threads, as the text models' do, which sum in another
order), with the words espeak-ng was asked to say: for the F16 file `apr import` writes
and the Q8_0 one `apr convert --quantize Q8_0` makes of it."""
import base64
import os
import shutil

import numpy as np
import pytest

from wasm_shared import require

pytestmark = [pytest.mark.native, pytest.mark.real_model]

SENTENCE = "The quick brown fox jumps over the lazy dog."
TIMEOUT_MS = 1_200_000      # download, load and a 30 s window's encoder in numpy without BLAS
Q8_0_FILE = "whisper-base.q8_0.apr"   # sorts after whisper-base.apr: the page's default stays


@pytest.fixture(scope="module")
def speech_models(tmp_path_factory):
    from apr_core.errors import AprError
    from apr_native.real_models import locate
    from speech_util import whisper_apr
    try:
        model_dir = locate("whisper-base")
    except AprError as err:
        require(False, "Whisper base unavailable: {}".format(err))
    folder = tmp_path_factory.mktemp("speech-models")   # served at /models/: this file alone
    made = whisper_apr(str(model_dir), folder)          # imported once per session
    served = folder / "whisper-base.apr"
    if not served.exists():
        os.symlink(made, str(served))
    from apr_native.cli.main import main
    os.environ.setdefault("APR_QUIET", "1")
    assert main(["convert", str(served), "--quantize", "Q8_0",
                 "-o", str(folder / Q8_0_FILE)]) == 0
    return str(folder)


@pytest.fixture(scope="module")
def speech_site(tmp_path_factory, speech_models):
    from apr_native.cli.web_cmd import list_models
    from apr_native.web_bundle import missing_runtime, prepare_site, site_mounts
    from apr_native.web_server import StaticServer
    reason = missing_runtime("017")
    require(reason is None, reason or "")
    site_dir = str(tmp_path_factory.mktemp("speech-site"))
    models = list_models(speech_models)          # what `apr web` puts in config.json
    assert [(m["url"], m["kind"]) for m in models] == [
        ("models/whisper-base.apr", "speech"), ("models/" + Q8_0_FILE, "speech")]
    prepare_site(site_dir, flavor="017", models=models)
    server = StaticServer(site_mounts(site_dir, speech_models)).start()
    yield server
    server.stop()


def _load_page(page, speech_site, query, log):
    """Open the speech page (`query` appended to its URL) and load its model box's file."""
    page.on("console", lambda m: log.append(m.text))
    page.on("pageerror", lambda e: log.append("pageerror: {}".format(e)))
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(speech_site.url("/speech.html" + query))
    page.wait_for_function("document.body.dataset.runtime")
    assert page.evaluate("document.body.dataset.runtime") == "ready", \
        page.inner_text("#error") + "\n".join(log[-20:])
    page.click("#load-button")
    page.wait_for_function("['ready', 'error'].includes(document.body.dataset.model)")
    assert page.evaluate("document.body.dataset.model") == "ready", page.inner_text("#error")
    # every projection runs at stored size on the shell's SIMD block kernels (Chromium has
    # SIMD), on a helper thread too (the page is cross-origin isolated)
    assert page.evaluate("document.body.dataset.kernels") == "wasm-simd"
    assert "SIMD block kernels" in page.inner_text("#load-title")
    assert "2 threads" in page.inner_text("#runtime")


def _sent_samples(page):
    """The float32 samples the page sent to the worker (its WebAudio decoding)."""
    return np.frombuffer(base64.b64decode(page.evaluate("""() => {
        const bytes = new Uint8Array(window.lastSamples.buffer);
        let text = "";
        for (let i = 0; i < bytes.length; i += 8192)
          text += String.fromCharCode.apply(null, bytes.subarray(i, i + 8192));
        return btoa(text); }""")), "<f4")


def test_speech_page_transcribes_a_wav_like_native(browser, speech_site, speech_models,
                                                    tmp_path):
    from apr_core.speech.audio import read_audio
    from apr_core.speech.model import load_whisper
    from apr_core.speech.transcribe import transcribe
    from speech_util import espeak_wav, words
    clip = str(tmp_path / "fox.wav")
    with open(clip, "wb") as handle:
        handle.write(espeak_wav(SENTENCE))
    context = browser.new_context(viewport={"width": 1100, "height": 800})
    log = []
    try:
        page = context.new_page()
        _load_page(page, speech_site, "?threads=2", log)
        # the model list comes from config.json (kind "speech"): the box is filled already
        assert page.input_value("#model-url") == "models/whisper-base.apr"

        page.set_input_files("#audio-file", clip)
        page.wait_for_function("['done', 'error'].includes(document.body.dataset.speech)")
        assert page.evaluate("document.body.dataset.speech") == "done", page.inner_text("#error")
        result = page.evaluate("window.lastSpeech")
        sent = _sent_samples(page)
        shown = page.inner_text("#transcript")
        rows = page.locator("#segments tbody tr").count()
        rtf_line = page.inner_text("#rtf")
        shot = os.path.join(os.environ.get("APR_ARTIFACTS") or os.path.expanduser(
            "~/.cache/apr/artifacts"), "speech_page.png")
        os.makedirs(os.path.dirname(shot), exist_ok=True)
        page.screenshot(path=shot, full_page=True)
    finally:
        context.close()

    # WebAudio decoded the 22.05 kHz WAV to 16 kHz mono: the same signal as apr's reader
    with open(clip, "rb") as handle:
        reference = read_audio(handle.read())
    assert abs(len(sent) - len(reference)) <= 16
    n = min(len(sent), len(reference))
    assert np.corrcoef(sent[:n], reference[:n])[0, 1] > 0.99

    native = transcribe(load_whisper(os.path.join(speech_models, "whisper-base.apr")), sent)
    assert words(result["text"]) == words(native["text"])
    assert {"quick", "fox", "over", "lazy", "dog"} <= set(words(result["text"]))
    assert result["language"] == native["language"] == "en"
    assert [(s["start"], s["end"]) for s in result["segments"]] == \
        [(s["start"], s["end"]) for s in native["segments"]]
    assert shown == result["text"].strip() and rows == len(result["segments"])
    assert result["audio_s"] == pytest.approx(len(sent) / 16000)
    assert "real-time factor" in rtf_line and result["rtf"] > 0
    print("browser RTF {:.3f} ({:.1f} s of audio in {:.1f} s); screenshot {}".format(
        result["rtf"], result["audio_s"], result["wall_s"], shot))


def test_speech_page_q8_0_on_the_block_kernels_like_native(browser, speech_site,
                                                           speech_models, tmp_path):
    """The Q8_0 file: its blocks as stored in the kernels' memory; the transcript equals
    `apr run`'s (apr_native.speech_native: the same blocks on the native block kernels)."""
    from apr_core.speech.transcribe import transcribe
    from apr_native.speech_native import load_native_whisper
    from speech_util import espeak_wav, words
    clip = str(tmp_path / "fox.wav")
    with open(clip, "wb") as handle:
        handle.write(espeak_wav(SENTENCE))
    context = browser.new_context()
    log = []
    try:
        page = context.new_page()
        _load_page(page, speech_site, "?threads=2&model=models/" + Q8_0_FILE, log)
        page.set_input_files("#audio-file", clip)
        page.wait_for_function("['done', 'error'].includes(document.body.dataset.speech)")
        assert page.evaluate("document.body.dataset.speech") == "done", page.inner_text("#error")
        result = page.evaluate("window.lastSpeech")
        sent = _sent_samples(page)
    finally:
        context.close()
    native = transcribe(load_native_whisper(os.path.join(speech_models, Q8_0_FILE),
                                            threads=2), sent)
    assert words(result["text"]) == words(native["text"])
    assert {"quick", "fox", "over", "lazy", "dog"} <= set(words(result["text"]))
    assert [(s["start"], s["end"]) for s in result["segments"]] == \
        [(s["start"], s["end"]) for s in native["segments"]]
    print("browser Q8_0 RTF {:.3f} ({:.1f} s of audio in {:.1f} s)".format(
        result["rtf"], result["audio_s"], result["wall_s"]))


def test_speech_page_records_the_microphone(browser, speech_site, speech_models, tmp_path):
    """The Record button: Chromium's fake microphone plays an espeak-ng WAV, MediaRecorder
    records it (webm/opus), WebAudio decodes that, and the words come back."""
    from apr_core.speech.model import load_whisper
    from apr_core.speech.transcribe import transcribe
    from speech_util import espeak_wav, words
    clip = str(tmp_path / "mic.wav")
    with open(clip, "wb") as handle:
        handle.write(espeak_wav(SENTENCE))
    # conftest's flags, plus a microphone that plays the WAV once, allowed without a prompt
    flags = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run",
             "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
             "--use-file-for-fake-audio-capture={}%noloop".format(clip)]
    with_mic = browser.browser_type.launch(executable_path=shutil.which("chromium"), args=flags)
    try:
        page = with_mic.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(speech_site.url("/speech.html"))
        page.wait_for_function("document.body.dataset.runtime === 'ready'")
        page.click("#load-button")
        page.wait_for_function("document.body.dataset.model === 'ready'")
        page.click("#record")
        page.wait_for_function("document.getElementById('record').textContent.includes('Stop')")
        page.wait_for_timeout(4000)              # the 2.8 s sentence, then silence
        page.click("#record")
        page.wait_for_function("['done', 'error'].includes(document.body.dataset.speech)")
        assert page.evaluate("document.body.dataset.speech") == "done", page.inner_text("#error")
        result = page.evaluate("window.lastSpeech")
        sent = np.asarray(page.evaluate("Array.from(window.lastSamples)"), np.float32)
    finally:
        with_mic.close()
    assert 3.0 < len(sent) / 16000 < 8.0            # what was recorded, at 16 kHz
    native = transcribe(load_whisper(os.path.join(speech_models, "whisper-base.apr")), sent)
    assert words(result["text"]) == words(native["text"])
    assert {"fox", "lazy", "dog"} <= set(words(result["text"]))


def test_speech_model_reloads_from_indexeddb(browser, speech_site, speech_models):
    """The first load downloads the APR file into IndexedDB; after a page reload the model
    loads again without one byte of it coming from the server (its byte counters)."""
    size = os.path.getsize(os.path.join(speech_models, "whisper-base.apr"))
    context = browser.new_context()          # a fresh profile: an empty IndexedDB
    try:
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)

        def load_model():
            page.wait_for_function("document.body.dataset.runtime === 'ready'")
            page.click("#load-button")
            page.wait_for_function("['ready', 'error'].includes(document.body.dataset.model)")
            assert page.evaluate("document.body.dataset.model") == "ready", \
                page.inner_text("#error")
            return page.evaluate("document.body.dataset.modelSource")

        speech_site.reset_counts()
        page.goto(speech_site.url("/speech.html"))
        assert load_model() == "network"
        assert speech_site.bytes_sent("/models/") == size       # downloaded once, whole
        speech_site.reset_counts()
        page.reload()
        assert load_model() == "cache"
        assert speech_site.requests, "the reload reached the server at all"
        assert speech_site.bytes_sent("/models/") == 0          # no model bytes again
    finally:
        context.close()
