"""Fuzz targets: one function per parser, and the seed inputs each campaign starts from.

A target takes arbitrary bytes and drives one parser as a user would (parse, read every
tensor, stream, verify, decrypt with a fixed test key). `AprError` is the only acceptable
failure; anything else is a bug (ARCHITECTURE §8 rule 3). Shared by `fuzz/run.py` (the
atheris campaign) and `tests/fuzz/test_fuzz_regressions.py` (corpus replay in CI).

Seeds are real files written by this project's writers and by the reference writers
(gguf-py, safetensors, lz4), plus the head of the real SmolLM2 GGUF when it is installed.
"""
from __future__ import annotations

import json
import os
import tempfile
from typing import Callable, Dict, List

from apr_core.errors import AprError

_REJECTED = [False]


def reset_rejected() -> None:
    _REJECTED[0] = False


def was_rejected() -> bool:
    """True when the last target call refused its input (an AprError was raised)."""
    return _REJECTED[0]


def _rejected() -> None:
    _REJECTED[0] = True


# A fixed, public test key: lets the targets reach the decryption and signature paths.
TEST_SEED = bytes(range(32))
MAX_TENSOR_BYTES = 1 << 22


_KEYS: List = []


def _key():
    """The test key pair, or None where no provider can derive it (Python 3.8 run)."""
    if not _KEYS:
        from apr_core import crypto
        from apr_core.crypto import keys
        _KEYS.append(keys.from_seed(TEST_SEED) if crypto.available("public_key_ed25519")
                     else None)
    return _KEYS[0]


def fuzz_apr2(data: bytes) -> None:
    from apr_core.formats.apr2 import read_apr2
    from apr_core.formats.apr2_encrypt import unlock
    from apr_core.formats.apr2_sign import verify_source
    from apr_core.formats.apr2_stream import StreamingLoader
    from apr_core.formats import flags as F
    from apr_core.io import BytesSource
    for verify in (True, False):
        try:
            model = read_apr2(data, verify=verify)
            if model.flags & F.ENCRYPTED:
                unlock(model, key=_key())
            for name in model.tensors:
                model.read_raw(name)
        except AprError:
            _rejected()
    try:
        if _key() is not None:
            verify_source(BytesSource(data), _key().public)
    except AprError:
        _rejected()
    try:
        loader = StreamingLoader(data)
        for info in loader.load_index():
            loader.load_tensor(info.name)
    except AprError:
        _rejected()


def fuzz_apr1(data: bytes) -> None:
    from apr_core.formats.apr1 import read_apr1
    key = _key()
    for kwargs in ({"verify": True}, {"verify": False, "key": key},
                   {"trusted_key": key.public if key is not None else None}):
        try:
            read_apr1(data, **kwargs).payload()
        except AprError:
            _rejected()


def fuzz_msgpack(data: bytes) -> None:
    from apr_core.formats.msgpack_codec import packb, unpackb
    try:
        value = unpackb(data)
    except AprError:
        _rejected()
        return
    # Whatever decodes re-encodes, and the canonical form is a fixed point.
    canonical = packb(value)
    assert packb(unpackb(canonical)) == canonical


def fuzz_gguf(data: bytes) -> None:
    from apr_core.formats.gguf import read_gguf
    try:
        model = read_gguf(data)
        for name, info in model.tensors.items():
            if info.size <= MAX_TENSOR_BYTES:
                model.read_raw(name)
    except AprError:
        _rejected()


def fuzz_safetensors(data: bytes) -> None:
    from apr_core.formats.safetensors import read_safetensors
    try:
        model = read_safetensors(data)
        for name, info in model.tensors.items():
            if info.size <= MAX_TENSOR_BYTES:
                model.read_raw(name)
    except AprError:
        _rejected()


def fuzz_lz4(data: bytes) -> None:
    """First 3 bytes: raw size (LE, < 16 MiB); the rest: one LZ4 block, then framed."""
    from apr_core.codecs import CODEC_LZ4, framing
    from apr_core.codecs import lz4
    if len(data) < 3:
        return
    raw_size = int.from_bytes(data[:3], "little") % (1 << 20)
    block = data[3:]
    for decode in (lz4.decompress, lz4.decompress_block):
        try:
            out = decode(block, raw_size)
            assert len(out) == raw_size
        except AprError:
            _rejected()
    try:
        framing.decode_blocks(block, CODEC_LZ4, raw_size)
    except AprError:
        _rejected()


def fuzz_shards(data: bytes) -> None:
    """`data` is a manifest; its shards are the seed shard files, looked up by name."""
    from apr_core.formats.shards import read_sharded
    shards = _shard_files()
    try:
        read_sharded(data, opener=lambda name: shards.get(name, b"")).close()
    except AprError:
        _rejected()


def fuzz_tokenizer(data: bytes) -> None:
    """Input that parses as a JSON object is a tokenizer.json; the loader and the
    encode/decode round trip may only raise AprError."""
    from apr_core.text.load import tokenizer_from_json
    try:
        obj = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return  # the stdlib's JSON parser is not under test
    if not isinstance(obj, dict):
        return
    try:
        tok = tokenizer_from_json(obj)
        tok.decode(tok.encode("hello 12 [X] héllo"))
    except AprError:
        _rejected()


TARGETS: Dict[str, Callable[[bytes], None]] = {
    "apr2": fuzz_apr2, "apr1": fuzz_apr1, "msgpack": fuzz_msgpack, "gguf": fuzz_gguf,
    "safetensors": fuzz_safetensors, "lz4": fuzz_lz4, "shards": fuzz_shards,
    "tokenizer": fuzz_tokenizer,
}


# Seeds ------------------------------------------------------------------------------

def _tensors():
    from apr_core import dtypes
    from apr_core.tensor import RawTensor
    by = dtypes.BY_NAME
    return [RawTensor("w", by["F32"], (2, 3), bytes(range(24))),
            RawTensor("q", by["Q8_0"], (1, 32), bytes(range(34))),
            RawTensor("s", by["F16"], (), b"\x00\x3c"),
            RawTensor("z", by["U8"], (300,), bytes(300))]


_SHARDS: Dict[str, bytes] = {}
_MANIFEST: List[bytes] = []


def _shard_files() -> Dict[str, bytes]:
    if not _SHARDS:
        from apr_core.formats.shards import write_sharded
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.apr")
            result = write_sharded(path, _tensors(), {"name": "fuzz"}, max_shard_size=600)
            for shard in result.files:
                with open(shard, "rb") as handle:
                    _SHARDS[os.path.basename(shard)] = handle.read()
            with open(path, "rb") as handle:
                _MANIFEST.append(handle.read())
    return _SHARDS


def _apr2_seeds() -> List[bytes]:
    from apr_core.formats.apr2 import read_apr2, write_apr2_bytes
    from apr_core.formats.apr2_encrypt import encrypt_apr2
    from apr_core.formats.apr2_sign import sign_apr2
    meta = {"model_type": "fuzz", "vocab": ["a", "é"], "n": 3}
    plain = write_apr2_bytes(_tensors(), meta)
    seeds = [plain, write_apr2_bytes(_tensors(), meta, compression="lz4"),
             write_apr2_bytes(_tensors(), meta, compression="zstd", alignment=32)]
    with tempfile.TemporaryDirectory() as tmp:
        src, signed, sealed = (os.path.join(tmp, n) for n in ("a.apr", "s.apr", "e.apr"))
        with open(src, "wb") as handle:
            handle.write(seeds[1])
        sign_apr2(src, signed, _key())
        encrypt_apr2(read_apr2(src), sealed, recipient=_key().public)
        for path in (signed, sealed):
            with open(path, "rb") as handle:
                seeds.append(handle.read())
    return seeds


def _apr1_seeds() -> List[bytes]:
    from apr_core.formats.apr1 import write_apr1_bytes
    card = {"name": "fuzz", "version": "1.0", "metrics": {"acc": 0.5}, "intended_users": []}
    payload = bytes(range(256)) * 4
    key = _key()
    return [write_apr1_bytes(payload, "LINEAR_REGRESSION", card),
            write_apr1_bytes(payload, "KMEANS", card, "zstd-l3"),
            write_apr1_bytes(payload, "CUSTOM", card, "lz4", signing_key=key),
            write_apr1_bytes(payload, "PCA", card, "zstd-l19", recipient=key.public)]


def _msgpack_seeds() -> List[bytes]:
    from apr_core.formats.msgpack_codec import ExtType, packb
    return [packb({"name": "m", "n": [1, -1, 2 ** 40, -2 ** 40, 1.5, None, True],
                   "b": b"\x00\x01", "e": ExtType(1, b"abcd"), "s": "é" * 40}),
            packb(list(range(20))), packb({str(i): i for i in range(20)})]


def _gguf_seeds() -> List[bytes]:
    from apr_core.formats.gguf import write_gguf_bytes
    seeds = [write_gguf_bytes(_tensors()[:3], {"general.architecture": "llama", "n": 7,
                                               "toks": ["a", "bc"], "nest": [[1], [2, 3]]})]
    try:  # gguf-py, llama.cpp's own writer
        import numpy as np
        import gguf
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "o.gguf")
            writer = gguf.GGUFWriter(path, "llama")
            writer.add_uint32("llama.block_count", 2)
            writer.add_array("tokenizer.ggml.tokens", ["<s>", "a", "b"])
            writer.add_tensor("w", np.arange(12, dtype=np.float32).reshape(3, 4))
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
            writer.close()
            with open(path, "rb") as handle:
                seeds.append(handle.read())
    except ImportError:
        pass
    try:  # the head of a real model: exercises truncation on real metadata
        from apr_native.real_models import locate
        with open(str(locate("demo")), "rb") as handle:
            seeds.append(handle.read(1 << 16))
    except Exception:  # the real model is optional for seeding
        pass
    return seeds


def _safetensors_seeds() -> List[bytes]:
    from apr_core.formats.safetensors import write_safetensors
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "a.safetensors")
        write_safetensors(path, _tensors()[:1] + _tensors()[2:], {"format": "pt"})
        with open(path, "rb") as handle:
            seeds = [handle.read()]
    try:
        import numpy as np
        from safetensors.numpy import save
        seeds.append(save({"a": np.arange(6, dtype=np.float32).reshape(2, 3),
                           "b": np.zeros((4,), dtype=np.int64)}, {"k": "v"}))
    except ImportError:
        pass
    return seeds


def _lz4_seeds() -> List[bytes]:
    from apr_core.codecs import lz4
    seeds = []
    for raw in (b"", b"a" * 100, bytes(range(256)) * 8, b"abcabcabd" * 50):
        seeds.append(len(raw).to_bytes(3, "little") + lz4.compress_block(raw))
    return seeds


def _tokenizer_seeds() -> List[bytes]:
    from apr_core.text.bpe import BYTE_TO_UNICODE
    vocab = {ch: b for b, ch in BYTE_TO_UNICODE.items()}
    vocab.update({"he": 256, "ll": 257, "hell": 258, "hello": 259})
    data = {
        "model": {"type": "BPE", "vocab": vocab,
                  "merges": ["h e", ["l", "l"], "he ll", "hell o"]},
        "added_tokens": [{"id": 260, "content": "<bos>", "special": True},
                         {"id": 262, "content": "[X]", "special": False, "rstrip": True}],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}]},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<bos>"}},
                                      {"Sequence": {"id": "A"}}],
                           "special_tokens": {"<bos>": {"ids": [260]}}},
        "decoder": {"type": "ByteLevel"},
    }
    small = dict(data, model={"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2},
                              "merges": ["a b"]})
    return [json.dumps(data).encode(), json.dumps(small).encode()]


def _shard_seeds() -> List[bytes]:
    _shard_files()
    return list(_MANIFEST)


SEEDS: Dict[str, Callable[[], List[bytes]]] = {
    "apr2": _apr2_seeds, "apr1": _apr1_seeds, "msgpack": _msgpack_seeds,
    "gguf": _gguf_seeds, "safetensors": _safetensors_seeds, "lz4": _lz4_seeds,
    "shards": _shard_seeds, "tokenizer": _tokenizer_seeds,
}

__all__ = ["TARGETS", "SEEDS", "TEST_SEED"]
