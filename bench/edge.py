"""The compiled worker (`apr compile MODEL --target worker`) in workerd, next to native `apr run`.

    python bench/edge.py                      # the demo model, 32 decode tokens
    python bench/edge.py --model PATH --tokens 64 --json

Measured in one run, one thread each:
- cold start: a fresh workerd, wall time of its first request (GET /health: Pyodide 0.17 and
  numpy booted from the embedded modules, apr_core imported), then of the first completion
  (the model read from the R2-style binding, sha256-checked, placed in the kernels' memory);
  the bundle has no memory snapshot yet, so there is no "with snapshot" row;
- warm latency: a one-token completion on the loaded model (best of 3);
- decode tok/s: (N - 1) tokens over the time an N-token completion takes beyond a one-token
  one (same prompt, greedy), next to `apr run MODEL PROMPT -n N --json`'s decode_tok_s;
- memory: the isolate's WebAssembly memories (the worker's x-apr-wasm-memory header:
  Python's heap, the kernels' weights and scratch) and workerd's resident set, against
  Cloudflare's 128 MB per isolate.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "native"))
sys.path.insert(0, os.path.join(ROOT, "wasm_tests"))
APR = os.path.join(os.path.dirname(sys.executable), "apr")
PROMPT = "The capital of France is"
LIMIT_MB = 128


def post(port, body, timeout=900):
    """(seconds, parsed body, headers) of one POST /v1/completions."""
    request = urllib.request.Request(
        "http://127.0.0.1:{}/v1/completions".format(port), data=json.dumps(body).encode(),
        method="POST", headers={"content-type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer = json.loads(response.read())
        headers = dict(response.headers)
    return time.perf_counter() - start, answer, headers


def get(port, path, timeout=900):
    start = time.perf_counter()
    with urllib.request.urlopen("http://127.0.0.1:{}{}".format(port, path),
                                timeout=timeout) as response:
        response.read()
    return time.perf_counter() - start


def rss_mb(pid):
    with open("/proc/{}/status".format(pid)) as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def wasm_mb(headers):
    """{"python": MB, "kernels": MB} from the worker's x-apr-wasm-memory header."""
    text = headers.get("x-apr-wasm-memory") or headers.get("X-Apr-Wasm-Memory") or ""
    parts = dict(item.strip().split("=") for item in text.split(";") if "=" in item)
    return {k: int(v) / 2 ** 20 for k, v in parts.items()}


def native_decode(model, tokens):
    done = subprocess.run([APR, "run", model, PROMPT, "-n", str(tokens), "--raw", "--json"],
                          capture_output=True, text=True,
                          env=dict(os.environ, APR_QUIET="1", APR_THREADS="1"))
    if done.returncode != 0:
        return "failed: " + (done.stderr.strip().splitlines() or ["?"])[-1]
    return json.loads(done.stdout)["timings"]["decode_tok_s"]


def workerd_figures(bundle, tokens):
    from workerd_runtime import WorkerdServer, workerd_binary
    with WorkerdServer(workerd_binary(), bundle, ["workerd/config.capnp"]) as server:
        assert server.start(), server.stderr
        figures = {"cold_boot_s": get(server.port, "/health")}
        one = {"prompt": PROMPT, "max_tokens": 1, "temperature": 0}
        figures["first_completion_s"], _, _ = post(server.port, one)
        figures["warm_one_token_s"] = min(post(server.port, one)[0] for _ in range(3))
        seconds, answer, headers = post(server.port, dict(one, max_tokens=tokens))
        made = answer["usage"]["completion_tokens"]
        figures["decode_tok_s"] = (made - 1) / max(seconds - figures["warm_one_token_s"], 1e-9)
        figures["wasm_mb"] = wasm_mb(headers)
        figures["workerd_rss_mb"] = rss_mb(server.process.pid)
        figures["backend"] = answer.get("system_fingerprint")
    return figures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model file (default: the demo model)")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from apr_native.compile.worker import build
    model = args.model
    if model is None:
        from apr_native.real_models import locate
        model = str(locate("demo"))
    with tempfile.TemporaryDirectory(prefix="apr-edge-") as tmp:
        bundle = os.path.join(tmp, "bench.worker")
        build(model, bundle)
        edge = workerd_figures(bundle, args.tokens)
    native = native_decode(model, args.tokens)
    edge["native_decode_tok_s"] = native
    if isinstance(native, float) and native:
        edge["decode_ratio_to_native"] = edge["decode_tok_s"] / native
    wasm_total = sum(edge["wasm_mb"].values())
    edge["wasm_total_mb"] = wasm_total
    edge["fits_128mb"] = wasm_total < LIMIT_MB
    if args.json:
        print(json.dumps(edge, indent=1))
        return 0
    print("model: {}  ({} decode tokens, greedy, one thread)".format(model, args.tokens))
    rows = [("cold start: first request (Pyodide + numpy + apr_core)", "{:.2f} s".format(edge["cold_boot_s"])),
            ("cold start with a memory snapshot", "not built yet"),
            ("first completion (model load + 1 token)", "{:.2f} s".format(edge["first_completion_s"])),
            ("warm one-token completion", "{:.3f} s".format(edge["warm_one_token_s"])),
            ("decode in workerd ({})".format(edge["backend"]), "{:.2f} tok/s".format(edge["decode_tok_s"])),
            ("decode, native apr run", native if isinstance(native, str) else "{:.2f} tok/s".format(native)),
            ("workerd / native", "{:.2f}x".format(edge["decode_ratio_to_native"]) if "decode_ratio_to_native" in edge else "-"),
            ("wasm memories: " + ", ".join("{} {:.0f} MB".format(k, v) for k, v in edge["wasm_mb"].items()),
             "{:.0f} MB ({} {} MB)".format(wasm_total, "<" if edge["fits_128mb"] else ">=", LIMIT_MB)),
            ("workerd resident set", "{:.0f} MB".format(edge["workerd_rss_mb"]))]
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print("{}  {}".format(label.ljust(width), value))
    return 0


if __name__ == "__main__":
    sys.exit(main())
