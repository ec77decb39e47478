"""The V8 switches an instruction level turns off (`apr_native.isa`'s table, which
bench/browser.py's `--isa` passes to Chromium) are switches this Chromium's V8 has: V8
ignores a misspelt `--no-enable-...` flag with a warning, so a wrong name would leave the
browser benchmark at the host's level without saying so."""
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from wasm_shared import require

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "native"))

from apr_native import isa  # noqa: E402

pytestmark = pytest.mark.native


def v8_switches() -> set:
    """The switches V8 lists for `--js-flags=--help` in this Chromium. Each process prints
    the list and its V8 stops there, so the browser never finishes loading a page: read
    until the list has been printed, then stop the browser."""
    chromium = shutil.which("chromium")
    require(chromium is not None, "chromium not installed")
    browser = subprocess.Popen([chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
                                "--js-flags=--help", "about:blank"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    lines: list = []
    reader = threading.Thread(target=lambda: lines.extend(browser.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    try:
        seen = 0
        while time.monotonic() < deadline:      # done when the output stops growing
            time.sleep(2)
            if lines and len(lines) == seen:
                break
            seen = len(lines)
    finally:
        os.killpg(browser.pid, signal.SIGKILL)
        browser.wait()
        reader.join(10)
    text = b"".join(lines).decode("utf-8", "replace")
    return set(re.findall(r"^  --([a-z0-9-]+) \(", text, flags=re.M))


def test_every_level_names_switches_v8_has():
    known = v8_switches()
    assert "enable-avx2" in known, "V8's flag list was not read"
    for name, level in isa.LEVELS.items():
        for flag in level.v8_flags:
            assert flag.startswith("--no-"), (name, flag)
            assert flag[len("--no-"):] in known, (name, flag)


def test_lower_levels_turn_off_at_least_what_higher_ones_do():
    names = list(isa.LEVELS)                 # lowest first
    for lower, higher in zip(names, names[1:]):
        assert set(isa.LEVELS[higher].v8_flags) <= set(isa.LEVELS[lower].v8_flags), \
            (lower, higher)
    assert isa.v8_flags(isa.NATIVE) == ()
