"""The stats view: one row per tensor (dtype, shape, mean/std/min/max, zeros, NaN/Inf,
elements, size), sortable by any column (`o` on the cursor's column, or a click on its header;
again reverses). Statistics are computed lazily in a worker thread, only for the rows
shown (the search filter applies), with a progress bar, and cached per tensor."""
from __future__ import annotations

import time
from typing import Any, Callable, List, NamedTuple, Optional

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, ProgressBar, Static
from textual.worker import get_current_worker

from apr_core.stats import TensorStats

from ..cli.common import human_bytes
from ..cli.render import fmt
from .data import ModelData, matching
from .messages import TensorChosen


class Column(NamedTuple):
    """A stats column: its key and title, and the value a row sorts by (None: not yet
    computed) from (model, tensor name, its statistics or None). Columns a worker fills
    have a fixed width (`computed`: "float" or "count"), since Textual re-measures a whole
    column when an auto-sized cell shrinks."""

    key: str
    title: str
    value: Callable[[ModelData, str, Optional[TensorStats]], Any]
    show: Callable[[Any], str] = fmt
    computed: Optional[str] = None


def _stat(field: str, kind: str = "float") -> Column:
    return Column(field, field, lambda data, name, s: None if s is None else
                  getattr(s, field), fmt, kind)


# THE column table of the stats view.
COLUMNS = (
    Column("tensor", "tensor", lambda data, name, s: name),
    Column("dtype", "dtype", lambda data, name, s: data.tensors[name].dtype.name),
    Column("shape", "shape", lambda data, name, s: tuple(data.tensors[name].shape),
           lambda shape: str(list(shape))),
    _stat("mean"), _stat("std"), _stat("min"), _stat("max"), _stat("zeros", "count"),
    _stat("nan", "count")._replace(title="NaN"), _stat("inf", "count")._replace(title="Inf"),
    Column("elements", "elements", lambda data, name, s: data.elements(name)),
    Column("size", "size", lambda data, name, s: data.nbytes(name), human_bytes),
)
# The widest float `render.fmt` writes ("{:.6g}": -1.23457e-05).
FLOAT_WIDTH = 12
_TEXT_COLUMNS = ("tensor", "dtype", "shape")
# How often a worker hands finished rows to the table.
BATCH_SECONDS = 0.25


class StatsView(Vertical):
    """A sortable DataTable of per-tensor statistics."""

    BINDINGS = [("o", "sort_column", "Sort by column")]
    DEFAULT_CSS = """
    StatsView > #stats-status { height: 1; color: $text-muted; }
    StatsView > ProgressBar { height: 1; }
    StatsView > DataTable { height: 1fr; }
    """

    def __init__(self, data: ModelData, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.data = data
        self.query_text = ""
        self.sort_key: Optional[str] = None
        self.reverse = False
        self.active = False
        self._pending = 0

    def compose(self) -> ComposeResult:
        yield Static(id="stats-status")
        yield ProgressBar(id="stats-progress", show_eta=False)
        yield DataTable(id="stats-table", cursor_type="cell", zebra_stripes=True)

    @property
    def table(self) -> DataTable:
        return self.query_one("#stats-table", DataTable)

    def on_mount(self) -> None:
        self._rebuild()

    def activate(self) -> None:
        """Start computing statistics (the first time the view is shown)."""
        if not self.active:
            self.active = True
            self._start_worker()

    def focus_main(self) -> None:
        self.table.focus()

    @property
    def shown(self) -> List[str]:
        """The tensors the table lists (filtered), in file order."""
        return matching(self.data.names, self.query_text)

    def ready(self) -> bool:
        """Every row shown has its statistics."""
        return self.active and all(self.data.cached_stats(n) for n in self.shown)

    def apply_filter(self, query: str) -> None:
        self.query_text = query
        self._rebuild()
        if self.active:
            self._start_worker()

    def action_sort_column(self) -> None:
        """Sort by the cursor's column; the same column again reverses the order."""
        self.sort_by(COLUMNS[self.table.cursor_coordinate.column].key)

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.sort_by(str(event.column_key.value))

    def on_data_table_cell_selected(self, event: DataTable.CellSelected) -> None:
        event.stop()
        self.post_message(TensorChosen(str(event.cell_key.row_key.value)))

    def sort_by(self, key: str) -> None:
        self.reverse = not self.reverse if key == self.sort_key else False
        self.sort_key = key
        self._rebuild()

    @property
    def selected_tensor(self) -> Optional[str]:
        table = self.table
        if not table.row_count:
            return None
        return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    def _ordered(self) -> List[str]:
        names = self.shown
        if self.sort_key is None:
            return names
        column = next(c for c in COLUMNS if c.key == self.sort_key)
        values = {n: column.value(self.data, n, self.data.cached_stats(n)) for n in names}
        known = sorted((n for n in names if values[n] is not None),
                       key=lambda n: values[n], reverse=self.reverse)
        return known + [n for n in names if values[n] is None]   # not yet computed: last

    def _rebuild(self) -> None:
        table = self.table
        column_index = table.cursor_coordinate.column if table.row_count else 0
        table.clear(columns=True)
        widths = {"float": FLOAT_WIDTH, "count": len(fmt(max(
            [self.data.elements(n) for n in self.data.names] or [0])))}
        for column in COLUMNS:
            arrow = "" if column.key != self.sort_key else (" ▼" if self.reverse else " ▲")
            label = column.title + arrow
            width = max(widths[column.computed], len(label)) if column.computed else None
            table.add_column(Text(label), key=column.key, width=width)
        for name in self._ordered():
            table.add_row(*self._cells(name), key=name)
        if table.row_count:
            table.move_cursor(row=0, column=column_index)
        self._status()

    def _cells(self, name: str) -> List[Text]:
        stats = self.data.cached_stats(name)
        cells = []
        for column in COLUMNS:
            value = column.value(self.data, name, stats)
            text = "…" if value is None else column.show(value)
            cells.append(Text(text, justify="left" if column.key in _TEXT_COLUMNS
                              else "right"))
        return cells

    def _status(self) -> None:
        shown, total = len(self.shown), len(self.data.names)
        done = sum(1 for n in self.shown if self.data.cached_stats(n))
        text = "{} tensors".format(total) if not self.query_text else \
            "{} of {} tensors match {!r}".format(shown, total, self.query_text)
        if done < shown:
            text += "   statistics: {}/{}".format(done, shown)
        sort = "" if self.sort_key is None else "   sorted by {} ({})".format(
            self.sort_key, "descending" if self.reverse else "ascending")
        self.query_one("#stats-status", Static).update(Text(
            text + sort + "   o: sort by column  enter: histogram"))
        bar = self.query_one("#stats-progress", ProgressBar)
        bar.update(total=max(shown, 1), progress=done if shown else 1)

    def _start_worker(self) -> None:
        todo = [n for n in self.shown if self.data.cached_stats(n) is None]
        self.run_worker(lambda: self._compute(todo), thread=True, exclusive=True,
                        group="stats", name="tensor statistics")

    def _compute(self, names: List[str]) -> None:
        """Worker thread: statistics of `names`; rows are filled in batches (a table
        redrawn per tensor costs more than the statistics of a small one)."""
        worker = get_current_worker()
        batch: List[str] = []
        last = time.monotonic()
        for name in names:
            if worker.is_cancelled:
                return
            self.data.stats(name)
            batch.append(name)
            if time.monotonic() - last >= BATCH_SECONDS or name == names[-1]:
                self.app.call_from_thread(self._fill, batch)
                batch, last = [], time.monotonic()

    def _fill(self, names: List[str]) -> None:
        table = self.table
        for name in names:
            if name in table.rows:
                for column, cell in zip(COLUMNS, self._cells(name)):
                    table.update_cell(name, column.key, cell)
        self._status()
