"""From timed calls to the profile's rows: per phase, op kind, weights and layer, with bytes,
FLOPs, achieved rates and the roofline verdict; an "other" row per phase for the time no
timed op accounts for (the numpy between kernels, RoPE tables, KV-cache bookkeeping, the
profiler's proxies).

    rows = op_rows(calls, phases, roof)      # phases: {"prefill": PhaseRun, "decode": ...}
    totals = phase_totals(rows, phases, roof)
    by_kind(rows, "decode", roof)            # a phase's rows summed over layers (the tables)
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Tuple

from .roofline import verdict
from .timing import Call

OTHER = "other"
SUMMED = ("calls", "tokens", "time_ms", "bytes", "weight_bytes", "act_bytes", "kv_bytes",
          "flops")


class PhaseRun(NamedTuple):
    """One phase's wall time: profiled (op by op, timed) and as the backend runs it."""
    tokens: int                   # prompt tokens (prefill) or tokens decoded
    seconds: float                # wall time of the profiled run
    plain_seconds: float          # the same work without profiling (fused layers)


def _rated(row: Dict[str, Any], roof: Dict[str, Any]) -> Dict[str, Any]:
    row.update(verdict(roof, row["flops"], row["bytes"], row["time_ms"] / 1e3))
    return row


def op_rows(calls: Iterable[Call], phases: Dict[str, PhaseRun], roof: Dict[str, Any]
            ) -> List[Dict[str, Any]]:
    """One row per (phase, op kind, weights, layer) in call order, then per phase the
    "other" row (`remainder: true`): wall time minus the ops' time."""
    rows: Dict[Tuple[str, str, Optional[str], Optional[int]], Dict[str, Any]] = {}
    for call in calls:
        key = (call.phase, call.kind, call.cost.label, call.layer)
        row = rows.get(key)
        if row is None:
            row = rows[key] = {"phase": call.phase, "op": call.kind, "weights": call.cost.label,
                               "layer": call.layer, "tensors": list(call.cost.tensors),
                               "remainder": False, **{name: 0 for name in SUMMED}}
        c = call.cost
        row["calls"] += 1
        row["tokens"] += c.tokens
        row["time_ms"] += call.dur_ns / 1e6
        row["weight_bytes"] += c.weight_bytes
        row["act_bytes"] += c.act_bytes
        row["kv_bytes"] += c.kv_bytes
        row["bytes"] += c.weight_bytes + c.act_bytes + c.kv_bytes
        row["flops"] += c.flops
    out = [_rated(row, roof) for row in rows.values()]
    for phase, run in phases.items():
        ops_ms = sum(r["time_ms"] for r in out if r["phase"] == phase)
        other = {"phase": phase, "op": OTHER, "weights": None, "layer": None, "tensors": [],
                 "remainder": True, **{name: 0 for name in SUMMED}}
        other["time_ms"] = run.seconds * 1e3 - ops_ms
        out.append(_rated(other, roof))
    for row in out:
        row["share_pct"] = 100.0 * row["time_ms"] / (phases[row["phase"]].seconds * 1e3)
    return out


def phase_totals(rows: List[Dict[str, Any]], phases: Dict[str, PhaseRun],
                 roof: Dict[str, Any]) -> Dict[str, Any]:
    """Per phase: wall time, tokens/s (profiled and plain), the ops' share of the wall time,
    bytes and FLOPs in all and their rates; for decode the bandwidth roof in tokens/s."""
    totals: Dict[str, Any] = {}
    for phase, run in phases.items():
        mine = [r for r in rows if r["phase"] == phase]
        ops_ms = sum(r["time_ms"] for r in mine if not r["remainder"])
        nbytes = sum(r["bytes"] for r in mine)
        flops = sum(r["flops"] for r in mine)
        total = {"tokens": run.tokens, "time_ms": run.seconds * 1e3,
                 "tok_s": run.tokens / run.seconds, "ops_ms": ops_ms,
                 "other_ms": run.seconds * 1e3 - ops_ms,
                 "ops_share": ops_ms / (run.seconds * 1e3),
                 "bytes": nbytes, "flops": flops,
                 "gbs": nbytes / run.seconds / 1e9, "gflops": flops / run.seconds / 1e9,
                 "unprofiled_time_ms": run.plain_seconds * 1e3,
                 "unprofiled_tok_s": run.tokens / run.plain_seconds,
                 "profiling_overhead": run.seconds / run.plain_seconds}
        if phase == "decode":
            per_token = nbytes / run.tokens
            total["bytes_per_token"] = per_token
            total["roof_tok_s"] = roof["bandwidth_gbs"] * 1e9 / per_token
        totals[phase] = total
    return totals


def _layers(layers: List[Optional[int]]) -> str:
    found = sorted(l for l in layers if l is not None)
    if not found:
        return "-"
    if found == list(range(found[0], found[-1] + 1)):
        return str(found[0]) if len(found) == 1 else "{}-{}".format(found[0], found[-1])
    return ",".join(map(str, found))


def by_kind(rows: List[Dict[str, Any]], phase: str, roof: Dict[str, Any]
            ) -> List[Dict[str, Any]]:
    """`phase`'s rows summed over layers per (op kind, weights), slowest first, the
    remainder last; `layers` says which layers ("0-29", "-" for none)."""
    merged: Dict[Tuple[str, Optional[str]], Dict[str, Any]] = {}
    for row in rows:
        if row["phase"] != phase:
            continue
        key = (row["op"], row["weights"])
        into = merged.get(key)
        if into is None:
            into = merged[key] = {"op": row["op"], "weights": row["weights"], "layer_list": [],
                                  "remainder": row["remainder"], "share_pct": 0.0,
                                  **{name: 0 for name in SUMMED}}
        into["layer_list"].append(row["layer"])
        into["share_pct"] += row["share_pct"]
        for name in SUMMED:
            into[name] += row[name]
    out = []
    for row in merged.values():
        row["layers"] = _layers(row.pop("layer_list"))
        out.append(_rated(row, roof))
    return sorted(out, key=lambda r: (r["remainder"], -r["time_ms"]))


__all__ = ["PhaseRun", "op_rows", "phase_totals", "by_kind", "OTHER"]
