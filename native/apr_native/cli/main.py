"""`apr` entry point: parse arguments, run the command, map errors to exit codes.

Starting is cheap: `apr --help` imports no command. Every `*_cmd` module of this package
declares its commands in a module-level literal, read from its source text, not imported:

    COMMANDS = {"run": "generate text from a prompt", "chat": "chat with a model"}

(a help line per command; `None` for an alias, which is accepted but not listed). Only the
module of the command being run (or asked about with `apr COMMAND --help` / `apr help
COMMAND`) is imported and its `register(subparsers)` called. A `*_cmd` module without the
literal still works: it is imported to register its commands (slow, and a test fails).
"""
from __future__ import annotations

import argparse
import ast
import importlib
import os
import re
import sys
from typing import Dict, Iterable, List, Optional, Tuple

from apr_core.errors import AprError, ErrorCode

EXIT_ARGS = ErrorCode.ARGUMENT.exit_code   # (cli.common imports the engine: not at start)
PROG = "apr"
# `COMMANDS = {...}` at the start of a line; the literal ends on its first line or at a "}"
# at the start of a later line.
_COMMANDS_LITERAL = re.compile(r"^COMMANDS\s*=\s*(\{[^\n]*\}[ \t]*$|\{.*?^\})", re.M | re.S)
_HELP_COMMAND = ("help", "show the help of a command: apr help COMMAND")

# name -> (module, help line or None for an alias)
CommandTable = Dict[str, Tuple[str, Optional[str]]]


def _package() -> str:
    return __package__ or __name__.rpartition(".")[0] or "apr_native.cli"


def _package_dir() -> str:
    return os.path.dirname(os.path.abspath(__file__))


def command_modules() -> List[str]:
    """Names of every `*_cmd` module of this package, sorted: a command group joins the
    CLI by existing, with no central list to edit."""
    names = {entry[:-3] for entry in os.listdir(_package_dir())
             if entry.endswith("_cmd.py") and not entry.startswith(".")}
    return sorted(names)


def declared_commands(module: str) -> Optional[Dict[str, Optional[str]]]:
    """The `COMMANDS` literal of `module`'s source, or None when it has none."""
    with open(os.path.join(_package_dir(), module + ".py"), encoding="utf-8") as handle:
        found = _COMMANDS_LITERAL.search(handle.read())
    if found is None:
        return None
    value = ast.literal_eval(found.group(1))
    if not isinstance(value, dict):
        return None
    return value


def command_table() -> CommandTable:
    """{command name: (module, help line or None)} in module order, then declaration order."""
    table: CommandTable = {}
    for module in command_modules():
        declared = declared_commands(module)
        if declared is None:
            declared = _registered_by(module)
        for name, help_line in declared.items():
            table.setdefault(name, (module, help_line))
    return table


def _registered_by(module: str) -> Dict[str, Optional[str]]:
    """The commands a module without a `COMMANDS` literal registers (imports it)."""
    parser = argparse.ArgumentParser(prog=PROG)
    sub = parser.add_subparsers()
    _import(module).register(sub)
    helps = {action.dest: action.help for action in sub._choices_actions}
    return {name: helps.get(name) for name in sub.choices}


def _import(module: str):
    return importlib.import_module("{}.{}".format(_package(), module))


def build_parser(load: Optional[Iterable[str]] = None,
                 table: Optional[CommandTable] = None) -> argparse.ArgumentParser:
    """The `apr` parser. The modules in `load` (default: all) register their real
    subparsers; every other command gets a placeholder carrying its help line."""
    table = command_table() if table is None else table
    modules = sorted({module for module, _ in table.values()})
    load = set(modules if load is None else load)
    parser = argparse.ArgumentParser(
        prog=PROG, description="APR model operations tool",
        epilog="`apr help COMMAND` or `apr COMMAND --help` for a command's options.")
    parser.add_argument("--version", action="store_true",
                        help="show versions, kernel backend and CPU/GPU features, then exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    registered = set()
    for name, (module, help_line) in table.items():
        if module in load:
            if module not in registered:
                _import(module).register(sub)
                registered.add(module)
        elif help_line is None:
            sub.add_parser(name, add_help=False)
        else:
            sub.add_parser(name, help=help_line, add_help=False)
    sub.add_parser(_HELP_COMMAND[0], help=_HELP_COMMAND[1], add_help=False)
    return parser


def suggestions(word: str, names: Iterable[str]) -> List[str]:
    """The command names nearest to a misspelled one (as git and cargo suggest)."""
    import difflib
    return difflib.get_close_matches(word, sorted(names), n=3, cutoff=0.6)


def _unknown(word: str, table: CommandTable) -> int:
    print("{}: error: unknown command '{}'".format(PROG, word), file=sys.stderr)
    near = suggestions(word, table)
    if near:
        print("did you mean: {}?".format(", ".join(near)), file=sys.stderr)
    print("(`{} --help` lists every command)".format(PROG), file=sys.stderr)
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
    table = command_table()
    position = next((i for i, a in enumerate(argv) if not a.startswith("-")), None)
    command = argv[position] if position is not None else None
    if command == _HELP_COMMAND[0]:
        rest = argv[position + 1:]
        if rest:                                  # `apr help X` == `apr X --help`
            return main(rest + ["--help"])
        build_parser(load=(), table=table).print_help()
        return 0
    if "--version" in argv[:position]:               # `apr --version [--json]`
        command, argv = "version", ["version"] + [a for a in argv if a != "--version"]
    elif command is not None and command not in table:
        return _unknown(command, table)
    if command:      # only the command's own module: no placeholder parsers for the rest
        module = table[command][0]
        table = {name: entry for name, entry in table.items() if entry[0] == module}
    parser = build_parser(load=[table[command][0]] if command else (), table=table)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_ARGS
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args) or 0)
    except AprError as err:
        if _debug():
            import traceback
            traceback.print_exc()
        if getattr(args, "json", False):
            from .common import emit_json
            emit_json({"error": err.to_dict()})
        print("apr: error: {}".format(err), file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as err:  # a bug: say so plainly, with the traceback on request
        if _debug():
            import traceback
            traceback.print_exc()
        print("apr: internal error: {}: {}".format(type(err).__name__, err), file=sys.stderr)
        from .common import EXIT_GENERAL
        return EXIT_GENERAL


if __name__ == "__main__":
    sys.exit(main())
