"""A conversation's KV cache as a session: taken from the block pool, saved, loaded, checked
against the model it is meant for, and given back to the pool.

    state = capture(engine.pool, engine.transformer, tokens, model_sha256, extra={...})
    save(path, state)                                   # temp file, then rename
    state = load(path)                                  # E002 / E004: never half-loaded
    check_fits(state, model_sha256, engine.transformer) # E016 for another model / settings
    restore(engine.pool, state)                         # -> positions the next request reuses

The pool keeps the KV of every full block a sequence computed, findable by the chain hash
of its tokens (the prefix cache). A session holds the tokens of such a chain and their KV
rows as stored (`kv_types`: f16 values, rotated q8_0 blocks, ...); `restore` writes them
into free blocks and registers them under the same keys, so the scheduler's prefix lookup
takes them as it would have taken the blocks of an uninterrupted conversation: same bytes,
same rows left to compute, same tokens. Rows are kept per position, not per block, so a
pool with another block size takes the full blocks of its own size.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from ..atomic import atomic_output
from ..errors import AprError, ErrorCode
from ..formats.session import decode_session, encode_session, write_session
from ..model import kv_types


@dataclasses.dataclass
class KVState:
    """Tokens `[n]` whose K and V are held, per layer `[n_kv, n, row_width]` (storage
    dtype of `kv_type`), and what they were computed with."""
    tokens: List[int]
    kv_type: str
    head_dim: int
    k: List[np.ndarray]
    v: List[np.ndarray]
    model_sha256: str
    context: int
    positions: Dict[str, Any]           # RoPE settings the keys were rotated with
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)   # the caller's state

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.k) + sum(a.nbytes for a in self.v)


def positions_of(config: Any) -> Dict[str, Any]:
    """The settings cached keys depend on besides the weights (post-RoPE keys)."""
    scaling = dataclasses.asdict(config.rope_scaling) \
        if dataclasses.is_dataclass(config.rope_scaling) else {}
    return {"kind": config.positions, "rope_theta": float(config.rope_theta),
            "rope_dim": int(config.rope_dim), "rope_scaling": scaling}


def capture(pool: Any, model: Any, tokens: Sequence[int], model_sha256: str,
            extra: Optional[Dict[str, Any]] = None) -> KVState:
    """The KV the pool holds for the longest run of full blocks of `tokens` (cached
    by the prefix cache as they filled): the session of those tokens."""
    require_plain(model)
    bs = pool.block_size
    ids = [int(t) for t in tokens]
    parent: Optional[bytes] = None
    blocks: List[int] = []
    for i in range(len(ids) // bs):
        key = pool.chain_hash(parent, ids[i * bs:(i + 1) * bs])
        block = pool.find(key)
        if block is None:
            break
        blocks.append(block)
        parent = key
    slots = (np.asarray(blocks, np.int64)[:, None] * bs
             + np.arange(bs, dtype=np.int64)[None, :]).reshape(-1)        # [n]
    cfg = model.config
    return KVState(ids[:len(slots)], pool.kv_type, cfg.head_dim,
                   [np.ascontiguousarray(k[:, slots]) for k in pool.k],   # [n_kv, n, row]
                   [np.ascontiguousarray(v[:, slots]) for v in pool.v],
                   model_sha256, cfg.max_ctx, positions_of(cfg), dict(extra or {}))


def restore(pool: Any, state: KVState) -> int:
    """Write `state`'s full blocks (of the pool's block size) into free blocks of `pool`
    and make them findable by prefix: the positions the next request of those tokens
    will not compute. AprError(ARGUMENT) when the pool has no prefix cache,
    AprError(MEMORY) when it has not the free blocks."""
    if not pool.prefix_cache:
        raise AprError(ErrorCode.ARGUMENT, "restoring a session needs the prefix cache")
    bs = pool.block_size
    n_blocks = state.n_tokens // bs
    if n_blocks > pool.free:
        raise AprError(ErrorCode.MEMORY, "the KV memory budget cannot hold this session",
                       blocks=n_blocks, free=pool.free)
    parent: Optional[bytes] = None
    taken: List[int] = []
    try:
        for i in range(n_blocks):
            key = pool.chain_hash(parent, state.tokens[i * bs:(i + 1) * bs])
            parent = key
            block = pool.lookup(key)          # already there: the same tokens' same KV
            if block is None:
                block = pool.allocate()
                rows = slice(i * bs, (i + 1) * bs)
                for cache, saved in ((pool.k, state.k), (pool.v, state.v)):
                    for layer, rows_kv in zip(cache, saved):    # [n_kv, bs, row]
                        layer[:, block * bs:(block + 1) * bs] = rows_kv[:, rows]
                pool.register(block, key)
            taken.append(block)
    finally:
        pool.release_all(taken)               # free but cached; the tail evicted first
    return n_blocks * bs


def require_plain(model: Any, **context: Any) -> None:
    """AprError(UNSUPPORTED) for a model with LoRA adapters: a session names its model by
    the file's sha256 alone, so rows computed with adapters (at whatever scales) would be
    taken as the plain model's. Every place that keeps sessions (apr chat --session, the
    server's slots, the browser's sessions) asks this before it runs a turn."""
    if getattr(model, "lora", None) is not None:
        raise AprError(ErrorCode.UNSUPPORTED, "sessions are not kept for a model loaded "
                       "with LoRA adapters", **context)


def check_fits(state: KVState, model_sha256: str, model: Any) -> None:
    """AprError(MISMATCH) unless `state` was saved for this model file, KV type, context
    and RoPE settings (its keys and values mean nothing to any other); UNSUPPORTED for a
    model with adapters (`require_plain`)."""
    require_plain(model)
    cfg = model.config
    wanted = [("model_sha256", state.model_sha256, model_sha256),
              ("kv_type", state.kv_type, model.kv_type),
              ("context", state.context, cfg.max_ctx),
              ("positions", state.positions, positions_of(cfg)),
              ("geometry", (len(state.k), state.k[0].shape[0] if state.k else 0,
                            state.head_dim),
               (cfg.n_layers, cfg.n_kv_heads, cfg.head_dim))]
    for what, saved, current in wanted:
        if saved != current:
            raise AprError(ErrorCode.MISMATCH, "the session was saved for another {}".format(
                {"model_sha256": "model", "kv_type": "KV cache type",
                 "context": "context size", "positions": "RoPE setting",
                 "geometry": "model shape"}[what]), field=what, session=str(saved),
                current=str(current))
    if state.n_tokens >= cfg.max_ctx:
        raise AprError(ErrorCode.MISMATCH, "the session is longer than the context",
                       tokens=state.n_tokens, context=cfg.max_ctx)


def _metadata(state: KVState) -> Dict[str, Any]:
    return {"model": {"sha256": state.model_sha256}, "kv_type": state.kv_type,
            "context": int(state.context), "positions": state.positions,
            "n_layers": len(state.k), "n_kv_heads": int(state.k[0].shape[0]) if state.k else 0,
            "head_dim": int(state.head_dim),
            "row_bytes": kv_types.row_bytes(state.kv_type, state.head_dim),
            "extra": state.extra}


def _parts(state: KVState) -> List[np.ndarray]:
    """K0, V0, K1, V1, ... each `[n_kv, n, row_width]`, contiguous."""
    return [np.ascontiguousarray(a) for layer in zip(state.k, state.v) for a in layer]


def save(path: Any, state: KVState) -> int:
    """Write `state` to `path` (a temporary file renamed into place); the bytes written."""
    with atomic_output(path) as handle:
        return write_session(handle, _metadata(state), state.tokens, _parts(state))


def to_bytes(state: KVState) -> bytes:
    """The session file of `state` in memory (a browser keeps it in IndexedDB)."""
    return encode_session(_metadata(state), state.tokens, _parts(state))


def from_bytes(data: Any, source: str = "<bytes>") -> KVState:
    """The KVState of a session file's bytes (validated whole first)."""
    saved = decode_session(data, source)
    meta = saved.metadata
    try:
        kind = kv_types.get(meta.get("kv_type"), meta["head_dim"])
        row_bytes = kv_types.row_bytes(kind.name, meta["head_dim"])
    except AprError as err:
        raise AprError(ErrorCode.CORRUPT, "session names an unusable KV cache type",
                       source=source, error=err.message)
    if row_bytes != meta["row_bytes"]:
        raise AprError(ErrorCode.CORRUPT, "session row size does not match its KV type",
                       source=source, row_bytes=meta["row_bytes"], expected=row_bytes)
    n, n_kv = meta["n_tokens"], meta["n_kv_heads"]
    shape = (n_kv, n, kv_types.row_width(kind.name, meta["head_dim"]))
    flat = np.frombuffer(saved.kv, np.dtype(kind.storage).newbyteorder("<"))
    per = n_kv * n * shape[2]
    arrays = [flat[i * per:(i + 1) * per].reshape(shape).copy()
              for i in range(2 * meta["n_layers"])]            # K0, V0, K1, V1, ...
    model = meta.get("model") if isinstance(meta.get("model"), dict) else {}
    return KVState(saved.tokens, kind.name, meta["head_dim"], arrays[0::2], arrays[1::2],
                   str(model.get("sha256", "")), meta["context"],
                   meta.get("positions") or {}, meta.get("extra") or {})


def load(path: Any) -> KVState:
    """Read and validate the session file at `path` (E007 when it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as err:
        raise AprError(ErrorCode.IO, "cannot read the session file", path=str(path),
                       error=err.strerror or str(err))
    return from_bytes(data, str(path))


__all__ = ["KVState", "capture", "restore", "check_fits", "save", "load", "to_bytes",
           "from_bytes",
           "positions_of"]
