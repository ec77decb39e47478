"""Start-up wall time of whole `apr` processes, as ratios to peers measured in the same run.

    python bench/startup.py                      # both real models, best of 5
    python bench/startup.py --models demo --repeats 3 --json
    python bench/startup.py --models demo --repeats 3 --cold

Rows (each a fresh process, best of `--repeats`, the commands taking turns so a shared
machine's drift hits them all alike):
- `apr --help`, `apr inspect MODEL`, `apr inspect MODEL --json`: ratio to a bare
  `python -c "import json"` (issue 21's targets: help <= 6x, inspect <= 4x);
- `apr run MODEL "Hi" -n 1`: ratio to llama-cpp-python loading the same file and producing
  one token in its own process. Both sides get the same prompt text: apr applies the
  model's chat template by default, llama-cpp-python's `create_chat_completion` applies
  the template the GGUF carries.
- with `--cold`, a machine's first run: `apr run MODEL QUESTION -n 16` with every kernel
  cache empty (apr_native.cold_start: the simd library is built, numba's compile goes to
  a background job, ended after each run), against llama-cpp-python's 16 tokens (it has
  no cache to fill). Issue 38's target: under 15 s on a 2-core machine.
A peer that fails is reported as failed, never silently dropped.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "native"))
APR = os.path.join(os.path.dirname(sys.executable), "apr")
PROMPT = "Hi"
LLAMA_CPP_ONE_TOKEN = (
    "import sys, llama_cpp\n"
    "llm = llama_cpp.Llama(sys.argv[1], n_ctx=512, verbose=False, n_threads={threads})\n"
    "llm.create_chat_completion([{{'role': 'user', 'content': sys.argv[2]}}], max_tokens=1,\n"
    "                           temperature=0)\n")
LLAMA_CPP_TOKENS = LLAMA_CPP_ONE_TOKEN.replace("max_tokens=1", "max_tokens=int(sys.argv[3])")
QUESTION = "What is the capital of France?"
COLD_TOKENS = 16
# Python's default: compiled modules are cached (a shell with PYTHONDONTWRITEBYTECODE=1
# would recompile apr's sources, but not site-packages' peers, on every start)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV.update(APR_QUIET="1", APR_CONFIG=os.devnull)


def timed(command):
    """Wall seconds of one process, or the error text when it fails. A command starting
    with "cold" runs the rest with every kernel cache empty (see the module docstring)."""
    if command[0] == "cold":
        return cold_timed(command[1:])
    return _timed(command, ENV)


def cold_timed(command):
    from apr_native.cold_start import cold_env, end_warmup_job, warmup_lock
    with tempfile.TemporaryDirectory(prefix="apr-cold-") as root:
        try:
            return _timed(command, cold_env(root, ENV))
        finally:
            end_warmup_job(warmup_lock(root))


def _timed(command, env):
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          env=env, stdin=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        tail = (done.stderr.decode(errors="replace").strip().splitlines() or ["no output"])
        return "exit {}: {}".format(done.returncode, tail[-1][:120])
    return seconds


def measure(commands, repeats):
    """{label: best seconds or error} over `repeats` interleaved rounds."""
    best = {}
    for _ in range(repeats):
        for label, command in commands:
            result = timed(command)
            previous = best.get(label)
            if isinstance(result, str):
                best.setdefault(label, result)
            elif not isinstance(previous, float) or result < previous:
                best[label] = result
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", default=["demo", "qwen2.5-coder-0.5b"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cold", action="store_true",
                        help="also time each model's first run with empty kernel caches")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from apr_native.real_models import locate
    paths = {name: str(locate(name)) for name in args.models}
    baseline = "python -c 'import json'"
    commands = [(baseline, [sys.executable, "-c", "import json"]),
                ("apr --help", [APR, "--help"])]
    peers = {"apr --help": baseline}
    llama = LLAMA_CPP_ONE_TOKEN.format(threads=args.threads)
    for name, path in paths.items():
        for suffix in ((), ("--json",)):
            label = "apr inspect {}{}".format(name, " --json" if suffix else "")
            commands.append((label, [APR, "inspect", path, *suffix]))
            peers[label] = baseline
        run_label = "apr run {} {!r} -n 1".format(name, PROMPT)
        peer_label = "llama-cpp-python {} 1 token".format(name)
        commands.append((run_label, [APR, "run", path, PROMPT, "-n", "1"]))
        commands.append((peer_label, [sys.executable, "-c", llama, path, PROMPT]))
        peers[run_label] = peer_label
        if args.cold:
            cold_label = "apr run {} (empty caches) -n {}".format(name, COLD_TOKENS)
            cold_peer = "llama-cpp-python {} {} tokens".format(name, COLD_TOKENS)
            commands.append((cold_label, ["cold", APR, "run", path, QUESTION, "-n",
                                          str(COLD_TOKENS)]))
            commands.append((cold_peer, [sys.executable, "-c",
                                         LLAMA_CPP_TOKENS.format(threads=args.threads), path,
                                         QUESTION, str(COLD_TOKENS)]))
            peers[cold_label] = cold_peer
    measure(commands, 1)                # warm-up: page cache, compiled-module caches
    best = measure(commands, args.repeats)
    ratios = {label: best[label] / best[peer] for label, peer in peers.items()
              if isinstance(best.get(label), float) and isinstance(best.get(peer), float)}
    if args.json:
        json.dump({"best_s": best, "peers": peers, "ratios": ratios}, sys.stdout, indent=2)
        print()
        return 0
    print("best of {} (wall seconds, whole processes, {} threads)".format(
        args.repeats, args.threads))
    for label, _ in commands:
        value = best[label]
        text = "{:8.3f} s".format(value) if isinstance(value, float) else "failed: " + value
        ratio = "  {:6.2f}x {}".format(ratios[label], peers[label]) if label in ratios else ""
        print("  {:42s} {}{}".format(label, text, ratio))
    return 0


if __name__ == "__main__":
    sys.exit(main())
