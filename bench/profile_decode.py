"""Where decode time goes: cProfile of greedy decode steps, grouped by what they do.

    .venv/bin/python bench/profile_decode.py [--model demo] [--backend numba] [--steps 16]

Loads the model with the mmap loader, prefills a short prompt, then profiles `--steps`
one-token forward passes and prints the share of time in quantized matmuls (the kernel
registry), attention, norms/RoPE/activations and everything else (Python glue). Under
numba a supported layer is one compiled call (the kind "decoder_block"): its time shows
as "one-call layers", all its matvecs, attention and norms inside.
Not a test: no assertions.
"""
import argparse
import cProfile
import os
import pstats
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), os.path.join(HERE, "..", "native")]

# group -> function names whose cumulative time counts, outermost calls only: a call made
# from another function of the same group is already inside that one's time.
# A name "file.py:function" matches that file's function only.
GROUPS = (("one-call layers", ("decoder_block.py:decoder_block",)),
          ("matmul kernels", ("matmul_group", "matmul")),
          ("gate/up + act", ("matmul_glu",)),
          ("attention", ("attention", "cached_attention")),
          ("norm/rope/act", ("rms_norm", "rms_norm_add", "layer_norm", "apply", "rotate",
                             "tables", "silu", "gelu", "gelu_tanh")),
          ("embedding rows", ("rows",)),
          ("rope + kv store", ("store", "rope_store")))


def outermost(stats, names):
    """Cumulative seconds of calls to `names` not made from another of `names`."""
    def named(path, fn):
        return fn in names or "{}:{}".format(os.path.basename(path), fn) in names

    total = 0.0
    for (path, _, fn), (_, _, _, _, callers) in stats.items():
        if named(path, fn):
            total += sum(ct for (caller_path, _, caller), (_, _, _, ct) in callers.items()
                         if not named(caller_path, caller))
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="demo")
    parser.add_argument("--backend", default=None)
    parser.add_argument("--steps", type=int, default=16)
    args = parser.parse_args()
    from apr_native.engine import EngineOptions, load_engine
    engine = load_engine(args.model, EngineOptions(backend=args.backend), with_tokenizer=False)
    model, backend = engine.transformer, engine.backend
    cache = model.new_cache(64 + args.steps)
    token = int(model.forward(list(range(1, 33)), cache, last_only=True)[-1].argmax())
    token = int(model.forward([token], cache)[-1].argmax())         # warm-up step
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    for _ in range(args.steps):
        token = int(model.forward([token], cache)[-1].argmax())
    profiler.disable()
    wall = time.perf_counter() - start
    stats = pstats.Stats(profiler).stats
    shares = {label: outermost(stats, names) for label, names in GROUPS}
    print("{} [{}]: {:.2f} tok/s over {} decode steps ({:.1f} ms/token)".format(
        args.model, backend, args.steps / wall, args.steps, 1e3 * wall / args.steps))
    total = sum(shares.values())
    for label, seconds in shares.items():
        print("  {:16s} {:6.1f} ms/token  {:5.1f} %".format(
            label, 1e3 * seconds / args.steps, 100 * seconds / wall))
    print("  {:16s} {:6.1f} ms/token  {:5.1f} %  (Python glue, numpy small ops, profiler)"
          .format("other", 1e3 * (wall - total) / args.steps, 100 * (wall - total) / wall))


if __name__ == "__main__":
    main()
