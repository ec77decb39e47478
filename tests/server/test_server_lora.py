"""`apr serve --lora FILE[:SCALE]` with llama-server's per-request `"lora": [{id, scale}]`,
through the official openai client (extra_body), on SmolLM2 with a GGUF LoRA written as
llama.cpp lays it out (the adapter test_lora_llama_cpp.py checks against llama.cpp).

Oracle: apr's own engine in this process, with the adapter at scale 1 and without it (the
former is llama.cpp-checked, the latter is the plain model): each request's greedy text
equals the one its scales ask for, also when requests with other scales arrive together."""
import asyncio

import pytest

pytestmark = [pytest.mark.native, pytest.mark.real_model]

openai = pytest.importorskip("openai", reason="the openai client is a dev dependency")

from server_util import running_server  # noqa: E402
from lora_files import write_gguf_lora  # noqa: E402

API_KEY = "k-lora"
MODEL = "smol"
MESSAGES = [{"role": "user", "content": "Explain what a CPU does."}]
MAX_TOKENS = 6     # the answers part at the first token


def expected_texts(path, lora):
    """(greedy text with the adapter at scale 1, at scale 0) from one engine."""
    from apr_native.engine import EngineOptions, load_engine
    engine = load_engine(path, EngineOptions(backend="numba", lora=((lora, 1.0),)))
    ids = engine.model.chat_ids(MESSAGES)
    adapted = engine.generate(ids, max_tokens=MAX_TOKENS).text
    engine.transformer.lora.set_scales([0.0])
    return adapted, engine.generate(ids, max_tokens=MAX_TOKENS).text


def test_request_lora_scales(smollm2_gguf, numba_ready, tmp_path):
    pytest.importorskip("uvicorn", reason="uvicorn is a native dependency")
    lora = str(tmp_path / "lora.gguf")
    write_gguf_lora(lora, range(0, 30, 3))
    adapted, base = expected_texts(smollm2_gguf, lora)
    assert adapted != base
    args = ["--model-id", MODEL, "--backend", "numba", "--lora", lora]
    with running_server(smollm2_gguf, args, tmp_path / "log.txt", API_KEY) as server:
        client = server.client()

        def ask(**extra):
            return client.chat.completions.create(
                model=MODEL, messages=MESSAGES, max_tokens=MAX_TOKENS, temperature=0.0,
                **extra).choices[0].message.content

        assert ask() == adapted                                       # startup scale 1
        assert ask(extra_body={"lora": [{"id": 0, "scale": 0.0}]}) == base
        assert ask(extra_body={"lora": []}) == base                   # unlisted: 0

        async def together():
            aclient = server.async_client()
            calls = [aclient.chat.completions.create(
                model=MODEL, messages=MESSAGES, max_tokens=MAX_TOKENS, temperature=0.0,
                extra_body={"lora": [{"id": 0, "scale": scale}]} if scale == 0 else
                {"lora": [{"path": lora, "scale": 1}]}) for scale in (0, 1, 0, 1)]
            return [r.choices[0].message.content for r in await asyncio.gather(*calls)]
        assert asyncio.run(together()) == [base, adapted, base, adapted]
        # requests held for their scales left the queue once, when they went in
        assert server.metric("apr_queue_depth") == 0

        assert server.http.get("/lora-adapters").json() == [
            {"id": 0, "path": lora, "scale": 1.0}]
        for bad in ([{"id": 3, "scale": 1.0}], [{"path": "nope.gguf"}],
                    [{"id": 0, "scale": "x"}], {"id": 0}):
            with pytest.raises(openai.BadRequestError) as err:
                ask(extra_body={"lora": bad})
            assert err.value.code == "invalid_lora", bad
        assert ask(extra_body={"lora": [{"id": 0, "scale": 0}]}) == base   # still serving
