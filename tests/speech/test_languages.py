"""apr's Whisper language table against OpenAI whisper's `tokenizer.LANGUAGES` as
transformers ships it (an independent copy), and against the language tokens of the real
Whisper base model (every code the model knows has a name, in token-id order)."""
from __future__ import annotations

import pytest

from apr_core.speech.languages import LANGUAGES, language_name

pytestmark = [pytest.mark.native]


def test_table_equals_openai_whisper_languages():
    from transformers.models.whisper.tokenization_whisper import LANGUAGES as REFERENCE
    assert list(LANGUAGES.items()) == list(REFERENCE.items())
    assert language_name("en") == "english" and language_name("yue") == "cantonese"
    assert language_name(None) is None and language_name("xx") == "xx"


@pytest.mark.real_model
def test_every_language_token_of_whisper_base_has_a_name(whisper_base_dir):
    import json
    import os
    with open(os.path.join(whisper_base_dir, "config.json")) as handle:
        lang_ids = json.load(handle)["lang_ids"]
    with open(os.path.join(whisper_base_dir, "vocabulary.txt"), encoding="utf-8") as handle:
        vocabulary = handle.read().split("\n")
    codes = [vocabulary[i][2:-2] for i in sorted(lang_ids)]
    assert codes == list(LANGUAGES)[:len(codes)]        # whisper base: the first 99
