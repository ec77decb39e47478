"""The compare view: two models side by side, one row per tensor name: present in both,
A only or B only, both shapes and dtypes, `apr diff`'s per-tensor comparison (status
MATCH/DRIFT/SHAPE, max |delta|, cosine; `diff_cmd.compare_tensor`) and the deltas of the
statistics (mean, std; B minus A). Names are paired as `apr diff` pairs them
(`tensor_map.pair_names`); the numbers come from a worker thread, for the rows shown."""
from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Optional

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, ProgressBar, Static
from textual.worker import get_current_worker

from ..cli.diff_cmd import compare_tensor
from ..cli.render import fmt
from ..cli.tensor_map import pair_names
from .data import ModelData, matching
from .messages import TensorChosen
from .stats_view import BATCH_SECONDS, FLOAT_WIDTH

# (key, title) of the compare table's columns.
COLUMNS = (("tensor", "tensor"), ("presence", "in"), ("shape_a", "shape A"),
           ("shape_b", "shape B"), ("dtype_a", "dtype A"), ("dtype_b", "dtype B"),
           ("status", "status"), ("max_delta", "max |Δ|"), ("cosine", "cosine"),
           ("d_mean", "Δ mean"), ("d_std", "Δ std"))
_NUMBERS = ("max_delta", "cosine", "d_mean", "d_std")
# Fixed widths of the columns the worker fills (a shrinking auto-sized cell makes
# Textual re-measure its whole column).
_WIDTHS = dict({"status": 6}, **{key: FLOAT_WIDTH for key in _NUMBERS})


class CompareView(Vertical):
    """Model A against model B, tensor by tensor."""

    DEFAULT_CSS = """
    CompareView > Static { height: auto; color: $text-muted; }
    CompareView > ProgressBar { height: 1; }
    CompareView > DataTable { height: 1fr; }
    """

    def __init__(self, data_a: ModelData, data_b: Optional[ModelData],
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.data_a, self.data_b = data_a, data_b
        self.query_text = ""
        self.active = False
        self.rows: Dict[str, Dict[str, Any]] = {}     # name -> row (see _base_rows)
        if data_b is not None:
            self.rows = _base_rows(data_a, data_b)

    def compose(self) -> ComposeResult:
        yield Static(id="compare-status")
        yield ProgressBar(id="compare-progress", show_eta=False)
        yield DataTable(id="compare-table", cursor_type="row", zebra_stripes=True)
        yield Static(id="compare-detail")

    @property
    def table(self) -> DataTable:
        return self.query_one("#compare-table", DataTable)

    def on_mount(self) -> None:
        table = self.table
        for key, title in COLUMNS:
            table.add_column(Text(title), key=key, width=_WIDTHS.get(key))
        self._rebuild()

    def activate(self) -> None:
        if not self.active and self.data_b is not None:
            self.active = True
            self._start_worker()

    def focus_main(self) -> None:
        self.table.focus()

    @property
    def shown(self) -> List[str]:
        return matching(self.rows, self.query_text)

    def ready(self) -> bool:
        return self.data_b is None or (self.active and all(
            self.rows[n]["done"] for n in self.shown))

    def apply_filter(self, query: str) -> None:
        self.query_text = query
        self._rebuild()
        if self.active:
            self._start_worker()

    @property
    def selected_tensor(self) -> Optional[str]:
        table = self.table
        if not table.row_count:
            return None
        return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._detail(str(event.row_key.value))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        name = str(event.row_key.value)
        if name in self.data_a.tensors:
            self.post_message(TensorChosen(name))

    def _rebuild(self) -> None:
        table = self.table
        table.clear()
        for name in self.shown:
            table.add_row(*self._cells(name), key=name)
        self._status()

    def _cells(self, name: str) -> List[Text]:
        row = self.rows[name]
        cells = []
        for key, _ in COLUMNS:
            value = row.get(key)
            text = ("…" if not row["done"] else "") if value is None else fmt(value)
            cells.append(Text(text, justify="right" if key in _NUMBERS else "left",
                              style=_style(key, row)))
        return cells

    def _status(self) -> None:
        if self.data_b is None:
            self.query_one("#compare-status", Static).update(Text(
                "compare needs two models: apr tui MODEL_A MODEL_B"))
            return
        rows = list(self.rows.values())
        count = {p: sum(1 for r in rows if r["presence"] == p) for p in ("both", "A only",
                                                                          "B only")}
        status = {s: sum(1 for r in rows if r.get("status") == s) for s in (
            "MATCH", "DRIFT", "SHAPE")}
        shown = self.shown
        done = sum(1 for n in shown if self.rows[n]["done"])
        lines = ["A: {} ({} tensors)   B: {} ({} tensors)".format(
            os.path.basename(self.data_a.path), len(self.data_a.names),
            os.path.basename(self.data_b.path), len(self.data_b.names)),
            "in both {}  A only {}  B only {}   MATCH {}  DRIFT {}  SHAPE {}{}{}".format(
                count["both"], count["A only"], count["B only"], status["MATCH"],
                status["DRIFT"], status["SHAPE"],
                "   compared {}/{}".format(done, len(shown)) if done < len(shown) else "",
                "   {} rows match {!r}".format(len(shown), self.query_text)
                if self.query_text else "")]
        self.query_one("#compare-status", Static).update(Text("\n".join(lines)))
        self.query_one("#compare-progress", ProgressBar).update(
            total=max(len(shown), 1), progress=done if shown else 1)

    def _detail(self, name: str) -> None:
        parts = [name]
        for side, data in (("A", self.data_a), ("B", self.data_b)):
            s = data.cached_stats(name) if data is not None and name in data.tensors \
                else None
            if s is not None:
                parts.append("{}: mean {} std {} min {} max {}".format(
                    side, fmt(s.mean), fmt(s.std), fmt(s.min), fmt(s.max)))
        self.query_one("#compare-detail", Static).update(Text("   ".join(parts)))

    def _start_worker(self) -> None:
        todo = [n for n in self.shown if not self.rows[n]["done"]]
        self.run_worker(lambda: self._compute(todo), thread=True, exclusive=True,
                        group="compare", name="compare models")

    def _compute(self, names: List[str]) -> None:
        """Worker thread: `apr diff`'s comparison and the stats deltas of each pair,
        handed to the table in batches."""
        worker = get_current_worker()
        assert self.data_b is not None
        batch: Dict[str, Dict[str, Any]] = {}
        last = time.monotonic()
        for name in names:
            if worker.is_cancelled:
                return
            row = self.rows[name]
            a, b = self.data_a.tensors[row["a"]], self.data_b.tensors[row["b"]]
            found = compare_tensor(a, b)
            stats_a, stats_b = self.data_a.stats(row["a"]), self.data_b.stats(row["b"])
            batch[name] = dict(status=found["status"], max_delta=found["max_delta"],
                               cosine=found["cosine"], d_mean=stats_b.mean - stats_a.mean,
                               d_std=stats_b.std - stats_a.std, done=True)
            if time.monotonic() - last >= BATCH_SECONDS or name == names[-1]:
                self.app.call_from_thread(self._fill, batch)
                batch, last = {}, time.monotonic()

    def _fill(self, updates: Dict[str, Dict[str, Any]]) -> None:
        table = self.table
        for name, update in updates.items():
            self.rows[name].update(update)
            if name in table.rows:
                for (key, _), cell in zip(COLUMNS, self._cells(name)):
                    table.update_cell(name, key, cell)
        self._status()
        if self.selected_tensor in updates:
            self._detail(str(self.selected_tensor))


def _base_rows(data_a: ModelData, data_b: ModelData) -> Dict[str, Dict[str, Any]]:
    """{name: row} from the headers alone: presence, shapes, dtypes (A's order first)."""
    pairs, only_a, only_b = pair_names(data_a.names, data_b.names, None)
    rows: Dict[str, Dict[str, Any]] = {}
    paired = dict(pairs)
    for name in data_a.names:
        a = data_a.tensors[name]
        row = {"tensor": name, "a": name, "shape_a": list(a.shape), "dtype_a": a.dtype.name,
               "presence": "A only", "done": True}
        if name in paired:
            b = data_b.tensors[paired[name]]
            row.update(b=paired[name], presence="both", shape_b=list(b.shape),
                       dtype_b=b.dtype.name, done=False)
        rows[name] = row
    for name in only_b:
        b = data_b.tensors[name]
        rows[name] = {"tensor": name, "b": name, "shape_b": list(b.shape),
                      "dtype_b": b.dtype.name, "presence": "B only", "done": True}
    return rows


def _style(key: str, row: Dict[str, Any]) -> str:
    if key == "presence" and row["presence"] != "both":
        return "bold yellow"
    if key == "status" and row.get("status") in ("DRIFT", "SHAPE"):
        return "bold red"
    if key in ("shape_a", "shape_b") and row["presence"] == "both" and \
            row.get("shape_a") != row.get("shape_b"):
        return "red"
    return ""
