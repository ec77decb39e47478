"""A profile as a Chrome trace (the JSON event format chrome://tracing and Perfetto load).

    write_trace("out.json", recorder.calls, recorder.spans)

Complete events ("ph": "X", times in microseconds from the start of the prefill, the
decode placed right after it): the phases, the token steps, the layers and every timed
op, nested on one track per phase (prefill tid 1, decode tid 2) and sorted by start
time; each op's args carry its layer, weights, tokens, bytes and FLOPs. Metadata events
name the process and the tracks.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Sequence

from apr_core.atomic import atomic_output

from .timing import Call, Span

TRACKS = {"prefill": 1, "decode": 2}


def _track(phase: str) -> int:
    return TRACKS.get(phase, len(TRACKS) + 1)


def phase_origins(spans: Sequence[Span]) -> Dict[str, int]:
    """Per phase, the clock reading its time 0 stands for: the reported phases may come
    from different runs, so each is placed after the ones before it as one run's would."""
    origins: Dict[str, int] = {}
    elapsed = 0
    for span in sorted((s for s in spans if s.category == "phase"),
                       key=lambda s: _track(s.phase)):
        origins[span.phase] = span.start_ns - elapsed
        elapsed += span.dur_ns
    return origins


def trace_events(calls: Sequence[Call], spans: Sequence[Span],
                 process: str = "apr profile") -> List[Dict[str, Any]]:
    """The events of `calls` and `spans` (metadata first, then by track and start)."""
    origins = phase_origins(spans)
    events: List[Dict[str, Any]] = []
    for span in spans:
        events.append({"name": span.name, "cat": span.category, "ph": "X",
                       "ts": (span.start_ns - origins[span.phase]) / 1e3,
                       "dur": span.dur_ns / 1e3, "pid": 1, "tid": _track(span.phase),
                       "args": {"phase": span.phase}})
    for call in calls:
        c = call.cost
        name = call.kind if c.label is None else "{} {}".format(call.kind, c.label)
        events.append({"name": name, "cat": call.kind, "ph": "X",
                       "ts": (call.start_ns - origins[call.phase]) / 1e3,
                       "dur": call.dur_ns / 1e3,
                       "pid": 1, "tid": _track(call.phase),
                       "args": {"op": call.kind, "layer": call.layer, "weights": c.label,
                                "tokens": c.tokens,
                                "bytes": c.weight_bytes + c.act_bytes + c.kv_bytes,
                                "flops": c.flops}})
    # a parent before its children when they start together: longer first
    events.sort(key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    meta: List[Dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0,
                                   "args": {"name": process}}]
    for phase in sorted({span.phase for span in spans} | {call.phase for call in calls},
                        key=_track):
        meta.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": _track(phase),
                     "args": {"name": phase}})
    return meta + events


def write_trace(path: str, calls: Sequence[Call], spans: Sequence[Span],
                process: str = "apr profile") -> int:
    """Write the trace file atomically; returns how many events it holds."""
    events = trace_events(calls, spans, process)
    with atomic_output(path) as handle:
        handle.write(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}).encode(
            "utf-8"))
    return len(events)


__all__ = ["trace_events", "write_trace", "TRACKS"]
