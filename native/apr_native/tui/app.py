"""`apr tui`'s Textual app: five views in tabs over one model (compare: two), switched by
keys, a search box that filters the current view's tensors by name, and headless
rendering of one view to SVG (`screenshot`).

    g graph   s stats   h histogram   c compare   t chat   / search   q quit
"""
from __future__ import annotations

import os
from typing import Any, Optional, Tuple

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Header, Input, TabbedContent, TabPane

from . import VIEWS, default_view
from .chat import ChatView
from .compare import CompareView
from .data import ModelData
from .graph import GraphView
from .histogram import HistogramView
from .messages import TensorChosen
from .stats_view import StatsView

SCREENSHOT_SIZE = (120, 36)


class TuiApp(App):
    """The `apr tui` application over `data_a` (and `data_b` for the compare view)."""

    TITLE = "apr tui"
    CSS = """
    #search { dock: top; display: none; }
    #search.open { display: block; }
    TabPane { padding: 0; }
    """
    BINDINGS = [Binding(key, "show('{}')".format(name), title)
                for name, title, key in VIEWS] + [
        Binding("slash", "search", "Search"), Binding("escape", "escape", "Back"),
        Binding("q", "quit", "Quit")]

    def __init__(self, data_a: ModelData, data_b: Optional[ModelData] = None,
                 view: Optional[str] = None, tensor: Optional[str] = None,
                 max_tokens: int = 128, engine_options: Any = None) -> None:
        super().__init__()
        self.data_a, self.data_b = data_a, data_b
        self.initial_view = view or default_view(data_b is not None, tensor)
        self.tensor = tensor
        self.max_tokens, self.engine_options = max_tokens, engine_options
        self.sub_title = os.path.basename(data_a.path) + (
            "  vs  " + os.path.basename(data_b.path) if data_b is not None else "")

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield Input(placeholder="search tensors by name (Enter keeps the filter, Esc clears)",
                    id="search")
        views = {"graph": lambda: GraphView(self.data_a, id="graph-view"),
                 "stats": lambda: StatsView(self.data_a, id="stats-view"),
                 "histogram": lambda: HistogramView(self.data_a, self.tensor,
                                                    id="histogram-view"),
                 "compare": lambda: CompareView(self.data_a, self.data_b, id="compare-view"),
                 "chat": lambda: ChatView(self.data_a.path, self.max_tokens,
                                          self.engine_options, id="chat-view")}
        with TabbedContent(initial=self.initial_view, id="views"):
            for name, title, key in VIEWS:
                with TabPane("{} [{}]".format(title, key), id=name):
                    yield views[name]()
        yield Footer()

    def view(self, name: Optional[str] = None) -> Any:
        """The view widget `name` (default: the one shown)."""
        return self.query_one("#{}-view".format(name or self.active_view_name))

    @property
    def active_view_name(self) -> str:
        return self.query_one("#views", TabbedContent).active

    @property
    def search(self) -> Input:
        return self.query_one("#search", Input)

    def on_mount(self) -> None:
        self._enter(self.active_view_name)

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self._enter(str(event.pane.id))

    def _enter(self, name: str) -> None:
        view = self.view(name)
        view.activate()
        if self.search.has_class("open"):
            self.search.value = view.query_text
        else:
            view.focus_main()

    def action_show(self, name: str) -> None:
        """Switch to view `name` (g/s/h/c/t)."""
        self.query_one("#views", TabbedContent).active = name

    def action_search(self) -> None:
        """Open the search box over the current view, holding its filter."""
        if self.active_view_name == "chat":
            return
        search = self.search
        search.value = self.view().query_text
        search.add_class("open")
        search.focus()

    def action_escape(self) -> None:
        """Esc: clear and close the search box; in the chat, leave the input line."""
        if self.search.has_class("open"):
            self.search.value = ""
            self.view().apply_filter("")
            self._close_search()
        elif self.active_view_name == "chat":
            self.query_one("#views", TabbedContent).query_one("Tabs").focus()

    def _close_search(self) -> None:
        self.search.remove_class("open")
        self.view().focus_main()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "search" and self.search.has_class("open"):
            view = self.view()
            if view.query_text != event.value:
                view.apply_filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "search":
            event.stop()
            self._close_search()

    def on_tensor_chosen(self, message: TensorChosen) -> None:
        """Enter on a tensor (graph, stats, compare): its histogram."""
        self.view("histogram").open(message.name)
        self.action_show("histogram")


async def screenshot(app: TuiApp, size: Tuple[int, int] = SCREENSHOT_SIZE) -> str:
    """Run `app` headless, wait until its view has its data, return the screen as SVG."""
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        while app.is_running and not app.view().ready():
            await pilot.pause(0.05)
        await pilot.pause()
        return app.export_screenshot(title="apr tui: {}".format(app.active_view_name))


def run_headless(coroutine: Any) -> Any:
    """Run `coroutine` (a headless session: `screenshot`, a test's Pilot) to its end on a
    fresh event loop, in a thread of its own when this thread already runs one (an
    embedding program, or Playwright's sync API beside it in a test process)."""
    import asyncio
    import threading
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = asyncio.run(coroutine)
        except BaseException as error:   # re-raised in the caller's thread
            outcome["error"] = error
    worker = threading.Thread(target=run, name="apr-tui-headless")
    worker.start()
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
