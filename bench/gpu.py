"""Benchmark: prefill and decode tokens/s per backend (numpy, numba, webgpu), same run,
with the WebGPU device's submissions and read-backs per token.

    python bench/gpu.py [--model demo] [--prompt 32] [--tokens 16] [--rounds 2]

NOTE: on a software adapter (Mesa lavapipe / llvmpipe: what a machine without a GPU runs,
the printed adapter says "CPU") WebGPU speed means NOTHING: shaders run on the same CPU
cores as numba, through a rasterizer's compute path. The numbers that matter there are the
counters (one submission and one read-back per token) and that the tokens are right; run
it on a real GPU for speed. Timings: rounds alternate between the backends in one
process, best of `--rounds`.

Browser hook: `BROWSER_PEERS` lists the browser runs to compare with (WebLLM,
transformers.js and apr's own executor over navigator.gpu in Chromium). Each entry is a
callable `(model_path, prompt_ids, tokens) -> {"prefill_tok_s", "decode_tok_s"}` appended
by the browser benchmark (bench/browser.py drives Chromium with Playwright); they print as
extra rows.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BROWSER_PEERS: List[Callable[[str, List[int], int], Dict[str, float]]] = []


def run_once(model: Any, prompt: List[int], tokens: int) -> Dict[str, float]:
    """Prefill `prompt`, then greedy-decode `tokens` tokens: tok/s of each phase."""
    cache = model.new_cache(len(prompt) + tokens + 1)
    start = time.perf_counter()
    row = model.forward(prompt, cache, last_only=True)[-1]
    prefill = time.perf_counter() - start
    device = model.device
    counts = (device.submissions, device.readbacks) if device is not None else (0, 0)
    start = time.perf_counter()
    for _ in range(tokens):
        row = model.forward([int(row.argmax())], cache)[-1]
    decode = time.perf_counter() - start
    result = {"prefill_tok_s": len(prompt) / prefill, "decode_tok_s": tokens / decode}
    if device is not None:
        result["submissions_per_token"] = (device.submissions - counts[0]) / tokens
        result["readbacks_per_token"] = (device.readbacks - counts[1]) / tokens
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="demo")
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens")
    parser.add_argument("--tokens", type=int, default=16, help="decoded tokens")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--backends", default="numpy,numba,webgpu")
    args = parser.parse_args()
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="apr-xdg-"))
    sys.path[:0] = [ROOT, os.path.join(ROOT, "native")]
    from apr_core.model import Transformer
    from apr_native import backends
    from apr_native.mmap_source import open_mmap
    from apr_native.real_models import locate
    path = str(locate(args.model))
    models = {}
    for name in args.backends.split(","):
        kernels = backends.select(name)
        if kernels.backend != name:
            print("{}: not available ({})".format(name, getattr(kernels, "fallback_reason",
                                                                "")))
            continue
        models[name] = Transformer.from_path(path, opener=open_mmap, kernels=kernels)
        if models[name].device is not None:
            print("webgpu adapter: {}".format(kernels.device.name))
    prompt = [1 + (i * 7919) % 4000 for i in range(args.prompt)]
    best: Dict[str, Dict[str, float]] = {}
    for _ in range(args.rounds):
        for name, model in models.items():
            model.forward(prompt[:2])                           # warm up (JIT, pipelines)
            result = run_once(model, prompt, args.tokens)
            kept = best.setdefault(name, result)
            for key in ("prefill_tok_s", "decode_tok_s"):
                kept[key] = max(kept[key], result[key])
    for peer in BROWSER_PEERS:
        best[getattr(peer, "__name__", "browser")] = peer(path, prompt, args.tokens)
    print("{:<12} {:>14} {:>14} {:>12} {:>12}".format(
        "backend", "prefill tok/s", "decode tok/s", "submit/tok", "readback/tok"))
    for name, r in best.items():
        print("{:<12} {:>14.2f} {:>14.2f} {:>12} {:>12}".format(
            name, r["prefill_tok_s"], r["decode_tok_s"],
            r.get("submissions_per_token", "-"), r.get("readbacks_per_token", "-")))
    print("(a software WebGPU adapter such as lavapipe says nothing about GPU speed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
