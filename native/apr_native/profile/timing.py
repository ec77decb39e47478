"""Timing every kernel call of one model: a `registry.Kernels` whose kernels are timing
proxies while a `Recorder` is recording.

    recorder = Recorder()
    kernels = ProfilingKernels(backends.select("numba"), recorder)   # load the model on it
    recorder.attach(transformer)          # names its weights (for bytes and labels)
    recorder.phase = "decode"             # from here on calls are timed
    ...
    recorder.phase = None                 # and from here on they run as before

The transformer looks its kernels up per call (`Kernels.lookup` / `.fused`), so a
lookup that hands out a proxy times the op without touching model code: nothing changes
for any other model, and with no phase set a lookup returns the backend's own kernel.
While recording, the fused kind "decoder_block" becomes a scope that runs the layer op by
op (the reference `Transformer.run_block`: a backend that runs a whole layer as one call,
like numba's, would hide the ops inside it) and tells the proxies which layer they are in.
Only the outermost kernel call is timed: a kernel that calls other kinds (numpy's
"matmul_group" calls "matmul" per weight) counts once, with its own cost. The embedding
lookup and the output norm, which no kernel runs, are timed by stand-ins on the profiled
model (`Recorder.attach`).
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from apr_core.quant import registry

from .costs import Cost, WeightNames, cost_of

SCOPE_KIND = "decoder_block"


class Call(NamedTuple):
    """One timed kernel call."""
    phase: str
    kind: str
    layer: Optional[int]
    start_ns: int                 # perf_counter_ns
    dur_ns: int
    cost: Cost


class Span(NamedTuple):
    """A named stretch of time that contains calls: a layer, a token step, a phase."""
    phase: str
    name: str
    category: str                 # "layer" | "step" | "phase"
    start_ns: int
    dur_ns: int


def _timer(recorder: "Recorder", kind: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, timed as op `kind` while `recorder` records (not inside another timed op:
    an op that calls others counts once, with its own cost)."""
    clock = time.perf_counter_ns

    def timed(*args: Any) -> Any:
        if recorder.depth or recorder.phase is None:
            return fn(*args)
        recorder.depth = 1
        start = clock()
        try:
            return fn(*args)
        finally:
            end = clock()
            recorder.depth = 0
            if recorder.defer_costs:            # (record's first branch, inlined: hot)
                recorder.pending.append((recorder.phase, kind, recorder.layer, start,
                                         end - start, args))
            else:
                recorder.record(kind, start, end - start, args)
    return timed


class _TimedPart:
    """A model part with its one step timed: `rows(ids)` for an embedding, a call for a
    norm; everything else (attributes, other methods) is the part's own."""

    def __init__(self, part: Any, timed: Callable[..., Any]) -> None:
        self._part = part
        self._timed = timed

    def rows(self, ids: Any) -> Any:
        return self._timed(self._part, ids)

    def __call__(self, x: Any) -> Any:
        return self._timed(self._part, x)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._part, name)


class Recorder:
    """Where the proxies write: the phase being recorded (None: not recording), the layer
    being run, and every call and span so far.

    With `defer_costs` a call keeps its arguments until `settle()` works out its cost, so
    that bookkeeping can run outside the timed work (the runner settles after each decode
    step); without it the cost is worked out at once and no arguments are kept (a long
    prefill would otherwise hold every activation of every layer)."""

    def __init__(self) -> None:
        self.phase: Optional[str] = None
        self.layer: Optional[int] = None
        self.depth = 0                # > 0 inside a timed call
        self.defer_costs = False
        self.names: Optional[WeightNames] = None
        self.calls: List[Call] = []
        self.spans: List[Span] = []
        # (phase, kind, layer, start, duration, arguments) of calls not costed yet
        self.pending: List[Tuple[str, str, Optional[int], int, int, Tuple[Any, ...]]] = []
        self.layer_spans: List[Tuple[str, int, int, int]] = []   # phase, layer, start, dur

    def record(self, kind: str, start: int, dur: int, args: Tuple[Any, ...]) -> None:
        if self.defer_costs:
            self.pending.append((self.phase or "", kind, self.layer, start, dur, args))
        else:
            self.calls.append(Call(self.phase or "", kind, self.layer, start, dur,
                                   cost_of(kind, self.names, args)))

    def settle(self) -> None:
        """Work out the costs of the deferred calls (and let go of their arguments) and
        name the deferred layer spans."""
        names = self.names
        self.calls.extend(Call(phase, kind, layer, start, dur, cost_of(kind, names, args))
                          for phase, kind, layer, start, dur, args in self.pending)
        self.spans.extend(Span(phase, "blk.{}".format(layer), "layer", start, dur)
                          for phase, layer, start, dur in self.layer_spans)
        self.pending, self.layer_spans = [], []

    def attach(self, transformer: Any) -> None:
        """Learn the model's weights (labels and stored bytes of what matmuls read) and
        time the two steps of its forward that no kernel runs: the embedding lookup and
        the output norm (`_TimedPart`s stand in for them on this model only)."""
        self.names = WeightNames(transformer)
        if not isinstance(transformer.embedding, _TimedPart):
            transformer.embedding = _TimedPart(transformer.embedding, _timer(
                self, "embedding", type(transformer.embedding).rows))
        if not isinstance(transformer.output_norm, _TimedPart):
            transformer.output_norm = _TimedPart(transformer.output_norm, _timer(
                self, "output_norm", type(transformer.output_norm).__call__))

    def span(self, name: str, category: str, start_ns: int) -> None:
        """Close a span that began at `start_ns` (now is its end)."""
        self.spans.append(Span(self.phase or "", name, category, start_ns,
                               time.perf_counter_ns() - start_ns))

    def clear(self) -> None:
        self.calls, self.spans, self.pending, self.layer_spans = [], [], [], []


class ProfilingKernels(registry.Kernels):
    """`inner`'s kernels, each behind a timing proxy while `recorder.phase` is set."""

    def __init__(self, inner: registry.Kernels, recorder: Recorder) -> None:
        super().__init__(inner.backend, inner.uniform_rows)
        self.inner = inner
        self.recorder = recorder
        # kind (fused kinds, dtype "*") or (kind, dtype) -> its proxy
        self._proxies: Dict[Any, Callable[..., Any]] = {}

    def fused(self, kind: str) -> registry.Kernel:
        # `Kernels.fused` is `lookup(kind, "*")`; a recorded proxy straight away (the
        # model looks up a dozen kernels per layer: the profiler's own cost is kept low)
        proxy = self._proxies.get(kind) if self.recorder.phase is not None else None
        return proxy if proxy is not None else self.lookup(kind, "*")

    def lookup(self, kind: str, dtype_name: str) -> registry.Kernel:
        if self.recorder.phase is None:
            return self.inner.lookup(kind, dtype_name)
        # While recording, proxies by (kind, dtype): nothing registers kernels meanwhile.
        key = kind if dtype_name == "*" else (kind, dtype_name)
        proxy = self._proxies.get(key)
        if proxy is None:
            kernel = self.inner.lookup(kind, dtype_name)
            proxy = self._proxies[key] = (
                self._scope() if kind == SCOPE_KIND else _timer(self.recorder, kind, kernel))
        return proxy

    def _scope(self) -> Callable[..., Any]:
        recorder, clock = self.recorder, time.perf_counter_ns
        by_ops = registry.lookup(SCOPE_KIND, "*")      # the reference: run_block, op by op

        def layer(model: Any, block: Any, *args: Any) -> Any:
            recorder.layer = block.index
            start = clock()
            try:
                return by_ops(model, block, *args)
            finally:
                end = clock()
                recorder.layer_spans.append((recorder.phase, block.index, start, end - start))
                recorder.layer = None
        return layer

    def __repr__(self) -> str:
        return "<ProfilingKernels {}>".format(self.backend)


__all__ = ["Call", "Span", "Recorder", "ProfilingKernels"]
