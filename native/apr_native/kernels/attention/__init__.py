"""Attention over the paged KV cache (numba): the blocked flash-style kernel
(`paged_attention`), its inner tile loops (`attention_tiles`), KV rows in their stored
types (`kv_rows`)."""
