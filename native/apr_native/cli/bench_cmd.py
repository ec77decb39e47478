"""`apr bench MODEL`: prefill and decode speed, time to first token, load time and peak RSS
(seed 004 §2.4), optionally against llama.cpp and transformers+torch on the same file.

    apr bench demo --compare llama.cpp --compare torch

Every runtime runs in its own child process (so load time and peak RSS are its own), one
after the other, on the same prompt token ids (fixed pseudo-random ids from the model's
vocabulary: speed does not depend on the text). Each child loads the model, runs
`--warmup` untimed generations (numba's compile-cache load and llama.cpp's first-call
setup land there), then `--repeats` timed ones: a prefill of the prompt, then greedy
decoding of `--decode-tokens` tokens through the KV cache. The best run is reported (the
machine may be shared; the best run is the least disturbed), and apr's ratios to each peer.

On a shared machine the speed of both runtimes drifts from minute to minute (+-15% seen
here), so a ratio from one child each depends on which minute each ran in. `--rounds R`
runs the children in turn R times (apr, peers, apr, peers, ...) and reports each
runtime's best over all its runs: the runtimes then sample the same minutes.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Tuple

from apr_core.errors import AprError, ErrorCode
from apr_core.model.kv_types import NAMES as KV_TYPES

from .. import backends, isa_peers
from .common import emit_json, resolve_model
from .context_args import kv_line


RUNTIMES = ("apr", "llama.cpp", "torch")
# What the prompt is, stated in every report: `apr run` applies a chat model's template by
# default, the bench does not (its prompt is token ids, identical for every runtime).
PROMPT_PATH = ("{} fixed pseudo-random token ids (seed {}): no text, no chat template; the "
               "same ids reach every runtime")
LABELS = {"apr": "apr", "llama.cpp": "llama.cpp (llama-cpp-python)",
          "torch": "transformers+torch f32"}
PROMPT_SEED = 1234


# --------------------------------------------------------------------------- runners
# Each returns (prefill(ids) -> logits of the last position, step(token) -> logits).

Runner = Tuple[Callable[[List[int]], Any], Callable[[int], Any]]


def _apr_runner(path: str, opts: Dict[str, Any]) -> Runner:
    from apr_core.runtime.context_options import ContextOptions
    from apr_native.engine import EngineOptions, load_engine
    engine = load_engine(path, EngineOptions(backend=opts.get("backend"),
                                             mmap=not opts.get("no_mmap"),
                                             context=ContextOptions(kv_type=opts.get("kv_type"))),
                         with_tokenizer=False)
    opts["backend"] = engine.backend
    opts["kv_cache"] = engine.kv_report()
    opts["decode_weight_bytes"] = decode_weight_bytes(engine.transformer)
    state: Dict[str, Any] = {}

    def prefill(ids: List[int]) -> Any:
        if "session" in state:
            state["session"].close()
        state["session"] = engine.session()
        return state["session"].forward(ids)

    def step(token: int) -> Any:
        return state["session"].forward([token])
    return prefill, step


def decode_weight_bytes(transformer: Any) -> int:
    """Weight bytes a decode step reads: every layer's projections and the LM head (the
    embedding gives one row, unless it is the LM head too)."""
    return transformer.layer_weight_bytes() + transformer.lm_head.nbytes


def _llama_cpp_runner(path: str, opts: Dict[str, Any]) -> Runner:
    import numpy as np
    try:
        import llama_cpp
    except ImportError:
        raise AprError(ErrorCode.UNSUPPORTED, "--compare llama.cpp needs llama-cpp-python")
    llm = llama_cpp.Llama(path, n_ctx=opts["prompt_tokens"] + opts["decode_tokens"] + 8,
                          n_batch=512, n_threads=opts["threads"],
                          # prefill runs on the batch threads, whose default is every core
                          n_threads_batch=opts["threads"], logits_all=False, verbose=False)
    n_vocab = llm.n_vocab()

    def logits() -> Any:
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,))

    def prefill(ids: List[int]) -> Any:
        llm.reset()
        llm.eval(ids)
        return logits()

    def step(token: int) -> Any:
        llm.eval([token])
        return logits()
    return prefill, step


def _torch_runner(path: str, opts: Dict[str, Any]) -> Runner:
    try:
        import torch
        import transformers
    except ImportError:
        raise AprError(ErrorCode.UNSUPPORTED, "--compare torch needs torch and transformers")
    torch.set_num_threads(opts["threads"])
    # transformers' own GGUF loader: dequantizes every weight to float32.
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(os.path.abspath(path)), gguf_file=os.path.basename(path),
        dtype=torch.float32).eval()
    state: Dict[str, Any] = {}

    def run(ids: List[int], past: Any) -> Any:
        with torch.no_grad():
            out = model(torch.tensor([ids]), past_key_values=past, use_cache=True)
        state["past"] = out.past_key_values
        return out.logits[0, -1].numpy()

    return (lambda ids: run(ids, None)), (lambda token: run([token], state["past"]))


RUNNERS = {"apr": _apr_runner, "llama.cpp": _llama_cpp_runner, "torch": _torch_runner}
# set to --threads in every child: apr's, numba's, and the BLAS/OpenMP pools torch and
# llama.cpp's dependencies size themselves from
THREAD_VARS = ("APR_THREADS", "NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "MKL_NUM_THREADS")


# --------------------------------------------------------------------------- worker

def _timed_run(prefill: Callable, step: Callable, ids: List[int], n_decode: int
               ) -> Dict[str, float]:
    start = time.perf_counter()
    token = int(prefill(ids).argmax())
    first = time.perf_counter()
    for _ in range(n_decode - 1):
        token = int(step(token).argmax())
    end = time.perf_counter()
    return {"ttft_s": first - start, "decode_s": end - first}


def measure(runtime: str, path: str, ids: List[int], opts: Dict[str, Any]) -> Dict[str, Any]:
    """Load `path` with `runtime` and time it (runs in the worker process)."""
    import resource
    start = time.perf_counter()
    prefill, step = RUNNERS[runtime](path, opts)
    load_s = time.perf_counter() - start
    n = opts["decode_tokens"]
    for _ in range(opts["warmup"]):
        _timed_run(prefill, step, ids, n)
    runs = [_timed_run(prefill, step, ids, n) for _ in range(opts["repeats"])]
    ttft = min(r["ttft_s"] for r in runs)
    decode = min(r["decode_s"] for r in runs)
    return {
        "runtime": runtime, "label": LABELS[runtime], "load_s": load_s, "ttft_s": ttft,
        # The first token comes out of the prefill, so prefill speed is prompt / TTFT and
        # decode speed counts the n - 1 tokens generated after it.
        "prefill_tok_s": len(ids) / ttft, "decode_tok_s": (n - 1) / decode if n > 1 else None,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "backend": opts.get("backend"), "threads": opts["threads"], "runs": runs,
        "kv_cache": opts.get("kv_cache"), "isa": isa_peers.describe(runtime, opts["isa"]),
        "decode_weight_bytes": opts.get("decode_weight_bytes"),
        # what this child actually ran on: the parent's ids and thread settings
        "prompt_ids": list(ids), "thread_env": {v: os.environ.get(v) for v in THREAD_VARS},
    }


def worker_main(argv: List[str]) -> int:
    """`python -m apr_native.cli.bench_cmd SPEC_JSON`: one runtime, one JSON line out."""
    spec = json.loads(argv[0])
    try:
        result = measure(spec["runtime"], spec["path"], spec["ids"], spec["opts"])
    except AprError as err:
        result = {"runtime": spec["runtime"], "error": err.message}
    sys.stdout.write("APR_BENCH " + json.dumps(result) + "\n")
    return 0


# --------------------------------------------------------------------------- command

def prompt_ids(path: str, count: int) -> List[int]:
    """`count` fixed pseudo-random token ids below the model's vocabulary size."""
    import random

    from apr_core.formats.open import open_model
    from apr_core.model.transformer import model_config
    with open_model(path, verify=False) as model_file:
        n_vocab = model_config(model_file).n_vocab
    rng = random.Random(PROMPT_SEED)
    return [rng.randrange(n_vocab) for _ in range(count)]


def _run_child(runtime: str, path: str, ids: List[int], opts: Dict[str, Any]) -> Dict[str, Any]:
    spec = json.dumps({"runtime": runtime, "path": path, "ids": ids, "opts": opts})
    env = dict(os.environ)
    env.update((var, str(opts["threads"])) for var in THREAD_VARS)
    env.update(isa_peers.child_env(runtime, opts["isa"]))
    done = subprocess.run([sys.executable, "-m", "apr_native.cli.bench_cmd", spec],
                          capture_output=True, text=True, env=env)
    for line in done.stdout.splitlines():
        if line.startswith("APR_BENCH "):
            return json.loads(line[len("APR_BENCH "):])
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return {"runtime": runtime, "error": "worker failed (exit {}): {}".format(
        done.returncode, tail)}


def merge_rounds(children: List[Dict[str, Any]], n_prompt: int, n_decode: int
                 ) -> Dict[str, Any]:
    """One runtime's result from its children of every round: speeds from the best run
    of all, the fastest load, the largest peak RSS (the first error, if any)."""
    failed = [c for c in children if "error" in c]
    if failed or len(children) == 1:
        return (failed or children)[0]
    merged = dict(children[0])
    merged["runs"] = [run for c in children for run in c["runs"]]
    merged["ttft_s"] = min(run["ttft_s"] for run in merged["runs"])
    merged["prefill_tok_s"] = n_prompt / merged["ttft_s"]
    if n_decode > 1:
        merged["decode_tok_s"] = (n_decode - 1) / min(run["decode_s"] for run in merged["runs"])
    merged["load_s"] = min(c["load_s"] for c in children)
    merged["peak_rss_bytes"] = max(c["peak_rss_bytes"] for c in children)
    return merged


def ratios(results: List[Dict[str, Any]]) -> Dict[str, Dict[str, float]]:
    """apr's speed over each peer's: {peer: {"prefill": x, "decode": x}}."""
    ours = next((r for r in results if r["runtime"] == "apr" and "error" not in r), None)
    out: Dict[str, Dict[str, float]] = {}
    if ours is None:
        return out
    for peer in results:
        if peer["runtime"] == "apr" or "error" in peer:
            continue
        out[peer["runtime"]] = {
            key: ours[key + "_tok_s"] / peer[key + "_tok_s"]
            for key in ("prefill", "decode") if ours[key + "_tok_s"] and peer[key + "_tok_s"]}
    return out


def roofline(results: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Decode's memory roofline: apr's weight bytes per token over this machine's read
    bandwidth (`profile.roofline`, probed once and cached), and the share of it each
    runtime reached; {} without an apr result."""
    ours = next((r for r in results if r["runtime"] == "apr" and r.get("decode_weight_bytes")),
                None)
    if ours is None:
        return {}
    from apr_native.profile.roofline import machine_roof
    roof = machine_roof()
    tok_s = roof["bandwidth_gbs"] * 1e9 / ours["decode_weight_bytes"]
    return {"bytes": ours["decode_weight_bytes"], "gbs": roof["bandwidth_gbs"],
            "method": roof["bandwidth_method"], "tok_s": tok_s,
            "reached": {r["runtime"]: 100.0 * r["decode_tok_s"] / tok_s for r in results
                        if "error" not in r and r.get("decode_tok_s")}}


def _print(path: str, ids: List[int], opts: Dict[str, Any], results: List[Dict[str, Any]],
           table: Dict[str, Dict[str, float]]) -> None:
    size = os.path.getsize(path)
    print("{} ({:.1f} MB): {} prompt tokens, {} decoded, best of {} after {} warm-up{}, "
          "{} threads".format(os.path.basename(path), size / 1e6, len(ids),
                              opts["decode_tokens"], opts["repeats"] * opts["rounds"],
                              opts["warmup"], " in each of {} interleaved rounds".format(
                                  opts["rounds"]) if opts["rounds"] > 1 else "",
                              opts["threads"]))
    print("  prompt: " + PROMPT_PATH.format(len(ids), PROMPT_SEED))
    print("  instruction level: " + ", ".join(
        "{} {}".format(r["runtime"], r["isa"]) for r in results if r.get("isa")))
    print("  {:30s} {:>10s} {:>10s} {:>8s} {:>8s} {:>9s}".format(
        "runtime", "prefill/s", "decode/s", "TTFT s", "load s", "peak RSS"))
    for r in results:
        label = r["label"] + (" [{}]".format(r["backend"]) if r.get("backend") else "") \
            if "label" in r else r["runtime"]
        if r.get("kv_cache"):
            label += " kv " + r["kv_cache"]["kv_type"]
        if "error" in r:
            print("  {:30s} error: {}".format(label, r["error"]))
            continue
        print("  {:30s} {:10.1f} {:10.2f} {:8.3f} {:8.2f} {:7.0f}MB".format(
            label, r["prefill_tok_s"], r["decode_tok_s"] or 0.0, r["ttft_s"], r["load_s"],
            r["peak_rss_bytes"] / 1e6))
    for r in results:
        if r.get("kv_cache"):
            print("  {}: {}".format(r["label"], kv_line(r["kv_cache"])))
    roof = roofline(results)
    if roof:
        print("  roofline: decode reads {:.1f} MB of weights a token; {:.1f} GB/s ({}) allows "
              "{:.1f} tok/s; ".format(roof["bytes"] / 1e6, roof["gbs"], roof["method"],
                                      roof["tok_s"]) + ", ".join(
            "{} {:.0f}%".format(name, pct) for name, pct in roof["reached"].items()))
    if "llama.cpp" in [r["runtime"] for r in results]:
        print("  llama.cpp's KV cache: f16 (its default)")
    for peer, row in table.items():
        print("  apr / {}: ".format(peer) + ", ".join(
            "{} {:.2f}x".format(key, value) for key, value in row.items()))


def run_bench(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    if os.path.isdir(path):
        raise AprError(ErrorCode.UNSUPPORTED, "apr bench takes a single model file", path=path)
    for name, value in (("--prompt-tokens", args.prompt_tokens),
                        ("--decode-tokens", args.decode_tokens), ("--repeats", args.repeats)):
        if value < 1:
            raise AprError(ErrorCode.ARGUMENT, "{} must be at least 1".format(name))
    if args.rounds < 1:
        raise AprError(ErrorCode.ARGUMENT, "--rounds must be at least 1")
    from apr_native.backends import threads
    opts = {"prompt_tokens": args.prompt_tokens, "decode_tokens": args.decode_tokens,
            "repeats": args.repeats, "warmup": max(0, args.warmup),
            "threads": args.threads or threads(), "backend": args.backend,
            "no_mmap": args.no_mmap, "rounds": args.rounds, "kv_type": args.kv_type,
            "isa": args.isa}
    isa_peers.check(args.isa, "llama.cpp" in (args.compare or []))
    ids = prompt_ids(path, args.prompt_tokens)
    order = ["apr"] + [c for c in RUNTIMES[1:] if c in (args.compare or [])]
    rounds = [[_run_child(runtime, path, ids, dict(opts)) for runtime in order]
              for _ in range(args.rounds)]
    results = [merge_rounds([one[i] for one in rounds], len(ids), opts["decode_tokens"])
               for i in range(len(order))]
    table = ratios(results)
    if args.json:
        emit_json({"model": path, "file_bytes": os.path.getsize(path), "prompt_ids": ids,
                   "prompt": PROMPT_PATH.format(len(ids), PROMPT_SEED),
                   "options": opts, "results": results, "ratios": table,
                   "roofline": roofline(results)})
    else:
        _print(path, ids, opts, results, table)
    return 0 if all("error" not in r for r in results) else 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="prefill/decode speed, TTFT, load time and peak RSS, "
                                     "optionally against llama.cpp and torch")
    p.add_argument("model", help="model file (.gguf, .apr, .safetensors) or 'demo'")
    p.add_argument("--compare", action="append", choices=RUNTIMES[1:],
                   help="also run this runtime on the same file (repeatable)")
    p.add_argument("-p", "--prompt-tokens", type=int, default=32)
    p.add_argument("-n", "--decode-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3, help="timed runs (best is reported)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs first")
    p.add_argument("--rounds", type=int, default=1,
                   help="run the runtimes in turn this many times (best of all rounds)")
    p.add_argument("--backend", choices=("auto",) + backends.NAMES,
                   help="apr kernel backend (default: $APR_BACKEND or auto)")
    p.add_argument("--threads", type=int, help="threads for every runtime (default: cores)")
    p.add_argument("--no-mmap", action="store_true", help="read weights instead of mapping")
    p.add_argument("--kv-type", choices=KV_TYPES,
                   help="apr's KV cache type (default f16, as llama.cpp's)")
    p.add_argument("--isa", choices=isa_peers.isa.NAMES, default=isa_peers.isa.NATIVE,
                   help="instruction level of apr's kernels and of llama.cpp's build "
                        "(default native: this CPU's own; avx2 measures what an AVX2 "
                        "CPU gets; llama.cpp at a named level needs "
                        "scripts/build_llama_lib.sh LEVEL)")
    p.add_argument("--json", action="store_true", help="one JSON object with every result")
    p.set_defaults(func=run_bench)


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
