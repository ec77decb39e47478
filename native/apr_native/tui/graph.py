"""The graph view: the model's data flow as a Tree (embedding → blocks → norm → lm head),
each block's stages with their tensors' dtypes and shapes. Enter on a tensor opens its
histogram; the search box keeps only the tensors whose names contain the query."""
from __future__ import annotations

from typing import Optional

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static, Tree
from textual.widgets.tree import TreeNode

from .data import ModelData
from .messages import TensorChosen
from .structure import Node, filter_graph, model_graph


class GraphView(Vertical):
    """The Tree of `structure.model_graph`, filtered by the search query."""

    DEFAULT_CSS = """
    GraphView > #graph-status { height: 1; color: $text-muted; }
    GraphView > Tree { height: 1fr; }
    """

    def __init__(self, data: ModelData, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.data = data
        self.graph = model_graph(data.tensors, data.summary(),
                                 data.path.rsplit("/", 1)[-1])
        self.query_text = ""

    def compose(self) -> ComposeResult:
        yield Static(id="graph-status")
        tree: Tree[Optional[str]] = Tree("model", id="graph-tree")
        tree.show_root = True
        yield tree

    def on_mount(self) -> None:
        self.apply_filter("")

    @property
    def tree(self) -> Tree:
        return self.query_one("#graph-tree", Tree)

    def ready(self) -> bool:
        return True   # built from the header when the view is created

    def activate(self) -> None:
        """Nothing to compute: the graph comes from tensor names, dtypes and shapes."""

    def focus_main(self) -> None:
        self.tree.focus()

    def apply_filter(self, query: str) -> None:
        """Show only the tensors whose names contain `query` (all when empty)."""
        self.query_text = query
        shown = filter_graph(self.graph, query)
        tree = self.tree
        tree.clear()
        if shown is None:
            tree.root.set_label(Text("no tensor matches {!r}".format(query)))
            tree.root.data = None
            self._status(0)
            return
        tree.root.set_label(Text(shown.label))
        tree.root.data = shown.tensor
        for child in shown.children:
            _add(tree.root, child)
        tree.root.expand()
        tree.move_cursor(tree.root)
        self._status(len(shown.tensors()))

    def _status(self, count: int) -> None:
        total = len(self.data.tensors)
        text = "{} tensors".format(total) if not self.query_text else \
            "{} of {} tensors match {!r}".format(count, total, self.query_text)
        self.query_one("#graph-status", Static).update(Text(
            text + "   ↑↓ move  space/enter fold  enter on a tensor: its histogram"))

    @property
    def tensor_names(self) -> list:
        """The tensors the tree holds now (after the search filter), in display order."""
        names = []

        def visit(node: TreeNode) -> None:
            if node.data:
                names.append(node.data)
            for child in node.children:
                visit(child)
        visit(self.tree.root)
        return names

    @property
    def selected_tensor(self) -> Optional[str]:
        """The tensor under the cursor, or None on a stage/label line."""
        node = self.tree.cursor_node
        return node.data if node is not None else None

    def on_tree_node_selected(self, event: Tree.NodeSelected) -> None:
        if event.node.data:
            event.stop()
            self.post_message(TensorChosen(event.node.data))


def _add(parent: TreeNode, node: Node) -> None:
    if not node.children:
        parent.add_leaf(Text(node.label, style="bold" if node.tensor else ""), data=node.tensor)
        return
    branch = parent.add(Text(node.label), data=node.tensor, expand=node.expanded)
    for child in node.children:
        _add(branch, child)
