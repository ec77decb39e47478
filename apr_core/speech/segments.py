"""Split one window's tokens into segments at timestamp tokens, and find the next seek.

faster-whisper's `_split_segments_by_timestamps`: consecutive timestamp tokens close one
segment and open the next; a window ending in a single timestamp had no speech after it
(seek moves a whole window), otherwise the unfinished tail is dropped and seek moves to
the last timestamp. Without consecutive timestamps the window is one segment whose end
is the last timestamp (or the window's end).
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple


def split_segments(tokens: List[int], timestamp_begin: int, time_offset: float,
                   segment_size: int, seek: int, input_stride: int,
                   time_precision: float) -> Tuple[List[Dict[str, Any]], int]:
    """([{"start", "end", "tokens"}], next seek in mel frames)."""
    single_ending = len(tokens) >= 2 and tokens[-2] < timestamp_begin <= tokens[-1]
    consecutive = [i for i in range(1, len(tokens))
                   if tokens[i] >= timestamp_begin and tokens[i - 1] >= timestamp_begin]
    out: List[Dict[str, Any]] = []
    if consecutive:
        slices = consecutive + ([len(tokens)] if single_ending else [])
        last = 0
        for current in slices:
            piece = tokens[last:current]
            out.append({"start": time_offset + (piece[0] - timestamp_begin) * time_precision,
                        "end": time_offset + (piece[-1] - timestamp_begin) * time_precision,
                        "tokens": piece})
            last = current
        if single_ending:
            seek += segment_size
        else:
            seek += (tokens[last - 1] - timestamp_begin) * input_stride
        return out, seek
    duration = segment_size * (time_precision / input_stride)     # mel frames -> seconds
    stamps = [t for t in tokens if t >= timestamp_begin]
    if stamps and stamps[-1] != timestamp_begin:
        duration = (stamps[-1] - timestamp_begin) * time_precision
    out.append({"start": time_offset, "end": time_offset + duration, "tokens": tokens})
    return out, seek + segment_size


__all__ = ["split_segments"]
