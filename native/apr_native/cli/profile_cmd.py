"""`apr profile MODEL`: where a prefill's and a decode's time goes, per op kind and layer,
against this machine's roofline.

    apr profile demo --json --trace out.json --assert-throughput 20

Runs a prefill of `--prompt-tokens` fixed pseudo-random ids (as `apr bench`; or the
`--prompt` text) and greedy decoding of `--decode-tokens` tokens: once untimed, then
`--repeats` times each as the backend runs it (`unprofiled` speeds: what `apr run` gets)
and with every kernel call timed (`apr_native.profile.timing`: layers run op by op, so a
backend's fused one-call layer is split into its ops); per phase the fastest run of each
is reported. Each op's bytes moved and FLOPs (`apr_native.profile.costs`) give its GB/s,
GFLOP/s and roofline verdict against the measured bandwidth and peak
(`apr_native.profile.roofline`, cached per machine; `--probe` measures again). `--trace`
writes a Chrome/Perfetto trace; `--assert-throughput N` exits 1
when unprofiled decode is below N tokens/s.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, List

from apr_core.errors import AprError, ErrorCode

from .. import backends
from . import thread_args
from .commands import help_line
from .common import EXIT_GENERAL, EXIT_OK, check_output, emit_json, human_bytes


def _apply_threads(threads: int, backend: str) -> None:
    """Run numba's kernels on `threads` threads (the pool may already run: restart it)."""
    if backend != "numba":
        return
    import numba
    from ..kernels import pool
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    if len(pool.get().threads) + 1 != threads:
        pool.restart(threads)


def _prompt_ids(engine: Any, args: argparse.Namespace) -> List[int]:
    if args.prompt is not None:
        ids = engine.model.prompt_ids(args.prompt)
        if not ids:
            raise AprError(ErrorCode.ARGUMENT, "--prompt gives no tokens")
        return ids
    if os.path.isdir(engine.path):
        raise AprError(ErrorCode.UNSUPPORTED, "a model directory needs --prompt TEXT (the "
                       "fixed token ids are made for a single model file)", path=engine.path)
    from .bench_cmd import prompt_ids
    return prompt_ids(engine.path, args.prompt_tokens)


def _check(args: argparse.Namespace) -> None:
    for name, value in (("--prompt-tokens", args.prompt_tokens),
                        ("--decode-tokens", args.decode_tokens), ("--repeats", args.repeats)):
        if value < 1:
            raise AprError(ErrorCode.ARGUMENT, "{} must be at least 1".format(name))
    if args.threads is not None and args.threads < 1:
        raise AprError(ErrorCode.ARGUMENT, "--threads must be at least 1")
    if args.trace:
        check_output(args.trace, args.force)


def profile(args: argparse.Namespace) -> Dict[str, Any]:
    """Load, run and measure: the report `--json` prints."""
    from apr_native.engine import EngineOptions, load_engine
    from apr_native.profile import report, roofline, runner
    from apr_native.profile.timing import ProfilingKernels, Recorder
    from .render import progress
    recorder = Recorder()
    engine = load_engine(args.model, EngineOptions(backend=args.backend),
                         with_tokenizer=args.prompt is not None,
                         wrap_kernels=lambda kernels: ProfilingKernels(kernels, recorder))
    if args.threads:
        _apply_threads(args.threads, engine.backend)
    ids = _prompt_ids(engine, args)
    context = engine.transformer.config.max_ctx
    if len(ids) + args.decode_tokens > context:
        raise AprError(ErrorCode.ARGUMENT, "prompt and decoded tokens exceed the model's "
                       "context", prompt=len(ids), decode=args.decode_tokens, context=context)
    roof = roofline.machine_roof(force=args.probe)
    steps, finish = runner.stages(engine, recorder, ids, args.decode_tokens, args.repeats)
    for _, run in progress(steps, "profiling"):
        run()
    phases = finish()
    rows = report.op_rows(recorder.calls, phases, roof)
    out = {"model": engine.path, "backend": engine.backend,
           "threads": thread_args.in_use(engine.backend),
           "prompt_tokens": len(ids), "decode_tokens": args.decode_tokens,
           "layer_mode": "profiled: op by op; unprofiled: as the backend runs them (fused)",
           "ops": rows, "roofline": roof, "totals": report.phase_totals(rows, phases, roof),
           "kinds": {phase: report.by_kind(rows, phase, roof) for phase in phases},
           "trace": None}
    if args.trace:
        from apr_native.profile.chrome_trace import write_trace
        out["trace"] = {"path": args.trace, "events": write_trace(
            args.trace, recorder.calls, recorder.spans)}
    return out


def run_profile(args: argparse.Namespace) -> int:
    _check(args)
    result = profile(args)
    decode = result["totals"]["decode"]["unprofiled_tok_s"]
    if args.assert_throughput is not None:
        result["assert_throughput"] = {"min_tok_s": args.assert_throughput,
                                       "decode_tok_s": decode,
                                       "passed": decode >= args.assert_throughput}
    if args.json:
        emit_json(result)
    else:
        _print(result)
    if args.assert_throughput is not None and decode < args.assert_throughput:
        print("apr: decode {:.2f} tok/s is below --assert-throughput {:g}".format(
            decode, args.assert_throughput), file=sys.stderr)
        return EXIT_GENERAL
    return EXIT_OK


def _pct(value: Any) -> str:
    return "-" if value is None else "{:.1f}".format(value)


def _rate(value: Any) -> str:
    return "-" if value is None else "{:.2f}".format(value)


def _print(result: Dict[str, Any]) -> None:
    from .render import print_table
    roof = result["roofline"]
    threads = result["threads"]
    print("{} [{}{}]: prefill {} tokens, decode {} tokens".format(
        result["model"], result["backend"], "" if threads is None else ", {} thread{}".format(
            threads, "" if threads == 1 else "s"), result["prompt_tokens"],
        result["decode_tokens"]))
    for phase, total in result["totals"].items():        # prefill, then decode
        rows = [[r["op"], r["weights"] or "", r["layers"], "" if r["remainder"] else r["calls"],
                 "{:.2f}".format(r["time_ms"]), _pct(r["share_pct"]), _rate(r["gbs"]),
                 _rate(r["gflops"]), _rate(r["intensity"]), r["bound"] or "-",
                 _pct(r["roof_pct"])] for r in result["kinds"][phase]]
        rows.append(["total", "", "", "", "{:.2f}".format(total["time_ms"]), "100.0",
                     _rate(total["gbs"]), _rate(total["gflops"]), "", "", ""])
        print_table("{}: {} tokens, {:.1f} tok/s profiled, {:.1f} tok/s unprofiled; ops "
                    "account for {:.1f}% of the time".format(
                        phase, total["tokens"], total["tok_s"], total["unprofiled_tok_s"],
                        100.0 * total["ops_share"]),
                    ["op", "weights", "layers", "calls", "ms", "%", "GB/s", "GFLOP/s",
                     "FLOP/B", "bound", "% roof"], rows,
                    right=["calls", "ms", "%", "GB/s", "GFLOP/s", "FLOP/B", "% roof"])
        print()
    print("roofline: {:.1f} GB/s ({}), {:.1f} GFLOP/s ({}); ridge {:.2f} FLOP/byte; best of "
          "{} probe{} of this machine, {} {}".format(
              roof["bandwidth_gbs"], roof["bandwidth_method"], roof["peak_gflops"],
              roof["peak_method"], roof["ridge_flops_per_byte"], roof["probes"],
              "" if roof["probes"] == 1 else "s", "cached, last" if roof["cached"] else
              "probed", roof["measured_at"]))
    decode = result["totals"].get("decode")
    if decode is not None:
        print("decode moves {} per token: the bandwidth allows {:.1f} tok/s; unprofiled "
              "decode reaches {:.1f} tok/s ({:.0f}% of it)".format(
                  human_bytes(decode["bytes_per_token"]), decode["roof_tok_s"],
                  decode["unprofiled_tok_s"],
                  100.0 * decode["unprofiled_tok_s"] / decode["roof_tok_s"]))
    if result["trace"]:
        print("trace: {} ({} events; open in https://ui.perfetto.dev or chrome://tracing)"
              .format(result["trace"]["path"], result["trace"]["events"]))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help=help_line("profile"), description=(
        "Profile a prefill and a greedy decode: time, bytes moved and FLOPs per op kind and "
        "layer, achieved GB/s and GFLOP/s against this machine's measured bandwidth and "
        "peak, a roofline verdict per op and a Chrome/Perfetto trace."))
    p.add_argument("model", help="model file (.gguf, .apr, .safetensors) or 'demo'")
    p.add_argument("-p", "--prompt", help="profile this text's tokens (no chat template) "
                   "instead of --prompt-tokens fixed pseudo-random ids")
    p.add_argument("--prompt-tokens", type=int, default=128,
                   help="prefill length in tokens (default 128)")
    p.add_argument("-n", "--decode-tokens", type=int, default=32,
                   help="tokens to decode (default 32)")
    p.add_argument("--repeats", type=int, default=3,
                   help="plain and profiled runs each; per phase the fastest of each is "
                   "reported (default 3)")
    p.add_argument("--backend", choices=("auto",) + backends.NAMES,
                   help="kernel backend (default: $APR_BACKEND, else CUDA > numba > numpy)")
    p.add_argument("--threads", type=int,
                   help="numba kernel threads (default: $APR_THREADS, else every core)")
    p.add_argument("--probe", action="store_true",
                   help="measure the machine's bandwidth and peak again (else cached)")
    p.add_argument("--trace", metavar="OUT.json", help="write a Chrome/Perfetto trace")
    p.add_argument("-f", "--force", action="store_true", help="overwrite --trace's file")
    p.add_argument("--assert-throughput", type=float, metavar="TOK_S",
                   help="exit 1 when unprofiled decode is below TOK_S tokens/s")
    p.add_argument("--json", action="store_true",
                   help="one JSON object: ops, roofline, totals")
    p.set_defaults(func=run_profile)
