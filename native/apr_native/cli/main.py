"""`apr` entry point: parse arguments, run the command, map errors to exit codes."""
from __future__ import annotations

import argparse
import os
import sys
import traceback
from typing import List, Optional

from apr_core.errors import AprError

from . import convert_cmd, inspect_cmd, quantize_cmd, run_cmd
from .common import EXIT_ARGS, EXIT_GENERAL, emit_json

COMMAND_GROUPS = (inspect_cmd, convert_cmd, quantize_cmd, run_cmd)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="apr", description="APR model operations tool")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for group in COMMAND_GROUPS:
        group.register(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_ARGS
    try:
        return int(args.func(args) or 0)
    except AprError as err:
        if os.environ.get("APR_LOG_LEVEL", "").lower() == "debug":
            traceback.print_exc()
        if getattr(args, "json", False):
            emit_json({"error": err.to_dict()})
        print("apr: error: {}".format(err), file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as err:  # a bug: say so plainly, with the traceback on request
        if os.environ.get("APR_LOG_LEVEL", "").lower() == "debug":
            traceback.print_exc()
        print("apr: internal error: {}: {}".format(type(err).__name__, err), file=sys.stderr)
        return EXIT_GENERAL


if __name__ == "__main__":
    sys.exit(main())
