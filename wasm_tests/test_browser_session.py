"""Chat sessions in Chromium (issue 42 item 1, the browser half): a session saved natively
(`apr chat --session`'s ChatSession on SmolLM2) imported into the page continues with
native's greedy tokens on the exact kernels, a reload continues without recomputing the
saved prompt, and damaged or mismatched sessions get their coded errors."""
import base64
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from apr_core.runtime.engine import DEFAULT_BLOCK_SIZE
from wasm_shared import QUESTION

pytestmark = [pytest.mark.native, pytest.mark.real_model]
QUERY = "pyodide=017&numpy=1&kernels=simd-exact"   # the relaxed default differs at near-ties
TOKENS = 8
AGAIN = "And the capital of Germany?"


def _native_turns(path, tmp_path):
    """Native apr: turn 1 saved as `apr chat --session` saves it, then turn 2 of the same
    (uninterrupted) conversation: session bytes, turn 2's messages, reply, prompt tokens."""
    from apr_core.runtime.engine import Engine, EngineOptions
    from apr_native.cli.chat_session import ChatSession
    # numpy's arithmetic over float32 weights (BLAS), f16 KV as the page's engine
    engine = Engine.open(path, EngineOptions(dequantize=True))
    messages = [{"role": "user", "content": QUESTION}]
    ids = engine.model.chat_ids(messages)
    first = engine.generate(ids, max_tokens=TOKENS)
    messages.append({"role": "assistant", "content": first.text})
    file = str(tmp_path / "native.aprs")
    ChatSession(file, engine).save(ids + first.token_ids,
                                   {"mode": "chat", "messages": messages, "transcript": ""})
    messages = messages + [{"role": "user", "content": AGAIN}]
    reply = engine.generate(engine.model.chat_ids(messages), max_tokens=TOKENS)
    with open(file, "rb") as handle:
        return handle.read(), messages, reply.text, len(engine.model.chat_ids(messages))


def _variant(data, **changes):
    """The session `data` with KVState fields changed (a valid file of another model...)."""
    from apr_core.runtime import kv_session
    state = kv_session.from_bytes(data)
    for key, value in changes.items():
        setattr(state, key, value)
    return kv_session.to_bytes(state)


IMPORT = ("([name, b64]) => apr.importSession(name, Uint8Array.from(atob(b64), "
          "(c) => c.charCodeAt(0))).then((info) => info, (e) => ({error: e.detail}))")
CHAT = ("([m, name, n]) => apr.chat(m, {maxTokens: n, session: name})"
        ".then((r) => r, (e) => ({error: e.detail}))")


def _b64(data):
    return base64.b64encode(data).decode("ascii")


def test_native_session_continues_in_the_page_and_after_a_reload(open_page, smollm2_path,
                                                                 tmp_path):
    start = time.time()
    with ThreadPoolExecutor(1) as pool:                # native runs while the page loads
        native = pool.submit(_native_turns, smollm2_path, tmp_path)
        page = open_page(QUERY)
        assert page.call("apr.boot({})")["precision"] == "exact"
        page.call("apr.load('models/smollm2.gguf')")
        print("page loaded", time.time() - start)
        data, messages, native_text, n_prompt = native.result()
    print("native", time.time() - start)

    info = page.call(IMPORT, ["native", _b64(data)])
    assert info["kv_type"] == "f16" and info["messages"] == messages[:2], info
    got = page.call(CHAT, [messages, "native", TOKENS])
    assert "error" not in got, got
    assert got["text"] == native_text
    # the saved rows (whole KV blocks of them) are reused: only the rest is computed
    assert got["session"]["restored_tokens"] == got["cached_tokens"] > 0
    assert got["prefilled_tokens"] == n_prompt - got["cached_tokens"]
    print("turn 2", time.time() - start)

    page.open()                                       # a reload: IndexedDB keeps the session
    page.call("apr.load('models/smollm2.gguf')")
    print("reloaded", time.time() - start)
    messages = messages + [{"role": "assistant", "content": native_text},
                           {"role": "user", "content": "Name one river there."}]
    got = page.call(CHAT, [messages, "native", 1])
    assert "error" not in got, got
    new_turn = got["prompt_tokens"] - n_prompt       # the reply and question since the save
    print("after reload: prompt", got["prompt_tokens"], "prefilled", got["prefilled_tokens"],
          "new turn", new_turn)
    assert got["session"]["restored_tokens"] == got["cached_tokens"]
    assert 0 < got["prefilled_tokens"] < new_turn + DEFAULT_BLOCK_SIZE   # + a partial block

    # damaged: E004 corrupted, E002 truncated, neither stored; mismatched: E016
    corrupt = bytearray(data)
    corrupt[len(data) // 2] ^= 0x55
    assert page.call(IMPORT, ["bad", _b64(bytes(corrupt))])["error"]["code"] == "E004"
    assert page.call(IMPORT, ["bad", _b64(data[:-100])])["error"]["code"] == "E002"
    assert all(s["name"] != "bad" for s in page.call("apr.sessionList()"))
    for field, value in (("model_sha256", "0" * 64), ("context", 1024)):
        page.call(IMPORT, ["other", _b64(_variant(data, **{field: value}))])
        got = page.call(CHAT, [messages, "other", 1])
        assert got.get("error", {}).get("code") == "E016", (field, got)

    # export gives back the file `apr chat --session` reads, with the conversation
    exported = page.call("""apr.exportSession('native').then((b) => {
        const bytes = new Uint8Array(b); let text = "";
        for (let i = 0; i < bytes.length; i += 8192)
          text += String.fromCharCode(...bytes.subarray(i, i + 8192));
        return btoa(text); })""")
    from apr_core.runtime import kv_session
    state = kv_session.from_bytes(base64.b64decode(exported))
    assert state.extra["messages"][:-1] == messages and state.model_sha256 == \
        kv_session.from_bytes(data).model_sha256
    print("done", time.time() - start)
