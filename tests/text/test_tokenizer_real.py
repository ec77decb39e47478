"""Real models' tokenizers (SmolLM2-135M, Qwen2.5-Coder-0.5B GGUF) against llama.cpp.

The oracle is llama-cpp-python's `Llama(path, vocab_only=True).tokenize(...)` /
`.detokenize(...)` (the wheel scripts/setup.sh builds); without it the comparisons skip,
while round trips and streaming still run.
"""
import pytest

from apr_core.formats.gguf import read_gguf
from apr_core.text.tokenizer import StreamingDetokenizer
from apr_core.text.load import tokenizer_from_gguf

pytestmark = [pytest.mark.native, pytest.mark.real_model]

TEXTS = [
    "Hello world", " Hello World!", "The quick brown fox jumps over the lazy dog.",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < 10; ++i) { printf(\"%d\\n\", i); }",
    "Ünïcödé: 日本語のテキスト, 한국어, Ελληνικά, русский, العربية",
    "emoji 😀🎉 👩‍👩‍👧‍👦 🇫🇷 ✅", "1234567890 3.14159 -42 1e10 2024-06-01",
    "tabs\tand\n\nnewlines\r\n  spaces   \n\n\n", "    ", "\n", "", " ",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n",
    "<|endoftext|> after", "I've been 'told he's there, 'RE you sure? We'Ve a'lL",
    "\u00a0non-breaking\u2003em\u3000ideographic", "x\u0301\u0327 combining marks",
    "a" * 500, "<|im_start|><|im_end|>", "</s> <s> [INST]",
]


@pytest.fixture(scope="module", params=["smollm2_gguf", "qwen_gguf"])
def model(request):
    path = request.getfixturevalue(request.param)
    return path, tokenizer_from_gguf(read_gguf(path).metadata)


@pytest.fixture(scope="module")
def llama_vocab(model):
    llama_cpp = pytest.importorskip("llama_cpp")
    return llama_cpp.Llama(model[0], vocab_only=True, verbose=False)


@pytest.mark.oracle
def test_encode_matches_llama_cpp(model, llama_vocab):
    _, tok = model
    for text in TEXTS:
        for add_special in (False, True):
            for parse_special in (False, True):
                expected = llama_vocab.tokenize(text.encode("utf-8"), add_bos=add_special,
                                                special=parse_special)
                assert tok.encode(text, add_special, parse_special) == expected, \
                    (text, add_special, parse_special)


@pytest.mark.oracle
def test_decode_matches_llama_cpp(model, llama_vocab):
    _, tok = model
    for text in TEXTS:
        ids = tok.encode(text, add_special=False)
        expected = llama_vocab.detokenize(ids, special=True).decode("utf-8", "replace")
        assert tok.decode(ids) == expected


def test_round_trip(model):
    _, tok = model
    for text in TEXTS:
        assert tok.decode(tok.encode(text, add_special=False)) == text
        assert tok.decode(tok.encode(text, add_special=False, parse_special=False)) == text


def test_special_tokens_and_eog(model):
    _, tok = model
    start, end = tok.token_to_id["<|im_start|>"], tok.token_to_id["<|im_end|>"]
    ids = tok.encode("<|im_start|>user\nhi<|im_end|>", add_special=False)
    assert ids[0] == start and ids[-1] == end
    assert start not in tok.encode("<|im_start|>", add_special=False, parse_special=False)
    assert tok.is_eog(end) and tok.is_eog(tok.eos_id) and not tok.is_eog(start)
    assert not tok.add_bos and not tok.add_eos     # both models say so in their metadata
    assert tok.decode(ids, skip_special=True) == "user\nhi"


def test_streaming_detokenizer_never_emits_partial_utf8(model):
    _, tok = model
    text = "mixed 😀🎉 👩‍👩‍👧‍👦 日本語 ✅ done"
    ids = tok.encode(text, add_special=False)
    pieces = [tok.token_bytes(i) for i in ids]
    # The check means something only if some token carries part of a character.
    assert any(_incomplete(p) for p in pieces)
    stream = StreamingDetokenizer(tok)
    chunks = [stream.add(i) for i in ids]
    chunks.append(stream.flush())
    assert "".join(chunks) == tok.decode(ids) == text
    assert all("\ufffd" not in chunk for chunk in chunks)
    assert "" in chunks[:-1]      # held back while a character was incomplete


def _incomplete(data):
    try:
        data.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True
