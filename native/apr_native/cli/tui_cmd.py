"""`apr tui MODEL [MODEL_B]`: a terminal UI (Textual) over a model: its data-flow graph,
per-tensor statistics, a tensor's histogram, two models compared, and a chat pane.

    apr tui model.gguf                          graph view (g/s/h/c/t switch, / search)
    apr tui a.gguf b.gguf                       the compare view
    apr tui model.gguf --tensor blk.0.attn_q.weight          its histogram
    apr tui model.gguf --view stats --screenshot stats.svg   render one view headless

Textual loads only when the command runs (never for `apr --help`).
"""
from __future__ import annotations

import argparse
from typing import Any, Optional

from apr_core.errors import AprError, ErrorCode

from .common import check_output, resolve_model


def _view(args: argparse.Namespace) -> str:
    from ..tui import default_view
    view = args.view or default_view(bool(args.model_b), args.tensor)
    if view == "compare" and not args.model_b:
        raise AprError(ErrorCode.ARGUMENT, "the compare view needs two models: apr tui "
                       "MODEL_A MODEL_B")
    return view


def run_tui(args: argparse.Namespace) -> int:
    view = _view(args)
    if args.max_tokens < 1:
        raise AprError(ErrorCode.ARGUMENT, "--max-tokens must be at least 1",
                       value=args.max_tokens)
    if args.screenshot:
        if not args.screenshot.lower().endswith(".svg"):
            raise AprError(ErrorCode.ARGUMENT, "--screenshot writes SVG: give a FILE.svg",
                           path=args.screenshot)
        check_output(args.screenshot, args.force)
    from ..tui.data import ModelData
    data_a = ModelData(resolve_model(args.model))
    data_b: Optional[ModelData] = None
    try:
        if args.model_b:
            data_b = ModelData(resolve_model(args.model_b))
        if args.tensor and args.tensor not in data_a.tensors:
            from .explain_cmd import suggestions
            raise AprError(ErrorCode.NOT_FOUND, "no such tensor", tensor=args.tensor,
                           did_you_mean=suggestions(args.tensor, data_a.names))
        return _run(args, view, data_a, data_b)
    finally:
        data_a.close()
        if data_b is not None:
            data_b.close()


def _run(args: argparse.Namespace, view: str, data_a: Any, data_b: Any) -> int:
    from ..engine import EngineOptions
    from ..tui.app import TuiApp
    options = EngineOptions(backend=args.backend, dequantize=args.dequantize)
    app = TuiApp(data_a, data_b, view, args.tensor, args.max_tokens, options)
    if not args.screenshot:
        app.run()
        return app.return_code or 0
    from textual.worker import WorkerFailed
    from apr_core.atomic import atomic_output
    from ..tui.app import run_headless, screenshot
    try:
        svg = run_headless(screenshot(app))
    except WorkerFailed as failed:   # the view's data could not be computed
        if isinstance(failed.error, AprError):
            raise failed.error
        raise
    with atomic_output(args.screenshot, overwrite=args.force) as handle:
        handle.write(svg.encode("utf-8"))
    print(args.screenshot)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from .run_cmd import add_runtime_arguments
    p = sub.add_parser("tui", help="terminal UI: graph, stats, histogram, compare and chat "
                       "views", description="Keys: g graph, s stats, h histogram, c compare, "
                       "t chat, / search (Enter keeps, Esc clears), arrows/Enter navigate, "
                       "o sorts the stats column under the cursor, q quits.")
    p.add_argument("model", help="model file (.gguf, .apr, .safetensors, HF dir) or name")
    p.add_argument("model_b", nargs="?", help="a second model: opens the compare view")
    from ..tui import VIEW_NAMES
    p.add_argument("--view", choices=VIEW_NAMES, help="view to open (default: graph; compare "
                   "with two models; histogram with --tensor)")
    p.add_argument("--tensor", help="the tensor the histogram view shows")
    p.add_argument("--screenshot", metavar="FILE.svg",
                   help="render the view headless once its data is loaded, write it as "
                        "SVG and exit")
    p.add_argument("-f", "--force", action="store_true",
                   help="overwrite an existing --screenshot file")
    p.add_argument("-n", "--max-tokens", type=int, default=128,
                   help="longest chat reply in tokens (default 128)")
    add_runtime_arguments(p)
    p.set_defaults(func=run_tui)
