"""Prefill and decode speed: apr (numpy, quantized and dequantized-at-load weights) against
transformers + torch (float32) and llama.cpp (llama-cpp-python, 2 threads), in one run.

    .venv/bin/python bench/generate.py [--models demo,qwen2.5-coder-0.5b] [--prompt 32]
                                       [--decode 16] [--repeats 2] [--isa avx2]
    # long context: a 7,000-token prompt, apr (f16 and q8_0 KV) against llama.cpp
    .venv/bin/python bench/generate.py --models qwen2.5-coder-0.5b --context 7000 \
        --decode 16 --runtimes apr,llama.cpp --kv-type f16,q8_0 --repeats 1 --rounds 2

Every runtime gets the same prompt token ids (a chat prompt cut to `--prompt` tokens, or
with `--context N` the prompt's text repeated to N tokens) and decodes greedily `--decode`
tokens through its KV cache. apr runs as `apr run` does: the engine's paged KV cache (type
`--kv-type`, default the engine's f16), the prompt prefilled in steps of the scheduler's
256 tokens. llama.cpp: n_batch 512, 2 threads, its default f16 KV cache. After one
warm-up run, the best of `--repeats` runs is reported, over `--rounds` rounds that
alternate the runtimes (the machine is shared; the best run is the least disturbed).
Prints tok/s per runtime, KV bytes per token, and the ratios of apr to each peer. Not a
test: no assertions.
"""
import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "native"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

PROMPT = ("You are a careful assistant. Explain, step by step and in plain words, how a "
          "bicycle turns the push of the rider's feet into forward motion, and why gears "
          "make climbing a hill easier.")


def timed(prefill, step, ids, n_decode):
    """(prefill seconds, decode seconds) of one greedy run through `prefill`/`step`."""
    start = time.perf_counter()
    logits = prefill(ids)
    mid = time.perf_counter()
    for _ in range(n_decode):
        logits = step(int(np.argmax(logits)))
    return mid - start, time.perf_counter() - mid


def apr_runner(path, dense, kv_type=None, report=None):
    from apr_core.runtime.batching.scheduler import DEFAULT_STEP_TOKENS
    from apr_core.runtime.context_options import ContextOptions
    from apr_native.engine import EngineOptions, load_engine
    engine = load_engine(path, EngineOptions(dequantize=dense,
                                             context=ContextOptions(kv_type=kv_type)),
                         with_tokenizer=False)
    if report is not None:
        report.update(engine.kv_report())
    state = {}

    def prefill(ids):
        if "session" in state:
            state["session"].close()
        state["session"] = session = engine.session()
        for start in range(0, len(ids), DEFAULT_STEP_TOKENS):
            logits = session.forward(ids[start:start + DEFAULT_STEP_TOKENS])
        return logits

    def step(token):
        return state["session"].forward([token])
    return prefill, step


def llama_cpp_runner(path, n_ctx=512):
    import llama_cpp
    llm = llama_cpp.Llama(path, n_ctx=n_ctx, n_batch=512, logits_all=False, verbose=False,
                          n_threads=2, n_threads_batch=2)

    def logits():
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))

    def prefill(ids):
        llm.reset()
        llm.eval(ids)
        return logits()

    def step(token):
        llm.eval([token])
        return logits()
    return prefill, step


def hf_model(path, name):
    """float32 transformers model from the same GGUF (as tests/model/test_model_real.py builds it)."""
    import torch
    import transformers
    if name != "qwen2.5-coder-0.5b":
        return transformers.AutoModelForCausalLM.from_pretrained(
            os.path.dirname(path), gguf_file=os.path.basename(path),
            dtype=torch.float32).eval()
    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    from test_model_real import qwen2_from_gguf
    return qwen2_from_gguf(path)[0]


def torch_runner(path, name):
    import torch
    torch.set_num_threads(2)
    model = hf_model(path, name)
    state = {}

    def prefill(ids):
        with torch.no_grad():
            out = model(torch.tensor([ids]), use_cache=True)
        state["past"] = out.past_key_values
        return out.logits[0, -1].numpy()

    def step(token):
        with torch.no_grad():
            out = model(torch.tensor([[token]]), past_key_values=state["past"], use_cache=True)
        state["past"] = out.past_key_values
        return out.logits[0, -1].numpy()
    return prefill, step


def prompt_ids(model, args):
    """The chat prompt's ids cut to `--prompt`, or its text repeated to `--context`."""
    ids = model.prompt_ids(PROMPT, chat=True)
    if not args.context:
        return ids[:args.prompt]
    text = model.prompt_ids(" ".join([PROMPT] * 8))
    return (ids + text * (args.context // len(text) + 1))[:args.context]


def bench_model(name, args):
    from apr_native.engine import load_engine
    from apr_native.real_models import locate
    path = str(locate(name))
    ids = prompt_ids(load_engine(path).model, args)
    n_ctx = max(512, len(ids) + args.decode + 16)
    runners = [("apr (quantized) kv " + kv, "apr", lambda kv=kv, r=None: apr_runner(
        path, False, kv, r)) for kv in args.kv_type.split(",")]
    runners += [("apr (dequantize_at_load)", "apr-dense",
                 lambda r=None: apr_runner(path, True)),
                ("transformers+torch f32", "torch", lambda r=None: torch_runner(path, name)),
                ("llama.cpp (2 threads, f16 KV)", "llama.cpp",
                 lambda r=None: llama_cpp_runner(path, n_ctx))]
    wanted = args.runtimes.split(",")
    runners = [r for r in runners if r[1] in wanted]
    best = {}
    for _ in range(args.rounds):          # rounds alternate the runtimes
        for label, _, make in runners:
            kv = {}
            prefill, step = make(r=kv)
            timed(prefill, step, ids[:64], 2)                              # warm-up
            runs = [timed(prefill, step, ids, args.decode) for _ in range(args.repeats)]
            old = best.get(label, (label, 0.0, 0.0, kv))
            best[label] = (label, max(old[1], len(ids) / min(r[0] for r in runs)),
                           max(old[2], args.decode / min(r[1] for r in runs)), kv)
            del prefill, step
            print("  {:34s} prefill {:8.1f} tok/s  decode {:7.2f} tok/s".format(
                *best[label][:3]), flush=True)
    for label, _, _, kv in best.values():
        if kv:
            print("  {}: KV cache {} {} bytes/token ({:.1f} MiB at {} tokens)".format(
                label, kv["kv_type"], kv["bytes_per_token"],
                kv["bytes_per_token"] * len(ids) / 1048576.0, len(ids)))
    return [row[:3] for row in best.values()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="demo,qwen2.5-coder-0.5b")
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--decode", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--context", type=int, default=0,
                        help="prompt length: the prompt text repeated to N tokens")
    parser.add_argument("--kv-type", default="f16",
                        help="apr's KV cache types, comma-separated (f32, f16, q8_0, q4_0)")
    parser.add_argument("--runtimes", default="apr,apr-dense,torch,llama.cpp",
                        help="which runtimes, comma-separated")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--isa", default="native",
                        help="instruction level of apr's kernels and llama.cpp's libraries "
                             "(apr_native.isa: native, generic, avx2, avx512, avx512vnni; "
                             "llama.cpp at a named level: scripts/build_llama_lib.sh LEVEL)")
    args = parser.parse_args()
    from apr_native import isa_peers
    isa_peers.check(args.isa, "llama.cpp" in args.runtimes.split(","))
    # before apr's kernels and llama-cpp-python load: both read them once
    for runtime in ("apr", "llama.cpp"):
        os.environ.update(isa_peers.child_env(runtime, args.isa))
    print("instruction level: apr {}, llama.cpp {}".format(
        isa_peers.describe("apr", args.isa), isa_peers.describe("llama.cpp", args.isa)))
    for name in args.models.split(","):
        print("{} ({} prompt tokens, {} decoded):".format(name, args.context or args.prompt,
                                                         args.decode), flush=True)
        rows = bench_model(name, args)
        table = {label: (p, d) for label, p, d in rows}
        for ours in [label for label in table if label.startswith("apr")]:
            for peer in [label for label in table if not label.startswith("apr")]:
                print("  ratio {} / {}: prefill {:.3f}x, decode {:.3f}x".format(
                    ours, peer, table[ours][0] / table[peer][0],
                    table[ours][1] / table[peer][1]))


if __name__ == "__main__":
    main()
