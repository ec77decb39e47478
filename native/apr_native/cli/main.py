"""`apr` entry point: parse arguments, run the command, map errors to exit codes."""
from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
import traceback
from typing import List, Optional

from apr_core.errors import AprError

from .common import EXIT_ARGS, EXIT_GENERAL, emit_json


def command_groups() -> list:
    """Every `*_cmd` module of this package, in name order; each has `register(subparsers)`.

    A command group joins the CLI by existing: no central list to edit."""
    package = __package__ or __name__.rpartition(".")[0]  # __name__ is "__main__" under -m
    names = sorted(info.name for info in pkgutil.iter_modules(_package_path())
                   if info.name.endswith("_cmd"))
    return [importlib.import_module("{}.{}".format(package, name)) for name in names]


def _package_path() -> List[str]:
    return [os.path.dirname(os.path.abspath(__file__))]


def _debug() -> bool:
    """Tracebacks on errors: APR_LOG_LEVEL=debug, or log_level = "debug" in config.toml."""
    from apr_native.config import log_level
    try:
        return log_level() == "debug"
    except AprError:        # the error being reported may be the broken config file itself
        return os.environ.get("APR_LOG_LEVEL", "").lower() == "debug"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="apr", description="APR model operations tool")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for group in command_groups():
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
        if _debug():
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
        if _debug():
            traceback.print_exc()
        print("apr: internal error: {}: {}".format(type(err).__name__, err), file=sys.stderr)
        return EXIT_GENERAL


if __name__ == "__main__":
    sys.exit(main())
