"""Chat templates: the models' own Jinja templates give the hand-written expected prompts,
and the built-in renderers (used when jinja2 is missing) give the same text."""
import sys

import pytest

from apr_core.errors import AprError, ErrorCode
from apr_core.formats.gguf import read_gguf
from apr_core.text.chat import detect_template, render_chat

SYSTEM_USER = [{"role": "system", "content": "You are a terse assistant."},
               {"role": "user", "content": "What is 2+2?"}]
EXPECTED_CHATML = ("<|im_start|>system\nYou are a terse assistant.<|im_end|>\n"
                   "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")
MULTI_TURN = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
              {"role": "user", "content": "Bye"}]

# Reference templates as the model families publish them (the oracle for the fallbacks).
LLAMA2 = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}"
    "{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}"
    "{% endif %}{% endfor %}")
LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}")
MISTRAL = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% endif %}{% endfor %}")
GEMMA = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}")


def _has_jinja():
    try:
        import jinja2  # noqa: F401
        return True
    except ImportError:
        return False


@pytest.fixture
def no_jinja(monkeypatch):
    """Make `import jinja2` fail, as on a Python without it."""
    monkeypatch.setitem(sys.modules, "jinja2", None)


def _model_template(path):
    return read_gguf(path).metadata["tokenizer.chat_template"]


@pytest.mark.native
@pytest.mark.real_model
@pytest.mark.parametrize("fixture,default_system", [
    ("smollm2_gguf", "You are a helpful AI assistant named SmolLM, trained by Hugging Face"),
    ("qwen_gguf", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.")])
def test_model_templates(request, monkeypatch, fixture, default_system):
    template = _model_template(request.getfixturevalue(fixture))
    user_only = [SYSTEM_USER[1]]
    expected_default = ("<|im_start|>system\n" + default_system + "<|im_end|>\n"
                        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")
    renders = []
    for jinja in (True, False):
        if not jinja:
            monkeypatch.setitem(sys.modules, "jinja2", None)
        elif not _has_jinja():
            continue
        assert render_chat(SYSTEM_USER, template) == EXPECTED_CHATML
        assert render_chat(user_only, template) == expected_default
        assert render_chat(SYSTEM_USER, template, add_generation_prompt=False) == \
            EXPECTED_CHATML[:-len("<|im_start|>assistant\n")]
        renders.append(render_chat(MULTI_TURN, template))
    assert len(set(renders)) == 1
    assert detect_template(template) == "chatml"


@pytest.mark.parametrize("template,name,expected", [
    (LLAMA2, "llama2", "<s>[INST] <<SYS>>\nYou are a terse assistant.\n<</SYS>>\n\n"
                       "What is 2+2? [/INST]"),
    (LLAMA3, "llama3", "<s><|start_header_id|>system<|end_header_id|>\n\nYou are a terse "
                       "assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
                       "What is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
    (MISTRAL, "mistral", None),
    (GEMMA, "gemma", None),
])
def test_builtin_families_match_reference_templates(template, name, expected):
    assert detect_template(template) == name
    conversations = [MULTI_TURN, [MULTI_TURN[0]]]
    if expected is not None:
        conversations.append(SYSTEM_USER)
        assert render_chat(SYSTEM_USER, name, bos_token="<s>", eos_token="</s>") == expected
    if _has_jinja():
        for messages in conversations:
            for generation in (True, False):
                kwargs = dict(add_generation_prompt=generation, bos_token="<s>",
                              eos_token="</s>")
                assert render_chat(messages, name, **kwargs) == \
                    render_chat(messages, template, **kwargs)


def test_builtin_hand_written():
    assert render_chat(MULTI_TURN, "mistral", bos_token="<s>", eos_token="</s>") == \
        "<s>[INST] Hi [/INST]Hello!</s>[INST] Bye [/INST]"
    assert render_chat(SYSTEM_USER, "gemma", bos_token="<bos>") == (
        "<bos><start_of_turn>user\nYou are a terse assistant.\n\nWhat is 2+2?<end_of_turn>\n"
        "<start_of_turn>model\n")
    assert render_chat(SYSTEM_USER) == EXPECTED_CHATML          # no template: ChatML
    parts = [{"role": "user", "content": [{"type": "text", "text": "What is "},
                                          {"type": "text", "text": "2+2?"}]}]
    assert render_chat(parts, "chatml") == render_chat([SYSTEM_USER[1]], "chatml")


def test_fallback_without_jinja(no_jinja):
    assert render_chat(SYSTEM_USER, LLAMA2, bos_token="<s>") == render_chat(
        SYSTEM_USER, "llama2", bos_token="<s>")
    with pytest.raises(AprError) as info:
        render_chat(SYSTEM_USER, "{{ messages[0]['content'] }}")
    assert info.value.code is ErrorCode.UNSUPPORTED
    with pytest.raises(AprError) as info:
        render_chat(SYSTEM_USER, "<|im_start|>{{ x }}", tools=[{"name": "f"}])
    assert info.value.code is ErrorCode.UNSUPPORTED
    with pytest.raises(AprError) as info:
        render_chat([{"role": "assistant", "content": "x"}], LLAMA2)
    assert info.value.code is ErrorCode.ARGUMENT


def test_jinja_helpers():
    pytest.importorskip("jinja2")
    with pytest.raises(AprError) as info:
        render_chat([{"role": "assistant", "content": "x"}], LLAMA2)
    assert info.value.code is ErrorCode.ARGUMENT and "alternate" in info.value.message
    text = render_chat([{"role": "user", "content": "x"}],
                       "{{ tools | tojson }}|{{ strftime_now('%Y') | length }}|{{ flag }}",
                       tools=[{"name": "größe", "b": 1}], flag="on")
    assert text == '[{"name": "größe", "b": 1}]|4|on'
    with pytest.raises(AprError) as info:
        render_chat(SYSTEM_USER, "{% for %}")
    assert info.value.code is ErrorCode.FORMAT
    with pytest.raises(AprError):
        render_chat([{"content": "no role"}], "chatml")
