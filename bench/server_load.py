"""Load test of `apr serve`: N concurrent streaming chat clients on loopback, against
llama.cpp's own OpenAI server (llama-cpp-python[server]) on the same GGUF in the same run.

    .venv/bin/python bench/server_load.py [--clients 64] [--max-tokens 8] [--timeout 900]
                                          [--model demo] [--no-peer] [--dequantize]

Each server is started as a subprocess on a free 127.0.0.1 port, warmed with one request,
then hit by `--clients` simultaneous streaming requests (`stream_options.include_usage`),
bounded by `--max-tokens` each and by `--timeout` overall: whatever has not finished by
then counts as an error. Prints, per server: errors and incomplete streams, p50/p99 time to
first token, aggregate completion tokens/s, wall time, and the server's RSS before and at
its peak; then the apr/peer ratios. Not a test: no assertions.
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

QUESTIONS = ["What is the capital of France?", "Name a primary colour.",
             "What is 2 plus 2?", "Say hello in Spanish."]
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
        await one_stream(client, model, QUESTIONS[0], max_tokens, time.perf_counter())
        t0 = time.perf_counter()
        tasks = [asyncio.ensure_future(one_stream(client, model, QUESTIONS[i % len(QUESTIONS)],
                                                  max_tokens, t0)) for i in range(clients)]
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


def run_server(name, command, port, ready_path, model, args):
    process, base = start(command, port, ready_path, args.timeout)
    sampler = RssSampler(process.pid)
    rss_before = sampler.rss()
    sampler.start()
    try:
        results, errors, wall = asyncio.run(load(base, model, args.clients, args.max_tokens,
                                                 args.timeout))
    finally:
        sampler.running = False
        sampler.join()
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
    ttfts = [r[0] for r in results if r[0] is not None]
    tokens = sum(r[1] for r in results)
    row = {"server": name, "clients": args.clients, "errors": errors,
           "incomplete": sum(1 for r in results if not r[2]),
           "ttft_p50_s": percentile(ttfts, 50), "ttft_p99_s": percentile(ttfts, 99),
           "tokens": tokens, "wall_s": wall, "tok_s": tokens / wall if wall else 0.0,
           "rss_before_mb": rss_before / 2 ** 20, "rss_peak_mb": sampler.peak / 2 ** 20}
    print("{server:>10}: {clients} clients, errors {errors}, incomplete {incomplete}, "
          "TTFT p50 {ttft_p50_s:.2f}s p99 {ttft_p99_s:.2f}s, {tokens} tokens in "
          "{wall_s:.1f}s = {tok_s:.2f} tok/s, RSS {rss_before_mb:.0f} -> peak "
          "{rss_peak_mb:.0f} MB".format(**row), flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=900, help="seconds, per server")
    parser.add_argument("--model", default="demo")
    parser.add_argument("--dequantize", action="store_true", help="apr: f32 weights")
    parser.add_argument("--no-peer", action="store_true", help="skip llama.cpp's server")
    parser.add_argument("--no-apr", action="store_true", help="run the peer only")
    args = parser.parse_args()
    from apr_native.cli.common import resolve_model
    path = resolve_model(args.model)

    port = free_port()
    command = APR + ["serve", args.model, "--port", str(port), "--model-id", "bench",
                     "--max-queue", str(args.clients + 1), "--max-tokens",
                     str(args.max_tokens)] + (["--dequantize"] if args.dequantize else [])
    apr = None if args.no_apr else run_server("apr", command, port, "/ready", "bench", args)
    if args.no_peer:
        return
    try:    # is the peer installed, with its server extra?
        importlib.import_module("llama_cpp.server.app")
    except ImportError as exc:
        print("peer skipped: llama-cpp-python[server] not importable ({})".format(exc))
        return
    port = free_port()
    command = [sys.executable, "-m", "llama_cpp.server", "--model", path, "--host",
               "127.0.0.1", "--port", str(port), "--n_threads", "2", "--model_alias",
               "bench", "--n_ctx", "2048",
               # by default it aborts the running stream whenever a new request arrives
               "--interrupt_requests", "False"]
    peer = run_server("llama.cpp", command, port, "/v1/models", "bench", args)
    if apr is None:
        return
    print("apr / llama.cpp: tok/s x{:.3f}, TTFT p50 x{:.2f}, TTFT p99 x{:.2f}, peak RSS "
          "x{:.2f}".format(apr["tok_s"] / peer["tok_s"] if peer["tok_s"] else float("nan"),
                           apr["ttft_p50_s"] / peer["ttft_p50_s"],
                           apr["ttft_p99_s"] / peer["ttft_p99_s"],
                           apr["rss_peak_mb"] / peer["rss_peak_mb"]))


if __name__ == "__main__":
    main()
