"""Chat sessions in the browser: `apr.chat(messages, {session: name})` (see worker.js).

A session is the `.aprs` file `apr chat --session` writes (apr_core.formats.session via
apr_core.runtime.kv_session: same bytes natively and here). The worker keeps each one in
IndexedDB (session_store.js) and hands it to Python as a file of Pyodide's file system,
`path(name)`; before a turn `prepare` gives its KV back to the engine's prefix cache (once
per loaded engine), so the turn's prompt computes only the rows after the saved ones; after
it `save` writes the conversation's KV to the same file, which the worker stores again.

A session of another model, KV type or context is refused (E016), a damaged one too (E002
truncated, E004 corrupted, E001 not a session): decoded and checked whole before a row of
it reaches the engine.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Dict, List, Sequence


from apr_websource import _error, _state

SESSION_DIR = "/sessions"


def path(name: str) -> str:
    """The file of session `name` in Pyodide's file system."""
    os.makedirs(SESSION_DIR, exist_ok=True)
    digest = hashlib.sha256(str(name).encode("utf-8")).hexdigest()[:32]
    return "{}/{}.aprs".format(SESSION_DIR, digest)


def locate(name: str) -> str:
    """`path(name)` as the worker's JSON answer."""
    return json.dumps(path(name))


async def _model_sha256() -> str:
    """The loaded model file's sha256 (a session's `model.sha256`, as natively: the whole
    file's digest), computed once per loaded model; several files: the digest of theirs."""
    engine = _state["engine"]
    known = _state.get("model_sha256")
    if known is not None and known[0] is engine:
        return known[1]
    sources = getattr(_state["source_model"], "remote_sources", None) or []
    digests = [hashlib.sha256(await source._fetch_all()).hexdigest() for source in sources]
    digest = digests[0] if len(digests) == 1 else hashlib.sha256(
        "\n".join(digests).encode("ascii")).hexdigest()
    _state["model_sha256"] = (engine, digest)
    return digest


def _restored() -> set:
    """Names of the sessions whose KV this engine holds already."""
    engine = _state["engine"]
    held = _state.get("restored_sessions")
    if held is None or held[0] is not engine:
        held = _state["restored_sessions"] = (engine, set())
    return held[1]


def _kv() -> Any:
    """apr_core.runtime.kv_session, imported on first use: it needs numpy, which the shell
    boots without on Pyodide 314 (formats only), where apr_web still imports this module."""
    from apr_core.runtime import kv_session
    return kv_session


def _read(file: str) -> Any:
    """The KVState of session file `file`."""
    with open(file, "rb") as handle:
        return _kv().from_bytes(handle.read(), "session")


async def prepare(name: str) -> str:
    """Give session `name`'s KV (when its file exists and this engine has not taken it
    yet) to the engine's prefix cache: `{path, restored_tokens, messages}`."""
    try:
        _kv().require_plain(_state["engine"].transformer, session=name)
        file = path(name)
        sha256 = await _model_sha256()
        restored, messages = 0, None
        if name not in _restored() and os.path.exists(file):
            state = _read(file)
            _kv().check_fits(state, sha256, _state["engine"].transformer)
            restored = _kv().restore(_state["engine"].pool, state)
            messages = state.extra.get("messages")
        _restored().add(name)
        return json.dumps({"path": file, "restored_tokens": restored, "messages": messages})
    except Exception as exc:
        return _error(exc)


def save(name: str, tokens: Sequence[int], messages: List[Dict[str, Any]]) -> int:
    """Save the KV of `tokens` (a turn's prompt and reply) as session `name`, with the
    conversation as `apr chat` keeps it (mode "chat", its messages); the tokens saved."""
    engine = _state["engine"]
    known = _state.get("model_sha256")
    state = _kv().capture(engine.pool, engine.transformer, tokens, known[1],
                               {"mode": "chat", "messages": messages, "transcript": ""})
    _kv().save(path(name), state)
    return state.n_tokens


def check(name: str, file: str) -> str:
    """Validate an imported session file whole and move it to session `name`'s place:
    `{n_tokens, kv_type, context, model_sha256, messages}`; the engine takes it anew."""
    try:
        try:
            state = _read(file)
        except Exception:
            os.remove(file)
            raise
        os.replace(file, path(name))
        if "restored_sessions" in _state:
            _state["restored_sessions"][1].discard(name)
        return json.dumps({"n_tokens": state.n_tokens, "kv_type": state.kv_type,
                           "context": state.context, "model_sha256": state.model_sha256,
                           "messages": state.extra.get("messages")})
    except Exception as exc:
        return _error(exc)


def forget(name: str) -> str:
    """Drop session `name`'s file (the worker removes it from IndexedDB)."""
    file = path(name)
    if os.path.exists(file):
        os.remove(file)
    if "restored_sessions" in _state:
        _state["restored_sessions"][1].discard(name)
    return json.dumps(True)


__all__ = ["path", "locate", "prepare", "save", "check", "forget"]
