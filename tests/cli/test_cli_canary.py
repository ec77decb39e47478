"""`apr canary create|check` (seed 000 §4.14): thresholds of §4.14.3 on real files."""
import json
import os
import shutil

import numpy as np
import pytest

from apr_core import dtypes
from apr_core.formats.apr2 import write_apr2
from apr_core.tensor import RawTensor
from cli_util import apr, apr_json

pytestmark = pytest.mark.native
F32 = dtypes.BY_NAME["F32"]


def _write(path, tensors):
    write_apr2(str(path), [_raw(n, v) for n, v in tensors.items()], {"model_type": "t"})
    return str(path)


def _raw(name, values):
    values = np.asarray(values, dtype="<f4")
    return RawTensor(name, F32, values.shape, values.tobytes())


@pytest.fixture
def base(tmp_path):
    rng = np.random.RandomState(0)
    z = rng.randn(50, 20)
    tensors = {"norm.weight": 1.0 + 0.1 * rng.randn(1000),
               "w": 0.5 + (z - z.mean()) / z.std()}   # mean 0.5, std 1 (to float32 rounding)
    path = _write(tmp_path / "base.apr", tensors)
    canary = str(tmp_path / "canary.json")
    code, _, err = apr("canary", "create", path, "-o", canary)
    assert code == 0, err
    return tmp_path, tensors, canary


def _check(tmp_path, tensors, canary):
    path = _write(tmp_path / "new.apr", tensors)
    return apr_json("canary", "check", path, "--canary", canary)


def test_canary_file_format(base):
    _, tensors, canary = base
    data = json.load(open(canary))
    assert data["tensor_count"] == 2 and set(data["tensors"]) == set(tensors)
    entry = data["tensors"]["w"]
    values = tensors["w"].astype(np.float32).astype(np.float64)
    assert entry["shape"] == [50, 20] and entry["count"] == 1000
    assert entry["mean"] == pytest.approx(values.mean(), rel=1e-12)
    assert entry["std"] == pytest.approx(values.std(), rel=1e-9)
    assert entry["min"] == pytest.approx(values.min()) and entry["max"] == pytest.approx(
        values.max())


def test_unchanged_model_passes(base):
    tmp_path, tensors, canary = base
    code, result = _check(tmp_path, tensors, canary)
    assert code == 0 and result["passed"]


@pytest.mark.parametrize("change,reason", [
    (lambda t: dict(t, w=t["w"] + 0.0555), "Mean drift 11"),      # 0.5 -> 0.5555: 11 %
    (lambda t: dict(t, w=0.5 + (t["w"] - 0.5) * 1.21), "Std drift 21"),
    (lambda t: dict(t, w=t["w"][:, :19]), "shape"),
    (lambda t: {"w": t["w"]}, "missing"),
    (lambda t: dict(t, **{"norm.weight": t["norm.weight"] * 11}), "Mean drift"),
])
def test_regressions_fail(base, change, reason):
    tmp_path, tensors, canary = base
    code, result = _check(tmp_path, change(tensors), canary)
    assert code == 5 and not result["passed"]
    assert any(reason in r for row in result["tensors"] for r in row["reasons"]), result


@pytest.mark.parametrize("change", [
    lambda t: dict(t, w=t["w"] + 0.045),                        # 9 % mean drift
    lambda t: dict(t, w=0.5 + (t["w"] - 0.5) * 1.19),           # 19 % std drift
])
def test_drift_inside_thresholds_passes(base, change):
    tmp_path, tensors, canary = base
    code, result = _check(tmp_path, change(tensors), canary)
    assert code == 0, result


def test_convert_canary_gate(base):
    """§4.14.4: `apr convert --canary` removes an output that fails, keeps one that passes,
    and --force keeps a failing one with a warning."""
    tmp_path, tensors, _ = base
    # a weight matrix name, so pruning applies to it
    src = _write(tmp_path / "src.apr", {"fc1.weight": tensors["w"],
                                        "norm.weight": tensors["norm.weight"]})
    canary = str(tmp_path / "gate.json")
    assert apr("canary", "create", src, "-o", canary)[0] == 0
    ok = str(tmp_path / "ok.apr")
    assert apr("convert", src, "-o", ok, "--precision", "f16", "--canary", canary)[0] == 0
    assert os.path.exists(ok)
    bad = str(tmp_path / "bad.apr")
    code, _, err = apr("convert", src, "-o", bad, "--prune", "0.9", "--canary", canary)
    assert code == 5 and "canary check failed" in err and not os.path.exists(bad)
    code, _, err = apr("convert", src, "-o", bad, "--prune", "0.9", "--canary", canary,
                       "--force")
    assert code == 0 and "warning: canary check failed" in err and os.path.exists(bad)


CACHE = os.environ.get("APR_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "apr")
# LLaMA-2's tokenizer.json (32k tokens) loads in a fraction of a second; Qwen's takes ~8 s.
TOKENIZER_DIR = os.path.join(CACHE, "tokenizers", "llama2")


@pytest.mark.oracle
def test_input_canary_survives_import(tmp_path):
    """A tiny random-weight LLaMA HF directory with LLaMA-2's real tokenizer.json: a prompt's
    greedy completion recorded from the directory is reproduced token for token by its
    `apr import` (weights, config and tokenizer travel into the APR file), and a canary
    holding a different completion fails."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if not os.path.isfile(os.path.join(TOKENIZER_DIR, "tokenizer.json")):
        pytest.skip("llama2 tokenizer.json not cached (run scripts/fetch_tokenizer_vectors.sh)")
    with open(os.path.join(TOKENIZER_DIR, "tokenizer.json"), encoding="utf-8") as handle:
        vocab = json.load(handle)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(vocab["model"]["vocab"]) + len(vocab.get("added_tokens", [])),
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True)
    hf = tmp_path / "hf"
    transformers.LlamaForCausalLM(config).save_pretrained(str(hf), safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER_DIR, name), str(hf / name))
    canary = str(tmp_path / "c.json")
    code, _, err = apr("canary", "create", str(hf), "-o", canary, "--input", "The capital",
                       "--max-tokens", "4")
    assert code == 0, err
    data = json.load(open(canary))
    assert len(data["inputs"][0]["tokens"]) == 4
    out = str(tmp_path / "m.apr")
    assert apr("import", str(hf), "-o", out)[0] == 0
    code, result = apr_json("canary", "check", out, "--canary", canary)
    assert code == 0 and result["inputs"][0]["token_accuracy"] == 1.0, result
    data["inputs"][0]["tokens"][-1] += 1
    json.dump(data, open(canary, "w"))
    code, result = apr_json("canary", "check", out, "--canary", canary)
    assert code == 5 and result["inputs"][0]["token_accuracy"] == 0.75
