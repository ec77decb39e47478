"""Real chat models answer correctly through `apr run` with no flag (seed 004 §7.1; the chat
template applies by default), from GGUF and from the same model converted to APR v2 — the
user-visible end of the whole pipeline."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.native, pytest.mark.real_model]


def apr_run(model, prompt, max_tokens):
    env = dict(os.environ, APR_QUIET="1")
    done = subprocess.run([sys.executable, "-m", "apr_native.cli.main", "run", model, prompt,
                           "--temperature", "0", "-n", str(max_tokens), "--json"],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["template"] == "chatml"       # both models' own templates are ChatML
    return result


@pytest.fixture(scope="module")
def demo_apr(smollm2_gguf, tmp_path_factory):
    from apr_core.conversion.convert import convert
    path = str(tmp_path_factory.mktemp("demo") / "smollm2.apr")
    convert(smollm2_gguf, path, compression="lz4")
    return path


@pytest.fixture(scope="module")
def qwen_apr(qwen_gguf, tmp_path_factory):
    from apr_core.conversion.convert import convert
    path = str(tmp_path_factory.mktemp("qwen") / "qwen.apr")
    convert(qwen_gguf, path)
    return path


@pytest.mark.parametrize("source", ["gguf", "apr"])
def test_demo_says_paris(source, smollm2_gguf, request):
    model = smollm2_gguf if source == "gguf" else request.getfixturevalue("demo_apr")
    result = apr_run(model, "What is the capital of France?", 24)
    assert "Paris" in result["text"]
    assert result["token_ids"] and result["timings"]["prefill_s"] > 0


@pytest.mark.parametrize("source", ["gguf", "apr"])
def test_qwen_says_4(source, qwen_gguf, request):
    model = qwen_gguf if source == "gguf" else request.getfixturevalue("qwen_apr")
    result = apr_run(model, "What is 2+2? Answer with just the number.", 8)
    assert result["text"].strip() == "4"
    assert result["finish_reason"] == "stop"


def test_demo_name_resolves(smollm2_gguf):
    result = apr_run("demo", "What is the capital of France?", 24)
    assert "Paris" in result["text"]


@pytest.fixture(scope="module")
def demo_model(smollm2_gguf):
    from apr_core.runtime.text_model import TextModel
    return TextModel.load(smollm2_gguf)


def test_stop_string_cuts_text_and_streaming_equals_batch(demo_model):
    ids = demo_model.prompt_ids("What is the capital of France?", chat=True)
    full = demo_model.generate(ids, max_tokens=24)
    assert "Paris" in full.text
    streamed = "".join(p.text for p in demo_model.stream(ids, max_tokens=24))
    assert streamed == full.text
    cut = demo_model.generate(ids, max_tokens=24, stop=["Paris"])
    assert cut.text == full.text[:full.text.index("Paris")]
    assert cut.finish_reason == "stop"


def test_chat_ids_start_with_a_single_bos(demo_model):
    tok = demo_model.tokenizer
    ids = demo_model.chat_ids([{"role": "user", "content": "hi"}])
    if tok.bos_id is not None and tok.add_bos:
        assert ids[0] == tok.bos_id and ids[1] != tok.bos_id
    assert tok.decode(ids).count("<|im_start|>user") == 1
