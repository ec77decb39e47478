"""Speculative decoding against plain decoding, same engine, same prompt, one run.

    .venv/bin/python bench/speculative.py [--model qwen2.5-coder-0.5b]
        [--prompt bench/prompts/code_edit.txt] [--tokens 160] [--draft-max 8[,4,16...]]
        [--draft MODEL] [--repeats 3] [--threads 2]

The prompt goes through the model's chat template, as `apr run` does. Each variant (plain;
`--speculate lookup`, once per `--draft-max` value; `--draft MODEL` when given) decodes
greedily up to `--tokens` tokens; after one warm-up the variants alternate `--repeats`
times and the best decode rate of each is reported with its ratio to plain, its
acceptance rate and tokens per forward pass. The token ids of every variant must equal
plain decoding's (checked, printed). Not a test.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "native"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--prompt", default=os.path.join(HERE, "prompts", "code_edit.txt"))
    ap.add_argument("--tokens", type=int, default=160)
    ap.add_argument("--draft-max", default="8", help="drafted tokens at most; a comma "
                    "list runs lookup once per value (the draft-length sweep)")
    ap.add_argument("--draft", help="a draft model (same tokenizer) as a third variant")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--backend", default="auto")
    args = ap.parse_args()
    os.environ["APR_THREADS"] = os.environ["NUMBA_NUM_THREADS"] = str(args.threads)

    from apr_core.runtime.sampling import SamplerConfig
    from apr_core.runtime.speculative import SpeculativeConfig
    from apr_native.engine import EngineOptions, load_engine

    engine = load_engine(args.model, EngineOptions(backend=args.backend))
    with open(args.prompt) as f:
        ids = engine.model.prompt_ids(f.read(), chat=True)
    lengths = [int(v) for v in args.draft_max.split(",")]
    variants = [("plain", None)] + [
        ("lookup" if len(lengths) == 1 else "lookup-%d" % k, SpeculativeConfig("lookup", k))
        for k in lengths]
    if args.draft:
        draft = load_engine(args.draft, EngineOptions(backend=args.backend))
        variants.append(("draft", SpeculativeConfig("draft", lengths[0],
                                                    draft_model=draft.transformer)))
    greedy = SamplerConfig(temperature=0.0)
    best = {}
    for round_ in range(args.repeats + 1):               # round 0: warm-up
        for name, spec in variants:
            g = engine.generate(ids, greedy, args.tokens, speculative=spec)
            rate = (len(g.token_ids) - 1) / g.decode_seconds
            if round_ and (name not in best or rate > best[name][0]):
                best[name] = (rate, g)
    plain_rate, plain = best["plain"]
    print("model {}  backend {}  prompt {} tokens  threads {}  best of {}".format(
        args.model, engine.backend, len(ids), args.threads, args.repeats))
    for name, _ in variants:
        rate, g = best[name]
        s = g.speculative or {}
        print("{:9s} decode {:7.1f} tok/s  x{:.2f}  ids {}  acceptance {}  tokens/pass {}".format(
            name, rate, rate / plain_rate,
            "same" if g.token_ids == plain.token_ids else "DIFFER",
            s.get("acceptance_rate", "-"), s.get("tokens_per_pass", "-")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
