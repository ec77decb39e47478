"""THE engine object: model file -> backend -> mmap opener -> tokenizer -> batching runtime.

    engine = Engine.load("demo", EngineOptions(backend="numba"))
    for piece in engine.stream(engine.model.prompt_ids("Hi", chat=True), max_tokens=32):
        print(piece.text, end="")

Every entry point gets its model here (`apr run`, `chat`, `serve`, `eval`, `trace`,
`bench`, `canary`, `examples/ray_serve.py`), so all of them run on the same backend
(`--backend`, else $APR_BACKEND, else the fastest available) with the same mmap loading.
Generation goes through the continuous-batching `Scheduler` over a paged `BlockPool`: a
single `apr run` is a batch of one, the server's many requests share the same code.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional, Sequence

from apr_core.runtime.batching.paged_kv import DEFAULT_BLOCK_SIZE, BlockPool
from apr_core.runtime.batching.request import ErrorEvent, FinishEvent, GenerationRequest, TokenEvent
from apr_core.runtime.batching.scheduler import DEFAULT_MAX_BATCH, DEFAULT_STEP_TOKENS, Scheduler
from apr_core.runtime.batching.session import PagedSession
from apr_core.errors import AprError, ErrorCode
from apr_core.runtime.text_model import Generation, Piece, TextModel
from apr_core.runtime.sampling import SamplerConfig

from . import backends

DEFAULT_KV_MEMORY = 2 << 30     # bytes of KV blocks (virtual until written)


@dataclass(frozen=True)
class EngineOptions:
    backend: Optional[str] = None        # numpy | numba | cuda | auto; None: $APR_BACKEND
    dequantize: bool = False             # weights to float32 at load
    mmap: bool = True                    # map the file instead of reading it
    max_batch: int = DEFAULT_MAX_BATCH   # sequences decoded together
    step_tokens: int = DEFAULT_STEP_TOKENS   # rows per step (decode rows + prompt chunks)
    kv_memory: int = DEFAULT_KV_MEMORY   # bytes the KV block pool may hold
    block_size: int = DEFAULT_BLOCK_SIZE     # positions per KV block
    prefix_cache: bool = True            # share KV blocks of identical prompt prefixes


def resolve_model(name: str) -> str:
    """A path on disk, or a built-in model name such as `demo` (located and verified)."""
    if os.path.exists(name):
        return name
    from . import real_models
    if name in real_models.MODELS:
        return str(real_models.locate(name))
    raise AprError(ErrorCode.IO, "no such file or built-in model", path=name)


def _uniform_rows(backend: str) -> int:
    """Rows from which the backend's matmul takes one path whatever the count (numba:
    integer dots up to DOT_MAX_TOKENS rows, float products above)."""
    if backend == "numba":
        from .kernels.cpu import DOT_MAX_TOKENS
        return DOT_MAX_TOKENS + 1
    return 1


class Engine:
    """A loaded model with its backend, tokenizer and batching scheduler."""

    def __init__(self, model: TextModel, backend: str, options: EngineOptions,
                 path: str = "", load_seconds: float = 0.0) -> None:
        self.model = model
        self.backend = backend
        self.options = options
        self.path = path
        self.load_seconds = load_seconds
        self._pool: Optional[BlockPool] = None
        self._scheduler: Optional[Scheduler] = None

    @classmethod
    def load(cls, name: str, options: Optional[EngineOptions] = None,
             with_tokenizer: bool = True) -> "Engine":
        """Resolve `name`, select the backend, load weights (mmap) and tokenizer (not
        with `with_tokenizer=False`: logits only, for `session()`, e.g. `apr bench` on a
        model file that has no tokenizer)."""
        options = options or EngineOptions()
        start = time.perf_counter()
        path = resolve_model(name)
        kernels = backends.select(options.backend)
        opener = None
        if options.mmap:
            from .mmap_source import open_mmap
            opener = open_mmap
        if with_tokenizer:
            model = TextModel.load(path, dequantize_at_load=options.dequantize,
                                   opener=opener, kernels=kernels)
        else:
            from apr_core.model import Transformer
            model = TextModel(Transformer.from_path(path, options.dequantize, opener, kernels),
                              None)
        return cls(model, kernels.backend, options, path, time.perf_counter() - start)

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
                                             opts.prefix_cache, max_blocks=most)
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
                                        _uniform_rows(self.backend))
        return self._scheduler

    def session(self) -> "PagedSession":
        """A hand-driven sequence over the scheduler's block pool (bench, canary)."""
        return PagedSession(self.transformer, self.pool)

    # ------------------------------------------------------------------ one generation

    def events(self, request: GenerationRequest) -> Iterator[Any]:
        """Run `request` to its end on the calling thread, yielding its events (the
        scheduler must not be driven by another thread meanwhile)."""
        scheduler = self.scheduler
        out: List[Any] = []
        state = scheduler.submit(request, out.append)
        try:
            while True:
                while out:
                    event = out.pop(0)
                    if isinstance(event, ErrorEvent):
                        raise event.error
                    yield event
                if state.done or not scheduler.has_work():
                    return
                scheduler.step()
        finally:
            if not state.done:
                scheduler.cancel(state)

    def stream(self, prompt_ids: Sequence[int], sampler: Optional[SamplerConfig] = None,
               max_tokens: int = 128, stop: Sequence[str] = ()) -> Iterator[Piece]:
        """Pieces of one greedy (or sampled) generation, as `TextModel.stream` gives."""
        request = GenerationRequest(list(prompt_ids), sampler or SamplerConfig(temperature=0.0),
                                    max_tokens, tuple(stop))
        for event in self.events(request):
            if isinstance(event, TokenEvent):
                yield Piece(event.token_id, event.text)
            elif isinstance(event, FinishEvent) and event.text:
                yield Piece(-1, event.text)

    def generate(self, prompt_ids: Sequence[int], sampler: Optional[SamplerConfig] = None,
                 max_tokens: int = 128, stop: Sequence[str] = ()) -> Generation:
        """One generation to its end: text, ids, the generator's finish reason, timings."""
        request = GenerationRequest(list(prompt_ids), sampler or SamplerConfig(temperature=0.0),
                                    max_tokens, tuple(stop))
        start = time.perf_counter()
        first: Optional[float] = None
        text: List[str] = []
        ids: List[int] = []
        finish = "length"
        for event in self.events(request):
            if first is None:
                first = time.perf_counter()
            if isinstance(event, TokenEvent):
                ids.append(event.token_id)
            else:
                finish = event.finish_reason
            text.append(event.text)
        end = time.perf_counter()
        first = first or end
        return Generation("".join(text), ids, len(request.prompt_ids), finish, first - start,
                          end - first)


__all__ = ["Engine", "EngineOptions", "resolve_model", "DEFAULT_KV_MEMORY"]
