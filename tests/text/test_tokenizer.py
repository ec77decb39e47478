"""Tokenizer units on small hand-made vocabularies: pre-tokenizer regex translation, BPE
merge order, SentencePiece merges and byte fallback, special-token splitting, BOS/EOS
policy, streaming detokenization and the errors for what is not supported."""
import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apr_core.errors import AprError, ErrorCode
from apr_core.text.bpe import BYTE_TO_UNICODE, merge_word
from apr_core.text.bpe_ranks import PairRanks
from apr_core.text.pretokenize import PRE_PATTERNS, PreTokenizer, translate
from apr_core.text.tokenizer import StreamingDetokenizer
from apr_core.text.load import tokenizer_from_gguf, tokenizer_from_json

BYTE_CHARS = [BYTE_TO_UNICODE[b] for b in range(256)]


def bpe_kv(extra_tokens=(), merges=(), pre="gpt-2", types=None, **more):
    """GGUF-style metadata of a byte-level BPE vocabulary: the 256 byte characters first."""
    tokens = BYTE_CHARS + list(extra_tokens)
    kv = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre,
          "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.merges": list(merges),
          "tokenizer.ggml.token_type": types or [1] * len(tokens)}
    kv.update(more)
    return kv


def spm_kv(pieces, scores, types=None, **more):
    """GGUF-style metadata of a SentencePiece vocabulary: <unk>, <s>, </s>, 256 byte tokens."""
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + list(pieces)
    kinds = [2, 3, 3] + [6] * 256 + (types or [1] * len(pieces))
    kv = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
          "tokenizer.ggml.scores": [0.0] * 259 + list(scores),
          "tokenizer.ggml.token_type": kinds}
    kv.update(more)
    return kv


# -- pre-tokenizer ---------------------------------------------------------------------------

@pytest.mark.parametrize("prop,prefix", [("L", "L"), ("N", "N"), ("P", "P"), ("S", "S"),
                                         ("M", "M"), ("Lu", "Lu"), ("Nd", "Nd")])
def test_property_classes_match_unicodedata(prop, prefix):
    pattern = re.compile(translate(r"\p{%s}" % prop))
    for cp in list(range(0, 0x3000, 7)) + list(range(0x1F300, 0x1F700, 13)) + [0x10FFFF]:
        ch = chr(cp)
        assert bool(pattern.fullmatch(ch)) == unicodedata.category(ch).startswith(prefix), hex(cp)


def test_whitespace_is_unicode_white_space_not_isspace():
    pattern = re.compile(translate(r"\s"))
    for ch in "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000":
        assert pattern.fullmatch(ch)
    for ch in "\x1c\x1d\x1e\x1fa\u200b":     # str.isspace() says yes to \x1c-\x1f
        assert not pattern.fullmatch(ch)


def test_gpt2_split():
    words = PreTokenizer.family("gpt2").split("Hello world!! I'm  here\n\n 123abc")
    assert words == ["Hello", " world", "!!", " I", "'m", " ", " here", "\n\n", " 123", "abc"]


def test_llama3_and_qwen2_number_split():
    assert PreTokenizer.family("llama3").split("1234567") == ["123", "456", "7"]
    assert PreTokenizer.family("qwen2").split("x 1234") == ["x", " ", "1", "2", "3", "4"]


def test_smollm_splits_every_digit_first():
    assert PreTokenizer.family("starcoder").split("ab 2024!") == ["ab", " ", "2", "0", "2", "4", "!"]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.sampled_from(sorted(PRE_PATTERNS)))
def test_split_keeps_every_character(text, family):
    assert "".join(PreTokenizer.family(family).split(text)) == text


def test_hf_split_behaviors():
    def run(behavior, invert=False):
        return PreTokenizer([("-", behavior, invert)]).split("a-b--c")
    assert run("isolated") == ["a", "-", "b", "-", "-", "c"]
    assert run("removed") == ["a", "b", "c"]
    assert run("merged_with_previous") == ["a-", "b-", "-", "c"]
    assert run("merged_with_next") == ["a", "-b", "-", "-c"]
    assert run("contiguous") == ["a", "-", "b", "--", "c"]
    assert run("removed", invert=True) == ["-", "-", "-"]


def test_unknown_pre_tokenizer_is_refused():
    with pytest.raises(AprError) as info:
        tokenizer_from_gguf(bpe_kv(pre="no-such-pre"))
    assert info.value.code is ErrorCode.UNSUPPORTED and info.value.context["pre"] == "no-such-pre"


# -- BPE --------------------------------------------------------------------------------------

def test_merge_word_lowest_rank_first_leftmost_on_ties():
    ranks = PairRanks({"a a": 0, "b c": 2, "a b": 3})
    assert merge_word("aaa", ranks) == ["aa", "a"]     # leftmost pair of equal rank
    assert merge_word("aaaa", ranks) == ["aa", "aa"]
    ranks[ranks.key("aa", "a")] = 1
    assert merge_word("aaa", ranks) == ["aaa"]
    assert merge_word("abc", ranks) == ["a", "bc"]     # (b,c) ranks before (a,b)
    assert merge_word("", ranks) == [] and merge_word("x", ranks) == ["x"]


def test_bpe_encode_decode_and_word_cache():
    kv = bpe_kv(["he", "ll", "hell", "hello", "\u0120w", "\u0120wo"],
                ["h e", "l l", "he ll", "hell o", "\u0120 w", "\u0120w o"])
    tok = tokenizer_from_gguf(kv)
    ids = tok.encode("hello wow", add_special=False)
    assert [tok.tokens[i] for i in ids] == ["hello", "\u0120wo", "w"]
    assert tok.decode(ids) == "hello wow"
    assert tok.encode("hello wow", add_special=False) == ids      # served from the cache
    assert "hello" in tok._cache


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=30))
def test_bpe_round_trip_any_text(text):
    tok = _tiny_bpe()
    assert tok.decode(tok.encode(text, add_special=False, parse_special=False)) == text


_tiny = []


def _tiny_bpe():
    if not _tiny:
        _tiny.append(tokenizer_from_gguf(bpe_kv(["he", "ll"], ["h e", "l l"])))
    return _tiny[0]


def test_special_tokens_split_before_pretokenization():
    kv = bpe_kv(["<|im_start|>", "<|im_end|>", "<tool>"], [],
                types=[1] * 256 + [3, 3, 4], **{"tokenizer.ggml.eos_token_id": 257})
    tok = tokenizer_from_gguf(kv)
    start, end, tool = 256, 257, 258
    ids = tok.encode("<|im_start|>hi<tool>x<|im_end|>", add_special=False)
    assert ids[0] == start and ids[-1] == end and tool in ids
    # parse_special=False: control tokens are plain text, user-defined ones still match.
    plain = tok.encode("<|im_start|>hi<tool>", add_special=False, parse_special=False)
    assert start not in plain and tool in plain
    assert tok.decode(ids) == "<|im_start|>hi<tool>x<|im_end|>"
    assert tok.decode(ids, skip_special=True) == "hi<tool>x"
    assert tok.is_eog(end) and not tok.is_eog(start)


def test_bos_eos_follow_metadata():
    kv = bpe_kv(["<s>", "</s>"], [], types=[1] * 256 + [3, 3],
                **{"tokenizer.ggml.bos_token_id": 256, "tokenizer.ggml.eos_token_id": 257,
                   "tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_eos_token": True})
    tok = tokenizer_from_gguf(kv)
    assert tok.encode("a") == [256, BYTE_CHARS.index("a"), 257]
    assert tok.encode("a", add_special=False) == [BYTE_CHARS.index("a")]
    assert tok.encode("") == [256, 257]
    # llama-bpe style vocabularies add BOS by default (llama.cpp's rule), metadata aside.
    llama3 = tokenizer_from_gguf(bpe_kv(["<s>"], [], pre="llama-bpe",
                                                 **{"tokenizer.ggml.bos_token_id": 256}))
    assert llama3.encode("a")[0] == 256


# -- SentencePiece ------------------------------------------------------------------------------

def test_spm_merges_by_score_and_space_prefix():
    pieces = ["\u2581", "\u2581h", "el", "lo", "\u2581hel", "\u2581hello", "ab", "bc"]
    scores = [-1, -2, -3, -4, -5, -1, -2, -1]
    tok = tokenizer_from_gguf(spm_kv(pieces, scores))
    ids = tok.encode("hello")
    assert ids[0] == 1 and [tok.tokens[i] for i in ids[1:]] == ["\u2581hello"]
    # "abc": pair (b,c) scores higher than (a,b), so b+c merges and a stays alone.
    assert [tok.tokens[i] for i in tok.encode("abc", add_special=False)] == \
        ["\u2581", "<0x61>", "bc"]
    assert tok.decode(tok.encode("hello abc")) == "<s>hello abc"
    assert tok.decode(tok.encode("hello abc"), skip_special=True) == "hello abc"
    assert tok.decode(tok.encode("  hello", add_special=False)) == "  hello"


def test_spm_byte_fallback_and_streaming_never_splits_a_character():
    tok = tokenizer_from_gguf(spm_kv(["\u2581", "\u2581ok"], [-2.0, -1.0]))
    text = "ok \U0001F600\u00e9!"
    ids = tok.encode(text, add_special=False)
    assert [tok.tokens[i] for i in ids[-7:]] == ["<0xF0>", "<0x9F>", "<0x98>", "<0x80>",
                                                 "<0xC3>", "<0xA9>", "<0x21>"]
    stream = StreamingDetokenizer(tok)
    chunks = [stream.add(i) for i in ids] + [stream.flush()]
    assert "".join(chunks) == tok.decode(ids) == text
    assert all("\ufffd" not in c for c in chunks)
    assert chunks[-8:-4] == ["", "", "", "\U0001F600"]


def test_streaming_flush_replaces_a_truncated_character():
    tok = tokenizer_from_gguf(spm_kv(["\u2581"], [-1.0]))
    ids = tok.encode("\U0001F600", add_special=False)[:-1]    # drop the last byte
    stream = StreamingDetokenizer(tok)
    assert "".join(stream.add(i) for i in ids) == ""
    assert stream.flush() == "\ufffd"
    assert tok.decode(ids) == "\ufffd"


def test_unsupported_and_broken_metadata():
    with pytest.raises(AprError) as info:
        tokenizer_from_gguf({"tokenizer.ggml.model": "bert",
                                      "tokenizer.ggml.tokens": ["a"]})
    assert info.value.code is ErrorCode.UNSUPPORTED and info.value.context["model"] == "bert"
    with pytest.raises(AprError) as info:
        tokenizer_from_gguf({"tokenizer.ggml.model": "gpt2",
                                      "tokenizer.ggml.tokens": ["a"]})
    assert info.value.code is ErrorCode.FORMAT        # no merges
    with pytest.raises(AprError):
        tokenizer_from_gguf({"general.architecture": "llama"})
    for broken in ({"tokenizer.ggml.tokens": BYTE_CHARS[:-1] + [7]},
                   {"tokenizer.ggml.token_type": ["x"] * 256},
                   {"tokenizer.ggml.merges": [3, 4]}):
        with pytest.raises(AprError) as info:
            tokenizer_from_gguf(dict(bpe_kv(), **broken))
        assert info.value.code is ErrorCode.FORMAT
    with pytest.raises(AprError) as info:
        tokenizer_from_gguf(dict(spm_kv([], []), **{"tokenizer.ggml.scores": [0.0]}))
    assert info.value.code is ErrorCode.FORMAT
    with pytest.raises(AprError) as info:
        tokenizer_from_json({"model": {"type": "WordPiece", "vocab": {}}})
    assert info.value.code is ErrorCode.UNSUPPORTED and info.value.context["model"] == "WordPiece"
    tok = _tiny_bpe()
    with pytest.raises(AprError) as info:
        tok.decode([10 ** 6])
    assert info.value.code is ErrorCode.ARGUMENT
