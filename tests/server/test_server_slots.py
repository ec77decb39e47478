"""`apr serve --slot-save-path DIR`: llama-server's POST /slots/{id}?action=save|restore|erase
on SmolLM2 with the official `openai` client.

Oracle: the same server continuing the conversation without any save: a second server
that restores the slot file and continues it must answer with the same greedy text and
reuse as many prompt tokens from the cache as the first one did (its own KV there, the
restored KV here). Damaged, mismatched and badly named files get their coded 4xx.
"""
import os
import shutil

import pytest

pytestmark = [pytest.mark.native, pytest.mark.real_model]

openai = pytest.importorskip("openai", reason="the openai client is a dev dependency")

from server_util import running_server  # noqa: E402

API_KEY = "k-slots"
MODEL = "smol"
FIRST = "My name is Alice and I live in Paris. Say hello to me."
SECOND = "What is my name, and where do I live?"
MAX_TOKENS = 24


def ask(server, messages, **kw):
    return server.client().chat.completions.create(
        model=MODEL, messages=messages, max_tokens=MAX_TOKENS, temperature=0.0,
        extra_body={"id_slot": 0}, **kw)


def slot(server, action, slot_id=0, **body):
    return server.http.post("/slots/{}?action={}".format(slot_id, action), json=body)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("slots")


def serve(model, folder, log, *flags):
    pytest.importorskip("uvicorn", reason="uvicorn is a native dependency")
    return running_server(model, ["--model-id", MODEL, "--max-batch", "4",
                                  "--slot-save-path", str(folder)] + list(flags), log, API_KEY)


def test_restore_then_continue_is_continuing_without_a_save(smollm2_gguf, numba_ready, folder,
                                                              tmp_path):
    with serve(smollm2_gguf, folder, tmp_path / "a.txt") as first:
        one = ask(first, [{"role": "user", "content": FIRST}])
        reply = one.choices[0].message.content
        saved = slot(first, "save", filename="alice.bin")
        assert saved.status_code == 200, saved.text
        body = saved.json()
        assert body["id_slot"] == 0 and body["filename"] == "alice.bin"
        assert body["n_saved"] > 0 and body["n_saved"] % 16 == 0      # whole KV blocks
        assert body["n_saved"] <= one.usage.prompt_tokens + one.usage.completion_tokens
        assert body["n_written"] == os.path.getsize(str(folder / "alice.bin"))
        assert body["timings"]["save_ms"] >= 0
        history = [{"role": "user", "content": FIRST}, {"role": "assistant", "content": reply},
                   {"role": "user", "content": SECOND}]
        unsaved = ask(first, history)               # the conversation, never interrupted
    with serve(smollm2_gguf, folder, tmp_path / "b.txt") as second:
        restored = slot(second, "restore", filename="alice.bin")
        assert restored.status_code == 200, restored.text
        body = restored.json()
        assert body["n_restored"] == saved.json()["n_saved"]
        assert body["n_read"] == saved.json()["n_written"]
        assert body["timings"]["restore_ms"] >= 0
        resumed = ask(second, history)
        assert resumed.choices[0].message.content == unsaved.choices[0].message.content
        cached = resumed.usage.prompt_tokens_details.cached_tokens
        assert cached == unsaved.usage.prompt_tokens_details.cached_tokens
        assert 0 < cached <= body["n_restored"]
        print("\nslot restore: {} tokens ({} bytes) in {} ms; the continued request reused {} "
              "of its {} prompt tokens, as the uninterrupted server did".format(
                  body["n_restored"], body["n_read"], body["timings"]["restore_ms"], cached,
                  resumed.usage.prompt_tokens))
        erased = slot(second, "erase")
        assert erased.status_code == 200 and erased.json()["id_slot"] == 0
        assert erased.json()["n_erased"] == resumed.usage.prompt_tokens + \
            resumed.usage.completion_tokens
        assert slot(second, "erase").json()["n_erased"] == 0


def test_bad_slot_requests_get_their_codes(smollm2_gguf, numba_ready, folder, tmp_path):
    with serve(smollm2_gguf, folder, tmp_path / "c.txt") as server:
        ask(server, [{"role": "user", "content": FIRST}])
        assert slot(server, "save", filename="good.bin").status_code == 200
        data = (folder / "good.bin").read_bytes()
        (folder / "cut.bin").write_bytes(data[:len(data) // 2])
        flipped = bytearray(data)
        flipped[len(data) - 1000] ^= 0x04
        (folder / "flipped.bin").write_bytes(bytes(flipped))
        for name, status, code in [("cut.bin", 400, "corrupt"), ("flipped.bin", 400, "checksum"),
                                   ("absent.bin", 404, "io")]:
            got = slot(server, "restore", filename=name)
            assert got.status_code == status, (name, got.text)
            assert got.json()["error"]["code"] == code, (name, got.text)
        for name in ("../good.bin", "sub/good.bin", ".hidden", "", None):
            got = slot(server, "restore", filename=name)
            assert got.status_code == 400 and got.json()["error"]["code"] == "invalid_filename"
        assert slot(server, "save", slot_id=4, filename="x.bin").json()["error"]["code"] == \
            "invalid_slot"
        assert slot(server, "load", filename="x.bin").json()["error"]["code"] == \
            "invalid_action"
        bad = server.client().chat.completions.with_raw_response
        with pytest.raises(openai.BadRequestError):
            bad.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                       max_tokens=2, extra_body={"id_slot": 9})
    shutil.copyfile(str(folder / "good.bin"), str(folder / "other-kv.bin"))
    with serve(smollm2_gguf, folder, tmp_path / "d.txt", "--kv-type", "q8_0") as other:
        got = slot(other, "restore", filename="other-kv.bin")
        assert got.status_code == 400 and got.json()["error"]["code"] == "mismatch", got.text
        assert got.json()["error"]["message"].startswith("E016")
