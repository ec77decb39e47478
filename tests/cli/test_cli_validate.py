"""`apr validate`: integrity, --nan-check/--zero-check/--stats/--shapes, the 100-point
--quality score (same Weights/Metadata points for one model in any container) and the
two-file pre/post comparison of seed 000 §4.8.4."""
import numpy as np
import pytest

from apr_core import dtypes
from apr_core.formats.apr2 import write_apr2
from apr_core.conversion.convert import convert
from apr_core.formats.safetensors import write_safetensors
from apr_core.quant import quantize
from apr_core.tensor import RawTensor
from cli_util import apr, apr_json, demo_files  # noqa: F401 (fixture)
from synthetic_models import write_gguf_model

pytestmark = pytest.mark.native
F32 = dtypes.BY_NAME["F32"]


def f32(name, values):
    values = np.asarray(values, np.float32)
    return RawTensor(name, F32, values.shape, values.tobytes())


def small_apr(path, tensors, meta=None):
    write_apr2(str(path), tensors, dict({"apr_version": "2.0.0"}, **(meta or {})))
    return str(path)


@pytest.mark.real_model
def test_quality_score_demo_in_every_container(demo_files):
    """Weights and Metadata are properties of the model: equal in every container.
    Structure/Security score the container: APR has a CRC32 (+10) and 64-byte alignment;
    SafeTensors offsets are not 32-byte aligned (-5); nothing here is signed (-10)."""
    expected = {"gguf": (25, 5), "apr": (25, 15), "apr_lz4": (25, 15), "st": (20, 5),
                "st_f32": (20, 5)}
    for key, (structure, security) in expected.items():
        code, report = apr_json("validate", demo_files[key], "--quality")
        assert code == 0 and report["valid"], key
        q = report["quality"]
        assert q["categories"] == {"structure": structure, "security": security,
                                   "weights": 25, "metadata": 25}, key
        assert q["total"] == structure + security + 50
        assert report["findings"] == [] and report["shape_problems"] == []
    code, out, _ = apr("validate", demo_files["apr"], "--quality")
    assert "Structure (25 pts):     25/25" in out and "TOTAL: 90/100 (EXCELLENT)" in out
    code, report = apr_json("validate", demo_files["apr"], "--quality", "--min-score", "91")
    assert code == 5 and report["quality"]["total"] == 90
    code, _, _ = apr("validate", demo_files["apr"], "--quality", "--min-score", "90")
    assert code == 0


def test_default_validate_checks_structure_only(tmp_path):
    path = small_apr(tmp_path / "m.apr", [f32("a", [1.0, np.nan]), f32("b", [0.0, 0.0])])
    code, report = apr_json("validate", path)
    assert code == 0 and report["valid"] and report["tensors_checked"] == 2
    assert report["findings"] == []
    code, out, _ = apr("validate", path, "--checksum")
    assert code == 0 and "VALID: 2 tensors checked" in out


def test_nan_and_zero_checks(tmp_path):
    path = small_apr(tmp_path / "m.apr", [f32("a", [1.0, np.nan, np.inf]),
                                          f32("b", [0.0, 0.0]), f32("c", [1.0, 2.0])])
    code, report = apr_json("validate", path, "--nan-check")
    assert code == 5 and not report["valid"]
    assert [(f["tensor"], f["check"]) for f in report["findings"]] == [("a", "nan")]
    assert report["findings"][0]["message"] == "1 NaN and 1 Inf values"
    code, report = apr_json("validate", path, "--zero-check")
    assert code == 5   # the NaN is always an error once values are decoded
    assert ("b", "zero", "warn") in [(f["tensor"], f["check"], f["severity"])
                                     for f in report["findings"]]
    clean = small_apr(tmp_path / "z.apr", [f32("b", [0.0, 0.0]), f32("c", [1.0, 2.0])])
    code, out, _ = apr("validate", clean, "--zero-check")
    assert code == 0 and "[WARN] b: every value is 0.0" in out and "VALID" in out


def test_stats_ranges_fail(tmp_path):
    path = small_apr(tmp_path / "m.apr", [f32("encoder.layer_norm.weight", np.full(8, 11.0)),
                                          f32("encoder.layer_norm.bias", np.zeros(8) + 0.1)])
    code, report = apr_json("validate", path, "--stats")
    assert code == 5
    assert [f["message"] for f in report["findings"]] == [
        "LayerNorm weight (gamma) mean 11 outside [0.5, 3.0]"]
    code, report = apr_json("validate", path, "--quality")
    assert code == 5 and report["quality"]["categories"]["weights"] == 20
    assert [c["points"] for c in report["quality"]["checks"] if c["check"] == "ranges"] == [5]


def test_shapes_against_contract_and_vocab(tmp_path):
    good = str(tmp_path / "good.gguf")
    write_gguf_model(good, quant="Q8_0")
    code, report = apr_json("validate", good, "--shapes")
    assert code == 0 and report["shape_problems"] == []
    # n_vocab in the metadata that the embedding does not have (seed 000 §11 #33)
    bad = str(tmp_path / "bad.gguf")
    write_gguf_model(bad, quant="Q8_0")
    out_apr = str(tmp_path / "bad.apr")
    convert(bad, out_apr)
    from apr_core.formats.open import open_model
    with open_model(out_apr) as model:
        meta = dict(model.metadata)
        tensors = [model.read_raw(n) for n in model.tensors]
    meta["gguf"]["kv"]["llama.vocab_size"] = 65
    meta["architecture"]["n_vocab"] = 65
    write_apr2(out_apr, tensors, meta)
    code, report = apr_json("validate", out_apr, "--shapes")
    assert code == 5
    assert any("token_embd.weight" in p and "(65, 64)" in p for p in report["shape_problems"])
    assert "metadata n_vocab 65 does not match token_embd.weight rows 64" in \
        report["shape_problems"]


def test_two_files_pre_post_comparison(tmp_path):
    rng = np.random.RandomState(3)
    weights = {"blk.0.ffn_up.weight": rng.standard_normal((32, 64)).astype(np.float32) * 0.05,
               "blk.0.attn_norm.weight": (1 + 0.1 * rng.standard_normal(64)).astype(np.float32)}
    original = small_apr(tmp_path / "a.apr", [f32(n, v) for n, v in weights.items()])
    q8 = dtypes.BY_NAME["Q8_0"]
    up = weights["blk.0.ffn_up.weight"]
    optimized = small_apr(tmp_path / "b.apr", [
        RawTensor("blk.0.ffn_up.weight", q8, up.shape, quantize(up, q8)),
        f32("blk.0.attn_norm.weight", weights["blk.0.attn_norm.weight"])])
    code, report = apr_json("validate", original, optimized, "--quality")
    assert code == 0 and report["pass"]
    from apr_core.quant import dequantize
    back = dequantize(quantize(up, q8), q8, up.shape).astype(np.float64)
    drift = np.linalg.norm(back - up) / np.linalg.norm(up.astype(np.float64))
    assert report["max_drift"] == pytest.approx(drift, rel=1e-6)
    assert report["mean_drift"] == pytest.approx(drift / 2, rel=1e-6)
    assert report["original"]["params"] == report["optimized"]["params"] == 32 * 64 + 64
    # a pruned copy (half the weights zeroed) fails the gate
    pruned = up.copy()
    pruned[:, ::2] = 0.0
    worse = small_apr(tmp_path / "c.apr", [f32("blk.0.ffn_up.weight", pruned),
                                           f32("blk.0.attn_norm.weight",
                                               weights["blk.0.attn_norm.weight"])])
    code, out, _ = apr("validate", original, worse, "--quality")
    assert code == 5
    assert "VERDICT: ✗ FAIL" in out and "Non-zero params" in out
    # 2,112 values of which 1,024 pruned: 1,088 non-zero, -48 %
    assert out.split("Non-zero params")[1].splitlines()[0].split() == ["2,112", "1,088",
                                                                       "-48%"]
    assert "blk.0.ffn_up.weight:" in out and "⚠ (highest drift)" in out


def test_safetensors_container_validates(tmp_path):
    path = str(tmp_path / "m.safetensors")
    write_safetensors(path, [f32("a", [1.0, 2.0])], {})
    code, report = apr_json("validate", path, "--quality")
    assert code == 0 and report["quality"]["categories"]["security"] == 5
    assert report["quality"]["categories"]["metadata"] == 0
