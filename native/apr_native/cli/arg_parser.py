"""Argument errors as one coded line, and option types that name their allowed range.

argparse answers a bad value with the whole usage text and no error code; every `apr`
parser (subparsers inherit the class) answers with one E011 line naming the option, the
value and what is allowed, and where to read more, then exits 2:

    apr: error: E011 ARGUMENT: -n/--max-tokens -5 is out of range (1..1048576); see 'apr help run'

    p.add_argument("--top-p", type=typed(float, RANGES["top_p"]))
"""
from __future__ import annotations

import argparse
import re
from typing import Any, Callable, NoReturn, Optional, Sequence, Tuple

from apr_core.errors import AprError, ErrorCode

PROG = "apr"

# Patterns are compiled on the first error (re caches them), not at every start.
# argparse reports a bad option value as "argument NAME: DETAIL"
_ARGUMENT = r"(?s)^argument (?P<name>[^:]+): (?P<detail>.*)$"
# argparse's wording -> ours; a DETAIL follows the option's name ("--backend 'x' is not
# one of ..."), a message that names no option stands alone. Anything else is kept.
_DETAILS: Sequence[Tuple[str, str]] = (
    (r"(?s)^invalid choice: (?P<value>.*?) \(choose from (?P<choices>.*)\)$",
     "{value} is not one of {choices}"),
    (r"(?s)^invalid (?P<type>\w+) value: (?P<value>.*)$", "{value} is not a valid {type}"),
    (r"^expected one argument$", "needs a value"),
)
_MESSAGES: Sequence[Tuple[str, str]] = (
    (r"(?s)^the following arguments are required: (?P<names>.*)$",
     "missing argument: {names}"),
    (r"(?s)^unrecognized arguments: (?P<names>.*)$", "unknown argument: {names}"),
)
_NOUNS = {int: "an integer", float: "a number"}


def _reworded(message: str, table: Sequence[Tuple[str, str]]) -> Optional[str]:
    for pattern, template in table:
        found = re.match(pattern, message)
        if found:
            return template.format(**found.groupdict())
    return None


def describe(message: str) -> str:
    """argparse's error message -> ours, on one line."""
    found = re.match(_ARGUMENT, message)
    if found:
        detail = found.group("detail")
        text = "{} {}".format(found.group("name"), _reworded(detail, _DETAILS) or detail)
    else:
        text = _reworded(message, _MESSAGES) or message
    return " ".join(text.split())


def report(err: AprError, command: Optional[str] = None) -> str:
    """THE one-line form of an error on stderr; an argument error (E011) also points at
    the help to read: `apr help COMMAND`, or `apr --help` before a command is known."""
    line = "{}: error: {}".format(PROG, err)
    if err.code is ErrorCode.ARGUMENT:
        line += "; see '{}'".format(
            "{} help {}".format(PROG, command) if command else PROG + " --help")
    return line


def error_line(text: str, command: Optional[str] = None) -> str:
    """`report` of an argument error with this text."""
    return report(AprError(ErrorCode.ARGUMENT, text), command)


class AprArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one E011 line (exit 2) instead of the usage text.

    A subparser's `prog` ("apr canary create") names its command; the top-level parser
    names the command main() found in `command`, as its own errors (an unknown option
    after the command) are about that command."""

    command: Optional[str] = None

    def error(self, message: str) -> NoReturn:
        command = self.prog.partition(" ")[2] or self.command
        self.exit(ErrorCode.ARGUMENT.exit_code, error_line(describe(message), command) + "\n")


def typed(kind: Callable[[str], Any], allowed: Any = None) -> Callable[[str], Any]:
    """An argparse `type` parsing `kind` (int or float) within `allowed` (a
    `apr_core.runtime.option_ranges.Range`, or None: any value of the type); a value
    outside it is an error naming the value and the range."""
    shown = "" if allowed is None else " ({})".format(allowed)

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError("{!r} is not {}{}".format(
                text, _NOUNS.get(kind, kind.__name__), shown))
        if allowed is not None and not allowed.contains(value):
            raise argparse.ArgumentTypeError("{} is out of range{}".format(text, shown))
        return value
    parse.__name__ = getattr(kind, "__name__", "value")
    return parse


__all__ = ["AprArgumentParser", "describe", "error_line", "report", "typed"]
