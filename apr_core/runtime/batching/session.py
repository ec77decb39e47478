"""One sequence over the block pool, driven by hand: logits in, tokens chosen by the caller.

    with PagedSession(model, pool) as session:
        logits = session.forward(prompt_ids)        # [n_vocab] of the last position
        logits = session.forward([next_id])

What `apr bench` and `apr canary` time and check: the same paged cache code and kernels as
the scheduler's steps (a batch of one), without its sampling and text handling.
"""
from __future__ import annotations

from typing import Any, List, Sequence

import numpy as np

from ...errors import AprError, ErrorCode
from .batch_kv import BatchKV
from .paged_kv import BlockPool


class PagedSession:
    """A block table of its own in `pool`; blocks released on `close`."""

    def __init__(self, model: Any, pool: BlockPool) -> None:
        self.model = model
        self.pool = pool
        self.blocks: List[int] = []
        self.length = 0

    def forward(self, token_ids: Sequence[int]) -> np.ndarray:
        """Run `token_ids` after what the session holds -> logits `[n_vocab]` of the last."""
        ids = [int(t) for t in token_ids]
        end = self.length + len(ids)
        bs = self.pool.block_size
        while len(self.blocks) * bs < end:
            block = self.pool.allocate()
            if block is None:
                raise AprError(ErrorCode.MEMORY, "KV memory budget exhausted",
                               positions=end, blocks=self.pool.n_blocks)
            self.blocks.append(block)
        step = BatchKV(self.pool, [(self.blocks, self.length, len(ids))], self.model.kernels)
        logits = self.model.forward_rows(ids, step, step.last_rows)[0]   # [n_vocab]
        self.length = end
        return logits

    def close(self) -> None:
        self.pool.release_all(self.blocks)
        self.blocks, self.length = [], 0

    def __enter__(self) -> "PagedSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["PagedSession"]
