"""Running the profile: a prefill of the prompt and greedy decoding of N tokens, plain and
profiled, after a warm-up.

    steps, finish = stages(engine, recorder, prompt_ids, n_decode, repeats=3)
    for name, run in steps:
        run()
    phases = finish()             # {"prefill": PhaseRun, "decode": PhaseRun}

1. warm-up, untimed (numba loads its compiled kernels, pages of the mapped file come in);
2. plain: the backend as `apr run` and `apr bench` run it (a numba layer is one fused
   call) -> the unprofiled wall times and tokens/s;
3. profiled: the same work with the recorder on, layers op by op, every kernel call timed;
2 and 3 `repeats` times in turn, the fastest run of each reported per phase.
Each run is a fresh `PagedSession` over the engine's block pool (what `apr bench` times):
prefill = forward of the prompt and argmax of its last logits; decode = N steps of one
token each (forward, argmax). The phases' wall times cover exactly that work: a decode's
is the sum of its steps', so the profiler's bookkeeping between steps (working out each
call's bytes and FLOPs) is not in it, while its timing proxies are.
"""
from __future__ import annotations

import gc
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from apr_core.errors import AprError, ErrorCode

from .report import PhaseRun
from .timing import Recorder

WARMUP_DECODE = 2
PHASES = ("prefill", "decode")


def _run(engine: Any, ids: Sequence[int], n_decode: int, recorder: Optional[Recorder] = None
         ) -> Tuple[float, float]:
    """(prefill seconds, decode seconds) of one run; phases and step spans go to
    `recorder` when given."""
    clock = time.perf_counter_ns

    def pick(logits: Any) -> int:
        """Greedy sampling, timed as op "argmax" when recording."""
        begin = clock()
        token = int(logits.argmax())                                # [n_vocab] -> id
        if recorder is not None:
            recorder.record("argmax", begin, clock() - begin, (logits,))
        return token

    session = engine.session()
    try:
        if recorder is not None:
            recorder.phase = "prefill"
        start = clock()
        token = pick(session.forward(list(ids)))
        prefill_end = clock()
        if recorder is not None:
            recorder.span("prefill", "phase", start)
            recorder.phase, recorder.defer_costs = "decode", True
        decode_start = clock()
        decode_ns = 0
        for step in range(n_decode):
            step_start = clock()
            token = pick(session.forward([token]))
            step_end = clock()
            decode_ns += step_end - step_start
            if recorder is not None:
                recorder.span("token {}".format(step), "step", step_start)
                recorder.settle()          # between the steps: not in their wall time
        if recorder is not None:
            recorder.span("decode", "phase", decode_start)
    finally:
        if recorder is not None:
            recorder.settle()
            recorder.phase, recorder.defer_costs = None, False
        session.close()
    return (prefill_end - start) / 1e9, decode_ns / 1e9


def stages(engine: Any, recorder: Recorder, ids: Sequence[int], n_decode: int,
           repeats: int = 1
           ) -> Tuple[List[Tuple[str, Callable[[], None]]], Callable[[], Dict[str, PhaseRun]]]:
    """The runs as (name, callable) stages (for a progress bar) and `finish()`, which
    gives the phases' PhaseRuns once they have run and leaves in `recorder` the calls and
    spans of the profiled run reported for each phase. Plain and profiled runs take place
    `repeats` times each, interleaved; per phase the fastest of each counts (the least
    disturbed by the machine's other work: `apr bench` reports its best run too)."""
    if not ids:
        raise AprError(ErrorCode.ARGUMENT, "the profile's prompt needs at least one token")
    plain_best: Dict[str, float] = {}
    # phase -> (seconds, its calls, its spans) of the fastest profiled run so far
    profiled_best: Dict[str, Tuple[float, List[Any], List[Any]]] = {}
    names = PHASES if n_decode else PHASES[:1]
    recorder.attach(engine.transformer)

    def warmup() -> None:
        _run(engine, ids, WARMUP_DECODE)

    def plain() -> None:
        for phase, seconds in zip(names, _run(engine, ids, n_decode)):
            plain_best[phase] = min(seconds, plain_best.get(phase, seconds))

    def profiled() -> None:
        recorder.clear()
        # The collector paused (as timeit does): the records the proxies keep would
        # otherwise trigger collections in the middle of the ops being timed.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            times = _run(engine, ids, n_decode, recorder)
        finally:
            if was_enabled:
                gc.enable()
        for phase, seconds in zip(names, times):
            if phase not in profiled_best or seconds < profiled_best[phase][0]:
                profiled_best[phase] = (
                    seconds, [c for c in recorder.calls if c.phase == phase],
                    [s for s in recorder.spans if s.phase == phase])

    def finish() -> Dict[str, PhaseRun]:
        recorder.clear()
        for phase in names:
            recorder.calls.extend(profiled_best[phase][1])
            recorder.spans.extend(profiled_best[phase][2])
        return {phase: PhaseRun(len(ids) if phase == "prefill" else n_decode,
                                profiled_best[phase][0], plain_best[phase])
                for phase in names}
    runs = [("warm-up", warmup)] + [("plain run", plain), ("profiled run", profiled)] * \
        max(1, repeats)
    return runs, finish


__all__ = ["stages", "WARMUP_DECODE", "PHASES"]
