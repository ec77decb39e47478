"""`apr chat MODEL --session FILE`: the conversation and its KV cache kept in FILE.

The first run starts the conversation and saves FILE after each turn; a later run with
the same model, KV type and context loads it, gives its KV back to the engine's prefix
cache and goes on from the last turn: the next prompt's saved part is not computed again
(`apr_core.runtime.kv_session`). A session of another model or settings is refused
(E016), a damaged one too (E002 truncated, E004 corrupted): never half-loaded.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

from apr_core.errors import AprError, ErrorCode
from apr_core.runtime import kv_session

from ..hub_store import model_sha256


def add_argument(p: Any) -> None:
    p.add_argument("--session", metavar="FILE",
                   help="keep the conversation and its KV cache in FILE: resumed from it "
                   "when it exists (same model, --kv-type and --ctx), saved after each turn")


def _quiet() -> bool:
    return os.environ.get("APR_QUIET") == "1"


class ChatSession:
    """The session file of one `apr chat` run over `engine`."""

    def __init__(self, path: str, engine: Any) -> None:
        kv_session.require_plain(engine.transformer, session=path)
        self.path = path
        self.engine = engine
        self.sha256 = model_sha256(engine.path)

    def resume(self, mode: str) -> Optional[Dict[str, Any]]:
        """The saved conversation state (`extra`: mode, messages or transcript) with its
        KV restored into the engine, or None when the file does not exist yet."""
        if not os.path.exists(self.path):
            return None
        start = time.perf_counter()
        state = kv_session.load(self.path)
        kv_session.check_fits(state, self.sha256, self.engine.transformer)
        if state.extra.get("mode") != mode:
            raise AprError(ErrorCode.MISMATCH, "the session was saved as another kind of "
                           "conversation", session=str(state.extra.get("mode")),
                           current=mode, path=self.path)
        restored = kv_session.restore(self.engine.pool, state)
        if not _quiet():
            print("apr: session {}: resumed {} turn(s), KV of {} tokens restored ({:.1f} MiB, "
                  "{:.3f} s)".format(self.path, _turns(state.extra), restored,
                                     state.nbytes / 1048576.0, time.perf_counter() - start),
                  file=sys.stderr)
        return state.extra

    def save(self, tokens: Sequence[int], extra: Dict[str, Any]) -> int:
        """Save the KV of `tokens` (the last turn's prompt and reply) with `extra`."""
        state = kv_session.capture(self.engine.pool, self.engine.transformer, tokens,
                                   self.sha256, extra)
        kv_session.save(self.path, state)
        return state.n_tokens


def _turns(extra: Dict[str, Any]) -> int:
    messages: List[Any] = extra.get("messages") or []
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "user") \
        if extra.get("mode") == "chat" else str(extra.get("transcript", "")).count("\n") // 2


__all__ = ["add_argument", "ChatSession", "model_sha256"]
