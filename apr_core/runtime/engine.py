"""THE engine object: a loaded model with its backend, tokenizer and batching runtime.

    engine = Engine.open(model_file_or_path, EngineOptions(), kernels=kernels, opener=...)
    for piece in engine.stream(engine.model.prompt_ids("Hi", chat=True), max_tokens=32):
        print(piece.text, end="")

Model file -> opener (mmap natively, ArrayBuffer/fetch in the browser) -> weights ->
backend (a `registry.Kernels` the model holds, never process-wide) -> tokenizer ->
generator. Native entry points (`apr run`, `chat`, `serve`, `eval`, `trace`, `bench`,
`canary`, the benches, `examples/ray_serve.py`) get theirs from `apr_native.engine.load_engine`,
which resolves built-in names and picks the backend and the mmap opener; the browser
worker opens one over its fetched bytes. Generation goes through the continuous-batching
`Scheduler` over a paged `BlockPool`: a single `apr run` is a batch of one, the server's
many requests share the same code.
"""
from __future__ import annotations

import copy
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Generator, Iterator, List, Optional, Sequence, Tuple

from ..errors import AprError, ErrorCode
from ..model import kv_types
from ..quant import registry
from .batching.paged_kv import DEFAULT_BLOCK_SIZE, BlockPool
from .batching.request import ErrorEvent, FinishEvent, GenerationRequest, TokenEvent
from .batching.scheduler import DEFAULT_MAX_BATCH, DEFAULT_STEP_TOKENS, Scheduler
from .batching.session import PagedSession
from .context_options import ContextOptions, apply_context
from .sampling import SamplerConfig
from .speculative import SpeculativeConfig
from .text_model import Generation, Piece, TextModel

DEFAULT_KV_MEMORY = 2 << 30     # bytes of KV blocks (virtual until written)
# The engine's KV cache type unless the options name one (`--kv-type`): half the memory
# of float32 (llama.cpp's default too); the library's caches default to kv_types.DEFAULT.
DEFAULT_KV_TYPE = "f16"


@dataclass(frozen=True)
class EngineOptions:
    backend: Optional[str] = None        # a backends.NAMES or auto; None: $APR_BACKEND
    dequantize: bool = False             # weights to float32 at load
    mmap: bool = True                    # map the file instead of reading it
    max_batch: int = DEFAULT_MAX_BATCH   # sequences decoded together
    step_tokens: int = DEFAULT_STEP_TOKENS   # rows per step (decode rows + prompt chunks)
    kv_memory: int = DEFAULT_KV_MEMORY   # bytes the KV block pool may hold
    block_size: int = DEFAULT_BLOCK_SIZE     # positions per KV block
    prefix_cache: bool = True            # share KV blocks of identical prompt prefixes
    chat_template: Optional[str] = None  # replaces the model's: a built-in name or Jinja
    context: Optional[ContextOptions] = None    # --ctx and RoPE overrides
    # CPU kernel threads of this engine's own (numba: a pool of that size); None: the
    # process's (APR_THREADS, else every core)
    threads: Optional[int] = None
    # LoRA adapters applied at run time: (PEFT directory or GGUF LoRA path, scale) each
    # (`--lora FILE[:SCALE]`); `transformer.lora.set_scales` changes the scales later
    lora: Tuple[Tuple[str, float], ...] = ()


def _one_request(prompt_ids: Sequence[int], sampler: Optional[SamplerConfig], max_tokens: int,
                 stop: Sequence[str], ignore_eos: bool,
                 speculative: Optional[SpeculativeConfig]) -> GenerationRequest:
    """The request of `Engine.stream` / `Engine.generate` (greedy unless told)."""
    return GenerationRequest(list(prompt_ids), sampler or SamplerConfig(temperature=0.0),
                             max_tokens, tuple(stop), ignore_eos=ignore_eos,
                             speculative=speculative)


def _shaped(model: TextModel, options: EngineOptions) -> TextModel:
    """`model` as `options` shape it (chat template, context and RoPE, KV cache type): a
    new TextModel over a shallow copy of its Transformer, the weights shared, so the
    object the caller handed over is left as it was (a second engine over the same
    weights may take other options). The copy's changed fields are rebound, never
    changed in place (`Transformer.reconfigure` replaces its config and ropes).
    Except on a device (webgpu): the device's forward pass holds the Transformer it was
    attached to and reads its config and ropes, so that one is shaped in place."""
    if getattr(model.transformer, "device", None) is not None:
        transformer = model.transformer
    else:
        transformer = copy.copy(model.transformer)
    if options.context is not None:
        apply_context(transformer, options.context)
    if options.context is None or options.context.kv_type is None:
        transformer.kv_type = kv_types.get(DEFAULT_KV_TYPE, transformer.config.head_dim).name
    if options.lora:
        from ..formats.lora import read_adapter
        from ..model.lora import apply_adapters
        transformer = apply_adapters(transformer, [(read_adapter(path), scale)
                                                   for path, scale in options.lora])
    shaped = copy.copy(model)
    shaped.transformer = transformer
    if options.chat_template and model.tokenizer is not None:
        shaped.chat_template = options.chat_template
    return shaped


class Engine:
    """A loaded model with its backend, tokenizer and batching scheduler."""

    def __init__(self, model: TextModel, options: Optional[EngineOptions] = None,
                 path: str = "", load_seconds: float = 0.0) -> None:
        self.options = options = options or EngineOptions()
        # the options that shape the model, applied here for every way an engine is made
        # (Engine.open, the browser worker, compiled workers), to the engine's own view
        self.model = _shaped(model, options)
        self.path = path
        self.load_seconds = load_seconds
        self._pool: Optional[BlockPool] = None
        self._scheduler: Optional[Scheduler] = None

    @classmethod
    def open(cls, path: str, options: Optional[EngineOptions] = None,
             kernels: Optional[registry.Kernels] = None,
             opener: Optional[Callable[[str], Any]] = None,
             with_tokenizer: bool = True) -> "Engine":
        """Load a model file or HF directory: weights on `kernels` (default numpy's),
        opened with `opener` (default `open_model`), and its tokenizer (not with
        `with_tokenizer=False`: logits only, for `session()`, e.g. `apr bench` on a model
        file that has no tokenizer)."""
        options = options or EngineOptions()
        start = time.perf_counter()
        if with_tokenizer:
            model = TextModel.load(path, dequantize_at_load=options.dequantize,
                                   opener=opener, kernels=kernels)
        else:
            from ..model import Transformer
            model = TextModel(Transformer.from_path(path, options.dequantize, opener, kernels),
                              None)
        return cls(model, options, os.fspath(path), time.perf_counter() - start)

    @property
    def backend(self) -> str:
        """The name of the backend the model runs on."""
        return self.transformer.kernels.backend

    @property
    def transformer(self) -> Any:
        return self.model.transformer

    @property
    def pool(self) -> BlockPool:
        """The KV block pool (created on first use; the arrays are virtual until used)."""
        if self._pool is None:
            cfg, opts = self.transformer.config, self.options
            most = opts.max_batch * -(-cfg.max_ctx // opts.block_size)
            self._pool = BlockPool.for_model(cfg, opts.kv_memory, opts.block_size,
                                             opts.prefix_cache, max_blocks=most,
                                             kv_type=self.transformer.kv_type)
        return self._pool

    @property
    def scheduler(self) -> Scheduler:
        """The batching scheduler over `pool`."""
        if self._scheduler is None:
            if self.model.tokenizer is None:
                raise AprError(ErrorCode.ARGUMENT, "generation needs the model's tokenizer "
                               "(this engine was loaded without it)")
            self._scheduler = Scheduler(self.transformer, self.model.tokenizer, self.pool,
                                        self.options.max_batch, self.options.step_tokens,
                                        self.transformer.kernels.uniform_rows)
        return self._scheduler

    def session(self) -> "PagedSession":
        """A hand-driven sequence over the scheduler's block pool (bench, canary)."""
        return PagedSession(self.transformer, self.pool)

    # ------------------------------------------------------------------ one generation

    def events(self, request: GenerationRequest) -> Iterator[Any]:
        """Run `request` to its end on the calling thread, yielding its events (the
        scheduler must not be driven by another thread meanwhile)."""
        scheduler = self.scheduler
        kernels = self.transformer.kernels
        out: List[Any] = []
        state = scheduler.submit(request, out.append)
        kernels.upgrade(len(request.prompt_ids))     # a quick-start backend: long prompts
        decoding = False
        try:
            while True:
                while out:
                    event = out.pop(0)
                    if isinstance(event, ErrorEvent):
                        raise event.error
                    decoding = decoding or isinstance(event, TokenEvent)
                    yield event
                if state.done or not scheduler.has_work():
                    return
                if decoding:
                    kernels.upgrade()                # ... and every decode step
                scheduler.step()
        finally:
            if not state.done:
                scheduler.cancel(state)

    def stream(self, prompt_ids: Sequence[int], sampler: Optional[SamplerConfig] = None,
               max_tokens: int = 128, stop: Sequence[str] = (),
               speculative: Optional[SpeculativeConfig] = None,
               report: Optional[Callable[[FinishEvent], None]] = None,
               ignore_eos: bool = False) -> Generator[Piece, None, str]:
        """Pieces of one greedy (or sampled) generation, as `TextModel.stream` gives; the
        generator returns the finish reason ("stop", "length", ...). `speculative`: draft
        and verify (same ids when greedy, same distribution when sampling); `report` gets
        the FinishEvent (its `speculative` counters)."""
        request = _one_request(prompt_ids, sampler, max_tokens, stop, ignore_eos, speculative)
        for event in self.events(request):
            if isinstance(event, TokenEvent):
                yield Piece(event.token_id, event.text)
            elif isinstance(event, FinishEvent):
                if report is not None:
                    report(event)
                if event.text:
                    yield Piece(-1, event.text)
                return event.finish_reason
        return "length"

    def generate(self, prompt_ids: Sequence[int], sampler: Optional[SamplerConfig] = None,
                 max_tokens: int = 128, stop: Sequence[str] = (),
                 speculative: Optional[SpeculativeConfig] = None,
                 ignore_eos: bool = False) -> Generation:
        """One generation to its end: text, ids, the generator's finish reason, timings
        (and the speculative counters when `speculative` is given)."""
        request = _one_request(prompt_ids, sampler, max_tokens, stop, ignore_eos, speculative)
        start = time.perf_counter()
        first: Optional[float] = None
        text: List[str] = []
        ids: List[int] = []
        finish = "length"
        counters = None
        for event in self.events(request):
            if first is None:
                first = time.perf_counter()
            if isinstance(event, TokenEvent):
                ids.append(event.token_id)
            else:
                finish = event.finish_reason
                counters = event.speculative
            text.append(event.text)
        end = time.perf_counter()
        first = first or end
        return Generation("".join(text), ids, len(request.prompt_ids), finish, first - start,
                          end - first, counters)


    def kv_report(self) -> dict:
        """The KV cache's type, bytes per position (K and V, every layer) and the bytes a
        full context takes (`--verbose`, `apr bench`)."""
        cfg = self.transformer.config
        per = kv_types.token_bytes(self.transformer.kv_type, cfg.n_layers, cfg.n_kv_heads,
                                   cfg.head_dim)
        return {"kv_type": self.transformer.kv_type, "bytes_per_token": per,
                "context": cfg.max_ctx, "context_bytes": per * cfg.max_ctx}


__all__ = ["Engine", "EngineOptions", "DEFAULT_KV_MEMORY", "DEFAULT_KV_TYPE"]
