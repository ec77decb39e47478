"""Key/value cache: preallocated per-layer arrays that decode steps append to.

Keys are cached *after* RoPE (seed 004 §3, F-REALIZE-003), so a decode step rotates only
its own new key. Layout per layer is `[n_kv_heads, capacity, row]`, one row per KV head
and position in the cache's KV type (`kv_types`: f32, f16, q8_0, q4_0; `--kv-type`):
attention reads one contiguous slab per KV head. The arrays are allocated once
(`kv_types.allocate`: zeroed pages the OS backs lazily), so an unused tail of the capacity
costs nothing.
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

import numpy as np

from ..errors import AprError, ErrorCode
from ..quant import registry
from .kv_types import DEFAULT as KV_DEFAULT, allocate as kv_allocate, get as kv_get
from .kv_types import load as kv_load, store as kv_store


class KVCache:
    """Per-layer K and V for positions `0 .. length-1` of one sequence."""

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, capacity: int,
                 kernels: Optional[registry.Kernels] = None,
                 kv_type: str = KV_DEFAULT) -> None:
        if capacity <= 0:
            raise AprError(ErrorCode.ARGUMENT, "KV cache capacity must be positive",
                           capacity=capacity)
        self.kernels = kernels or registry.NUMPY   # its model's backend (rope_store, attention)
        self.capacity = int(capacity)
        self.length = 0
        self.head_dim = head_dim
        self.kv_type = kv_get(kv_type, head_dim).name
        self.k: List[np.ndarray] = [kv_allocate(self.kv_type, n_kv_heads, self.capacity,
                                                      head_dim) for _ in range(n_layers)]
        self.v: List[np.ndarray] = [kv_allocate(self.kv_type, n_kv_heads, self.capacity,
                                                      head_dim) for _ in range(n_layers)]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.k) + sum(a.nbytes for a in self.v)

    def check_room(self, n_new: int) -> None:
        """AprError(MEMORY) unless `n_new` more positions fit."""
        if self.length + n_new > self.capacity:
            raise AprError(ErrorCode.MEMORY, "context is full: KV cache capacity exceeded",
                           length=self.length, new=n_new, capacity=self.capacity)

    def store(self, layer: int, k: np.ndarray, v: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Write `k, v [T, n_kv, hd]` at positions `length .. length+T-1` of `layer`
        (encoded as the KV type); return all keys and values so far as float32, each
        `[n_kv, length+T, hd]`. `length` moves on only at `advance`, once every layer has
        stored its part of the step."""
        end = self.length + k.shape[0]
        kv_store(self.k[layer], self.head_dim, slice(self.length, end), k)
        kv_store(self.v[layer], self.head_dim, slice(self.length, end), v)
        return (kv_load(self.k[layer], self.head_dim, slice(0, end)),
                kv_load(self.v[layer], self.head_dim, slice(0, end)))

    def layer(self, layer: int) -> Tuple[np.ndarray, np.ndarray]:
        """The whole K and V arrays of `layer`, each `[n_kv, capacity, hd]` (positions
        from `length` on are free for the step being computed)."""
        return self.k[layer], self.v[layer]

    def positions(self, n_new: int) -> np.ndarray:
        """Positions `[n_new]` int64 of the next tokens."""
        return np.arange(self.length, self.length + n_new, dtype=np.int64)

    def rope_store(self, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                   cos: Any, sin: Any, dim: int, neox: bool) -> np.ndarray:
        """Fused kind "rope_store" at `length ..` -> rotated q `[T, H, hd]`."""
        return self.kernels.fused("rope_store")(q, k, v, cos, sin, dim, neox, self.k[layer],
                                          self.v[layer], self.length)

    def attention(self, layer: int, q: np.ndarray, positions: np.ndarray, scale: float,
                  window: int) -> np.ndarray:
        """Fused kind "attention" of `q [T, H, hd]` over keys `0 .. length+T-1`."""
        return self.kernels.fused("attention")(q, self.k[layer], self.v[layer],
                                         self.length + q.shape[0], positions, scale, window)

    def kernel_view(self, n_new: int) -> Tuple[np.ndarray, np.ndarray, int]:
        """(slots [T] int64, tables [T, 1] int32, block): this cache as one block of
        `capacity` slots, the form a paged kernel takes (`fused.attention_paged`)."""
        return (self.positions(n_new), np.zeros((n_new, 1), np.int32), self.capacity)

    def advance(self, n_new: int) -> None:
        self.length += n_new

    def truncate(self, length: int) -> None:
        """Forget positions `length ..` (a shared prompt prefix re-used, a rejected
        speculative draft): they are zeroed, so the cache is byte for byte what it was
        before they were stored."""
        if not 0 <= length <= self.length:
            raise AprError(ErrorCode.ARGUMENT, "cannot truncate the KV cache beyond its length",
                           length=length, current=self.length)
        for k, v in zip(self.k, self.v):       # each [n_kv, capacity, hd]
            k[:, length:self.length] = 0
            v[:, length:self.length] = 0
        self.length = length

    def reset(self) -> None:
        self.length = 0


__all__ = ["KVCache"]
