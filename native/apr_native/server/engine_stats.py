"""What the serving engine's thread publishes about itself: one immutable snapshot.

The scheduler and its block pool belong to the engine thread (see `engine.py`); the event
loop (`/metrics`, `/health`, the 429 check) must not read them while a step changes them.
After loading, after taking its inbox and after every step, the engine thread builds an
`EngineStats` from them and replaces the published one in a single assignment; readers
get one whole snapshot, never half of an old one and half of a new one.

    snapshot = engine.snapshot          # None until the model is loaded
    snapshot.waiting, snapshot.figures(pending=0)
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

RATE_WINDOW_S = 10.0        # tokens per second are averaged over this much recent time


@dataclass(frozen=True)
class EngineStats:
    """The scheduler's and block pool's figures at one moment (engine thread's view)."""

    running: int                    # sequences in the running batch
    waiting: int                    # requests in the scheduler's queue
    max_batch: int
    prompt_tokens: int              # prompt tokens looked up in the prefix cache
    cached_tokens: int              # ... of which found there
    generated_tokens: int
    preempted: int
    steps: int
    drafted_tokens: int
    accepted_tokens: int
    kv_blocks_used: int
    kv_blocks_free: int
    kv_blocks_cached: int
    kv_blocks_total: int
    kv_block_tokens: int
    kv_bytes: int
    # (perf_counter time, generated_tokens) samples of the last RATE_WINDOW_S, oldest first
    progress: Tuple[Tuple[float, int], ...] = ()

    @classmethod
    def of(cls, scheduler: Any, progress: Tuple[Tuple[float, int], ...] = ()
           ) -> "EngineStats":
        """Read `scheduler` (on the thread that drives it)."""
        s, pool = scheduler.stats, scheduler.pool
        return cls(running=len(scheduler.running), waiting=len(scheduler.waiting),
                   max_batch=scheduler.max_batch, prompt_tokens=s["prompt_tokens"],
                   cached_tokens=s["cached_tokens"], generated_tokens=s["generated_tokens"],
                   preempted=s["preempted"], steps=s["steps"],
                   drafted_tokens=s["drafted_tokens"], accepted_tokens=s["accepted_tokens"],
                   kv_blocks_used=pool.used, kv_blocks_free=pool.free,
                   kv_blocks_cached=pool.cached, kv_blocks_total=pool.n_blocks,
                   kv_block_tokens=pool.block_size, kv_bytes=pool.nbytes,
                   progress=tuple(progress))

    def tokens_per_second(self, now: Optional[float] = None) -> float:
        """Generated tokens per second over the last RATE_WINDOW_S before `now` (0 when
        nothing was generated that recently)."""
        now = time.perf_counter() if now is None else now
        recent = [(t, g) for t, g in self.progress if now - t <= RATE_WINDOW_S]
        if not recent:
            return 0.0
        t0, g0 = recent[0]
        return (self.generated_tokens - g0) / max(now - t0, 1e-3)

    def figures(self, pending: int = 0, now: Optional[float] = None) -> Dict[str, float]:
        """The `/metrics` and `/health` figures; `pending`: submissions not yet taken by
        the engine thread (they count as waiting)."""
        queried = self.prompt_tokens
        return {"prefix_hit_ratio": self.cached_tokens / queried if queried else 0.0,
                "tokens_per_second": self.tokens_per_second(now),
                "running": self.running, "waiting": self.waiting + pending,
                "kv_blocks_used": self.kv_blocks_used, "kv_blocks_free": self.kv_blocks_free,
                "kv_blocks_cached": self.kv_blocks_cached,
                "kv_blocks_total": self.kv_blocks_total,
                "kv_block_tokens": self.kv_block_tokens, "kv_bytes": self.kv_bytes,
                "prefix_queries": self.prompt_tokens, "prefix_hits": self.cached_tokens,
                "generated_tokens": self.generated_tokens, "preempted": self.preempted,
                "steps": self.steps, "drafted_tokens": self.drafted_tokens,
                "accepted_tokens": self.accepted_tokens, "max_batch": self.max_batch}


__all__ = ["EngineStats", "RATE_WINDOW_S"]
