"""apr against wllama in Chromium on real GGUF files: decode, prefill and memory.

For each model (default: SmolLM2-135M Q4_1, Qwen2.5-Coder-0.5B Q4_K_M, Gemma-3-270M Q4_K_M):
* apr: the shell (Pyodide 0.17 + numpy) with its WebAssembly SIMD kernels over the GGUF
  blocks as stored, on every core (`threads`: the page is cross-origin isolated): the page's
  default kernels (`simd`: relaxed SIMD in Chromium), and each further setting of
  `--kernels` (e.g. `simd,simd-exact`) on a page of its own; the ratios are the first's;
* wllama (llama.cpp compiled to WebAssembly, npm @wllama/wllama) at each thread count in
  `--wllama-threads` (default 1 and every core); its best counts.
All pages are loaded in one Chromium (cross-origin isolated, as `apr web` serves it) and run
alternately `--rounds` times, so load from elsewhere on the machine falls on all alike; the
best run of each counts, and every run is printed.
* decode: tokens/s over `--tokens` greedy tokens after a short prompt;
* prefill: tokens/s of the first forward pass over a >= 128-token prompt (bench/prompts);
* memory: growth of the whole Chromium's RSS when the model is loaded (apr first, then each
  wllama page), against the file's size.

    .venv/bin/python bench/browser.py [--models demo,qwen2.5-coder-0.5b] [--rounds 3]
        [--kernels simd,simd-exact] [--isa avx2] [--json]

`--isa LEVEL` runs the one Chromium (so apr and wllama alike) with V8 kept to that
instruction level (`apr_native.isa.v8_flags`: e.g. avx2 turns off AVX-VNNI, which relaxed
SIMD's int8 dots lower to where the CPU has it), so one machine measures what a browser on
another kind of CPU runs.

Needs Debian's Chromium, Playwright (PyPI) and `bash scripts/setup_web.sh` (npm packages).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "native"))
sys.path.insert(0, ROOT)

from apr_native.browser_memory import chromium_rss  # noqa: E402
from apr_native.web_bundle import prepare_site, site_mounts  # noqa: E402
from apr_native.web_server import StaticServer  # noqa: E402

PROMPT = "The capital of France is"
LONG_PROMPT = os.path.join(ROOT, "bench", "prompts", "code_edit.txt")
MODELS = ("demo", "qwen2.5-coder-0.5b", "gemma3-270m")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
JS_FLAGS = ("--expose-gc",)


def chromium_args(level: str) -> list:
    """Chromium's switches, V8 kept to instruction level `level`."""
    from apr_native import isa
    return FLAGS + ["--js-flags=" + " ".join(JS_FLAGS + isa.v8_flags(level))]
# A page that runs wllama from the same origin (its wasm served from node_modules).
WLLAMA_PAGE = """<!doctype html><meta charset="utf-8"><script type="module">
import { Wllama } from "/vendor/wllama/index.js";
let wllama = null;
window.loadWllama = async (url, threads) => {
  wllama = new Wllama({ default: "/vendor/wllama/wasm/wllama.wasm" });
  const t0 = performance.now();
  await wllama.loadModelFromUrl(url, { n_threads: threads, n_ctx: 1024, n_gpu_layers: 0 });
  return { load_s: (performance.now() - t0) / 1000 };
};
window.runWllama = async (prompt, tokens) => {
  const stamps = [], t0 = performance.now();
  // cache_prompt false: every run evaluates its whole prompt (no KV reuse across runs)
  await wllama.createCompletion({ prompt, max_tokens: tokens, temperature: 0, ignore_eos: true,
    cache_prompt: false, stream: true, onData: () => stamps.push(performance.now()) });
  const decode = (stamps[stamps.length - 1] - stamps[0]) / 1000;
  return { chunks: stamps.length, prefill_s: (stamps[0] - t0) / 1000,
           decode_tok_s: stamps.length > 1 ? (stamps.length - 1) / decode : null };
};
window.wllamaReady = true;
</script>"""


def settle(pages) -> int:
    """Collect garbage in every apr page's worker, then the browsers' RSS."""
    for page in pages:
        page.evaluate("apr.collectGarbage()")
    time.sleep(3)
    return chromium_rss()


class Side:
    """One contender's page: its runs, best of each kind, memory growth at load."""

    def __init__(self, name: str, page, load_s: float, memory: int) -> None:
        self.name, self.page, self.load_s, self.memory = name, page, load_s, memory
        self.decode, self.prefill = [], []

    def summary(self, prompt_tokens: int) -> dict:
        return {"name": self.name, "load_s": self.load_s, "memory_bytes": self.memory,
                "decode_tok_s": max(self.decode), "decode_runs": self.decode,
                "prefill_tok_s": prompt_tokens / min(self.prefill),
                "prefill_runs_s": self.prefill}


def open_apr(browser, server, threads: int, pages: list, kernels: str = "simd") -> Side:
    page = browser.new_page()
    page.set_default_timeout(1_800_000)
    page.goto(server.url("/index.html?pyodide=017&numpy=1&kernels={}&threads={}".format(
        kernels, threads)))
    page.wait_for_function("document.body.dataset.runtime")
    before = settle(pages + [page])
    start = time.perf_counter()
    info = page.evaluate("apr.load('models/model.gguf')")
    load_s = time.perf_counter() - start
    pages.append(page)
    runtime = page.evaluate("apr.boot({})")
    return Side("apr ({} threads, {} {})".format(runtime["threads"], info["kernels"],
                                                runtime["precision"]), page, load_s,
                settle(pages) - before)


def open_wllama(browser, server, threads: int, pages: list) -> Side:
    page = browser.new_page()
    page.set_default_timeout(1_800_000)
    page.goto(server.url("/site/wllama.html"))
    page.wait_for_function("window.wllamaReady")
    before = settle(pages)
    load = page.evaluate("([u, n]) => loadWllama(u, n)", [server.url("/models/model.gguf"), threads])
    return Side("wllama ({} threads)".format(threads), page, load["load_s"],
                settle(pages) - before)


def bench_model(play, path: str, args) -> dict:
    from apr_core.runtime.text_model import TextModel
    model = TextModel.load(path)
    with open(LONG_PROMPT) as handle:
        long_text = handle.read()
    short_ids, long_ids = model.prompt_ids(PROMPT), model.prompt_ids(long_text)
    work = tempfile.mkdtemp(prefix="apr-bench-")
    try:
        models = os.path.join(work, "models")
        os.makedirs(models)
        os.symlink(os.path.abspath(path), os.path.join(models, "model.gguf"))
        site = os.path.join(work, "site")
        prepare_site(site, flavor="017")
        with open(os.path.join(site, "wllama.html"), "w") as handle:
            handle.write(WLLAMA_PAGE)
        server = StaticServer(site_mounts(site, models)).start()
        # a profile on disk, as a user's (an off-the-record context keeps IndexedDB, apr's
        # model cache, in memory, which would count against apr's memory)
        browser = play.chromium.launch_persistent_context(
            os.path.join(work, "profile"), executable_path=shutil.which("chromium"),
            args=chromium_args(args.isa))
        try:
            pages: list = []
            aprs = [open_apr(browser, server, args.threads, pages, kernels)
                    for kernels in args.kernels]
            wllamas = [open_wllama(browser, server, n, pages) for n in args.wllama_threads]
            greedy = "([ids, n]) => apr.greedy(ids, n)"
            for _ in range(args.rounds):
                for apr in aprs:
                    # the running page in front, as a user's: Chromium lowers the CPU
                    # priority of background tabs' renderers, which a loaded machine shows
                    apr.page.bring_to_front()
                    run = apr.page.evaluate(greedy, [short_ids, args.tokens])
                    apr.decode.append(run["decode_tok_s"])
                    apr.prefill.append(apr.page.evaluate(greedy, [long_ids, 1])["prefill_s"])
                for side in wllamas:
                    side.page.bring_to_front()
                    run = side.page.evaluate("([p, n]) => runWllama(p, n)", [PROMPT, args.tokens])
                    side.decode.append(run["decode_tok_s"])
                    side.prefill.append(side.page.evaluate(
                        "([p, n]) => runWllama(p, n)", [long_text, 1])["prefill_s"])
        finally:
            browser.close()
            server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    size = os.path.getsize(path)
    ours, *others = [apr.summary(len(long_ids)) for apr in aprs]
    theirs = [side.summary(len(long_ids)) for side in wllamas]
    best_decode = max(theirs, key=lambda s: s["decode_tok_s"])
    best_prefill = max(theirs, key=lambda s: s["prefill_tok_s"])
    return {"model": os.path.basename(path), "isa": args.isa, "file_bytes": size,
            "tokens": args.tokens,
            "prompt_tokens": len(long_ids), "apr": ours, "apr_other_kernels": others,
            "wllama": theirs,
            "decode_vs_wllama_best": ours["decode_tok_s"] / best_decode["decode_tok_s"],
            "prefill_vs_wllama_best": ours["prefill_tok_s"] / best_prefill["prefill_tok_s"],
            "apr_memory_vs_file": ours["memory_bytes"] / size,
            "wllama_best_decode": best_decode["name"], "wllama_best_prefill": best_prefill["name"]}


def report(result: dict) -> None:
    mb = lambda n: n / 2 ** 20  # noqa: E731
    print("{} ({:.0f} MB), decode {} tokens, prefill {} tokens, V8 at level {}".format(
        result["model"], mb(result["file_bytes"]), result["tokens"], result["prompt_tokens"],
        result["isa"]))
    for side in [result["apr"]] + result["apr_other_kernels"] + result["wllama"]:
        print("  {:28} decode {:7.2f} tok/s  prefill {:7.1f} tok/s  memory +{:5.0f} MB  "
              "load {:5.1f} s  decode runs {}".format(
                  side["name"], side["decode_tok_s"], side["prefill_tok_s"],
                  mb(side["memory_bytes"]), side["load_s"],
                  " ".join("{:.1f}".format(r) for r in side["decode_runs"])))
    print("  apr / wllama's best: decode {:.2f}x ({}), prefill {:.2f}x ({}); apr memory "
          "{:.2f}x the file".format(result["decode_vs_wllama_best"], result["wllama_best_decode"],
                                    result["prefill_vs_wllama_best"],
                                    result["wllama_best_prefill"], result["apr_memory_vs_file"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cores = os.cpu_count() or 1
    parser.add_argument("--models", default=",".join(MODELS),
                        help="built-in model names or GGUF paths, comma-separated")
    parser.add_argument("--tokens", type=int, default=32, help="tokens to decode")
    parser.add_argument("--rounds", type=int, default=3, help="alternating runs (best counts)")
    parser.add_argument("--threads", type=int, default=cores, help="apr's threads")
    parser.add_argument("--wllama-threads", default="1,{}".format(cores),
                        help="wllama thread counts to try (its best counts)")
    parser.add_argument("--kernels", default="simd",
                        help="apr's kernel settings, comma-separated (the page's `kernels=`: "
                             "simd, simd-exact, numpy); the first is the one compared")
    parser.add_argument("--isa", default="native",
                        help="instruction level V8 may use, for both sides (apr_native.isa: "
                             "native, generic, avx2, avx512, avx512vnni)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from apr_native import isa
    if args.isa not in isa.NAMES:
        parser.error("--isa must be one of " + ", ".join(isa.NAMES))
    args.kernels = [k for k in args.kernels.split(",") if k]
    args.wllama_threads = sorted({int(n) for n in args.wllama_threads.split(",")})
    from playwright.sync_api import sync_playwright
    from apr_native.real_models import locate
    results = []
    with sync_playwright() as play:
        for name in args.models.split(","):
            path = name if os.path.isfile(name) else str(locate(name))
            results.append(bench_model(play, path, args))
            if not args.json:
                report(results[-1])
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
