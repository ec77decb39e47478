"""The per-step input buffer: what changes from one forward step to the next.

One `array<u32>` uploaded before each step's single submission (floats as their bits):

    word  0 rows T         1 rows with logits R     2 block-table width W
          3 ids at         4 positions at           5 KV slots at
          6 KV block size  7 block tables at [T, W] 8 logit rows at [R]
          9, 10  cos, sin of the "full" RoPE [T, dim/2] at
          11, 12 cos, sin of the "sliding" RoPE at
    then the arrays, each at the word its header entry names.

`Capacity` sizes the buffer (and every activation buffer of a plan); a step that needs
more makes the runner build a larger plan.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Sequence, Tuple

import numpy as np

HEADER_WORDS = 16
ROPE_KINDS = ("full", "sliding")     # table index 0 and 1 of rope_store


class Capacity(NamedTuple):
    """Most rows, logit rows and block-table width a plan's buffers hold."""

    rows: int
    out_rows: int
    table_width: int

    def grown(self, rows: int, out_rows: int, table_width: int) -> "Capacity":
        """The smallest power-of-two capacity holding this one and the given sizes."""
        return Capacity(_pow2(max(self.rows, rows)), _pow2(max(self.out_rows, out_rows)),
                        _pow2(max(self.table_width, table_width)))

    def holds(self, rows: int, out_rows: int, table_width: int) -> bool:
        return rows <= self.rows and out_rows <= self.out_rows and \
            table_width <= self.table_width


def _pow2(n: int) -> int:
    size = 1
    while size < n:
        size *= 2
    return size


def step_words(capacity: Capacity, rope_half: int) -> int:
    """u32 words of the step buffer for `capacity` (RoPE tables of `rope_half` pairs)."""
    t = capacity.rows
    return HEADER_WORDS + 3 * t + t * capacity.table_width + capacity.out_rows + \
        2 * len(ROPE_KINDS) * t * rope_half


def pack_step(ids: np.ndarray, positions: np.ndarray, slots: np.ndarray,
              tables: np.ndarray, block: int, out_rows: Sequence[int],
              ropes: Sequence[Optional[Tuple[np.ndarray, np.ndarray]]]) -> np.ndarray:
    """The step buffer's words (uint32): `ids, positions, slots [T]`, `tables [T, W]`,
    `out_rows [R]`, `ropes[kind]` = (cos, sin) each `[T, dim/2]` float32 or None."""
    t = int(ids.shape[0])
    width = int(tables.shape[1])
    parts = [np.asarray(ids, np.uint32), np.asarray(positions, np.uint32),
             np.asarray(slots, np.uint32), np.ascontiguousarray(tables, np.uint32).reshape(-1),
             np.asarray(out_rows, np.uint32)]
    for table in ropes:
        for values in (table if table is not None else (np.zeros(0, np.float32),) * 2):
            parts.append(np.ascontiguousarray(values, np.float32).reshape(-1).view(np.uint32))
    header = np.zeros(HEADER_WORDS, np.uint32)
    header[0], header[1], header[2], header[6] = t, len(out_rows), width, block
    at = HEADER_WORDS
    slots_in_header = [3, 4, 5, 7, 8, 9, 10, 11, 12]
    for word, part in zip(slots_in_header, parts):
        header[word] = at
        at += part.size
    return np.concatenate([header] + parts)


__all__ = ["Capacity", "HEADER_WORDS", "ROPE_KINDS", "step_words", "pack_step"]
