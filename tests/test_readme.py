"""The README's first code block is the install command, and it works as written.

The block is read from README.md (not copied here), so an edit to the README is what gets
tested. It runs with `bash -euo pipefail` in a copy of the repository's files (what a
fresh clone holds: no .venv, no build outputs), which makes it install apr and the demo
model into a new venv of the copy and ask the demo question. pip's cache is the user's (a
machine that has installed these packages before), apr's cache (`APR_CACHE`: kernel
builds, verified-model stamps) a new one, as on a first install; nothing is written outside
tmp_path. Background jobs the first run starts (kernel builds that outlive `apr run`) are
ended when the block is done: they run the copy's Python, which names them.
"""
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

pytestmark = [pytest.mark.real_model, pytest.mark.native]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICK_START = "bash scripts/quickstart.sh"
# a block may take this long before the test gives up on it (pip + first runs, 2 loaded cores)
TIMEOUT_S = 900


def first_bash_block(text):
    """The commands of the first ```bash fenced block of `text` (comments and blank lines
    dropped), or [] when there is none."""
    match = re.search(r"^```bash\n(.*?)^```", text, re.M | re.S)
    if not match:
        return []
    lines = (line.split("#", 1)[0].strip() for line in match.group(1).splitlines())
    return [line for line in lines if line]


def readme_block():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        return first_bash_block(handle.read())


def test_first_bash_block_of_the_readme_is_the_quick_start():
    """The first command a reader meets installs apr; the tests' command comes after it."""
    assert readme_block() == [QUICK_START]
    assert first_bash_block("text\n```sh\nls\n```\n```bash\na  # b\n\nc\n```\n") == ["a", "c"]


def tracked_copy(destination):
    """Copy the working tree's files that a commit of it would hold (tracked, plus new files
    git does not ignore) to `destination`: a clone of the checkout as it is."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, stdout=subprocess.PIPE,
                            check=True).stdout.decode().split("\0")
    copied = 0
    for name in filter(None, listed):
        source = os.path.join(ROOT, name)
        if not os.path.lexists(source):          # deleted in the working tree, not committed
            continue
        target = os.path.join(destination, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
        copied += 1
    return copied


def end_processes_of(folder):
    """SIGTERM every process whose program lives under `folder` (found in /proc): what the
    block left running, started from the copy's venv. Returns how many were signalled."""
    ended = 0
    prefix = os.path.join(folder, "")
    for pid in filter(str.isdigit, os.listdir("/proc") if os.path.isdir("/proc") else []):
        try:
            with open("/proc/{}/cmdline".format(pid), "rb") as handle:
                program = handle.read().split(b"\0", 1)[0].decode(errors="replace")
            if program.startswith(prefix):
                os.kill(int(pid), signal.SIGTERM)
                ended += 1
        except OSError:                 # gone meanwhile, or not ours to read
            continue
    return ended


def test_readme_quick_start_runs_as_written_in_a_fresh_copy(tmp_path):
    clone = tmp_path / "clone"
    copied = tracked_copy(str(clone))
    assert not (clone / ".venv").exists() and (clone / "scripts" / "quickstart.sh").is_file()
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["APR_DEMO_OUT"] = str(tmp_path / "out")     # the converted model stays in tmp_path
    env["APR_CACHE"] = str(tmp_path / "apr-cache")
    os.makedirs(env["APR_DEMO_OUT"])
    start = time.monotonic()
    try:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(readme_block())],
                              cwd=str(clone), env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=TIMEOUT_S)
    finally:
        left = end_processes_of(str(clone))
    took = time.monotonic() - start
    out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    print("copied {} files; the block took {:.0f} s; {} background process(es) ended".format(
        copied, took, left))
    assert done.returncode == 0, (out[-2000:], err[-4000:])
    assert "Paris" in out, out[-2000:]
    assert (clone / ".venv" / "bin" / "apr").is_file()
