"""Memory of the Chromium a test or benchmark launched through Playwright: the resident bytes
of every browser process under this Python process (browser, zygote, GPU, utility, renderer
and worker processes), not counting Playwright's node driver."""
from __future__ import annotations

import os
from typing import Iterable, List, Optional, Set


def chromium_rss(roots: Optional[Iterable[int]] = None) -> int:
    """Resident bytes of every Chromium process started under this process, or with `roots`
    (browser process ids from `browser_roots`) of those browsers' process trees only."""
    import psutil
    if roots is None:
        processes = psutil.Process(os.getpid()).children(recursive=True)
    else:
        processes = []
        for pid in roots:
            try:
                root = psutil.Process(pid)
                processes += [root] + root.children(recursive=True)
            except psutil.NoSuchProcess:
                pass
    total = 0
    for child in processes:
        try:
            if child.name() != "node":
                total += child.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def browser_pids() -> Set[int]:
    """Ids of the processes under this process now (take before launching a browser)."""
    import psutil
    return {p.pid for p in psutil.Process(os.getpid()).children(recursive=True)}


def browser_roots(before: Set[int]) -> List[int]:
    """The browser processes launched since `before` (browser_pids()): new processes whose
    parent is not new, Playwright's node driver aside."""
    import psutil
    new = [p for p in psutil.Process(os.getpid()).children(recursive=True)
           if p.pid not in before]
    ids = {p.pid for p in new}
    roots = []
    for process in new:
        try:
            if process.name() != "node" and process.ppid() not in ids:
                roots.append(process.pid)
        except psutil.NoSuchProcess:
            pass
    return roots
