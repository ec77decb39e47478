"""The README and docs/ hold together: every relative link (and its #anchor) points at a file
and heading that exist, every docs page is reachable from the README's map and the docs
site's nav, and the row counts the pages quote come from the constant that sets them.

Anchors are checked with GitHub's rule for heading ids (lowercase; punctuation other than
`-` and `_` dropped; each space a `-`), which is how the README and the pages are read on
GitHub; mkdocs (`mkdocs build --strict`) checks its own rendering of docs/ separately.
"""
import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
PAGES = sorted(name for name in os.listdir(DOCS) if name.endswith(".md"))
# [text](target) and ![alt](target); a target has no spaces (titles are not used here)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^(#{1,6}) +(.+?) *$", re.M)


def _read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _prose(text):
    """The text outside fenced blocks (a `# comment` in a bash block is no heading)."""
    return FENCE.sub("", text)


def github_anchor(heading):
    """The id GitHub gives a heading: `apr compile --target web` -> apr-compile---target-web."""
    text = heading.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    return {github_anchor(match.group(2)) for match in HEADING.finditer(_prose(_read(path)))}


def links(path):
    """(target file, anchor or None) of each relative link in the prose of `path`."""
    found = []
    for target in LINK.findall(INLINE_CODE.sub("", _prose(_read(path)))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):        # https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        where = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
            if file_part else path
        found.append((target, where, anchor or None))
    return found


DOCUMENTS = [os.path.join(ROOT, "README.md")] + [os.path.join(DOCS, page) for page in PAGES]


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: os.path.relpath(p, ROOT))
def test_relative_links_point_at_existing_files_and_headings(path):
    found = links(path)
    broken = []
    for target, where, anchor in found:
        if not os.path.exists(where):
            broken.append("{}: no such file".format(target))
        elif anchor and where.endswith(".md") and anchor not in anchors(where):
            broken.append("{}: no heading with that anchor".format(target))
    print("{}: {} relative links".format(os.path.relpath(path, ROOT), len(found)))
    assert not broken, broken


def test_link_check_sees_a_broken_link(tmp_path):
    """The checker itself: a missing file and a missing anchor are both reported."""
    (tmp_path / "b.md").write_text("# Real heading\n")
    page = tmp_path / "a.md"
    page.write_text("[ok](b.md#real-heading) [gone](c.md) [bad](b.md#other)\n"
                    "```\n[in code](nowhere.md)\n```\n")
    found = links(str(page))
    assert [(t, os.path.exists(w), a) for t, w, a in found] == [
        ("b.md#real-heading", True, "real-heading"), ("c.md", False, None),
        ("b.md#other", True, "other")]
    assert anchors(str(tmp_path / "b.md")) == {"real-heading"}


def test_every_docs_page_is_in_the_readme_map_and_the_site_nav():
    readme = {os.path.basename(w) for _, w, _ in links(os.path.join(ROOT, "README.md"))
              if os.path.dirname(w) == DOCS}
    nav = set(re.findall(r"^\s*- [^:]+: (\S+\.md)\s*$", _read(os.path.join(ROOT, "mkdocs.yml")),
                         re.M))
    assert set(PAGES) - {"index.md"} <= readme, sorted(set(PAGES) - readme)
    assert set(PAGES) == nav, sorted(set(PAGES) ^ nav)


def _constant(path, name):
    """A module-level integer constant, read from source (apr_native needs Python 3.10+)."""
    for node in ast.parse(_read(path)).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("{} not found in {}".format(name, path))


# (page, sentence with the number, the number minus DOT_MAX_TOKENS)
ROW_QUOTES = [
    ("decoding-and-sampling.md", r"verification pass takes up to (\d+) rows", 0),
    ("decoding-and-sampling.md", r"the pending token \+ (\d+) drafted", -1),
    ("decoding-and-sampling.md", r"caps a pass at (\d+) rows", 0),
    ("serving.md", r"a step of up to (\d+) rows", 0),
    ("serving.md", r"Up to (\d+) rows each row", 0),
    ("serving.md", r"recomputes at least (\d+) prompt rows", 1),
]


def test_row_counts_quoted_in_the_docs_are_dot_max_tokens():
    """The numba backend's integer-dot row limit is `DOT_MAX_TOKENS`: the sentences that
    quote it (speculative verification rows, the server's exact rows, a prefix hit's
    recompute) must say its value, not an older one."""
    rows = _constant(os.path.join(ROOT, "native", "apr_native", "numba_rows.py"),
                     "DOT_MAX_TOKENS")
    wrong = []
    for page, sentence, offset in ROW_QUOTES:
        text = " ".join(_read(os.path.join(DOCS, page)).split())
        numbers = [int(n) for n in re.findall(sentence, text)]
        if numbers != [rows + offset]:
            wrong.append((page, sentence, numbers, rows + offset))
    assert not wrong, wrong
