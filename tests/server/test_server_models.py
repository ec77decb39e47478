"""Many models, one server (issue 42 item 2): `apr serve SMOLLM2 QWEN` routes by the
request's `model`, loads on first use and unloads the least recently used past
`--max-models`; GET /v1/models shows each model's state, POST /models/load|unload as
llama-server's router has them.

Oracles: the demo question answered "Paris" by both real models, each concurrent greedy
answer equal to what the same model answers alone, every response tagged with the model
that was asked; RSS read from /proc of the server process.
"""
import asyncio
import os
import threading
import time

import pytest

pytestmark = [pytest.mark.native, pytest.mark.real_model]

openai = pytest.importorskip("openai", reason="the openai client is a dev dependency")

from server_util import running_server  # noqa: E402

API_KEY = "k-models"
QUESTION = "What is the capital of France?"
HAIKU = "Write a haiku about the sea."


def ids(smollm2_gguf, qwen_gguf):
    return os.path.basename(smollm2_gguf), os.path.basename(qwen_gguf)


def rss(server):
    """The server process's resident set, bytes (VmRSS)."""
    with open("/proc/{}/status".format(server.process.pid)) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def cards(server):
    return server.http.get("/v1/models").json()["data"]


def states(server):
    return {card["id"]: card["status"]["value"] for card in cards(server)}


def in_memory(card):
    """The model has an engine: loaded, being unloaded, or loading (not just waiting for
    another model to unload first)."""
    status = card["status"]
    return status["value"] in ("loaded", "unloading") or (
        status["value"] == "loading" and not status.get("waiting_for_unload"))


def ask(client, model, question=QUESTION, n=12):
    reply = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": question}], max_tokens=n,
        temperature=0)
    return reply.model, reply.choices[0].message.content


@pytest.fixture(scope="module")
def two(smollm2_gguf, qwen_gguf, tmp_path_factory):
    pytest.importorskip("uvicorn", reason="uvicorn is a native dependency")
    log = tmp_path_factory.mktemp("models") / "stderr.txt"
    with running_server([smollm2_gguf, qwen_gguf], ["--max-models", "2", "--max-batch", "8"],
                        log, API_KEY) as running:
        yield running


def test_models_listed_unloaded_and_unknown_model_is_404(two, smollm2_gguf, qwen_gguf):
    smol, qwen = ids(smollm2_gguf, qwen_gguf)
    assert states(two) == {smol: "unloaded", qwen: "unloaded"}
    with pytest.raises(openai.NotFoundError) as err:
        ask(two.client(), "no-such-model")
    assert err.value.status_code == 404
    assert err.value.body["code"] == "model_not_found"
    assert states(two) == {smol: "unloaded", qwen: "unloaded"}     # nothing loaded for it
    missing = two.http.post("/models/load", json={"model": "nope"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == \
        "model_not_found"


def test_eight_concurrent_clients_split_across_two_models(two, smollm2_gguf, qwen_gguf):
    smol, qwen = ids(smollm2_gguf, qwen_gguf)
    client = two.client()
    alone = {m: ask(client, m) for m in (smol, qwen)}          # loads both on first use
    print("alone:", alone)
    assert states(two) == {smol: "loaded", qwen: "loaded"}
    # both say Paris; an open question tells them apart: two models, two answers
    haiku = {m: ask(client, m, HAIKU, n=16)[1] for m in (smol, qwen)}
    print("haiku:", haiku)
    assert haiku[smol] != haiku[qwen]

    async def everyone():
        aclient = two.async_client()

        async def one(i):
            model = (smol, qwen)[i % 2]
            reply = await aclient.chat.completions.create(
                model=model, messages=[{"role": "user", "content": QUESTION}],
                max_tokens=12, temperature=0)
            return model, reply.model, reply.choices[0].message.content
        return await asyncio.gather(*(one(i) for i in range(8)))
    together = asyncio.run(everyone())
    print("together:", together)
    for asked, tagged, text in together:
        assert tagged == asked
        assert "Paris" in text
        assert (tagged, text) == alone[asked]


def test_loading_model_does_not_stall_a_loaded_one(two, smollm2_gguf, qwen_gguf):
    smol, qwen = ids(smollm2_gguf, qwen_gguf)
    client = two.client()
    ask(client, smol, n=2)
    assert two.http.post("/models/load", json={"model": qwen}, timeout=600).json() == \
        {"success": True, "model": qwen}
    assert two.http.post("/models/unload", json={"model": qwen}).json() == \
        {"success": True, "model": qwen}
    assert states(two)[qwen] == "unloaded"
    again = two.http.post("/models/unload", json={"model": qwen})
    assert again.status_code == 400 and again.json()["error"]["code"] == "model_not_loaded"
    loaded = {}
    loader = threading.Thread(target=lambda: loaded.update(
        reply=two.http.post("/models/load", json={"model": qwen}, timeout=600)))
    loader.start()
    deadline = time.monotonic() + 60
    while states(two)[qwen] != "loading":
        assert time.monotonic() < deadline and loader.is_alive()
        time.sleep(0.02)
    answered_while_loading = 0
    while True:
        _, text = ask(client, smol, n=8)
        assert "Paris" in text
        if states(two)[qwen] != "loading":
            break
        answered_while_loading += 1
    loader.join()
    print("SmolLM2 answers while Qwen loaded:", answered_while_loading)
    assert answered_while_loading >= 1
    assert loaded["reply"].json() == {"success": True, "model": qwen}
    assert states(two) == {smol: "loaded", qwen: "loaded"}


def test_lru_unload_under_max_models_1_keeps_answering_and_frees_memory(
        smollm2_gguf, qwen_gguf, tmp_path):
    pytest.importorskip("uvicorn", reason="uvicorn is a native dependency")
    smol, qwen = ids(smollm2_gguf, qwen_gguf)
    folder = tmp_path / "models"        # --models-dir: links to the two files
    folder.mkdir()
    for path in (smollm2_gguf, qwen_gguf):
        os.symlink(path, folder / os.path.basename(path))
    with running_server([], ["--models-dir", str(folder), "--max-models", "1"],
                        tmp_path / "stderr.txt", API_KEY) as server:
        client = server.client()
        errors, answers = [], []

        def keep_asking(model, rounds):
            for _ in range(rounds):
                try:
                    answers.append((model,) + ask(client, model))
                except Exception as err:            # counted, and the test fails on it
                    errors.append((model, repr(err)))
        clients = [threading.Thread(target=keep_asking, args=(m, 3))
                   for m in (smol, qwen, smol, qwen)]
        swaps, last = 0, None
        for thread in clients:
            thread.start()
        while any(t.is_alive() for t in clients):
            current = cards(server)
            assert sum(in_memory(card) for card in current) <= 1, current
            loaded = [card["id"] for card in current if card["status"]["value"] == "loaded"]
            if loaded and loaded != last:
                swaps, last = swaps + 1, loaded
            time.sleep(0.05)
        print("errors:", errors, "answers:", len(answers), "loaded-model changes seen:", swaps)
        assert errors == []
        assert len(answers) == 12
        for asked, tagged, text in answers:
            assert tagged == asked and "Paris" in text
        # Both models have run (their kernels and code are in): RSS with SmolLM2 alone,
        # with none, with Qwen (491 MB), then with SmolLM2 again after Qwen's LRU unload
        assert "Paris" in ask(client, smol)[1]
        assert states(server) == {smol: "loaded", qwen: "unloaded"}
        rss_smol = rss(server)
        server.http.post("/models/unload", json={"model": smol})
        rss_idle = rss(server)
        ask(client, qwen, n=2)
        rss_qwen = rss(server)
        assert states(server) == {smol: "unloaded", qwen: "loaded"}
        ask(client, smol, n=2)
        assert states(server) == {smol: "loaded", qwen: "unloaded"}
        rss_smol_again = rss(server)
        server.http.post("/models/unload", json={"model": smol})
        rss_idle_again = rss(server)
        print("RSS MB: SmolLM2 {:.0f}, none {:.0f}, Qwen {:.0f}, SmolLM2 after Qwen's unload "
              "{:.0f}, none again {:.0f}".format(*(v / 1e6 for v in (
                  rss_smol, rss_idle, rss_qwen, rss_smol_again, rss_idle_again))))
        assert rss_qwen > rss_smol_again + (100 << 20)    # Qwen's weights were resident
        assert rss_smol_again <= 1.10 * rss_smol
        assert rss_idle_again <= 1.10 * rss_idle
