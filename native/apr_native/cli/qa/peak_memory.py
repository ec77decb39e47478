"""Peak resident memory of this process, for the memory-ceiling check of `apr qa`.

Linux keeps a process's high-water mark (`VmHWM` in /proc/self/status) and lets the
process reset it to the current RSS by writing "5" to /proc/self/clear_refs (Linux 4.0+).
`reset()` does that before the model is loaded, so the peak read afterwards covers loading
and decoding, not what ran before (an earlier command in the same process, the imports'
transient allocations). Where the reset is refused or /proc is absent the peak is
`getrusage`'s `ru_maxrss`, which counts from process start: an upper bound.
"""
from __future__ import annotations

import resource
import sys
from typing import Tuple

STATUS = "/proc/self/status"
CLEAR_REFS = "/proc/self/clear_refs"
RESET_HIGH_WATER_MARK = "5"          # proc(5): "reset the peak resident set size"


def reset() -> bool:
    """Restart the high-water mark at the current RSS; False when the kernel refuses."""
    try:
        with open(CLEAR_REFS, "w") as handle:
            handle.write(RESET_HIGH_WATER_MARK)
        return True
    except OSError:
        return False


def peak_bytes() -> Tuple[int, str]:
    """(peak RSS in bytes, where it was read: "VmHWM" or "ru_maxrss")."""
    try:
        with open(STATUS) as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024, "VmHWM"   # "VmHWM:  123 kB"
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss is KiB on Linux, bytes on macOS
    return (peak if sys.platform == "darwin" else peak * 1024), "ru_maxrss"


__all__ = ["reset", "peak_bytes"]
