"""llama.cpp's own tokenizer test vectors (tests/test-tokenizer-0): every vocabulary whose
type we implement must reproduce every expected id list exactly.

The vectors ship only in the llama-cpp-python sdist: `bash scripts/fetch_tokenizer_vectors.sh`
extracts them to $APR_CACHE/llama.cpp-src/models (or point APR_LLAMA_SRC at a llama.cpp
source tree). Inputs are separated by "\\n__ggml_vocab_test__\\n"; line i of the .out file
holds the ids of input i. llama.cpp tokenizes them with add_special=False and
parse_special=False.
"""
import glob
import os

import pytest

from apr_core.errors import AprError, ErrorCode
from apr_core.formats.gguf import read_gguf
from apr_core.text.load import tokenizer_from_gguf

pytestmark = pytest.mark.oracle

SEPARATOR = "\n__ggml_vocab_test__\n"
# Vocabulary types llama.cpp has and we do not implement: they must fail loudly.
UNSUPPORTED = {"bert-bge": "bert", "nomic-bert-moe": "t5"}


def vocab_dir():
    candidates = []
    if os.environ.get("APR_LLAMA_SRC"):
        root = os.environ["APR_LLAMA_SRC"]
        candidates += [os.path.join(root, "models"), os.path.join(root, "vendor", "llama.cpp",
                                                                  "models"), root]
    cache = os.environ.get("APR_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "apr")
    candidates.append(os.path.join(cache, "llama.cpp-src", "models"))
    for path in candidates:
        if glob.glob(os.path.join(path, "ggml-vocab-*.gguf.inp")):
            return path
    return None


VOCAB_DIR = vocab_dir()
NAMES = sorted(os.path.basename(p)[len("ggml-vocab-"):-len(".gguf.inp")]
               for p in glob.glob(os.path.join(VOCAB_DIR or "", "ggml-vocab-*.gguf.inp")))
needs_vectors = pytest.mark.skipif(
    VOCAB_DIR is None, reason="llama.cpp tokenizer vectors not found: run "
    "scripts/fetch_tokenizer_vectors.sh or set APR_LLAMA_SRC")


def read_vectors(name):
    """(text, expected ids) pairs, parsed the way test-tokenizer-0.cpp parses them."""
    base = os.path.join(VOCAB_DIR, "ggml-vocab-{}.gguf".format(name))
    with open(base + ".inp", "rb") as handle:
        raw = handle.read().decode("utf-8")
    texts, pos = [], 0
    while pos < len(raw):
        end = raw.find(SEPARATOR, pos)
        if end < 0:
            texts.append(raw[pos:])
            break
        texts.append(raw[pos:end])
        pos = end + len(SEPARATOR)
    with open(base + ".out", "r", encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    assert len(lines) >= len(texts)
    return [(t, [int(x) for x in line.split()]) for t, line in zip(texts, lines)]


_loaded = {}


def load(name):
    if name not in _loaded:
        path = os.path.join(VOCAB_DIR, "ggml-vocab-{}.gguf".format(name))
        _loaded.clear()            # big vocabularies: keep one at a time
        _loaded[name] = read_gguf(path).metadata
    return _loaded[name]


@needs_vectors
def test_required_vocabularies_present():
    for name in ("gpt-2", "qwen2", "llama-bpe", "llama-spm"):
        assert name in NAMES


@needs_vectors
@pytest.mark.parametrize("name", [n for n in NAMES if n not in UNSUPPORTED] or ["none"])
def test_vectors(name):
    if name == "none":
        pytest.skip("no vectors")
    tokenizer = tokenizer_from_gguf(load(name))
    failures = []
    for text, expected in read_vectors(name):
        got = tokenizer.encode(text, add_special=False, parse_special=False)
        if got != expected:
            failures.append((text, got, expected))
    assert not failures, "{} of {} differ, first: {!r}".format(
        len(failures), len(read_vectors(name)), failures[0])


@needs_vectors
@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_unsupported_types_are_refused(name):
    path = os.path.join(VOCAB_DIR, "ggml-vocab-{}.gguf".format(name))
    if not os.path.exists(path):
        pytest.skip("{} not in this llama.cpp version".format(name))
    with pytest.raises(AprError) as info:
        tokenizer_from_gguf(load(name))
    assert info.value.code is ErrorCode.UNSUPPORTED
    assert info.value.context["model"] == UNSUPPORTED[name]


@needs_vectors
@pytest.mark.parametrize("name", ["gpt-2", "llama-bpe", "qwen2", "llama-spm", "starcoder"])
def test_vectors_round_trip(name):
    """decode(encode(s)) == s for every vector input (no special tokens in them)."""
    tokenizer = tokenizer_from_gguf(load(name))
    for text, _ in read_vectors(name):
        ids = tokenizer.encode(text, add_special=False, parse_special=False)
        assert tokenizer.decode(ids) == text
