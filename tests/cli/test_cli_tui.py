"""`apr tui` (Textual) driven by Textual's Pilot on the real SmolLM2-135M and Qwen2.5-0.5B
GGUFs. The independent source of truth is gguf-py: `GGUFReader`'s tensor list (names,
types, dims innermost-first) and `gguf.dequantize` for values; greedy chat is checked
against the Engine run directly."""
import math
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from cli_util import apr

pytestmark = [pytest.mark.native, pytest.mark.real_model]

SIZE = (120, 36)
BINS = 40
PROMPT = "What is the capital of France?"


class Gguf:
    """What gguf-py reads from a GGUF file: names in file order, shapes row-major."""

    def __init__(self, path):
        import gguf
        self.reader = gguf.GGUFReader(path)
        self.tensors = {t.name: t for t in self.reader.tensors}
        self.names = [t.name for t in self.reader.tensors]

    def shape(self, name):
        return [int(d) for d in reversed(self.tensors[name].shape)]

    def dtype(self, name):
        return self.tensors[name].tensor_type.name

    def values(self, name):
        import gguf
        tensor = self.tensors[name]
        return gguf.dequantize(tensor.data, tensor.tensor_type).reshape(self.shape(name))


@pytest.fixture(scope="module")
def smol(smollm2_gguf):
    return Gguf(smollm2_gguf)


@pytest.fixture(scope="module")
def qwen(qwen_gguf):
    return Gguf(qwen_gguf)


def drive(path_a, scenario, path_b=None, **kwargs):
    """Run the TUI over `path_a` (and `path_b`) headless; `scenario(app, pilot)` drives it."""
    from apr_native.tui.app import TuiApp, run_headless
    from apr_native.tui.data import ModelData
    data = [ModelData(p) for p in (path_a, path_b) if p]
    app = TuiApp(data[0], data[1] if path_b else None, **kwargs)

    async def main():
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            await scenario(app, pilot)
    try:
        run_headless(main())
    finally:
        for d in data:
            d.close()


async def until(pilot, condition, timeout=300.0):
    """Pause until `condition()` (a guard against a hang, not a speed check)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the TUI did not get there"
        await pilot.pause(0.05)


async def search(pilot, text):
    await pilot.press("slash", *text, "enter")


def cell(table, row, key):
    """The text of one cell of a DataTable (row index, column key)."""
    index = [c.key.value for c in table.ordered_columns].index(key)
    return str(table.get_row_at(row)[index])


def rows(table):
    return [str(table.coordinate_to_cell_key((i, 0)).row_key.value)
            for i in range(table.row_count)]


def test_graph_shows_every_tensor_with_dtype_and_shape_in_data_flow_order(smollm2_gguf, smol):
    async def scenario(app, pilot):
        view = app.view("graph")
        tree = view.tree
        assert sorted(view.tensor_names) == sorted(smol.names)
        labels = {}

        def visit(node):
            if node.data:
                labels[node.data] = str(node.label)
            for child in node.children:
                visit(child)
        visit(tree.root)
        for name in smol.names:
            assert labels[name] == "{}  {} {}".format(name, smol.dtype(name), smol.shape(name))
        top = [str(n.label).split()[0] for n in tree.root.children]
        assert top == ["input", "embedding", "blocks", "output", "lm", "output"]
        blocks = tree.root.children[2]
        assert [str(n.label) for n in blocks.children] == ["blk.{}".format(i) for i in range(30)]
        stages = [str(n.label).split("  ")[0] for n in blocks.children[0].children]
        assert stages == ["attention norm", "self-attention", "+ residual", "FFN norm",
                          "feed-forward", "+ residual"]
        # arrows move the cursor: input line, embedding, then its tensor
        assert tree.cursor_node is tree.root and view.selected_tensor is None
        await pilot.press("down", "down", "down")
        assert view.selected_tensor == "token_embd.weight" == smol.names[0]
        await pilot.press("down", "down", "down", "down")   # blocks, blk.0, its norm, tensor
        assert view.selected_tensor == "blk.0.attn_norm.weight"
        await pilot.press("enter")                           # opens its histogram
        assert app.active_view_name == "histogram"
        await until(pilot, app.view("histogram").ready)
        assert app.view("histogram").current.stats.name == "blk.0.attn_norm.weight"
    drive(smollm2_gguf, scenario)


def test_search_filters_the_current_view_and_esc_clears_it(smollm2_gguf, smol):
    wanted = [n for n in smol.names if "attn_q" in n]
    assert len(wanted) == 30

    async def scenario(app, pilot):
        await search(pilot, "attn_q")
        # the graph lists layers in data-flow order (the file's order is blk.0, 1, 10 ...)
        assert app.view("graph").tensor_names == sorted(wanted, key=lambda n: int(
            n.split(".")[1]))
        await pilot.press("s")
        stats = app.view("stats")
        assert rows(stats.table) == smol.names        # each view keeps its own filter
        await search(pilot, "attn_q")
        assert rows(stats.table) == wanted
        await pilot.press("h")
        await search(pilot, "ffn_down")
        histogram = app.view("histogram")
        options = histogram.options
        assert [options.get_option_at_index(i).id for i in range(options.option_count)] == [
            n for n in smol.names if "ffn_down" in n]
        await pilot.press("g", "slash", "escape")     # Esc in the search box clears it
        assert sorted(app.view("graph").tensor_names) == sorted(smol.names)
        await search(pilot, "no-such-tensor")
        assert app.view("graph").tensor_names == []
    drive(smollm2_gguf, scenario)


def test_stats_sort_orders_a_column_by_gguf_py_values(smollm2_gguf, smol):
    wanted = [n for n in smol.names if "attn_q" in n]
    means = {n: float(smol.values(n).astype(np.float64).mean()) for n in wanted}
    by_mean = sorted(wanted, key=means.get)

    async def scenario(app, pilot):
        await pilot.press("s")
        view = app.view("stats")
        await search(pilot, "attn_q")
        await until(pilot, view.ready)
        table = view.table
        assert rows(table) == wanted
        for i, name in enumerate(wanted):
            assert float(cell(table, i, "mean")) == pytest.approx(means[name], rel=1e-5)
            assert cell(table, i, "shape") == str(smol.shape(name))
            assert cell(table, i, "dtype") == smol.dtype(name)
            assert cell(table, i, "nan") == "0"
        await pilot.press("right", "right", "right")   # tensor, dtype, shape, mean
        await pilot.press("o")
        assert view.sort_key == "mean"
        assert rows(table) == by_mean
        await pilot.press("o")                          # again: descending
        assert rows(table) == by_mean[::-1]
        assert view.selected_tensor == by_mean[-1]
        await pilot.press("down")                       # navigation moves the selection
        assert view.selected_tensor == by_mean[-2]
        await pilot.press("right", "right", "o")        # the column under the cursor: min
        mins = [float(cell(table, i, "min")) for i in range(table.row_count)]
        assert mins == sorted(mins) and view.sort_key == "min"
        assert rows(table) == sorted(wanted, key=lambda n: float(smol.values(n).min()))
    drive(smollm2_gguf, scenario)


def test_histogram_counts_are_numpy_histogram_of_the_tensor(smollm2_gguf, smol):
    first, second = "blk.0.attn_q.weight", "blk.0.attn_v.weight"

    def expected(name):
        values = smol.values(name).astype(np.float64)
        return np.histogram(values, bins=BINS, range=(values.min(), values.max()))[0]

    async def scenario(app, pilot):
        view = app.view("histogram")
        await until(pilot, view.ready)
        found = view.current
        assert found.stats.name == first
        assert sum(found.counts) == math.prod(smol.shape(first)) == found.stats.count
        assert found.counts == expected(first).tolist()
        assert smol.names.index(second) == smol.names.index(first) + 1
        await pilot.press("down")                    # the next tensor of the list
        assert view.tensor == second
        await until(pilot, view.ready)
        assert view.current.stats.name == second
        assert sum(view.current.counts) == math.prod(smol.shape(second))
        assert view.current.counts == expected(second).tolist()
    drive(smollm2_gguf, scenario, view="histogram", tensor=first)


def test_compare_smollm2_with_qwen_shows_presence_and_shapes(smollm2_gguf, qwen_gguf, smol,
                                                             qwen):
    only_a = [n for n in smol.names if n not in qwen.tensors]
    only_b = [n for n in qwen.names if n not in smol.tensors]
    both = [n for n in smol.names if n in qwen.tensors]
    assert only_a and only_b and both

    async def scenario(app, pilot):
        view = app.view("compare")
        assert app.active_view_name == "compare"     # two models open it
        table = view.table
        assert rows(table) == smol.names + only_b
        await until(pilot, view.ready)
        shown = rows(table)
        for i, name in enumerate(shown):
            presence = cell(table, i, "presence")
            if name in only_a:
                assert presence == "A only" and cell(table, i, "shape_b") == ""
            elif name in only_b:
                assert presence == "B only" and cell(table, i, "shape_a") == ""
            else:
                assert presence == "both"
            if name in smol.tensors:
                assert cell(table, i, "shape_a") == str(smol.shape(name))
                assert cell(table, i, "dtype_a") == smol.dtype(name)
            if name in qwen.tensors:
                assert cell(table, i, "shape_b") == str(qwen.shape(name))
                assert cell(table, i, "dtype_b") == qwen.dtype(name)
            if name in both and smol.shape(name) != qwen.shape(name):
                assert cell(table, i, "status") == "SHAPE"
        assert any(smol.shape(n) != qwen.shape(n) for n in both)
        row = shown.index("blk.0.attn_norm.weight")   # stats deltas: B's mean minus A's
        delta = qwen.values("blk.0.attn_norm.weight").astype(np.float64).mean() - \
            smol.values("blk.0.attn_norm.weight").astype(np.float64).mean()
        assert float(cell(table, row, "d_mean")) == pytest.approx(delta, rel=1e-5)
        await search(pilot, "attn_q.bias")            # Qwen's biases: B only
        assert rows(table) == [n for n in only_b if "attn_q.bias" in n]
    drive(smollm2_gguf, scenario, qwen_gguf)


def test_compare_a_model_with_itself_is_cosine_1_everywhere(smollm2_gguf, smol):
    async def scenario(app, pilot):
        view = app.view("compare")
        await until(pilot, view.ready)
        table = view.table
        assert rows(table) == smol.names
        for i in range(table.row_count):
            assert cell(table, i, "presence") == "both"
            assert cell(table, i, "status") == "MATCH"
            assert cell(table, i, "cosine") == "1"
            assert cell(table, i, "max_delta") == "0"
            assert cell(table, i, "d_mean") == "0"
    drive(smollm2_gguf, scenario, smollm2_gguf)


def test_chat_pane_answers_as_the_engine_does(smollm2_gguf):
    from apr_native.engine import EngineOptions, load_engine
    tokens = 12
    engine = load_engine(smollm2_gguf, EngineOptions())
    want = engine.generate(engine.model.prompt_ids(PROMPT, chat=True), max_tokens=tokens).text
    assert want.strip()

    async def scenario(app, pilot):
        await pilot.press("t")
        view = app.view("chat")
        assert app.focused is view.input
        await pilot.press(*PROMPT)       # h, s, c, t typed into the input switch nothing
        assert app.active_view_name == "chat" and view.input.value == PROMPT
        await pilot.press("enter")
        await until(pilot, lambda: view.transcript and view.ready())
        assert view.transcript == [("user", PROMPT), ("assistant", want)]
        await pilot.press("escape", "g")                # Esc leaves the input: keys work
        assert app.active_view_name == "graph"
    drive(smollm2_gguf, scenario, max_tokens=tokens)


def svg_text(path):
    """The characters an SVG screenshot shows (Textual writes spaces as &#160;)."""
    with open(path, encoding="utf-8") as handle:
        svg = handle.read()
    assert svg.startswith("<svg")
    return svg.replace("&#160;", " ")


@pytest.mark.parametrize("view", ["graph", "stats", "histogram", "compare"])
def test_screenshot_svg_holds_the_tensor_names_of_the_view(smollm2_gguf, smol, view, tmp_path):
    out = str(tmp_path / "tui.svg")
    extra = [smollm2_gguf] if view == "compare" else []
    code, stdout, err = apr("tui", smollm2_gguf, *extra, "--view", view, "--screenshot", out)
    assert code == 0, err
    assert stdout.strip() == out
    text = svg_text(out)
    shown = set(re.findall(r"[\w.]+\.(?:weight|bias)", text))
    assert shown and shown <= set(smol.names)
    # each view lists the model's first tensors in file order (graph: blk.0's)
    first = [n for n in smol.names if n.startswith(("token_embd", "blk.0."))] \
        if view == "graph" else smol.names[:20]
    assert set(first) <= shown, set(first) - shown
    if view == "stats":
        assert "{:.6g}".format(smol.values(first[0]).astype(np.float64).mean()) in text
    code, _, err = apr("tui", smollm2_gguf, *extra, "--view", view, "--screenshot", out)
    assert code != 0 and "exists" in err                # no overwrite without -f
    assert apr("tui", smollm2_gguf, *extra, "--view", view, "--screenshot", out, "-f")[0] == 0


def test_bad_arguments_are_coded_errors(smollm2_gguf, tmp_path):
    from apr_core.errors import ErrorCode
    code, _, err = apr("tui", smollm2_gguf, "--view", "compare", "--screenshot",
                       str(tmp_path / "x.svg"))
    assert code == ErrorCode.ARGUMENT.exit_code and "E011" in err and "two models" in err
    code, _, err = apr("tui", smollm2_gguf, "--tensor", "blk.0.attn_qq.weight",
                       "--screenshot", str(tmp_path / "x.svg"))
    assert code == ErrorCode.NOT_FOUND.exit_code and "E010" in err
    assert "blk.0.attn_q.weight" in err                   # did you mean
    code, _, err = apr("tui", smollm2_gguf, "--screenshot", str(tmp_path / "x.png"))
    assert code == ErrorCode.ARGUMENT.exit_code and "SVG" in err
    code, _, err = apr("tui", str(tmp_path / "missing.gguf"), "--screenshot",
                       str(tmp_path / "x.svg"))
    assert code != 0 and "E0" in err and "Traceback" not in err
    assert not os.listdir(tmp_path)


def test_help_does_not_import_textual():
    code = ("import sys\nfrom apr_native.cli.main import main\n"
            "for args in (['--help'], ['tui', '--help']):\n"
            "    try:\n        main(args)\n    except SystemExit:\n        pass\n"
            "assert 'textual' not in sys.modules, 'textual imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "o sorts the stats column" in done.stdout
