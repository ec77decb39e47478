"""`apr diff`: identity is exactly 100 %, a changed tensor is found with numpy's numbers,
one model in different containers is identical, names map across GGUF/HF conventions."""
import json

import numpy as np
import pytest

from apr_core import dtypes
from apr_core.formats.apr2 import write_apr2
from apr_core.formats.gguf import write_gguf
from apr_core.formats.safetensors import write_safetensors
from apr_core.tensor import RawTensor
from cli_util import apr, apr_json, demo_files  # noqa: F401 (fixture)

pytestmark = pytest.mark.native
F32 = dtypes.BY_NAME["F32"]


def f32(name, values):
    values = np.asarray(values, np.float32)
    return RawTensor(name, F32, values.shape, values.tobytes())


def weights(seed=0):
    rng = np.random.RandomState(seed)
    return {"blk.0.attn_q.weight": rng.standard_normal((8, 16)).astype(np.float32),
            "blk.0.attn_norm.weight": (1 + rng.standard_normal(16)).astype(np.float32),
            "token_embd.weight": rng.standard_normal((32, 16)).astype(np.float32)}


def write(path, tensors, meta=None):
    write_apr2(str(path), [f32(n, v) for n, v in tensors.items()],
               dict({"apr_version": "2.0.0"}, **(meta or {})))
    return str(path)


def test_identity_is_100_percent(tmp_path):
    a = write(tmp_path / "a.apr", weights())
    code, report = apr_json("diff", a, a)
    assert code == 0 and report["similarity"] == 100.0
    assert (report["max_delta"], report["l2"], report["changed"]) == (0.0, 0.0, 0)
    code, out, _ = apr("diff", a, a)
    assert "Similarity: 100.0%" in out and "Max delta 0, L2 distance 0" in out


def test_changed_tensor_numbers_match_numpy(tmp_path):
    w = weights()
    changed = dict(w)
    changed["blk.0.attn_q.weight"] = w["blk.0.attn_q.weight"].copy()
    changed["blk.0.attn_q.weight"][2, 3] += 0.5
    changed["blk.0.attn_q.weight"][5] *= -1
    a, b = write(tmp_path / "a.apr", w), write(tmp_path / "b.apr", changed)
    code, report = apr_json("diff", a, b)
    assert code == 0 and report["changed"] == 1
    x = w["blk.0.attn_q.weight"].astype(np.float64).ravel()
    y = changed["blk.0.attn_q.weight"].astype(np.float64).ravel()
    row = next(r for r in report["tensors"] if r["a"] == "blk.0.attn_q.weight")
    assert row["status"] == "DRIFT"
    assert row["max_delta"] == pytest.approx(np.abs(x - y).max(), rel=1e-6)
    assert row["l2"] == pytest.approx(np.linalg.norm(x - y), rel=1e-6)
    assert row["drift"] == pytest.approx(np.linalg.norm(x - y) / np.linalg.norm(x), rel=1e-6)
    cosine = x @ y / np.linalg.norm(x) / np.linalg.norm(y)
    assert row["cosine"] == pytest.approx(cosine, rel=1e-9)
    n = {k: v.size for k, v in w.items()}
    expected = 100 * (n["blk.0.attn_q.weight"] * max(cosine, 0) + n["token_embd.weight"] +
                      n["blk.0.attn_norm.weight"]) / sum(n.values())
    assert report["similarity"] == pytest.approx(expected, rel=1e-9)
    assert report["l2"] == pytest.approx(np.linalg.norm(x - y), rel=1e-6)


def test_missing_and_reshaped_tensors_and_vocab(tmp_path):
    w = weights()
    other = {"blk.0.attn_q.weight": w["blk.0.attn_q.weight"].reshape(16, 8),
             "token_embd.weight": w["token_embd.weight"], "extra.weight": np.ones(4)}
    a = write(tmp_path / "a.apr", w, {"vocab": ["a", "b", "c", "d"]})
    b = write(tmp_path / "b.apr", other, {"vocab": ["a", "c", "d", "e", "f"]})
    code, report = apr_json("diff", a, b)
    assert report["only_in_a"] == ["blk.0.attn_norm.weight"]
    assert report["only_in_b"] == ["extra.weight"]
    shape = next(r for r in report["tensors"] if r["a"] == "blk.0.attn_q.weight")
    assert shape["status"] == "SHAPE"
    assert report["similarity"] == pytest.approx(100 * 512 / (512 + 16 + 4 + 128))
    assert report["vocab"] == {"available": True, "size_a": 4, "size_b": 5, "added": 2,
                               "removed": 1, "reordered": 2}
    code, out, _ = apr("diff", a, b)
    assert "Vocab Changes: Added 2 tokens, Removed 1 tokens" in out
    assert "Only in A: 1 tensor(s): blk.0.attn_norm.weight" in out


@pytest.mark.real_model
def test_one_model_in_every_container_is_identical(demo_files):
    """GGUF vs APR (LZ4) vs SafeTensors packed: same bytes; vs SafeTensors F32: decoded."""
    for key in ("apr_lz4", "st", "st_f32"):
        code, report = apr_json("diff", demo_files["gguf"], demo_files[key])
        assert code == 0
        assert report["similarity"] == 100.0 and report["max_delta"] == 0.0, key
        assert report["compared"] == 272 and report["changed"] == 0
        assert report["vocab"]["added"] == report["vocab"]["removed"] == 0


def hf_names(gguf_names):
    from apr_core import name_maps
    return name_maps.name_map("llama").translate(gguf_names, "gguf", "hf")


def test_tensor_mapping_gguf_vs_hf_drift_report(tmp_path):
    """APR (GGUF names) vs SafeTensors (HF names) of the same weights, one tensor drifted."""
    w = weights()
    w["output_norm.weight"] = np.ones(16, np.float32)
    names = hf_names(list(w))
    assert names["blk.0.attn_q.weight"] == "model.layers.0.self_attn.q_proj.weight"
    a = write(tmp_path / "m.apr", w)
    hf = {names[k]: v for k, v in w.items()}
    hf["model.layers.0.input_layernorm.weight"] = hf["model.layers.0.input_layernorm.weight"] \
        + np.float32(10.2)
    st_path = str(tmp_path / "source.safetensors")
    write_safetensors(st_path, [f32(n, v) for n, v in hf.items()], {})
    code, report = apr_json("diff", a, st_path)
    assert report["compared"] == 0 and report["similarity"] == 0.0  # names differ
    code, report = apr_json("diff", a, st_path, "--tensor-mapping")
    assert code == 0 and report["compared"] == 4 and report["changed"] == 1
    code, out, _ = apr("diff", a, st_path, "--tensor-mapping")
    assert "blk.0.attn_q.weight -> model.layers.0.self_attn.q_proj.weight: MATCH " \
           "(delta < 1e-06)" in out
    drift = [line for line in out.splitlines() if "DRIFT" in line]
    assert len(drift) == 1 and drift[0].startswith(
        "blk.0.attn_norm.weight -> model.layers.0.input_layernorm.weight: DRIFT (delta = 10.2)")
    assert drift[0].endswith("!!!")
    # an explicit mapping file
    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps({"blk.0.attn_q.weight":
                                   "model.layers.0.self_attn.q_proj.weight"}))
    code, report = apr_json("diff", a, st_path, "--tensor-mapping", str(mapping))
    assert report["compared"] == 1 and report["changed"] == 0
    mapping.write_text("{not json")
    code, _, err = apr("diff", a, st_path, "--tensor-mapping", str(mapping))
    assert code == 4 and "E001" in err and "mapping" in err


def test_gguf_quantized_vs_f32_reports_quantization_drift(tmp_path):
    from apr_core.quant import dequantize, quantize
    q8 = dtypes.BY_NAME["Q8_0"]
    w = np.random.RandomState(5).standard_normal((8, 64)).astype(np.float32)
    a = write(tmp_path / "a.apr", {"blk.0.attn_q.weight": w})
    g = str(tmp_path / "b.gguf")
    write_gguf(g, [RawTensor("blk.0.attn_q.weight", q8, w.shape, quantize(w, q8))],
               {"general.architecture": "llama"})
    code, report = apr_json("diff", a, g)
    back = dequantize(quantize(w, q8), q8, w.shape)
    row = report["tensors"][0]
    assert (row["dtype_a"], row["dtype_b"], row["status"]) == ("F32", "Q8_0", "DRIFT")
    assert row["max_delta"] == pytest.approx(float(np.abs(back - w).max()), rel=1e-6)


@pytest.mark.parametrize("family,extra", [("llama", {}), ("qwen2", {}),
                                          ("gemma3", {"hidden_activation": "gelu_pytorch_tanh"}),
                                          ("gpt2", {"hidden_act": "gelu_new"})])
def test_hf_directory_vs_its_gguf_export_is_identical(tmp_path, family, extra):
    """llama.cpp's layout (LLaMA's permuted Q/K rows, Gemma's norm offset, GPT-2's
    transposed Conv1D weights) is undone by laying the HF side out the same way."""
    from apr_core.conversion.convert import convert
    from synthetic_models import write_hf_model
    hf = tmp_path / "hf"
    write_hf_model(hf, family, **extra)
    gguf = str(tmp_path / "model.gguf")
    convert(str(hf), gguf)
    for a, b in ((str(hf), gguf), (gguf, str(hf))):
        code, report = apr_json("diff", a, b, "--tensor-mapping")
        assert code == 0 and report["changed"] == 0, [
            r["a"] for r in report["tensors"] if r["status"] != "MATCH"]
        assert report["similarity"] == 100.0 and not report["only_in_a"] + report["only_in_b"]
        names = {r["a"] for r in report["tensors"]} | {r["b"] for r in report["tensors"]}
        assert "model.layers.0.self_attn.q_proj.weight" in names or family == "gpt2"
