"""Text in, text out: a model with its tokenizer and chat template (what `apr run` drives).

    model = TextModel.load("model.gguf")
    for piece in model.stream(model.prompt_ids("What is 2+2?", chat=True), max_tokens=16):
        print(piece.text, end="")

The tokenizer comes from the same file as the weights: GGUF `tokenizer.ggml.*` keys, the
GGUF block an APR file carries in its metadata, or `tokenizer.json` in a Hugging Face
directory. Text is streamed through `StreamingDetokenizer`, so no broken UTF-8 is emitted,
and stop strings are held back until it is certain they do not match.
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, Generator, List, NamedTuple, Optional, Sequence

from ..errors import AprError, ErrorCode
from .generate import generate_step
from .sampling import Sampler, SamplerConfig
from ..text.chat import render_chat
from ..text.text_stream import TextStream
from ..text.tokenizer import Tokenizer
from ..text.load import tokenizer_from_gguf, tokenizer_from_json


class Piece(NamedTuple):
    """One generated token and the text it completes (may be "" mid-character)."""

    token_id: int
    text: str


class Generation(NamedTuple):
    """A finished generation: text, token ids and timings (seconds)."""

    text: str
    token_ids: List[int]
    prompt_tokens: int
    finish_reason: str          # "stop" (EOS or stop string) or "length"
    prefill_seconds: float
    decode_seconds: float
    speculative: Optional[Dict[str, Any]] = None   # speculative.speculative_stats

    def as_dict(self) -> Dict[str, Any]:
        decoded = max(len(self.token_ids) - 1, 0)
        out = {
            "text": self.text,
            "token_ids": self.token_ids,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": len(self.token_ids),
            "finish_reason": self.finish_reason,
            "timings": {
                "prefill_s": round(self.prefill_seconds, 4),
                "decode_s": round(self.decode_seconds, 4),
                "prefill_tok_s": _rate(self.prompt_tokens, self.prefill_seconds),
                "decode_tok_s": _rate(decoded, self.decode_seconds),
            },
        }
        if self.speculative is not None:
            out["speculative"] = self.speculative
        return out


def _rate(count: int, seconds: float) -> Optional[float]:
    return round(count / seconds, 2) if seconds > 0 and count else None


def tokenizer_for(model_file: Any, path: Optional[str] = None) -> Tokenizer:
    """The tokenizer stored with the weights (GGUF keys, APR's GGUF block, tokenizer.json)."""
    if model_file.format == "gguf":
        return tokenizer_from_gguf(model_file.metadata)
    gguf_block = model_file.metadata.get("gguf") if isinstance(model_file.metadata, dict) else None
    if isinstance(gguf_block, dict) and isinstance(gguf_block.get("kv"), dict):
        return tokenizer_from_gguf(gguf_block["kv"])
    meta = model_file.metadata if isinstance(model_file.metadata, dict) else {}
    if isinstance(meta.get("hf_tokenizer"), dict):     # an APR file made from a HF directory
        return tokenizer_from_json(meta["hf_tokenizer"],
                                             meta.get("hf_tokenizer_config") or {})
    if path and os.path.isdir(path) and os.path.isfile(os.path.join(path, "tokenizer.json")):
        return tokenizer_from_json(path)
    raise AprError(ErrorCode.NOT_FOUND, "model carries no tokenizer (GGUF tokenizer keys or "
                   "tokenizer.json)", path=path)


class TextModel:
    """A Transformer plus its tokenizer and chat template."""

    def __init__(self, transformer: Any, tokenizer: Tokenizer,
                 chat_template: Optional[str] = None) -> None:
        self.transformer = transformer
        self.tokenizer = tokenizer
        self.chat_template = chat_template or getattr(tokenizer, "chat_template", None)

    @classmethod
    def load(cls, path: str, dequantize_at_load: bool = False,
             opener: Optional[Callable[[str], Any]] = None, kernels: Any = None
             ) -> "TextModel":
        """Load weights, tokenizer and template from a model file or HF directory.

        `opener(path)` opens the file (default `open_model`; apr_native passes its mmap
        loader); `kernels` the backend's `registry.Kernels` (default numpy's)."""
        from ..formats.open import open_model
        with (opener or open_model)(path) as model_file:
            return cls.from_model_file(model_file, path, dequantize_at_load, kernels)

    @classmethod
    def from_model_file(cls, model_file: Any, path: Optional[str] = None,
                        dequantize_at_load: bool = False, kernels: Any = None
                        ) -> "TextModel":
        """Weights, tokenizer and template from an open ModelFile (`path`: where it came
        from, for a HF directory's config.json and tokenizer.json)."""
        from ..model.transformer import Transformer, read_hf_config
        hf_config = read_hf_config(path) if path and os.path.isdir(path) else None
        transformer = Transformer.from_model_file(model_file, dequantize_at_load, hf_config,
                                                  kernels)
        return cls(transformer, tokenizer_for(model_file, path))

    # ------------------------------------------------------------------ prompts

    def render(self, messages: Sequence[Dict[str, Any]], add_generation_prompt: bool = True,
               **extra: Any) -> str:
        """Chat messages rendered with the model's own template (`extra`, e.g. `tools`,
        reaches the template as variables)."""
        tok = self.tokenizer
        bos = tok.decode([tok.bos_id]) if tok.bos_id is not None else ""
        eos = tok.decode([tok.eos_id]) if tok.eos_id is not None else ""
        return render_chat(messages, self.chat_template, add_generation_prompt,
                           bos_token=bos, eos_token=eos, **extra)

    def check_template(self) -> Dict[str, Any]:
        """Render the probe conversations with this model's template (`chat_probe`):
        its `AprError` when the template is broken or over budget, else what it learned."""
        from ..text.chat_probe import probe_template
        tok = self.tokenizer
        bos = tok.decode([tok.bos_id]) if tok.bos_id is not None else ""
        eos = tok.decode([tok.eos_id]) if tok.eos_id is not None else ""
        return probe_template(self.chat_template, bos, eos)

    def prompt_ids(self, prompt: str, chat: bool = False, system: Optional[str] = None
                   ) -> List[int]:
        """Token ids for a plain prompt, or for one user turn through the chat template."""
        if not chat:
            return self.tokenizer.encode(prompt, add_special=True, parse_special=False)
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": prompt}]
        return self.chat_ids(messages)

    def chat_ids(self, messages: Sequence[Dict[str, Any]], **extra: Any) -> List[int]:
        text = self.render(messages, **extra)
        # The template already wrote BOS where the model wants it; don't add a second.
        ids = self.tokenizer.encode(text, add_special=False, parse_special=True)
        tok = self.tokenizer
        if tok.add_bos and tok.bos_id is not None and (not ids or ids[0] != tok.bos_id):
            ids = [tok.bos_id] + ids
        return ids

    # ------------------------------------------------------------------ generation

    def stream(self, prompt_ids: Sequence[int], sampler: Optional[SamplerConfig] = None,
               max_tokens: int = 128, stop: Sequence[str] = (), cache: Any = None
               ) -> Generator[Piece, None, str]:
        """Yield generated pieces; ends at EOS/EOG, a stop string, or `max_tokens`, and
        returns the finish reason: "stop" (EOS/EOG or a stop string) or "length"."""
        text = TextStream(self.tokenizer, stop)
        steps = generate_step(self.transformer, prompt_ids, Sampler.for_tokenizer(
            sampler or SamplerConfig(temperature=0.0), self.tokenizer), max_tokens,
            self.tokenizer.eog_ids, cache)
        while True:
            try:
                token = next(steps)
            except StopIteration as done:
                reason = "stop" if done.value == "eos" else "length"
                break
            piece, stopped = text.add(token)
            yield Piece(token, piece)
            if stopped:
                return "stop"
        tail = text.finish()
        if tail:
            yield Piece(-1, tail)
        return reason

    def generate(self, prompt_ids: Sequence[int], sampler: Optional[SamplerConfig] = None,
                 max_tokens: int = 128, stop: Sequence[str] = ()) -> Generation:
        """Run `stream` to the end and collect text, ids and timings."""
        start = time.perf_counter()
        first = None
        text: List[str] = []
        ids: List[int] = []
        pieces = self.stream(prompt_ids, sampler, max_tokens, stop)
        while True:
            try:
                piece = next(pieces)
            except StopIteration as done:
                reason = done.value           # the generator's, never guessed here
                break
            if first is None:
                first = time.perf_counter()
            if piece.token_id >= 0:
                ids.append(piece.token_id)
            text.append(piece.text)
        end = time.perf_counter()
        first = first or end
        return Generation("".join(text), ids, len(prompt_ids), reason, first - start,
                          end - first)
