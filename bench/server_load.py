"""Load test of `apr serve`: 1, 4, 16 and 64 concurrent streaming chat clients on loopback,
against llama.cpp's own `llama-server` (continuous batching, `--parallel N`) and
llama-cpp-python's server, on the same GGUF in the same run, with the same 2 threads,
prompts and max_tokens; and `apr run`'s single-stream decode for reference.

    .venv/bin/python bench/server_load.py [--clients 1,4,16,64] [--max-tokens 64]
        [--model qwen2.5-coder-0.5b] [--peers apr,llama-server,llama-cpp-python]
        [--threads 2] [--max-batch N] [--kv-memory 1G] [--backend numba] [--isa avx2]
        [--llama-server PATH] [--sampling greedy|defaults] [--timeout 900]
        [--json results.json]

apr and llama-cpp-python are started once and run every level (apr with `--max-batch` =
the most clients, capped at 64); llama-server is started per level as a user would for
that many clients (`--parallel C -c C*512`; build it once with
scripts/build_llama_server.sh, else that peer is skipped). Each level begins with one
warm-up request, then C simultaneous streaming requests through the official `openai`
client (temperature 0, or with `--sampling defaults` no sampling field, so each server
samples with its defaults, the model's recommended settings or llama-server's, as the
`openai` client's own defaults get; `stream_options.include_usage`), each asking to count
from a different number (long, distinct answers), bounded by `--max-tokens` and by
`--timeout`.
A stream that fails, or ends without a finish_reason, or has not ended by the timeout,
counts as an error. Aggregate tok/s is the completion tokens received (the usage the
server reports, else the content chunks) over the wall time from the requests being
sent to the last stream ending. Prints a table per level, then the ratios. Not a test.

`--isa LEVEL` (apr_native.isa) runs every peer at one instruction level: apr serve with
$APR_ISA, llama-server as `scripts/build_llama_server.sh LEVEL` built it (that level's
cmake switches), llama-cpp-python on the libraries `scripts/build_llama_lib.sh LEVEL`
built; so an AVX-512 machine measures what an AVX2 user gets.
"""
import argparse
import asyncio
import importlib
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "native"))

import httpx    # noqa: E402  (after the path setup, like the other benches)
import openai   # noqa: E402

from apr_native import isa_peers  # noqa: E402
from server_load_report import SERVERS, finite, print_tables, summary  # noqa: E402
from server_process import RssSampler, ServerFailed, free_port, log_tail, start  # noqa: E402

PROMPT = "Count from {} to {}, separated by commas."
APR = [sys.executable, "-c", "import sys; from apr_native.cli.main import main; "
       "sys.exit(main())"]


def apr_env(args):
    # the peers' thread counts are flags; apr's numba kernels take theirs from APR_THREADS
    return dict(os.environ, APR_QUIET="1", APR_THREADS=str(args.threads),
                **isa_peers.child_env("apr", args.isa))


def llama_cpp_python_env(args):
    """llama-cpp-python's server at `--isa`: its libraries built for that level."""
    return dict(os.environ, **isa_peers.child_env("llama.cpp", args.isa))


async def one_stream(client, model, question, max_tokens, t0, greedy=True):
    """One streamed chat request: time to first token and to the end (from t0), completion
    tokens, whether the server reported them, whether the stream finished. `greedy`:
    temperature 0, else no sampling field at all (the server's defaults)."""
    stream = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": question}],
        max_tokens=max_tokens, temperature=0 if greedy else openai.NOT_GIVEN, stream=True,
        stream_options={"include_usage": True})
    ttft, usage, pieces, finished = None, None, 0, False
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage.completion_tokens
        for choice in chunk.choices:
            if choice.delta is not None and choice.delta.content:
                pieces += 1
                if ttft is None:
                    ttft = time.perf_counter() - t0
            if choice.finish_reason is not None:
                finished = True
    # servers that ignore stream_options send no usage: count the content chunks
    return {"ttft": ttft, "end": time.perf_counter() - t0,
            "tokens": pieces if usage is None else usage, "usage": usage is not None,
            "finished": finished}


def openai_client(base, connections, timeout):
    """An AsyncOpenAI client of its own connection pool, without retries (a retry would
    hide an error and stretch the wall time)."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return openai.AsyncOpenAI(base_url=base + "/v1", api_key="unused", max_retries=0,
                              timeout=timeout, http_client=httpx.AsyncClient(
                                  limits=limits, timeout=timeout))


async def load(base, model, clients, max_tokens, timeout, greedy=True):
    # The warm-up's connection is not reused: a server may close it after the stream
    # (llama-server does), and every client of the load opens its own anyway.
    async with openai_client(base, 1, timeout) as client:
        await asyncio.wait_for(one_stream(client, model, PROMPT.format(1, 300), max_tokens,
                                          time.perf_counter(), greedy), timeout)
    async with openai_client(base, clients, timeout) as client:
        t0 = time.perf_counter()
        tasks = [asyncio.ensure_future(one_stream(
            client, model, PROMPT.format(7 * i + 2, 7 * i + 302), max_tokens, t0, greedy))
            for i in range(clients)]
        done, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        wall = time.perf_counter() - t0
    results, failures = [], []
    for task in done:
        if task.exception() is not None:
            failures.append("{}: {}".format(type(task.exception()).__name__,
                                            task.exception())[:300])
        else:
            results.append(task.result())
    failures += ["timeout after {:.0f}s".format(timeout)] * len(pending)
    if results and not pending:     # the last stream's end, not when asyncio noticed it
        wall = max(r["end"] for r in results)
    return results, failures, wall


def percentile(values, q):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def measure(name, base, model, clients, args, sampler, log):
    sampler.peak = sampler.rss()
    try:
        results, failures, wall = asyncio.run(load(base, model, clients, args.max_tokens,
                                                   args.timeout, args.sampling == "greedy"))
    except Exception as exc:    # the warm-up request itself failed
        results, failures, wall = [], ["warm-up: {}: {}".format(type(exc).__name__, exc)
                                       [:300]] * clients, float("nan")
    ttfts = [r["ttft"] for r in results if r["ttft"] is not None]
    per_stream = [r["tokens"] for r in results]
    tokens = sum(per_stream)
    incomplete = sum(1 for r in results if not r["finished"])
    row = {"server": name, "clients": clients, "errors": len(failures) + incomplete,
           "failed": len(failures), "incomplete": incomplete,
           "first_error": failures[0] if failures else None,
           "ttft_p50_s": percentile(ttfts, 50), "ttft_p99_s": percentile(ttfts, 99),
           "tokens": tokens, "min_stream_tokens": min(per_stream) if per_stream else 0,
           "usage_reported": all(r["usage"] for r in results) if results else False,
           "wall_s": wall, "tok_s": tokens / wall if results and wall > 0 else 0.0,
           "rss_peak_mb": sampler.peak / 2 ** 20}
    if clients == 1 and results and results[0]["ttft"] is not None:
        # after the first token, as `apr run` times its decode
        row["decode_tok_s"] = (tokens - 1) / max(wall - results[0]["ttft"], 1e-9)
    print("{server:>16} x{clients:<3}: errors {errors} (incomplete {incomplete}), TTFT p50 "
          "{ttft_p50_s:.2f}s p99 {ttft_p99_s:.2f}s, {tokens} tokens in {wall_s:.1f}s = "
          "{tok_s:.2f} tok/s, peak RSS {rss_peak_mb:.0f} MB".format(**row), flush=True)
    if failures:
        print("{:>22}first error: {}\n{:>22}server log: {}".format(
            "", failures[0], "", log_tail(log).replace("\n", "\n" + " " * 22)), flush=True)
    return row


def run_server(name, command, port, ready_path, model, levels, args, env=None):
    """Start `command`, run every concurrency level in `levels` against it, stop it."""
    process, base, log = start(command, port, ready_path, args.timeout, env or dict(os.environ))
    sampler = RssSampler(process.pid)
    sampler.start()
    rows = []
    try:
        for clients in levels:
            rows.append(measure(name, base, model, clients, args, sampler, log))
            if process.poll() is not None:
                raise ServerFailed("exited ({}) at {} clients:\n{}".format(
                    process.returncode, clients, log_tail(log, 20)))
        return rows
    except ServerFailed as exc:
        exc.rows = rows
        raise
    finally:
        sampler.running = False
        sampler.join()
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def apr_run_decode(path, args):
    """`apr run`'s decode tok/s on the warm-up prompt (best of 3), or None."""
    command = APR + ["run", path, PROMPT.format(1, 300), "--chat", "--max-tokens",
                     str(args.max_tokens), "--json"]
    if args.backend:
        command += ["--backend", args.backend]
    best, tokens, error = None, None, None
    for _ in range(3):
        done = subprocess.run(command, capture_output=True, text=True, env=apr_env(args))
        try:
            out = json.loads(done.stdout)
            speed, tokens = out["timings"]["decode_tok_s"], out["completion_tokens"]
        except (ValueError, KeyError) as exc:
            error = "exit {}: {}".format(done.returncode, (done.stderr.strip().splitlines()
                                                           or [repr(exc)])[-1])
            continue
        best = speed if best is None else max(best, speed)
    if best is None:
        print("{:>16}     : failed ({})".format("apr run", error), flush=True)
    else:
        print("{:>16}     : decode {:.2f} tok/s, {} tokens (best of 3)".format(
            "apr run", best, tokens), flush=True)
    return best


def llama_server_binary(args):
    """The cached llama-server (never built here: that takes minutes), or None."""
    if args.llama_server:
        return args.llama_server if os.access(args.llama_server, os.X_OK) else None
    found = subprocess.run(["bash", os.path.join(HERE, "..", "scripts",
                                                 "build_llama_server.sh"), args.isa, "--cached"],
                           capture_output=True, text=True)
    lines = found.stdout.strip().splitlines()
    return lines[-1] if found.returncode == 0 and lines else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="1,4,16,64", help="concurrency levels")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--sampling", choices=("greedy", "defaults"), default="greedy",
                        help="temperature 0, or no sampling field (each server's defaults)")
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds: for a server to be ready, and per level")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b",
                        help="GGUF file or built-in model name")
    parser.add_argument("--peers", default=",".join(SERVERS))
    parser.add_argument("--threads", type=int, default=2, help="threads of every server")
    parser.add_argument("--max-batch", type=int,
                        help="apr serve --max-batch (default: the most clients, capped at 64)")
    parser.add_argument("--kv-memory", help="apr serve --kv-memory (default: apr's)")
    parser.add_argument("--backend", help="apr serve/run --backend (default: apr's)")
    parser.add_argument("--isa", default="native",
                        help="instruction level of every peer: native, or one of "
                             "apr_native.isa's (generic, avx2, avx512, avx512vnni)")
    parser.add_argument("--llama-server", help="llama-server binary (default: the one "
                        "scripts/build_llama_server.sh [LEVEL] built and cached)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    from apr_native.engine import resolve_model
    isa_peers.check(args.isa, "llama-cpp-python" in args.peers)
    path = os.path.abspath(resolve_model(args.model))
    levels = [int(c) for c in args.clients.split(",")]
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = sorted(set(peers) - set(SERVERS))
    if unknown:
        parser.error("unknown peers {} (known: {})".format(", ".join(unknown),
                                                          ", ".join(SERVERS)))
    print("model {}, {} threads, {} max tokens, levels {}, instructions: apr {}, llama.cpp "
          "{}".format(path, args.threads, args.max_tokens, levels,
                      isa_peers.describe("apr", args.isa),
                      isa_peers.describe("llama.cpp", args.isa)), flush=True)
    started = time.perf_counter()
    rows, run_tok_s, problems = [], None, {}

    def attempt(name, *run_args, **kwargs):
        try:
            rows.extend(run_server(name, *run_args, **kwargs))
        except ServerFailed as exc:
            rows.extend(getattr(exc, "rows", []))
            problems.setdefault(name, []).append(str(exc))
            print("{} failed: {}".format(name, exc), flush=True)

    if "apr" in peers:
        run_tok_s = apr_run_decode(path, args)
        port = free_port()
        command = APR + ["serve", path, "--port", str(port), "--model-id", "bench",
                         "--max-batch", str(args.max_batch or min(max(levels), 64)),
                         "--max-queue", str(max(levels)),
                         "--max-tokens", str(args.max_tokens)]
        if args.kv_memory:
            command += ["--kv-memory", args.kv_memory]
        if args.backend:
            command += ["--backend", args.backend]
        attempt("apr", command, port, "/ready", "bench", levels, args, env=apr_env(args))
    if "llama-server" in peers:
        binary = llama_server_binary(args)
        if binary is None:
            problems["llama-server"] = ["no binary"]
            print("llama-server skipped: no binary; build it with scripts/build_llama_server.sh"
                  " {} (about 4 minutes, cached) or pass --llama-server PATH".format(
                      "" if args.isa == "native" else args.isa), flush=True)
        else:
            for clients in levels:
                port = free_port()
                threads = str(args.threads)
                command = [binary, "-m", path, "--host", "127.0.0.1", "--port", str(port),
                           "-t", threads, "-tb", threads, "--parallel", str(clients),
                           "-c", str(clients * 512), "--alias", "bench", "--no-webui"]
                attempt("llama-server", command, port, "/health", "bench", [clients], args)
    if "llama-cpp-python" in peers:
        try:    # is the peer installed, with its server extra?
            importlib.import_module("llama_cpp.server.app")
        except ImportError as exc:
            problems["llama-cpp-python"] = ["not installed"]
            print("llama-cpp-python skipped: its server is not importable ({}); "
                  "pip install 'llama-cpp-python[server]' (scripts/setup.sh caches the "
                  "wheel)".format(exc), flush=True)
        else:
            port = free_port()
            threads = str(args.threads)
            command = [sys.executable, "-m", "llama_cpp.server", "--model", path, "--host",
                       "127.0.0.1", "--port", str(port), "--n_threads", threads,
                       "--n_threads_batch", threads, "--model_alias", "bench",
                       "--n_ctx", "2048",
                       # by default it aborts the running stream whenever a new one arrives
                       "--interrupt_requests", "False"]
            attempt("llama-cpp-python", command, port, "/v1/models", "bench", levels, args,
                    env=llama_cpp_python_env(args))

    by = {(r["server"], r["clients"]): r for r in rows}
    print_tables(by, levels, args)
    ratios = summary(by, levels, run_tok_s)
    elapsed = time.perf_counter() - started
    print("run took {:.0f}s".format(elapsed))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(finite({"model": os.path.basename(path), "threads": args.threads,
                              "isa": args.isa,
                              "max_tokens": args.max_tokens, "levels": levels, "rows": rows,
                              "apr_run_decode_tok_s": run_tok_s, "ratios": ratios,
                              "problems": problems, "elapsed_s": elapsed}), f, indent=1)


if __name__ == "__main__":
    main()
