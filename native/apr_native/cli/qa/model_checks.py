"""The checks of `apr qa` that run the model, on THE engine `apr run` uses (`load_engine`):
load, tokenizer round trip, golden answer, perplexity (`apr eval`'s computation), decode
throughput and the peak-memory ceiling."""
from __future__ import annotations

import math
from typing import Any, List, Optional

from apr_core.errors import AprError

from . import FAIL, PASS, SKIP, Check, QaOptions, peak_memory
from .texts import ENGLISH_TEXT, PPL_CONTEXT, ROUND_TRIP_TEXT

GOLDEN_TOKENS = 32          # the golden answer's length cap
THROUGHPUT_TOKENS = 32      # decoded (EOS ignored) for the speed measurement
PPL_MAX_CHUNKS = 4
MIB = 1 << 20


class ModelRun:
    """The engine-backed checks of one `apr qa` run, sharing one loaded engine; the golden
    answer's token ids are kept for the llama.cpp logits check."""

    def __init__(self, path: str, options: QaOptions) -> None:
        self.path = path
        self.options = options
        self.engine: Any = None
        self.load_error: Optional[str] = None
        self.golden_prompt_ids: List[int] = []
        self.golden_ids: List[int] = []
        self.peak_reset = False

    def needs_engine(self) -> str:
        """Why an engine check cannot run ("" when it can)."""
        if self.engine is not None:
            return ""
        if "load" in self.options.skip:
            return "needs the model loaded (load is skipped)"
        return "needs the model loaded (see load)"

    def load(self) -> Check:
        from apr_native.engine import EngineOptions, load_engine
        self.peak_reset = peak_memory.reset()      # the memory check counts from here
        try:
            self.engine = load_engine(self.path, EngineOptions(
                backend=self.options.backend, dequantize=self.options.dequantize))
        except AprError as err:
            self.load_error = str(err)
            return Check("load", FAIL, str(err))
        cfg = self.engine.transformer.config
        return Check("load", PASS, "{} layers, vocabulary {}, {} backend, {:.2f} s".format(
            cfg.n_layers, cfg.n_vocab, self.engine.backend, self.engine.load_seconds))

    def tokenizer(self) -> Check:
        tok = self.engine.model.tokenizer
        ids = tok.encode(ROUND_TRIP_TEXT, add_special=False, parse_special=False)
        back = tok.decode(ids)
        if back == ROUND_TRIP_TEXT:
            return Check("tokenizer", PASS, "{} characters -> {} tokens -> the same text"
                         .format(len(ROUND_TRIP_TEXT), len(ids)))
        at = next((i for i, (a, b) in enumerate(zip(back, ROUND_TRIP_TEXT)) if a != b),
                  min(len(back), len(ROUND_TRIP_TEXT)))
        return Check("tokenizer", FAIL, "round trip differs at character {}: {!r} became "
                     "{!r}".format(at, ROUND_TRIP_TEXT[at:at + 12], back[at:at + 12]))

    def golden(self) -> Check:
        model = self.engine.model
        opts = self.options
        ids = model.prompt_ids(opts.golden_prompt, chat=opts.golden_chat)
        generation = self.engine.generate(ids, None, GOLDEN_TOKENS)        # greedy
        self.golden_prompt_ids, self.golden_ids = list(ids), list(generation.token_ids)
        shown = generation.text.strip().replace("\n", " ")
        if len(shown) > 80:
            shown = shown[:77] + "..."
        if opts.golden_expect in generation.text:
            return Check("golden", PASS, "{!r} -> {!r} contains {!r}".format(
                opts.golden_prompt, shown, opts.golden_expect))
        return Check("golden", FAIL, "{!r} -> {!r} does not contain {!r}".format(
            opts.golden_prompt, shown, opts.golden_expect))

    def perplexity(self) -> Check:
        from apr_core.runtime.perplexity import perplexity
        model = self.engine.model
        tok = model.tokenizer
        ids = tok.encode(ENGLISH_TEXT, add_special=True, parse_special=False)
        result = perplexity(model.transformer, ids, PPL_CONTEXT,
                            bos_id=tok.bos_id if tok.add_bos else None,
                            max_chunks=PPL_MAX_CHUNKS)
        ppl, limit = result["ppl"], self.options.max_ppl
        detail = "PPL {:.2f} on the built-in English text ({} tokens scored, context {})" \
            .format(ppl, result["tokens_scored"], PPL_CONTEXT)
        if math.isfinite(ppl) and ppl <= limit:
            return Check("perplexity", PASS, "{} <= {:g}".format(detail, limit))
        return Check("perplexity", FAIL, "{} > --max-ppl {:g}".format(detail, limit))

    def throughput(self) -> Check:
        ids = self.golden_prompt_ids or self.engine.model.prompt_ids(
            self.options.golden_prompt, chat=self.options.golden_chat)
        self.engine.generate(ids, None, 2, ignore_eos=True)       # kernels compiled/loaded
        generation = self.engine.generate(ids, None, THROUGHPUT_TOKENS, ignore_eos=True)
        decoded = len(generation.token_ids) - 1                    # after the first token
        seconds = generation.decode_seconds
        if decoded < 1 or seconds <= 0:
            return Check("throughput", FAIL, "no decode step was timed ({} tokens)".format(
                len(generation.token_ids)))
        rate = decoded / seconds
        detail = "{:.1f} tok/s decoding {} tokens ({} backend)".format(
            rate, decoded, self.engine.backend)
        floor = self.options.min_tok_s
        if floor is None:
            return Check("throughput", SKIP, detail + "; no floor given (--min-tok-s)")
        if rate >= floor:
            return Check("throughput", PASS, "{} >= {:g}".format(detail, floor))
        return Check("throughput", FAIL, "{} < --min-tok-s {:g}".format(detail, floor))

    def memory(self) -> Check:
        peak, source = peak_memory.peak_bytes()
        since = "from load through decoding" if self.peak_reset else \
            "since the process started ({}; the high-water mark could not be reset)".format(
                source)
        detail = "peak RSS {:.1f} MiB {}".format(peak / MIB, since)
        ceiling = self.options.max_rss_mb
        if ceiling is None:
            return Check("memory", SKIP, detail + "; no ceiling given (--max-rss-mb)")
        if peak <= ceiling * MIB:
            return Check("memory", PASS, "{} <= {:g} MiB".format(detail, ceiling))
        return Check("memory", FAIL, "{} > --max-rss-mb {:g}".format(detail, ceiling))


__all__ = ["ModelRun", "GOLDEN_TOKENS", "THROUGHPUT_TOKENS"]
