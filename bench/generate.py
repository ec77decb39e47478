"""Prefill and decode speed: apr (numpy, quantized and dequantized-at-load weights) against
transformers + torch (float32) and llama.cpp (llama-cpp-python, 2 threads), in one run.

    .venv/bin/python bench/generate.py [--models demo,qwen2.5-coder-0.5b] [--prompt 32]
                                       [--decode 16] [--repeats 2]

Every runtime gets the same prompt token ids (a chat prompt cut to `--prompt` tokens) and
decodes greedily `--decode` tokens through its KV cache. After one warm-up run, the best of
`--repeats` runs is reported (the machine is shared; the best run is the least disturbed).
Prints tok/s per runtime and the ratios of apr to each peer. Not a test: no assertions.
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


def apr_runner(path, dense):
    from apr_native.engine import EngineOptions, load_engine
    model = load_engine(path, EngineOptions(dequantize=dense), with_tokenizer=False).transformer
    state = {}

    def prefill(ids):
        state["cache"] = model.new_cache(len(ids) + 64)
        return model.forward(ids, state["cache"], last_only=True)[-1]

    def step(token):
        return model.forward([token], state["cache"])[-1]
    return prefill, step


def llama_cpp_runner(path):
    import llama_cpp
    llm = llama_cpp.Llama(path, n_ctx=512, logits_all=False, verbose=False, n_threads=2)

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


def bench_model(name, args):
    from apr_native.engine import load_engine
    from apr_native.real_models import locate
    path = str(locate(name))
    ids = load_engine(path).model.prompt_ids(PROMPT, chat=True)[:args.prompt]
    runners = [("apr (quantized)", lambda: apr_runner(path, False)),
               ("apr (dequantize_at_load)", lambda: apr_runner(path, True)),
               ("transformers+torch f32", lambda: torch_runner(path, name)),
               ("llama.cpp (2 threads)", lambda: llama_cpp_runner(path))]
    rows = []
    for label, make in runners:
        prefill, step = make()
        timed(prefill, step, ids, 2)                                   # warm-up
        runs = [timed(prefill, step, ids, args.decode) for _ in range(args.repeats)]
        best_prefill = min(r[0] for r in runs)
        best_decode = min(r[1] for r in runs)
        rows.append((label, len(ids) / best_prefill, args.decode / best_decode))
        del prefill, step
        print("  {:32s} prefill {:8.1f} tok/s  decode {:7.2f} tok/s".format(*rows[-1]),
              flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="demo,qwen2.5-coder-0.5b")
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--decode", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    for name in args.models.split(","):
        print("{} ({} prompt tokens, {} decoded):".format(name, args.prompt, args.decode),
              flush=True)
        rows = bench_model(name, args)
        table = {label: (p, d) for label, p, d in rows}
        for ours in [label for label in table if label.startswith("apr")]:
            for peer in [label for label in table if not label.startswith("apr")]:
                print("  ratio {} / {}: prefill {:.3f}x, decode {:.3f}x".format(
                    ours, peer, table[ours][0] / table[peer][0],
                    table[ours][1] / table[peer][1]))


if __name__ == "__main__":
    main()
