"""`apr` entry point: parse arguments, run the command, map errors to exit codes.

Starting is cheap: `apr --help` imports no command. The commands, their modules, groups
and help lines are THE table in `commands.py`; only the module of the command being run
(or asked about with `apr COMMAND --help` / `apr help COMMAND`) is imported and its
`register(subparsers)` called. A command returns its exit code; what it computed stays
its own (nothing is handed back on the parsed arguments).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Iterable, List, Optional

from apr_core.errors import AprError, ErrorCode

from . import commands
from .arg_parser import PROG, AprArgumentParser, error_line, report

EXIT_ARGS = ErrorCode.ARGUMENT.exit_code   # (cli.common is not needed at start)
HELP = "help"
_WIDEST_NAME = 22       # a longer command name (with aliases) gets a line of its own


def _package() -> str:
    return __package__ or __name__.rpartition(".")[0] or "apr_native.cli"


def _import(module: str):
    return importlib.import_module("{}.{}".format(_package(), module))


def grouped_help(width: Optional[int] = None) -> str:
    """The command list of `apr --help`: THE table's groups in order, a help line each."""
    import shutil           # (with textwrap: only when help is shown)
    import textwrap
    width = width or shutil.get_terminal_size().columns
    labels = {c.name: c.name + "".join(" ({})".format(a) for a in c.aliases)
              for c in commands.COMMANDS.values()}
    column = min(max(map(len, labels.values())), _WIDEST_NAME) + 4
    lines: List[str] = []
    for group in commands.GROUPS:
        lines.append(group.title + ":")
        for command in group.commands:
            label = "  " + labels[command.name]
            text = textwrap.wrap(command.help, max(width - column - 2, 20))
            if len(label) + 2 > column:
                lines.append(label)
            else:
                lines.append(label.ljust(column) + text.pop(0))
            lines.extend(" " * column + rest for rest in text)
        lines.append("")
    return "\n".join(lines)


class _RootParser(AprArgumentParser):
    """The top-level parser: its epilog (the grouped command list, wrapped to the
    terminal) is written when help is shown, not on every start."""

    def format_help(self) -> str:
        if self.epilog is None:
            self.epilog = grouped_help() + "\n`{0} help COMMAND` or `{0} COMMAND --help` " \
                "for a command's options.".format(PROG)
        return super().format_help()


def build_parser(load: Optional[Iterable[str]] = None) -> AprArgumentParser:
    """The `apr` parser with the real subparsers of the modules in `load` (default: every
    command module); its help lists every command from the table either way."""
    parser = _RootParser(
        prog=PROG, usage="{} [-h] [--version] COMMAND ...".format(PROG),
        description="APR model operations tool",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="store_true",
                        help="show versions, kernel backend and CPU/GPU features, then exit")
    # prog: the subcommands' usage starts "apr run", not with the usage line above
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", help=argparse.SUPPRESS,
                                prog=PROG)
    for module in commands.modules() if load is None else load:
        _import(module).register(sub)
    return parser


def suggestions(word: str, names: Iterable[str]) -> List[str]:
    """The command names nearest to a misspelled one (as git and cargo suggest)."""
    import difflib
    return difflib.get_close_matches(word, sorted(names), n=3, cutoff=0.6)


def _unknown(word: str) -> int:
    near = suggestions(word, commands.NAMES)
    print(error_line("unknown command '{}'{}".format(
        word, " (did you mean: {}?)".format(", ".join(near)) if near else "")),
        file=sys.stderr)
    return EXIT_ARGS


def _debug() -> bool:
    """Tracebacks on errors: APR_LOG_LEVEL=debug, or log_level = "debug" in config.toml."""
    from apr_native.config import log_level
    try:
        return log_level() == "debug"
    except AprError:        # the error being reported may be the broken config file itself
        return os.environ.get("APR_LOG_LEVEL", "").lower() == "debug"


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    position = next((i for i, a in enumerate(argv) if not a.startswith("-")), None)
    word = argv[position] if position is not None else None
    if word == HELP:
        rest = argv[position + 1:]
        if rest:                                  # `apr help X` == `apr X --help`
            return main(rest + ["--help"])
        build_parser(load=()).print_help()
        return 0
    if "--version" in argv[:position]:               # `apr --version [--json]`
        word, argv = "version", ["version"] + [a for a in argv if a != "--version"]
    command = commands.find(word) if word is not None else None
    if word is not None and command is None:
        return _unknown(word)
    # only the command's own module: `apr --help` and `apr run ...` import nothing else
    parser = build_parser(load=[command.module] if command else ())
    parser.command = command.name if command else None
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_ARGS
    return _run(args, command.name if command else "")


def _run(args: argparse.Namespace, command: str) -> int:
    from .thread_args import apply as apply_threads
    try:
        apply_threads(args)                     # -t/--threads: before any backend starts
        return int(args.func(args) or 0)
    except AprError as err:
        if _debug():
            import traceback
            traceback.print_exc()
        if getattr(args, "json", False):
            from .common import emit_json
            emit_json({"error": err.to_dict()})
        print(report(err, command), file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as err:  # a bug: say so plainly, with the traceback on request
        if _debug():
            import traceback
            traceback.print_exc()
        print("{}: internal error: {}: {}".format(PROG, type(err).__name__, err),
              file=sys.stderr)
        from .common import EXIT_GENERAL
        return EXIT_GENERAL


if __name__ == "__main__":
    sys.exit(main())
