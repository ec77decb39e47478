"""Terminal rendering shared by the inspection commands: a `rich` console, tables and the
text histogram of `apr tensors --hist` (seed 000 §4.2.1)."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Iterator, List, Sequence

if TYPE_CHECKING:                    # rich loads when something is drawn (not for --json)
    from rich.console import Console

from .common import quiet

# Width when stdout is not a terminal: wide enough that long tensor names never wrap.
PIPE_WIDTH = 200
BAR = "█"


def console() -> Console:
    """stdout console: colour as `config.color_enabled` says (APR_COLOR, NO_COLOR, the
    config file, a TTY), never with APR_QUIET=1. Piped without colour, plain strings are
    written as they are (`PlainConsole`): the same text without importing rich."""
    from apr_native.config import color_enabled
    tty = sys.stdout.isatty()
    colour = color_enabled(tty) and not quiet()
    if not tty and not colour:
        return PlainConsole()       # type: ignore[return-value]
    return _rich_console(tty, colour)


class PlainConsole:
    """A console for piped, colourless output. Markup and highlighting are off and lines
    never wrap there (PIPE_WIDTH), so rich would print a string unchanged: strings go
    straight to stdout (rich's import and set-up are ~20 ms, a fifth of `apr inspect`);
    anything else (tables, trees) and every other method go to a rich console."""

    def __init__(self) -> None:
        self._rich: Any = None

    def print(self, *objects: Any, sep: str = " ", end: str = "\n", **options: Any) -> None:
        if options or not all(isinstance(o, str) for o in objects):
            self._console().print(*objects, sep=sep, end=end, **options)
            return
        sys.stdout.write(sep.join(objects) + end)

    def _console(self) -> Any:
        if self._rich is None:
            sys.stdout.flush()
            self._rich = _rich_console(False, False)
        return self._rich

    def __getattr__(self, name: str) -> Any:
        return getattr(self._console(), name)


def _rich_console(tty: bool, colour: bool) -> Console:
    from rich.console import Console
    # markup off: tensor names and shapes contain [brackets] rich would eat
    return Console(no_color=not colour, highlight=False, markup=False, soft_wrap=not tty,
                   width=None if tty else PIPE_WIDTH, force_terminal=colour and not tty)


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]],
                right: Sequence[str] = ()) -> None:
    """A rich table; `right` names the columns to right-align (numbers)."""
    from rich.table import Table
    table = Table(title=title, title_justify="left", show_edge=False, box=None,
                  pad_edge=False)
    for column in columns:
        table.add_column(column, justify="right" if column in right else "left",
                         overflow="fold")
    for row in rows:
        table.add_row(*[fmt(v) for v in row])
    console().print(table)


def fmt(value: Any) -> str:
    """Numbers with 4-6 significant digits, everything else as str."""
    if isinstance(value, float):
        return "{:.6g}".format(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return "{:,}".format(value)
    return str(value)


def histogram_lines(counts: Sequence[int], edges: Sequence[float], height: int = 10) -> List[str]:
    """A vertical bar chart: one column per bin, `height` rows, count and value axes."""
    peak = max(max(counts), 1) if len(counts) else 1
    label_width = len(str(peak))
    lines = []
    for row in range(height, 0, -1):
        threshold = peak * (row - 0.5) / height
        label = str(peak) if row == height else ("0" if row == 1 else "")
        bars = "".join(BAR if c >= threshold or (row == 1 and c > 0) else " " for c in counts)
        lines.append("{:>{w}} |{}".format(label, bars, w=label_width))
    lines.append("{} +{}".format(" " * label_width, "-" * len(counts)))
    lo, mid, hi = edges[0], edges[len(edges) // 2], edges[-1]
    axis = "{:<.4g}".format(lo)
    middle = "{:.4g}".format(mid)
    pos = max(len(axis) + 1, len(counts) // 2 - len(middle) // 2)
    axis = axis.ljust(pos) + middle
    axis = axis.ljust(max(len(axis) + 1, len(counts) - len("{:.4g}".format(hi)))) + \
        "{:.4g}".format(hi)
    lines.append("{}  {}".format(" " * label_width, axis))
    return lines


def progress(items: Sequence[Any], description: str) -> Iterator[Any]:
    """`items`, with a rich progress bar on stderr when it is a terminal (never when piped
    or APR_QUIET=1): for loops over every tensor of a model, which take seconds."""
    if quiet() or len(items) < 2:
        yield from items
        return
    from rich.console import Console
    from rich.progress import Progress
    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=len(items))
        for item in items:
            yield item
            bar.advance(task)


def wants_json(args: Any) -> bool:
    """--json, or `output_format = "json"` in the user's config.toml (seed 000 §8)."""
    try:
        from ..config import wants_json as configured
    except ImportError:   # config support absent: the flag alone decides
        return bool(getattr(args, "json", False))
    return configured(args)
