"""Load test of `apr serve`: 1, 4, 16 and 64 concurrent streaming chat clients on loopback,
against llama.cpp's own `llama-server` (continuous batching, `--parallel N`) and
llama-cpp-python's server, on the same GGUF in the same run, with the same 2 threads,
prompts and max_tokens; and `apr run`'s single-stream decode for reference.

    .venv/bin/python bench/server_load.py [--clients 1,4,16,64] [--max-tokens 64]
        [--model qwen2.5-coder-0.5b] [--peers apr,llama-server,llama-cpp-python]
        [--kv-memory 1G] [--json results.json]

apr and llama-cpp-python are started once and run every level; llama-server is started
per level as a user would for that many clients (`--parallel C -c C*512`; build it with
scripts/build_llama_server.sh). Each server is warmed with one request, then hit by C
simultaneous streaming requests (temperature 0, `stream_options.include_usage`), each
asking to count from a different number (long, distinct answers), bounded by
`--max-tokens` and by `--timeout`: whatever has not finished by then counts as an error.
Prints per level and server: errors and incomplete streams, p50/p99 time to first token,
aggregate completion tokens/s, wall time, peak RSS; then the ratios. Not a test.
"""
import argparse
import asyncio
import importlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "native"))

import httpx    # noqa: E402  (after the path setup, like the other benches)
import psutil   # noqa: E402

PROMPT = "Count from {} to {}, separated by commas."
APR = [sys.executable, "-c", "import sys; from apr_native.cli.main import main; "
       "sys.exit(main())"]


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RssSampler(threading.Thread):
    """Peak resident memory of a process (and its children), sampled every 100 ms."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.peak = 0
        self.running = True

    def rss(self):
        try:
            procs = [self.process] + self.process.children(recursive=True)
            return sum(p.memory_info().rss for p in procs)
        except psutil.Error:
            return 0

    def run(self):
        while self.running:
            self.peak = max(self.peak, self.rss())
            time.sleep(0.1)


def start(command, port, ready_path, timeout):
    # A file, not a pipe: a chatty server (llama.cpp logs every load) must never block on
    # a full pipe nobody reads.
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log,
                               env=dict(os.environ, APR_QUIET="1"))
    base = "http://127.0.0.1:{}".format(port)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            raise SystemExit("server exited: " + log.read().decode(errors="replace")[-2000:])
        try:
            if httpx.get(base + ready_path, timeout=5).status_code == 200:
                return process, base
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    process.kill()
    raise SystemExit("server not ready after {}s".format(timeout))


async def one_stream(client, model, question, max_tokens, t0):
    """(ttft seconds, completion tokens, complete?) of one streamed chat request."""
    body = {"model": model, "messages": [{"role": "user", "content": question}],
            "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    ttft, usage, pieces, done = None, None, 0, False
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError("HTTP {}".format(response.status_code))
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(chunk["error"].get("message"))
            if chunk.get("usage"):
                usage = chunk["usage"]["completion_tokens"]
            if any(c.get("delta", {}).get("content") for c in chunk.get("choices", [])):
                pieces += 1
                if ttft is None:
                    ttft = time.perf_counter() - t0
    # servers that ignore stream_options send no usage: count the content chunks
    return ttft, pieces if usage is None else usage, done


async def load(base, model, clients, max_tokens, timeout):
    limits = httpx.Limits(max_connections=clients + 4)
    async with httpx.AsyncClient(base_url=base, timeout=timeout, limits=limits) as client:
        await one_stream(client, model, PROMPT.format(1, 300), max_tokens, time.perf_counter())
        t0 = time.perf_counter()
        tasks = [asyncio.ensure_future(one_stream(
            client, model, PROMPT.format(7 * i + 2, 7 * i + 302), max_tokens, t0))
            for i in range(clients)]
        done, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        wall = time.perf_counter() - t0
    results, errors = [], len(pending)
    for task in done:
        if task.exception() is not None:
            errors += 1
        else:
            results.append(task.result())
    return results, errors, wall


def percentile(values, q):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def measure(name, base, model, clients, args, sampler):
    sampler.peak = sampler.rss()
    results, errors, wall = asyncio.run(load(base, model, clients, args.max_tokens,
                                             args.timeout))
    ttfts = [r[0] for r in results if r[0] is not None]
    tokens = sum(r[1] for r in results)
    row = {"server": name, "clients": clients, "errors": errors,
           "incomplete": sum(1 for r in results if not r[2]),
           "ttft_p50_s": percentile(ttfts, 50), "ttft_p99_s": percentile(ttfts, 99),
           "tokens": tokens, "wall_s": wall, "tok_s": tokens / wall if wall else 0.0,
           "rss_peak_mb": sampler.peak / 2 ** 20}
    if clients == 1 and results and results[0][0] is not None:
        # after the first token, as `apr run` times its decode
        row["decode_tok_s"] = (tokens - 1) / max(wall - results[0][0], 1e-9)
    print("{server:>16} x{clients:<3}: errors {errors}, incomplete {incomplete}, TTFT p50 "
          "{ttft_p50_s:.2f}s p99 {ttft_p99_s:.2f}s, {tokens} tokens in {wall_s:.1f}s = "
          "{tok_s:.2f} tok/s, peak RSS {rss_peak_mb:.0f} MB".format(**row), flush=True)
    return row


def run_server(name, command, port, ready_path, model, levels, args):
    """Start `command`, run every concurrency level in `levels` against it, stop it."""
    process, base = start(command, port, ready_path, args.timeout)
    sampler = RssSampler(process.pid)
    sampler.start()
    try:
        return [measure(name, base, model, clients, args, sampler) for clients in levels]
    finally:
        sampler.running = False
        sampler.join()
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def apr_run_decode(model, args):
    """`apr run`'s decode tok/s on the first prompt (best of 3)."""
    best = 0.0
    for _ in range(3):
        done = subprocess.run(APR + ["run", model, PROMPT.format(1, 300), "--chat", "-n",
                                     str(args.max_tokens), "--json"], capture_output=True,
                              text=True, env=dict(os.environ, APR_QUIET="1"))
        if done.returncode == 0:
            best = max(best, json.loads(done.stdout)["timings"]["decode_tok_s"])
    print("{:>16}     : decode {:.2f} tok/s (best of 3)".format("apr run", best), flush=True)
    return best


def llama_server_binary(args):
    if args.llama_server:
        return args.llama_server
    found = subprocess.run(["bash", os.path.join(HERE, "..", "scripts",
                                                 "build_llama_server.sh")],
                           capture_output=True, text=True)
    return found.stdout.strip().splitlines()[-1] if found.returncode == 0 else None


def ratio(a, b):
    return a / b if b else float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="1,4,16,64", help="concurrency levels")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=900, help="seconds, per level")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--peers", default="apr,llama-server,llama-cpp-python")
    parser.add_argument("--kv-memory", default="1G", help="apr serve --kv-memory")
    parser.add_argument("--llama-server", help="llama-server binary (default: built and "
                        "cached by scripts/build_llama_server.sh)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    from apr_native.cli.common import resolve_model
    path = resolve_model(args.model)
    levels = [int(c) for c in args.clients.split(",")]
    peers = args.peers.split(",")
    rows, run_tok_s = [], None

    if "apr" in peers:
        run_tok_s = apr_run_decode(args.model, args)
        port = free_port()
        command = APR + ["serve", args.model, "--port", str(port), "--model-id", "bench",
                         "--max-batch", str(min(max(levels), 64)),
                         "--kv-memory", args.kv_memory,
                         "--max-queue", str(max(levels) + 1),
                         "--max-tokens", str(args.max_tokens)]
        rows += run_server("apr", command, port, "/ready", "bench", levels, args)
    if "llama-server" in peers:
        binary = llama_server_binary(args)
        if binary is None:
            print("llama-server skipped: run scripts/build_llama_server.sh")
        else:
            for clients in levels:
                port = free_port()
                command = [binary, "-m", path, "--host", "127.0.0.1", "--port", str(port),
                           "-t", "2", "-tb", "2", "--parallel", str(clients),
                           "-c", str(clients * 512), "--alias", "bench", "--no-webui"]
                rows += run_server("llama-server", command, port, "/health", "bench",
                                   [clients], args)
    if "llama-cpp-python" in peers:
        try:    # is the peer installed, with its server extra?
            importlib.import_module("llama_cpp.server.app")
        except ImportError as exc:
            print("llama-cpp-python skipped: its server is not importable ({})".format(exc))
        else:
            port = free_port()
            command = [sys.executable, "-m", "llama_cpp.server", "--model", path, "--host",
                       "127.0.0.1", "--port", str(port), "--n_threads", "2",
                       "--model_alias", "bench", "--n_ctx", "2048",
                       # by default it aborts the running stream whenever a new one arrives
                       "--interrupt_requests", "False"]
            rows += run_server("llama-cpp-python", command, port, "/v1/models", "bench",
                               levels, args)

    by = {(r["server"], r["clients"]): r for r in rows}
    print("\nclients | apr tok/s | llama-server | llama-cpp-python | apr/llama-server | "
          "apr/llama-cpp-python")
    for clients in levels:
        a, ls, lp = (by.get((n, clients), {}).get("tok_s", float("nan"))
                     for n in ("apr", "llama-server", "llama-cpp-python"))
        print("{:>7} | {:>9.1f} | {:>12.1f} | {:>16.1f} | {:>16.2f} | {:>20.2f}".format(
            clients, a, ls, lp, ratio(a, ls), ratio(a, lp)))
    single = by.get(("apr", 1), {}).get("tok_s")
    if single:
        if run_tok_s:
            print("apr serve 1 stream decode / apr run decode: x{:.2f}".format(
                ratio(by[("apr", 1)].get("decode_tok_s", 0.0), run_tok_s)))
        if ("apr", 16) in by:
            print("apr 16 streams / apr 1 stream: x{:.2f}".format(
                ratio(by[("apr", 16)]["tok_s"], single)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "apr_run_decode_tok_s": run_tok_s}, f, indent=1)


if __name__ == "__main__":
    main()
