"""The browser rows of bench/gpu.py: apr's WebGPU backend in Chromium (navigator.gpu in the
shell's GPU worker), and the CPU kernels of the same page, on the same GGUF.

    .venv/bin/python bench/browser_gpu.py [--model demo] [--prompt 32] [--tokens 16]
        [--backends numpy,webgpu]            # bench/gpu.py's own native rows beside them

Each browser row: prefill and decode tok/s, submissions and read-backs per token (the GPU
worker's counters), and whether its greedy tokens equal native numpy's on the same prompt.
It registers callables in bench/gpu.py's BROWSER_PEERS hook and runs that benchmark.

NOTE: Chromium here runs WebGPU on SwiftShader (Vulkan on the CPU, inside the browser):
its speed means NOTHING about a GPU. What the rows show there is correctness and the
counters (one submission and one read-back per token).

transformers.js (npm @huggingface/transformers) on WebGPU is the natural peer, but it runs
ONNX exports only (it has no GGUF reader) and fetches them from the Hugging Face Hub, which
this machine cannot reach; no ONNX copy of these models exists locally. `transformers_js`
is the hook: it reports why it cannot run until a local ONNX export is given with
`--onnx-dir` (then extend `_transformers_js_page`).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from typing import Any, Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "native"), os.path.join(ROOT, "bench")]

FLAGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--enable-unsafe-webgpu",
         "--enable-features=Vulkan", "--use-webgpu-adapter=swiftshader"]
QUERY = "/index.html?pyodide=017&numpy=1"


class BrowserSession:
    """One Chromium with the shell served on 127.0.0.1 (cross-origin isolated) and a page
    booted; `run(backend, path, ids, tokens)` loads the GGUF on that backend and decodes."""

    def __init__(self) -> None:
        from playwright.sync_api import sync_playwright
        from apr_native.web_bundle import prepare_site, site_mounts
        from apr_native.web_server import StaticServer
        self.work = tempfile.mkdtemp(prefix="apr-bench-gpu-")
        self.models = os.path.join(self.work, "models")
        os.makedirs(self.models)
        site = prepare_site(os.path.join(self.work, "site"), flavor="017")
        self.server = StaticServer(site_mounts(site, self.models)).start()
        self.play = sync_playwright().start()
        self.browser = self.play.chromium.launch(executable_path=shutil.which("chromium"),
                                                 args=FLAGS)
        self.page = self.browser.new_page()
        self.page.set_default_timeout(3_600_000)
        self.page.goto(self.server.url(QUERY))
        self.page.wait_for_function("document.body.dataset.runtime")
        self.runtime = self.page.evaluate("apr.boot({})")

    def run(self, backend: str, path: str, ids: List[int], tokens: int) -> Dict[str, Any]:
        name = os.path.basename(path)
        link = os.path.join(self.models, name)
        if not os.path.exists(link):
            os.symlink(os.path.abspath(path), link)
        info = self.page.evaluate("([u, b]) => apr.load(u, {backend: b})",
                                  ["models/" + name, backend])
        before = self.page.evaluate("apr.memory()")
        got = self.page.evaluate("([ids, n]) => apr.greedy(ids, n)", [ids, tokens])
        after = self.page.evaluate("apr.memory()")
        self.page.evaluate("(u) => apr.forget(u)", "models/" + name)
        passes = len(got["tokens"])        # one prefill + decode passes: a pass per token
        return {"prefill_tok_s": len(ids) / got["prefill_s"],
                "decode_tok_s": got["decode_tok_s"] or 0.0, "tokens": got["tokens"],
                "kernels": info["kernels"], "adapter": info["adapter"],
                "gpu_reason": info["gpu_reason"], "gpu_bytes": before["gpu"],
                "submissions_per_token": (after["submissions"] - before["submissions"]) / passes,
                "readbacks_per_token": (after["readbacks"] - before["readbacks"]) / passes}

    def close(self) -> None:
        self.browser.close()
        self.play.stop()
        self.server.stop()
        shutil.rmtree(self.work, ignore_errors=True)


def native_greedy(path: str, ids: List[int], tokens: int) -> List[int]:
    """Native apr's greedy ids (numpy backend) after `ids`: what every row must equal."""
    from apr_core.model import Transformer
    from apr_core.runtime.generate import generate_step
    return list(generate_step(Transformer.from_path(path), ids, max_tokens=tokens))


def browser_peer(session: BrowserSession, backend: str, label: str) -> Any:
    def peer(path: str, ids: List[int], tokens: int) -> Dict[str, Any]:
        result = session.run(backend, path, ids, tokens)
        reference = native_greedy(path, ids, tokens)
        same = result["tokens"] == reference
        print("{}: kernels {}, adapter {}, greedy tokens {} native's{}".format(
            label, result["kernels"], result["adapter"] or "-",
            "EQUAL" if same else "DIFFER from", "" if same else
            " ({} vs {})".format(result["tokens"], reference)))
        if backend == "webgpu" and result["gpu_reason"]:
            print("  (no WebGPU: {})".format(result["gpu_reason"]))
        if backend != "webgpu":
            result.pop("submissions_per_token")
            result.pop("readbacks_per_token")
        return result
    peer.__name__ = label
    return peer


def transformers_js(onnx_dir: Optional[str]) -> Optional[str]:
    """Why transformers.js cannot be compared here (None once it can)."""
    package = os.path.join(ROOT, "web", "node_modules", "@huggingface", "transformers")
    if not onnx_dir:
        return ("transformers.js runs ONNX exports fetched from the Hugging Face Hub; there "
                "is no local ONNX copy of this model (give --onnx-dir)")
    if not os.path.isdir(package):
        return "npm @huggingface/transformers is not installed in web/node_modules"
    return "the transformers.js page is not written yet (bench/browser_gpu.py)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--onnx-dir", default=None, help="a local ONNX export for transformers.js")
    parser.add_argument("--browser-backends", default="webgpu,cpu")
    args, rest = parser.parse_known_args()
    import gpu
    session = BrowserSession()
    print("browser: WebGPU adapter {}".format(session.runtime.get("gpu") or
                                              "none ({})".format(session.runtime.get("gpuReason"))))
    try:
        for backend in args.browser_backends.split(","):
            gpu.BROWSER_PEERS.append(browser_peer(session, backend, "browser-" + backend))
        why = transformers_js(args.onnx_dir)
        if why:
            print("transformers.js: not run: {}".format(why))
        sys.argv = [sys.argv[0]] + rest
        return gpu.main()
    finally:
        session.close()


if __name__ == "__main__":
    sys.exit(main())
