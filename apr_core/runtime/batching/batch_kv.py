"""One step's view of the block pool: what `Transformer.hidden_states` needs to run the
rows of many sequences at once.

    step = BatchKV(pool, [(seq_a.blocks, seq_a.computed, 1), (seq_b.blocks, 0, 37)],
                   model.kernels)
    logits = model.forward_rows(ids_a + ids_b, step, step.last_rows)

Rows are the sequences' new tokens, in order. Row t of a sequence whose first `computed`
positions are already in the pool sits at position `computed + i`; its K and V go to the
slot of that position in the sequence's block table, and its query attends to positions
`0 .. computed + i` of that sequence only. The caller (the scheduler) has already
allocated the blocks these positions need.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from ...errors import AprError, ErrorCode
from ...quant import registry
from .paged_kv import BlockPool

Segment = Tuple[Sequence[int], int, int]      # (block table, positions computed, new rows)


class BatchKV:
    """The cache argument of `Transformer.forward_rows` for one batch step."""

    def __init__(self, pool: BlockPool, segments: Sequence[Segment],
                 kernels: Optional[registry.Kernels] = None) -> None:
        self.pool = pool
        self.kernels = kernels or registry.NUMPY   # the model's backend
        self.block_size = pool.block_size
        bs = self.block_size
        widest = max(len(table) for table, _, _ in segments)
        positions: List[np.ndarray] = []
        slots: List[np.ndarray] = []
        rows: List[np.ndarray] = []
        self.last_rows: List[int] = []     # row of each segment's last token
        total = 0
        for table, computed, count in segments:
            pos = np.arange(computed, computed + count, dtype=np.int64)      # [n]
            if count <= 0 or (computed + count + bs - 1) // bs > len(table):
                raise AprError(ErrorCode.ARGUMENT, "batch segment without blocks for its "
                               "positions", computed=computed, new=count, blocks=len(table))
            padded = np.zeros(widest, np.int32)
            padded[:len(table)] = table
            blocks = padded[pos // bs].astype(np.int64)                       # [n]
            positions.append(pos)
            slots.append(blocks * bs + pos % bs)
            rows.append(np.broadcast_to(padded, (count, widest)))
            total += count
            self.last_rows.append(total - 1)
        self._positions = np.concatenate(positions)                           # [T] int64
        self.slots = np.concatenate(slots)                                    # [T] int64
        self.tables = np.ascontiguousarray(np.concatenate(rows), np.int32)    # [T, widest]
        self.rows = total

    # ------------------------------------------------------------------ the cache protocol

    def positions(self, n_new: int) -> np.ndarray:
        self.check_room(n_new)
        return self._positions

    def check_room(self, n_new: int) -> None:
        if n_new != self.rows:
            raise AprError(ErrorCode.ARGUMENT, "batch step got a different number of tokens "
                           "than its segments", tokens=n_new, rows=self.rows)

    def advance(self, n_new: int) -> None:
        """Nothing to move: the scheduler counts each sequence's computed positions."""

    def layer(self, layer: int) -> Tuple[np.ndarray, np.ndarray]:
        """The pool's K and V of `layer`, each `[n_kv, slots, hd]`."""
        return self.pool.k[layer], self.pool.v[layer]

    def kernel_view(self, n_new: int) -> Tuple[np.ndarray, np.ndarray, int]:
        """(slots [T] int64, block tables [T, blocks] int32, block size)."""
        return self.slots, self.tables, self.block_size

    def rope_store(self, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                   cos: Any, sin: Any, dim: int, neox: bool) -> np.ndarray:
        """Fused kind "rope_store_paged" -> rotated q `[T, H, hd]`."""
        return self.kernels.fused("rope_store_paged")(q, k, v, cos, sin, dim, neox,
                                                   self.pool.k[layer], self.pool.v[layer],
                                                   self.slots)

    def attention(self, layer: int, q: np.ndarray, positions: np.ndarray, scale: float,
                  window: int) -> np.ndarray:
        """Fused kind "attention_paged": each row over its own sequence -> `[T, q_dim]`."""
        return self.kernels.fused("attention_paged")(q, self.pool.k[layer], self.pool.v[layer],
                                                  self.tables, self.block_size, positions,
                                                  scale, window)


__all__ = ["BatchKV", "Segment"]
