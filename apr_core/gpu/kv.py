"""The KV cache on the device: one K and one V buffer per layer, `[slots, n_kv, head_dim]`
float32, mirroring the slots of a host cache (a paged `BlockPool`, or a `KVCache`: one
block of `capacity` slots).

The host arrays stay untouched (virtual zeros); the device buffers grow (doubling, the old
contents copied in the same submission as the step that needs them) to the highest slot
a step reads or writes. Host-side edits of the cache that do not run a forward pass are
mirrored as queued device ops, applied at the start of the next step's submission:
`BlockPool.copy` (a forked choice's partial block), `BlockPool.clear` and
`KVCache.truncate` (a rejected speculative draft, a reused prefix). They are hooked on the
instance: the host classes know nothing of devices.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np

from ..errors import AprError, ErrorCode

MIN_SLOTS = 64
Op = Tuple[Any, ...]     # ("copy", src, src_off, dst, dst_off, n) | ("clear", buf, off, n)


class DeviceKV:
    """Device buffers of one host cache (`owner`: a BlockPool or a KVCache)."""

    def __init__(self, device: Any, n_layers: int, row_bytes: int, max_binding: int,
                 owner: Any) -> None:
        self.device = device
        self.n_layers = n_layers
        self.row_bytes = row_bytes          # bytes of one slot: n_kv * head_dim * 4
        self.max_binding = max_binding
        self.slots = 0
        self.buffers: Dict[str, Any] = {}   # "k:<layer>", "v:<layer>" -> device buffer
        self.pending: List[Op] = []
        self.generation = 0                 # bumps when the buffers are replaced
        self._scratch = None
        self._hook(owner)

    def needed_slots(self, positions: np.ndarray, slots: np.ndarray, tables: np.ndarray,
                     block: int) -> int:
        """One past the highest slot the step writes (`slots`) or reads (every position
        `0 .. positions[t]` of each row's table)."""
        last = positions // block                                     # [T]
        top = tables[np.arange(tables.shape[0]), last].astype(np.int64) * block \
            + positions % block                                       # [T] slot of pos
        full = [int(tables[t, :last[t]].max()) * block + block - 1 if last[t] else -1
                for t in range(tables.shape[0])]
        return int(max(int(slots.max()), int(top.max()), max(full))) + 1

    def ensure(self, needed: int) -> None:
        """Grow to hold `needed` slots (copies queued into `pending`)."""
        if needed <= self.slots:
            return
        size = max(MIN_SLOTS, self.slots)
        while size < needed:
            size *= 2
        if size * self.row_bytes > self.max_binding:
            size = self.max_binding // self.row_bytes
            if size < needed:
                raise AprError(ErrorCode.MEMORY, "KV cache of this context exceeds the "
                               "device's storage binding limit", slots=needed,
                               limit_bytes=self.max_binding)
        grown = {}
        for layer in range(self.n_layers):
            for kind in ("k", "v"):
                name = "{}:{}".format(kind, layer)
                buf = self.device.buffer(size * self.row_bytes, "kv")
                if self.slots:
                    self.pending.append(("copy", self.buffers[name], 0, buf, 0,
                                         self.slots * self.row_bytes))
                grown[name] = buf
        self.buffers = grown
        self.slots = size
        self.generation += 1

    def take_pending(self) -> List[Op]:
        ops, self.pending = self.pending, []
        return ops

    # ------------------------------------------------------------------ host edits

    def copy_slots(self, source: int, target: int, count: int) -> None:
        """Slots `source .. source+count-1` to `target ..` in every layer."""
        self.ensure(max(source, target) + count)
        n = count * self.row_bytes
        if self._scratch is None or self._scratch[1] < n:
            self._scratch = (self.device.buffer(n, "kv"), n)
        tmp = self._scratch[0]
        for buf in self.buffers.values():       # WebGPU forbids a copy within one buffer
            self.pending.append(("copy", buf, source * self.row_bytes, tmp, 0, n))
            self.pending.append(("copy", tmp, 0, buf, target * self.row_bytes, n))

    def clear_slots(self, slots: List[int]) -> None:
        for slot in slots:
            if slot < self.slots:
                for buf in self.buffers.values():
                    self.pending.append(("clear", buf, slot * self.row_bytes,
                                         self.row_bytes))

    def _hook(self, owner: Any) -> None:
        if hasattr(owner, "block_size") and hasattr(owner, "copy"):      # a BlockPool
            pool, copy, clear = owner, owner.copy, owner.clear

            def pool_copy(source: int, target: int, slots: int) -> None:
                copy(source, target, slots)
                bs = pool.block_size
                self.copy_slots(source * bs, target * bs, slots)

            def pool_clear(table: Any, start: int, stop: int) -> None:
                clear(table, start, stop)
                bs = pool.block_size
                self.clear_slots([table[p // bs] * bs + p % bs for p in range(start, stop)])

            owner.copy, owner.clear = pool_copy, pool_clear
        elif hasattr(owner, "truncate"):                                   # a KVCache
            cache, truncate = owner, owner.truncate

            def cache_truncate(length: int) -> None:
                old = cache.length
                truncate(length)
                self.clear_slots(list(range(length, old)))

            owner.truncate = cache_truncate


__all__ = ["DeviceKV", "MIN_SLOTS"]
