"""`apr inspect` reads the header only: a GGUF vocabulary (and merges) is never decoded.

The GGUF reader keeps large metadata arrays as raw bytes (`apr_core.formats.gguf_lazy`);
here decoding one raises, so any code path of inspect that decodes the vocabulary fails.
The values the lazy arrays give when they are decoded are checked against gguf-py.
"""
import json

import pytest

from apr_core.formats import gguf_lazy
from apr_core.formats.gguf import read_gguf
from cli_util import apr


@pytest.fixture
def no_decode(monkeypatch):
    def refuse(self):
        raise AssertionError("a lazy GGUF array of {} items was decoded".format(self.count))
    monkeypatch.setattr(gguf_lazy.GGUFArray, "_decode_all", refuse)


@pytest.fixture
def decodes(monkeypatch):
    """The item counts of the lazy arrays decoded whole, in order (a spy on
    `_decode_all`, which `values()` calls once per array before caching)."""
    seen = []
    decode_all = gguf_lazy.GGUFArray._decode_all

    def spy(self):
        seen.append(self.count)
        return decode_all(self)
    monkeypatch.setattr(gguf_lazy.GGUFArray, "_decode_all", spy)
    return seen


@pytest.mark.parametrize("model", ["smollm2_gguf", "qwen_gguf"])
def test_inspect_never_decodes_the_vocabulary(model, request, no_decode):
    path = request.getfixturevalue(model)
    expected = {"smollm2_gguf": 49152, "qwen_gguf": 151936}[model]
    code, out, err = apr("inspect", path)
    assert code == 0, err
    assert "{:,}".format(expected) in out and "items:" in out
    code, out, err = apr("inspect", path, "--json")
    assert code == 0, err
    info = json.loads(out)
    assert info["vocab_size"] == expected
    assert info["metadata"]["tokenizer.ggml.tokens"].startswith(
        "[{} items: ".format(expected))
    assert info["chat_template"]["present"] and info["chat_template"]["check"] == "ok"
    assert info["family"] in ("llama", "qwen2")


def test_lazy_arrays_equal_gguf_py(smollm2_gguf, decodes):
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(smollm2_gguf)
    ours = read_gguf(smollm2_gguf)
    try:
        lazy = ours.header_metadata["tokenizer.ggml.tokens"]
        assert isinstance(lazy, gguf_lazy.GGUFArray) and len(lazy) == 49152
        field = reader.fields["tokenizer.ggml.tokens"]
        oracle = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
        # one item before any full decode (walks the lengths), then everything
        assert [lazy[i] for i in (0, 5, 1023, 1024, 4097, 49151, -1)] == \
            [oracle[i] for i in (0, 5, 1023, 1024, 4097, 49151, -1)]
        before = len(decodes)
        assert list(lazy) == oracle and lazy == oracle
        assert decodes[before:] == [49152]             # decoded all at once, then cached
        merges = reader.fields["tokenizer.ggml.merges"]
        assert ours.metadata["tokenizer.ggml.merges"] == \
            [bytes(merges.parts[i]).decode("utf-8") for i in merges.data]
        assert isinstance(ours.metadata["tokenizer.ggml.tokens"], list)
    finally:
        ours.close()


@pytest.mark.parametrize("chunk", [1 << 20, 4093])
def test_string_offsets_come_from_the_parse_walk(smollm2_gguf, monkeypatch, chunk):
    """The reader's one walk over the lengths records where every 1024th string starts
    (also across buffer refills: a small odd read size), so finding one token later walks
    at most 1023 lengths and never the whole array again."""
    import struct
    from apr_core.formats import gguf_cursor
    gguf = pytest.importorskip("gguf")
    monkeypatch.setattr(gguf_cursor, "_CHUNK", chunk)
    ours = read_gguf(smollm2_gguf)
    try:
        lazy = ours.header_metadata["tokenizer.ggml.tokens"]
        marks = lazy._checkpoints
        assert marks is not None and len(marks) == -(-len(lazy) // gguf_lazy.CHECKPOINT)
        pos, walked = 0, []
        for index in range(len(lazy)):
            if index % gguf_lazy.CHECKPOINT == 0:
                walked.append(pos)
            pos += 8 + struct.unpack_from("<Q", lazy.raw, pos)[0]
        assert marks == walked and pos == len(lazy.raw)
        field = gguf.GGUFReader(smollm2_gguf).fields["tokenizer.ggml.tokens"]
        for i in (0, 1023, 1024, 1025, 30000, 49151):
            assert lazy[i] == bytes(field.parts[field.data[i]]).decode("utf-8")
    finally:
        ours.close()


def test_run_decodes_each_large_array_once(smollm2_gguf, decodes):
    """`apr run` on a GGUF decodes the vocabulary, merges and token types once (the
    tokenizer needs them); asking whether the file is a Whisper APR reads 4 bytes."""
    header = read_gguf(smollm2_gguf)
    try:
        lazy = sum(isinstance(v, gguf_lazy.GGUFArray) for v in header.header_metadata.values())
    finally:
        header.close()
    before = len(decodes)
    code, out, err = apr("run", smollm2_gguf, "Hi", "-n", "1", "--backend", "numpy")
    assert code == 0, err
    assert lazy >= 2 and len(decodes) - before == lazy
