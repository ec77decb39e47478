"""`apr inspect`'s chat template description is remembered across processes
(apr_native.template_cache): used only for the exact template, BOS/EOS and renderer code
it was made for; broken or foreign entries are ignored; failures are never remembered."""
import json

import pytest

from apr_core.text import chat_probe
from apr_native import template_cache

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("APR_CACHE", str(tmp_path))
    calls = []
    real = chat_probe.describe_template

    def counted(*args):
        calls.append(args)
        return real(*args)
    monkeypatch.setattr(chat_probe, "describe_template", counted)
    return calls


def test_a_description_is_made_once_then_read_back(cache):
    first = template_cache.describe(CHATML, "<s>", "</s>")
    assert first["check"] == "ok" and first["family"] == "chatml" and len(cache) == 1
    assert template_cache.describe(CHATML, "<s>", "</s>") == first and len(cache) == 1
    # another EOS string is another entry: described afresh
    template_cache.describe(CHATML, "<s>", "<|im_end|>")
    assert len(cache) == 2


def test_an_entry_for_another_key_or_a_broken_one_is_not_used(cache):
    path, key = template_cache.entry_path(CHATML, "", "")
    template_cache.describe(CHATML, "", "")
    entry = json.load(open(path))
    entry["info"]["family"] = "forged"
    entry["key"][1] = CHATML + " "              # the same file name, another template
    json.dump(entry, open(path, "w"))
    assert template_cache.describe(CHATML, "", "")["family"] == "chatml"
    assert len(cache) == 2
    open(path, "w").write("{not json")
    assert template_cache.describe(CHATML, "", "")["family"] == "chatml"
    assert len(cache) == 3
    assert json.load(open(path))["key"] == key    # rewritten


def test_a_failing_template_is_described_every_time(cache):
    broken = "{{ raise_exception('no') }}"
    first = template_cache.describe(broken, "", "")
    assert first["check"] != "ok"
    template_cache.describe(broken, "", "")
    assert len(cache) == 2
