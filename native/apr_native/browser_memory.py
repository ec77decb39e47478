"""Memory of the Chromium a test or benchmark launched through Playwright: the resident bytes
of every browser process under this Python process (browser, zygote, GPU, utility, renderer
and worker processes), not counting Playwright's node driver."""
from __future__ import annotations

import os


def chromium_rss() -> int:
    """Resident bytes of every Chromium process started under this process."""
    import psutil
    total = 0
    for child in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if child.name() != "node":
                total += child.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total
