"""`apr inspect`, `apr tensors` (--stats, --hist, --filter), `apr tree`, `apr hex` on the
demo model and its conversions: the same numbers whichever format holds the tensors."""
import json
import os

import numpy as np
import pytest

from apr_core import dtypes
from apr_core.formats.apr2 import write_apr2
from apr_core.formats.gguf import read_gguf
from apr_core.quant import dequantize
from apr_core.tensor import RawTensor
from cli_util import apr, apr_json, demo_files  # noqa: F401 (fixture)

pytestmark = pytest.mark.native
F32 = dtypes.BY_NAME["F32"]


@pytest.mark.real_model
def test_inspect_json_header_vocab(demo_files):
    code, info = apr_json("inspect", demo_files["gguf"])
    assert code == 0
    assert (info["format"], info["version"], info["tensor_count"]) == ("gguf", 3, 272)
    assert info["parameters"] == 134515008 and info["vocab_size"] == 49152
    assert info["family"] == "llama" and info["dtypes"] == {"F32": 61, "Q4_1": 210, "Q8_0": 1}
    code, apr_info = apr_json("inspect", demo_files["apr"], "--header")
    assert code == 0 and "metadata" not in apr_info
    assert apr_info["magic"] == "APR2" and apr_info["header_size"] == 32
    assert apr_info["version"] == "2.0" and "GGUF_SRC" in apr_info["flags"]
    assert apr_info["metadata_offset"] == 32
    assert apr_info["index_offset"] == 32 + apr_info["metadata_size"]
    assert apr_info["data_offset"] % 64 == 0 and apr_info["alignment"] == 64
    # the same model facts from every container
    for key in ("apr", "apr_lz4", "st"):
        code, other = apr_json("inspect", demo_files[key])
        assert code == 0
        for field in ("tensor_count", "parameters", "vocab_size", "family"):
            assert other[field] == info[field], (key, field)
    code, vocab = apr_json("inspect", demo_files["apr"], "--vocab")
    tokens = read_gguf(demo_files["gguf"]).metadata["tokenizer.ggml.tokens"]
    assert vocab["vocab"] == tokens[:20]
    code, full = apr_json("inspect", demo_files["gguf"], "--vocab", "--full")
    assert full["vocab"] == tokens and len(full["tensors"]) == 272


@pytest.mark.real_model
def test_inspect_text(demo_files):
    code, out, err = apr("inspect", demo_files["apr_lz4"])
    assert code == 0, err
    assert "Parameters:  134,515,008" in out and "Vocab Size:  49,152" in out
    assert "COMPRESSED" in out and "Checksum:    0x" in out
    code, out, _ = apr("inspect", demo_files["gguf"], "--vocab")
    assert "Vocabulary (20 shown):" in out and "'<|im_start|>'" in out


@pytest.mark.real_model
def test_tensors_stats_identical_across_formats(demo_files):
    """APR, APR+LZ4, SafeTensors (packed) and SafeTensors (F32) of the demo: every
    statistic of every tensor equal to the last bit; oracle: numpy on gguf-py's
    dequantization of two tensors."""
    by_format = {}
    for key in ("gguf", "apr", "apr_lz4", "st", "st_f32"):
        code, rows = apr_json("tensors", demo_files[key], "--stats")
        assert code == 0 and len(rows) == 272
        by_format[key] = {r["name"]: r for r in rows}
    ref = by_format["gguf"]
    for key, rows in by_format.items():
        for name, row in rows.items():
            expected = dict(ref[name])
            if key == "st_f32":
                expected["dtype"] = "F32"
            assert row == expected, (key, name)
    assert all(r["status"] == "OK" for r in ref.values())
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(demo_files["gguf"])
    for tensor in reader.tensors:
        if tensor.name in ("blk.7.ffn_up.weight", "token_embd.weight"):
            values = gguf.dequantize(tensor.data, tensor.tensor_type).astype(np.float64)
            row = ref[tensor.name]
            assert row["mean"] == pytest.approx(values.mean(), rel=1e-9, abs=1e-12)
            assert row["std"] == pytest.approx(values.std(), rel=1e-9)
            assert (row["min"], row["max"]) == (values.min(), values.max())


@pytest.mark.real_model
def test_tensors_filter_and_hist(demo_files):
    code, rows = apr_json("tensors", demo_files["apr"], "--filter", "blk.1[0-9].attn_q*")
    assert code == 0 and sorted(r["name"] for r in rows) == \
        sorted("blk.{}.attn_q.weight".format(i) for i in range(10, 20))
    assert rows[0]["shape"] == [576, 576] and rows[0]["dtype"] == "Q4_1"
    code, hist = apr_json("tensors", demo_files["gguf"], "--hist", "blk.0.ffn_norm.weight",
                          "--bins", "10")
    tensor = next(t for t in read_gguf(demo_files["gguf"]).tensors.values()
                  if t.name == "blk.0.ffn_norm.weight")
    with read_gguf(demo_files["gguf"]) as model:
        values = dequantize(model.read_raw(tensor.name).data, tensor.dtype, tensor.shape)
    counts, edges = np.histogram(values.astype(np.float64), bins=10)
    assert hist["counts"] == counts.tolist() and hist["edges"] == edges.tolist()
    code, out, _ = apr("tensors", demo_files["gguf"], "--hist", "blk.0.ffn_norm.weight")
    assert code == 0 and "Distribution: blk.0.ffn_norm.weight (shape: [576], dtype: F32)" in out
    assert "█" in out and "{:.4g}".format(float(values.max())) in out
    code, _, err = apr("tensors", demo_files["gguf"], "--hist", "blk.0.ffn_nrm.weight")
    assert code == 2 and "E010" in err and "blk.0.ffn_norm.weight" in err


def test_hist_flags_the_seed_failure_mode(tmp_path):
    """seed 000 §10.11: a LayerNorm weight with mean 11 is visible in `tensors --hist`."""
    path = str(tmp_path / "m.apr")
    values = (11.2 + 0.2 * np.random.RandomState(0).standard_normal(384)).astype(np.float32)
    write_apr2(path, [RawTensor("encoder.layer_norm.weight", F32, (384,), values.tobytes())],
               {"apr_version": "2.0.0"})
    code, out, _ = apr("tensors", path, "--hist", "encoder.layer_norm.weight")
    assert code == 0
    assert "ANOMALY (ERROR): LayerNorm weight (gamma) mean {:.4g} outside [0.5, 3.0]".format(
        values.astype(np.float64).mean()) in out


@pytest.mark.real_model
def test_tree_text_mermaid_json(demo_files):
    code, out, _ = apr("tree", demo_files["apr"])
    assert code == 0
    assert "{i} x30 [0..29]" in out and "Q4_1 [576, 1536]" in out
    code, tree = apr_json("tree", demo_files["gguf"])
    blk = next(c for c in tree["children"] if c["name"] == "blk")
    layer = blk["children"][0]
    assert (layer["count"], layer["range"]) == (30, [0, 29])
    assert sorted(c["name"] for c in layer["children"]) == sorted(
        ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate",
         "ffn_up", "ffn_down"])
    code, out, _ = apr("tree", demo_files["gguf"], "--format", "mermaid")
    lines = out.splitlines()
    assert lines[0] == "graph TD"
    nodes = [line for line in lines if '["' in line]
    edges = [line for line in lines if "-->" in line]
    assert len(edges) == len(nodes) - 1   # a tree: one edge per node but the root
    # root, token_embd + weight, output_norm + weight, blk, {i}, 9 roles + their weights
    assert len(nodes) == 1 + 2 + 2 + 1 + 1 + 9 * 2


@pytest.mark.real_model
def test_hex_tensor_shows_stored_bytes_and_values(demo_files):
    code, report = apr_json("hex", demo_files["apr"], "--tensor", "blk.2.attn_v.weight",
                            "--limit", "40")
    with read_gguf(demo_files["gguf"]) as model:
        raw = model.read_raw("blk.2.attn_v.weight")
    assert code == 0 and bytes.fromhex(report["hex"]) == raw.data[:40]
    assert report["dtype"] == "Q4_1" and report["shape"] == [192, 576]
    values = dequantize(raw.data, raw.dtype, raw.shape).reshape(-1)[:16]
    assert report["values"] == [float(v) for v in values]
    code, out, _ = apr("hex", demo_files["apr"], "--tensor", "blk.2.attn_v.weight")
    assert out.splitlines()[1].startswith("00000000  " + " ".join(
        "{:02x}".format(b) for b in raw.data[:8]))


def test_inspect_reads_only_header_and_index(tmp_path, monkeypatch):
    """The CLI's inspect never reads a payload: count the bytes its FileSource reads."""
    from apr_core import io as apr_io
    path = str(tmp_path / "big.apr")
    payload = np.arange(1 << 20, dtype=np.float32)
    write_apr2(path, [RawTensor("w{}".format(i), F32, (1 << 20,), payload.tobytes())
                      for i in range(8)], {"apr_version": "2.0.0"})
    read = []
    original = apr_io.FileSource._read
    monkeypatch.setattr(apr_io.FileSource, "_read",
                        lambda self, offset, length: read.append(length) or
                        original(self, offset, length))
    for args in (("inspect",), ("inspect", "--header"), ("tensors",), ("tree",)):
        read.clear()
        code, _, _ = apr(args[0], path, *args[1:])
        assert code == 0 and sum(read) < 4096, (args, sum(read))
    assert os.path.getsize(path) > 32 << 20
    json.dumps(read)


def test_config_output_format_json(tmp_path):
    """seed 000 §8: `output_format = "json"` in config.toml makes every report JSON."""
    pytest.importorskip("apr_native.config")
    config = tmp_path / "config.toml"
    config.write_text('[defaults]\noutput_format = "json"\n')
    path = str(tmp_path / "m.apr")
    write_apr2(path, [RawTensor("w", F32, (2,), np.ones(2, np.float32).tobytes())], {})
    for args in (("inspect",), ("tensors", "--stats"), ("validate",), ("lint",), ("tree",)):
        code, out, _ = apr(args[0], path, *args[1:], env={"APR_CONFIG": str(config)})
        assert code == 0 and json.loads(out), args
    code, out, _ = apr("inspect", path)
    assert code == 0 and out.startswith("=== ")
