"""The histogram view: the value distribution of one tensor (bins of numpy.histogram
over its dequantized finite values, `apr_core.stats.histogram`) drawn as the same text
bar chart as `apr tensors --hist`, beside a list of tensors to pick from (arrows move,
the search filters the list). Histograms are computed in a worker and cached."""
from __future__ import annotations

from typing import Any, List, Optional

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from ..cli.render import fmt, histogram_lines
from .data import Histogram, ModelData, matching
from .structure import first_matrix

CHART_HEIGHT = 12


class HistogramView(Horizontal):
    """A tensor list (left) and the selected tensor's histogram (right)."""

    DEFAULT_CSS = """
    HistogramView > OptionList { width: 36; height: 1fr; }
    HistogramView > VerticalScroll { width: 1fr; height: 1fr; padding: 0 1; }
    """

    def __init__(self, data: ModelData, tensor: Optional[str] = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.data = data
        self.tensor = tensor or first_matrix(data.tensors)
        self.current: Optional[Histogram] = None   # the histogram on screen
        self.query_text = ""
        self.active = False

    def compose(self) -> ComposeResult:
        yield OptionList(id="hist-list")
        with VerticalScroll():
            yield Static(id="hist-chart")

    @property
    def options(self) -> OptionList:
        return self.query_one("#hist-list", OptionList)

    def on_mount(self) -> None:
        self._fill_list()

    def activate(self) -> None:
        if not self.active:
            self.active = True
            self.show_tensor(self.tensor)

    def open(self, name: str) -> None:
        """Show `name`'s histogram (and only its: a first activation skips the default)."""
        self.active = True
        self.show_tensor(name)

    def focus_main(self) -> None:
        self.options.focus()

    def ready(self) -> bool:
        return self.tensor is None or (self.current is not None and
                                       self.current.stats.name == self.tensor)

    @property
    def shown(self) -> List[str]:
        return matching(self.data.names, self.query_text)

    def apply_filter(self, query: str) -> None:
        self.query_text = query
        self._fill_list()

    def _fill_list(self) -> None:
        options = self.options
        options.clear_options()
        names = self.shown
        options.add_options([Option(Text(n), id=n) for n in names])
        if self.tensor in names:
            options.highlighted = names.index(self.tensor)

    def show_tensor(self, name: Optional[str]) -> None:
        """Select `name` in the list and draw its histogram (computed in a worker)."""
        if name is None:
            return
        self.tensor = name
        if name in self.shown and self.options.highlighted != self.shown.index(name):
            self.options.highlighted = self.shown.index(name)
        self.current = None
        self.query_one("#hist-chart", Static).update(Text("{}\n\ncomputing the histogram…"
                                                          .format(name)))
        self.run_worker(lambda: self._compute(name), thread=True, exclusive=True,
                        group="histogram", name="histogram")

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        event.stop()
        if self.active and event.option_id and event.option_id != self.tensor:
            self.show_tensor(event.option_id)

    def _compute(self, name: str) -> None:
        found = self.data.histogram(name)
        self.app.call_from_thread(self._draw, name, found)

    def _draw(self, name: str, found: Histogram) -> None:
        if name != self.tensor:    # the user moved on while this one was computed
            return
        self.current = found
        self.query_one("#hist-chart", Static).update(Text("\n".join(chart_lines(found))))


def chart_lines(found: Histogram) -> List[str]:
    """The histogram as text: title, statistics, the bar chart, the counts."""
    s = found.stats
    counted = sum(found.counts)
    lines = ["{}  {} {}".format(s.name, s.dtype, list(s.shape)),
             "elements {}   counted {}   NaN {}   Inf {}".format(
                 fmt(s.count), fmt(counted), fmt(s.nan), fmt(s.inf)),
             "min {}   max {}   mean {}   std {}   zeros {}".format(
                 fmt(s.min), fmt(s.max), fmt(s.mean), fmt(s.std), fmt(s.zeros)),
             "", "{} bins:".format(len(found.counts))]
    lines += histogram_lines(found.counts, found.edges, CHART_HEIGHT)
    peak = max(range(len(found.counts)), key=lambda i: found.counts[i]) if found.counts else 0
    if found.counts:
        lines += ["", "fullest bin: [{}, {}) holds {} values".format(
            fmt(found.edges[peak]), fmt(found.edges[peak + 1]), fmt(found.counts[peak]))]
    return lines
