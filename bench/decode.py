"""Benchmark: apr's numpy transformer decode vs llama.cpp (llama-cpp-python), same run.

    python bench/decode.py [--model demo] [--tokens 32] [--threads 1] [--isa avx2] [--no-mmap]

Greedy-decodes `--tokens` tokens after an 8-token prompt with apr (weights kept quantized,
and dequantized at load) and with llama.cpp on the same GGUF, and prints tokens/s and the
apr/llama.cpp ratios. Both timings span the same work: the prompt's prefill from an empty
cache, then the tokens (each runtime warmed up on two tokens first). `--threads` sets OpenBLAS and llama.cpp threads: OpenBLAS threads
spin between the many small per-layer matvecs, so 1 is usually fastest for numpy decode.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="demo", help="a built-in model's name or a GGUF file")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--isa", default="native",
                        help="instruction level of apr's kernels and llama.cpp's libraries "
                             "(see apr_native.isa)")
    parser.add_argument("--dots", choices=("default", "both"), default="default",
                        help="both: apr's weights kept quantized, once with the exact one-token "
                             "dots (int16 activations) and once with int8 activations "
                             "(APR_DOTS=exact / int8, forced over the per-type default of "
                             "isa.int8_dots), in place of the quantized and dense runs")
    parser.add_argument("--no-mmap", action="store_true",
                        help="both runtimes read the weights into memory instead of mapping "
                             "the file (apr: huge pages, apr_native.mmap_source.open_resident; "
                             "llama.cpp: use_mmap=False)")
    args = parser.parse_args()
    # Must be set before numpy loads OpenBLAS.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "APR_THREADS"):
        os.environ[var] = str(args.threads)
    sys.path[:0] = [ROOT, os.path.join(ROOT, "native")]
    from apr_native import isa, isa_peers
    isa_peers.check(args.isa, False)
    for runtime in ("apr", "llama.cpp"):      # before apr's kernels and llama_cpp load
        os.environ.update(isa_peers.child_env(runtime, args.isa))
    from apr_native.real_models import locate
    from apr_core.runtime.generate import generate
    from apr_native.engine import EngineOptions, load_engine
    path = args.model if os.path.isfile(args.model) else str(locate(args.model))
    prompt = [1, 504, 3458, 282, 4649, 314, 28, 253]
    rates, cpu_rates = {}, {}
    runs = ((("apr quantized", False, None), ("apr dense", True, None))
            if args.dots == "default" else
            (("apr exact dots", False, 0), ("apr int8 dots", False, 1)))
    if args.dots == "both" and os.environ.get("BENCH_SWAP"):       # the other order
        runs = runs[::-1]
    for label, dense, act8 in runs:
        engine = load_engine(path, EngineOptions(dequantize=dense, mmap=not args.no_mmap),
                             with_tokenizer=False)
        model, label = engine.transformer, "{} ({})".format(label, engine.backend)
        if act8 is not None:        # forced over the per-type default (isa.int8_dots)
            os.environ[isa.DOTS_ENV] = ("exact", "int8")[act8]
            from apr_native.kernels import pool
            pool.get().task[pool.ACT8] = act8
        model.forward(prompt[:2])                                   # warm up BLAS
        start, cpu = time.perf_counter(), time.thread_time()
        out = generate(model, prompt, max_tokens=args.tokens)
        rates[label] = len(out) / (time.perf_counter() - start)
        cpu_rates[label] = len(out) / (time.thread_time() - cpu)
        del model
    try:
        import llama_cpp
    except ImportError:
        llama_cpp = None
    if llama_cpp is not None:
        llm = llama_cpp.Llama(path, n_ctx=256, n_threads=args.threads, verbose=False,
                              use_mmap=not args.no_mmap)
        llm.eval(prompt[:2])                                        # warm up
        llm.reset()                      # empty cache: generate() evaluates the whole prompt
        start, cpu = time.perf_counter(), time.thread_time()
        count = 0
        for _ in llm.generate(prompt, temp=0.0, reset=True):
            count += 1
            if count == args.tokens:
                break
        rates["llama.cpp"] = count / (time.perf_counter() - start)
        cpu_rates["llama.cpp"] = count / (time.thread_time() - cpu)
    for label, rate in rates.items():
        line = "{:14s} {:7.2f} tok/s".format(label, rate)
        if "llama.cpp" in rates and label != "llama.cpp":
            line += "   ({:.3f}x llama.cpp)".format(rate / rates["llama.cpp"])
        if args.threads == 1:
            # the calling thread's CPU time (both runtimes compute on it at one thread):
            # what a token costs when other jobs share the cores
            line += "   cpu-time {:7.2f} tok/s".format(cpu_rates[label])
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
