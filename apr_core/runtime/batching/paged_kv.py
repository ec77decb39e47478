"""The paged KV cache: one pool of fixed-size blocks that every sequence's keys and values
live in, under a memory budget, with prefix caching.

    pool = BlockPool.for_model(config, budget_bytes=2 << 30, block_size=16)
    table = [pool.allocate() for _ in range(3)]      # a sequence's block table
    ...
    pool.register(table[0], pool.chain_hash(None, tokens[:16]))   # its first block is full
    pool.release(table[0])                            # refcount 0: free, still findable
    pool.lookup(pool.chain_hash(None, tokens[:16]))   # -> the same block, computed KV kept

Layout per layer: `k[layer], v[layer]` are `[n_kv, n_blocks * block_size, row]` in the
pool's KV type (`model.kv_types`: a row is one position of one KV head, `head_dim` f32 or
f16 values or `head_dim / 32` Q8_0 / Q4_0 blocks), so block b holds slots
`b*block_size .. (b+1)*block_size - 1` of every KV head (the form
`fused.attention_paged` reads). Rows never share bytes, so zeroing a position (`clear`)
restores the pool byte for byte whatever the type. Arrays come from `kv_types.allocate`
(zeroed pages the OS backs lazily): a budget costs memory only as blocks are first written.

Prefix caching: a full block is keyed by a hash of its tokens chained with the hash of the
block before it (so equal keys mean equal whole prefixes). When its last user releases it
the block stays in the table as free-but-cached, at the young end of an LRU; allocation
takes never-cached blocks first, then evicts the oldest cached one. A lookup that hits a
free cached block takes it back out of the free list.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence

import numpy as np

from ...errors import AprError, ErrorCode
from ...model import kv_types

DEFAULT_BLOCK_SIZE = 16


class BlockPool:
    """KV blocks of one model: storage, refcounts, free list and prefix index."""

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, n_blocks: int,
                 block_size: int = DEFAULT_BLOCK_SIZE, prefix_cache: bool = True,
                 kv_type: str = kv_types.DEFAULT) -> None:
        if n_blocks <= 0 or block_size <= 0:
            raise AprError(ErrorCode.ARGUMENT, "KV pool needs at least one block of one slot",
                           n_blocks=n_blocks, block_size=block_size)
        self.block_size = int(block_size)
        self.n_blocks = int(n_blocks)
        self.prefix_cache = prefix_cache
        self.kv_type = kv_types.get(kv_type, head_dim).name
        slots = self.n_blocks * self.block_size
        self.k: List[np.ndarray] = [kv_types.allocate(self.kv_type, n_kv_heads, slots, head_dim)
                                    for _ in range(n_layers)]
        self.v: List[np.ndarray] = [kv_types.allocate(self.kv_type, n_kv_heads, slots, head_dim)
                                    for _ in range(n_layers)]
        self.refcount = [0] * self.n_blocks
        self._fresh: List[int] = list(range(self.n_blocks - 1, -1, -1))   # never cached
        self._cached_free: "OrderedDict[int, None]" = OrderedDict()       # LRU, oldest first
        self._by_hash: Dict[bytes, int] = {}
        self._hash_of: Dict[int, bytes] = {}
        self.hits = 0          # prefix-cache lookups that found a block
        self.queries = 0       # prefix-cache lookups

    @classmethod
    def for_model(cls, config, budget_bytes: int, block_size: int = DEFAULT_BLOCK_SIZE,
                  prefix_cache: bool = True, max_blocks: Optional[int] = None,
                  kv_type: str = kv_types.DEFAULT) -> "BlockPool":
        """As many blocks as `budget_bytes` holds for `config` (a ModelConfig) in KV type
        `kv_type`, at most `max_blocks`; AprError(MEMORY) when the budget is below one
        block."""
        per_block = block_bytes(config, block_size, kv_type)
        n = int(budget_bytes) // per_block
        if max_blocks is not None:
            n = min(n, int(max_blocks))
        if n < 1:
            raise AprError(ErrorCode.MEMORY, "KV memory budget is smaller than one block",
                           budget=int(budget_bytes), block_bytes=per_block)
        return cls(config.n_layers, config.n_kv_heads, config.head_dim, n, block_size,
                   prefix_cache, kv_type)

    # ------------------------------------------------------------------ accounting

    @property
    def free(self) -> int:
        """Blocks that can be allocated now (never cached, or cached with no user)."""
        return len(self._fresh) + len(self._cached_free)

    @property
    def used(self) -> int:
        return self.n_blocks - self.free

    @property
    def cached(self) -> int:
        """Free blocks whose computed KV is still findable by prefix."""
        return len(self._cached_free)

    @property
    def nbytes(self) -> int:
        """The budget the arrays span (virtual until written)."""
        return sum(a.nbytes for a in self.k) + sum(a.nbytes for a in self.v)

    # ------------------------------------------------------------------ blocks

    def allocate(self) -> Optional[int]:
        """A block for a new user (refcount 1), or None when every block is in use."""
        if self._fresh:
            block = self._fresh.pop()
        elif self._cached_free:
            block, _ = self._cached_free.popitem(last=False)         # evict the oldest
            del self._by_hash[self._hash_of.pop(block)]
        else:
            return None
        self.refcount[block] = 1
        return block

    def share(self, block: int) -> None:
        """One more user of `block` (a forked choice reading the same prompt)."""
        self.refcount[block] += 1

    def release(self, block: int) -> None:
        """One user fewer; at zero the block is free (kept findable if it is cached)."""
        count = self.refcount[block] - 1
        if count < 0:
            raise RuntimeError("KV block {} released more often than taken".format(block))
        self.refcount[block] = count
        if count == 0:
            if block in self._hash_of:
                self._cached_free[block] = None                        # youngest
            else:
                self._fresh.append(block)

    def release_all(self, blocks: Sequence[int]) -> None:
        for block in reversed(list(blocks)):     # the tail first: evicted before the head
            self.release(block)

    def copy(self, source: int, target: int, slots: int) -> None:
        """The first `slots` positions of block `source` into block `target`."""
        a, b = source * self.block_size, target * self.block_size
        for arrays in (self.k, self.v):
            for layer in arrays:
                layer[:, b:b + slots] = layer[:, a:a + slots]

    def clear(self, table: Sequence[int], start: int, stop: int) -> None:
        """Zero positions `start .. stop-1` of the sequence whose block table is `table`
        (the KV of a rejected speculative draft: as if it had never been stored)."""
        if stop <= start:
            return
        bs = self.block_size
        slots = [table[pos // bs] * bs + pos % bs for pos in range(start, stop)]
        for arrays in (self.k, self.v):
            for layer in arrays:                      # [n_kv, slots, hd]
                layer[:, slots] = 0

    # ------------------------------------------------------------------ prefix cache

    @staticmethod
    def chain_hash(parent: Optional[bytes], tokens: Sequence[int]) -> bytes:
        """The key of a full block: sha256 of the previous block's key and its tokens."""
        digest = hashlib.sha256(parent or b"")
        digest.update(np.asarray(tokens, "<i4").tobytes())
        return digest.digest()

    def lookup(self, key: bytes) -> Optional[int]:
        """The cached block with `key`, now with one more user, or None."""
        if not self.prefix_cache:
            return None
        self.queries += 1
        block = self._by_hash.get(key)
        if block is None:
            return None
        self.hits += 1
        if self.refcount[block] == 0:
            del self._cached_free[block]
        self.refcount[block] += 1
        return block

    def find(self, key: bytes) -> Optional[int]:
        """The block registered under `key`, or None; nothing changes (no user taken, no
        hit counted): a reader of cached KV such as a session save."""
        return self._by_hash.get(key) if self.prefix_cache else None

    def register(self, block: int, key: bytes) -> None:
        """`block` is full and holds the KV of the prefix `key` names: make it findable
        (unless another block already is, or prefix caching is off)."""
        if not self.prefix_cache or key in self._by_hash or block in self._hash_of:
            return
        self._by_hash[key] = block
        self._hash_of[block] = key


def block_bytes(config, block_size: int, kv_type: str = kv_types.DEFAULT) -> int:
    """Bytes of one block: K and V of `block_size` positions, every layer and KV head."""
    return kv_types.token_bytes(kv_type, config.n_layers, config.n_kv_heads,
                                config.head_dim) * block_size


__all__ = ["BlockPool", "block_bytes", "DEFAULT_BLOCK_SIZE"]
