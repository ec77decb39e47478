"""Whisper base speed: apr natively and in Chromium against faster-whisper (CTranslate2)
int8 and float32, as the real-time factor (seconds of audio per wall second; higher is
faster) on one > 30 s espeak-ng clip, at the same thread count.

* apr f16 (native): `apr_core.speech.transcribe` on the APR file `apr import` writes from the
  same CTranslate2 directory, numpy's BLAS limited to `--threads`;
* apr f16 / Q8_0 (chromium): the speech page (web/speech.html, Pyodide 0.17 + numpy, no
  BLAS; its projections on the shell's WebAssembly SIMD kernels and their helper threads) on
  each of the two APR files and the same samples, timed inside the worker (decoding by
  WebAudio is not counted);
* apr Q8_0 (native): the same on the file `apr convert --quantize Q8_0` makes of it, its
  projections on the block kernels `backends.select` picks (`apr_native.speech_native`);
* faster-whisper int8 / float32: `WhisperModel(dir, compute_type=..., cpu_threads=threads)`;
* whisper.cpp f16 / Q8_0 (PyPI `pywhispercpp`, its manylinux wheel): on the files `apr export
  --format whisper.cpp` writes of those two APR files -- the same weights -- with
  `n_threads=threads`, language fixed to English (it would otherwise encode the first window
  twice to detect it);
* whisper.cpp f16 / Q8_0 wasm (chromium): the same ggml files in whisper.cpp compiled to
  WebAssembly (npm `@transcribe/shout`, SIMD and pthreads) in a cross-origin isolated page of
  its own, on `--threads` threads, timed inside the page (the transcription only, not the
  model's fetch or load); see bench/whisper_wasm_peer.py.
All decode greedily (beam 1) with timestamps, the same temperature fallback and no VAD.
Rounds alternate between the peers so load from elsewhere on the machine falls on all alike;
the best round of each counts. The word error rate against the text espeak-ng spoke is
printed too (a check that every peer did the same work).

    .venv/bin/python bench/whisper.py [--rounds 3] [--threads 2] [--no-browser]
        [--browser-only] [--no-wasm] [--json]
"""
from __future__ import annotations

import argparse
import os
import sys

PARSER = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
PARSER.add_argument("--rounds", type=int, default=3, help="alternating rounds (best counts)")
PARSER.add_argument("--browser-rounds", type=int, default=1,
                    help="rounds of the (slow) Chromium peer, within the first rounds")
PARSER.add_argument("--threads", type=int, default=2, help="threads of every native peer")
PARSER.add_argument("--no-browser", action="store_true", help="skip the Chromium peers")
PARSER.add_argument("--browser-only", action="store_true",
                    help="only the Chromium peers (apr and whisper.cpp wasm)")
PARSER.add_argument("--no-wasm", action="store_true", help="skip whisper.cpp wasm in Chromium")
PARSER.add_argument("--json", action="store_true", help="print the results as JSON")
ARGS = PARSER.parse_args() if __name__ == "__main__" else None
if ARGS is not None:   # before numpy loads: its BLAS reads these once
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(ARGS.threads)

import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "native"), os.path.join(ROOT, "tests"),
                os.path.join(ROOT, "bench")]

from speech_util import word_error_rate  # noqa: E402  (the tests' own measure)

# About 40 s at espeak-ng's default 175 words per minute: two 30 s windows.
SCRIPT = ("The history of the printing press begins in the fifteenth century. Before it, "
          "every book was copied by hand, which made books rare and expensive. A goldsmith "
          "named Johannes Gutenberg combined a screw press with metal letters that could be "
          "moved and used again. Within fifty years, printers worked in more than two hundred "
          "cities across Europe. Prices fell, more people learned to read, and new ideas "
          "travelled faster than ever before. Scientists shared their results, merchants "
          "printed price lists, and newspapers appeared in the following century. Today we "
          "carry a library in our pockets, but the idea is the same: copy words cheaply and "
          "let them reach everyone.")
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]


def make_clip(folder: str) -> str:
    path = os.path.join(folder, "speech.wav")
    subprocess.run(["espeak-ng", "-w", path, SCRIPT], check=True, capture_output=True)
    return path


def apr_peers(paths: dict, threads: int) -> dict:
    """apr natively on each APR file of {label: path}, its kernels on `threads` threads."""
    from apr_core.speech.transcribe import transcribe
    from apr_native.speech_native import load_native_whisper
    peers = {}
    for label, path in paths.items():
        model = load_native_whisper(path, threads=threads)
        peers["apr {} (native)".format(label)] = \
            lambda s, model=model: transcribe(model, s, beam_size=1)["text"]
    return peers


def whisper_cpp_peers(paths: dict, threads: int) -> dict:
    """whisper.cpp (pywhispercpp) on each ggml file of {label: path}."""
    from pywhispercpp.model import Model
    peers = {}
    for label, path in paths.items():
        model = Model(path, n_threads=threads, print_progress=False,
                      redirect_whispercpp_logs_to=None)
        peers["whisper.cpp " + label] = lambda s, model=model: " ".join(
            seg.text for seg in model.transcribe(s, language="en")).strip()
    return peers


def native_peers(model_dir: str, apr_paths: dict, ggml_paths: dict, threads: int) -> dict:
    """name -> function(samples) -> text."""
    from faster_whisper import WhisperModel
    peers = apr_peers(apr_paths, threads)
    for compute in ("int8", "float32"):
        model = WhisperModel(model_dir, device="cpu", compute_type=compute,
                             cpu_threads=threads)

        def run(samples, model=model):
            segments, _ = model.transcribe(samples, beam_size=1, vad_filter=False,
                                           condition_on_previous_text=True)
            return "".join(seg.text for seg in segments).strip()
        peers["faster-whisper " + compute] = run
    peers.update(whisper_cpp_peers(ggml_paths, threads))
    return peers


def make_files(model_dir: str, work: str) -> tuple:
    """({label: APR path}, {label: whisper.cpp path}) for f16 and Q8_0, via the CLI."""
    def apr(*argv):
        subprocess.run([sys.executable, "-m", "apr_native.cli.main"] + list(argv), check=True,
                       capture_output=True, env=dict(os.environ, APR_QUIET="1"))
    aprs = {"f16": os.path.join(work, "whisper-base.apr"),
            "Q8_0": os.path.join(work, "whisper-base-q8_0.apr")}
    apr("import", model_dir, "-o", aprs["f16"])
    apr("convert", aprs["f16"], "--quantize", "Q8_0", "-o", aprs["Q8_0"])
    ggmls = {}
    for label, path in aprs.items():
        ggmls[label] = os.path.join(work, "ggml-base-{}.bin".format(label.lower()))
        apr("export", path, "--format", "whisper.cpp", "-o", ggmls[label])
    return aprs, ggmls


PLAYWRIGHT: list = []


def playwright():
    """One Playwright driver for every Chromium peer (its sync API starts once a process)."""
    if not PLAYWRIGHT:
        from playwright.sync_api import sync_playwright
        PLAYWRIGHT.append(sync_playwright().start())
    return PLAYWRIGHT[0]


def wasm_peers(ggml_paths: dict, threads: int) -> dict:
    """whisper.cpp compiled to WebAssembly in Chromium on each ggml file of {label: path}."""
    from whisper_wasm_peer import ShoutPeer, missing
    if missing():
        print("skipping whisper.cpp wasm: " + missing(), file=sys.stderr)
        return {}
    return {"whisper.cpp {} wasm (chromium)".format(label):
            ShoutPeer(path, threads, CHROMIUM_FLAGS, playwright())
            for label, path in ggml_paths.items()}


class BrowserPeer:
    """The speech page in Chromium with the APR file loaded; `run(samples)` -> (text, s)."""

    def __init__(self, apr_path: str) -> None:
        from apr_native.cli.web_cmd import list_models
        from apr_native.web_bundle import prepare_site, site_mounts
        from apr_native.web_server import StaticServer
        self.site_dir = tempfile.mkdtemp(prefix="apr-bench-site-")
        models_dir = os.path.dirname(apr_path)
        prepare_site(self.site_dir, flavor="017", models=list_models(models_dir))
        self.server = StaticServer(site_mounts(self.site_dir, models_dir)).start()
        self.browser = playwright().chromium.launch(executable_path=shutil.which("chromium"),
                                                 args=CHROMIUM_FLAGS)
        self.page = self.browser.new_page()
        self.page.set_default_timeout(3_600_000)
        self.page.goto(self.server.url("/speech.html?model=models/" +
                                       os.path.basename(apr_path)))
        self.page.wait_for_function("document.body.dataset.runtime === 'ready'")
        self.page.click("#load-button")
        self.page.wait_for_function("['ready', 'error'].includes(document.body.dataset.model)")
        if self.page.evaluate("document.body.dataset.model") != "ready":
            raise RuntimeError(self.page.inner_text("#error"))

    def run(self, samples) -> tuple:
        import base64
        encoded = base64.b64encode(samples.astype("<f4").tobytes()).decode()
        result = self.page.evaluate("""async (b64) => {
            const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
            return speech.call("transcribe", bytes.buffer, {beam_size: 1}); }""", encoded)
        return result["text"], result["wall_s"]

    def close(self) -> None:
        self.browser.close()
        self.server.stop()
        shutil.rmtree(self.site_dir, ignore_errors=True)


def main(args: argparse.Namespace) -> int:
    from apr_core.speech.audio import SAMPLE_RATE, read_audio
    from apr_native.real_models import locate
    model_dir = str(locate("whisper-base"))
    work = tempfile.mkdtemp(prefix="apr-bench-whisper-")
    try:
        aprs, ggmls = make_files(model_dir, work)
        with open(make_clip(work), "rb") as handle:
            samples = read_audio(handle.read())
        audio_s = len(samples) / SAMPLE_RATE
        peers = {} if args.browser_only else native_peers(model_dir, aprs, ggmls, args.threads)
        browsers = {} if args.no_browser else {
            "apr {} (chromium)".format(label): BrowserPeer(path) for label, path in aprs.items()}
        if not (args.no_browser or args.no_wasm):
            browsers.update(wasm_peers(ggmls, args.threads))
        best = {}
        texts = {}
        runs = {}
        for round_index in range(args.rounds):
            for name, fn in peers.items():
                start = time.perf_counter()
                texts[name] = fn(samples)
                elapsed = time.perf_counter() - start
                runs.setdefault(name, []).append(elapsed)
                best[name] = min(best.get(name, elapsed), elapsed)
                print("round {} {}: {:.1f} s".format(round_index + 1, name, elapsed),
                      file=sys.stderr, flush=True)
            for name, browser in browsers.items():
                if round_index >= args.browser_rounds:
                    break
                text, elapsed = browser.run(samples)
                print("round {} {}: {:.1f} s".format(round_index + 1, name, elapsed),
                      file=sys.stderr, flush=True)
                texts[name] = text
                runs.setdefault(name, []).append(elapsed)
                best[name] = min(best.get(name, elapsed), elapsed)
        for browser in browsers.values():
            browser.close()
        if PLAYWRIGHT:
            PLAYWRIGHT.pop().stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()[0]
    rows = [{"peer": name, "best_s": best[name], "rtf": audio_s / best[name],
             "runs_s": runs[name], "wer": word_error_rate(SCRIPT, texts[name])}
            for name in best]
    if args.json:
        print(json.dumps({"audio_s": audio_s, "threads": args.threads, "rounds": args.rounds,
                          "load_average": load, "results": rows}, indent=2))
        return 0
    print("Whisper base, {:.1f} s espeak-ng clip, {} thread(s), best of {} alternating "
          "rounds (load average {:.2f})".format(audio_s, args.threads, args.rounds, load))
    print("{:<32} {:>9} {:>8} {:>6}   runs (s)".format("peer", "best (s)", "RTF", "WER"))
    for row in rows:
        print("{:<32} {:>9.2f} {:>7.2f}x {:>6.3f}   {}".format(
            row["peer"], row["best_s"], row["rtf"], row["wer"],
            " ".join("{:.1f}".format(r) for r in row["runs_s"])))
    return 0


if __name__ == "__main__":
    sys.exit(main(ARGS))
