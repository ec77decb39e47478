"""`apr tui`: a Textual terminal UI over one model (or two, side by side).

    app.py          TuiApp: the tabs, key bindings, search box, headless screenshots
    data.py         ModelData: one opened model, its tensors, statistics cached per tensor
    structure.py    the model's data-flow graph (embedding -> blocks -> norm -> lm head)
    graph.py        the graph view (a Tree)
    stats_view.py   per-tensor statistics (a sortable DataTable, computed in a worker)
    histogram.py    one tensor's value distribution
    compare.py      two models side by side (`apr diff`'s comparison)
    chat.py         a chat pane streaming the Engine's tokens
    messages.py     what the views tell the app (a tensor chosen: show its histogram)

Textual is imported only by app.py and the view modules (this package's __init__,
data.py and structure.py need none), so `apr --help` never loads it.
"""
from __future__ import annotations

from typing import Optional

# THE view table: (id, tab title, key that shows it). Textual-free, so the CLI reads it
# without loading Textual.
VIEWS = (("graph", "Graph", "g"), ("stats", "Stats", "s"), ("histogram", "Histogram", "h"),
         ("compare", "Compare", "c"), ("chat", "Chat", "t"))
VIEW_NAMES = tuple(name for name, _, _ in VIEWS)


def default_view(two_models: bool, tensor: Optional[str] = None) -> str:
    """The view `apr tui` opens without --view: compare for two models, the histogram
    for --tensor, else the graph."""
    if two_models:
        return "compare"
    return "histogram" if tensor else "graph"
