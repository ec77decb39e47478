"""`apr import`: SafeTensors (file, HF directory, sharded), GGUF and PyTorch into APR, with
the name maps of seed 000 §10.8 and the inline validation of §10.10.

Oracles: transformers' logits for models imported from PyTorch checkpoints (the imported
APR file runs in apr's runtime and gives the same logits), the source files' own bytes
for everything copied, and hand-made expectations for name mapping and refusals.
"""
import json
import os

import numpy as np
import pytest

import synthetic_models as sm
from apr_core import dtypes
from apr_core.formats.open import open_model
from apr_core.formats.safetensors import write_safetensors
from apr_core.tensor import RawTensor
from cli_util import apr, apr_json
from torch_checkpoints import torch_checkpoints  # noqa: F401  (fixture)

pytestmark = pytest.mark.native
F32 = dtypes.BY_NAME["F32"]


def _raw(name, values):
    values = np.asarray(values, dtype="<f4")
    return RawTensor(name, F32, values.shape, values.tobytes())


def whisper_tensors(ln_mean=1.0, rename=None):
    """A tiny Whisper-shaped SafeTensors state (HF names), one layer per side."""
    rng = np.random.RandomState(0)
    names = ["model.encoder.conv1.weight", "model.encoder.conv1.bias",
             "model.encoder.embed_positions.weight", "model.encoder.layer_norm.weight",
             "model.encoder.layer_norm.bias", "model.encoder.layers.0.self_attn.q_proj.weight",
             "model.encoder.layers.0.fc1.weight", "model.decoder.embed_tokens.weight",
             "model.decoder.layer_norm.weight", "model.decoder.layer_norm.bias",
             "model.decoder.layers.0.encoder_attn_layer_norm.weight",
             "model.decoder.layers.0.encoder_attn.k_proj.weight"]
    out = []
    for name in names:
        if name.endswith("layer_norm.weight"):
            values = ln_mean + 0.01 * rng.randn(8)
        elif name.endswith("bias"):
            values = 0.01 * rng.randn(8)
        else:
            values = 0.05 * rng.randn(8, 8)
        out.append(_raw(rename.get(name, name) if rename else name, values))
    return out


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize("variant", ["_dir", "", "_legacy"])
def test_pytorch_import_runs_like_transformers(torch_checkpoints, tmp_path, arch,  # noqa: F811
                                               variant):
    """A PyTorch checkpoint imported to APR: every tensor is torch's, and for an HF
    directory (config.json beside pytorch_model.bin) the APR file runs with transformers'
    logits."""
    import torch
    from apr_core.model.transformer import Transformer
    import torch_checkpoints as tc
    out = str(tmp_path / "m.apr")
    code, result = apr_json("import", torch_checkpoints[arch + variant], "-o", out)
    assert code == 0, result
    assert result["architecture"] == arch
    reference = torch_checkpoints[arch + ":sd"]
    with open_model(out) as model:
        assert sorted(model.tensors) == sorted(reference)
        for name, tensor in reference.items():
            assert model.read_raw(name).data == tensor.contiguous().numpy().tobytes(), name
        assert model.metadata["provenance"]["source_format"] == "pytorch"
    if variant != "_dir":
        return
    ids = [1, 5, 9, 33, 2]
    hf = tc.tiny_models()[arch]
    hf.load_state_dict(reference)
    with torch.no_grad():
        want = hf(torch.tensor([ids])).logits[0].float().numpy()
    got = Transformer.from_path(out).forward(ids)
    assert float(np.abs(got - want).max()) <= 1e-3


def test_safetensors_dir_and_gguf_keep_bytes(tmp_path):
    sm.write_hf_model(tmp_path / "hf", "qwen2")
    sm.write_gguf_model(tmp_path / "m.gguf", quant="Q8_0")
    for source in (tmp_path / "hf", tmp_path / "m.gguf"):
        out = str(tmp_path / (source.name + ".apr"))
        code, _, err = apr("import", str(source), "-o", out)
        assert code == 0, err
        with open_model(str(source)) as src, open_model(out) as dst:
            assert sorted(src.tensors) == sorted(dst.tensors)
            for name in src.tensors:
                assert src.read_raw(name) == dst.read_raw(name), name
    with open_model(str(tmp_path / "hf.apr")) as model:
        assert model.metadata["hf_config"]["model_type"] == "qwen2"
        assert model.metadata["model_type"] == "qwen2"


def test_canonical_names_and_unknown_names(tmp_path):
    src = str(tmp_path / "whisper.safetensors")
    write_safetensors(src, whisper_tensors())
    out = str(tmp_path / "w.apr")
    code, _, err = apr("import", src, "-o", out, "--arch", "whisper", "--names", "apr")
    assert code == 0, err
    with open_model(out) as model:
        names = set(model.tensors)
        assert model.metadata["name_source"] == "hf"
    assert {"encoder.conv1.weight", "encoder.positional_embedding", "decoder.token_embedding",
            "decoder.layers.0.encoder_attn_layer_norm.weight"} <= names
    assert not any(n.startswith("model.") for n in names)
    renamed = str(tmp_path / "renamed.safetensors")
    write_safetensors(renamed, whisper_tensors(rename={
        "model.encoder.layers.0.fc1.weight": "model.encoder.blocks.0.fc1.weight"}))
    code, _, err = apr("import", renamed, "-o", str(tmp_path / "r.apr"), "--arch", "whisper")
    assert code == 5 and "model.encoder.blocks.0.fc1.weight" in err
    code, _, err = apr("import", renamed, "-o", str(tmp_path / "r.apr"), "--arch", "whisper",
                       "--force")
    assert code == 0 and "not in the whisper name map" in err


def test_inline_validation_aborts_unless_forced(tmp_path):
    src = str(tmp_path / "bad.safetensors")
    write_safetensors(src, whisper_tensors(ln_mean=11.0))
    out = str(tmp_path / "bad.apr")
    code, _, err = apr("import", src, "-o", out, "--arch", "whisper")
    assert code == 5 and "layer_norm.weight" in err and "mean 11" in err
    assert not os.path.exists(out)
    code, _, err = apr("import", src, "-o", out, "--arch", "whisper", "--force")
    assert code == 0 and os.path.exists(out)
    assert "warning: model.encoder.layer_norm.weight: mean 11" in err   # forced, not hidden
    nan = [_raw("model.encoder.conv1.weight", [[float("nan"), 0.0]])]
    write_safetensors(src, nan)
    code, _, err = apr("import", src, "-o", str(tmp_path / "nan.apr"), "--arch", "whisper")
    assert code == 5 and "NaN" in err            # F-ROSETTA-005: NaN halts the import
    code, _, err = apr("import", src, "-o", str(tmp_path / "nan.apr"), "--arch", "whisper",
                       "--force")
    assert code == 0 and os.path.exists(str(tmp_path / "nan.apr"))


def test_architecture_refusals(tmp_path):
    sm.write_gguf_model(tmp_path / "m.gguf")
    code, _, err = apr("import", str(tmp_path / "m.gguf"), "-o", str(tmp_path / "x.apr"),
                       "--arch", "qwen2")
    assert code == 5 and "architecture mismatch" in err
    odd = str(tmp_path / "odd.safetensors")
    write_safetensors(odd, [_raw("foo.bar", [1.0, 2.0])])
    code, _, err = apr("import", odd, "-o", str(tmp_path / "odd.apr"))
    assert code == 5 and "pass --arch" in err


def test_provenance_license_and_checksum(tmp_path):
    sm.write_hf_model(tmp_path / "hf", "llama")
    (tmp_path / "hf" / "README.md").write_text("---\nlicense: cc-by-nc-4.0\n---\n# card\n")
    code, result = apr_json("import", str(tmp_path / "hf"), "-o", str(tmp_path / "a.apr"))
    assert code == 0
    assert any("restricts commercial use" in w for w in result["warnings"])
    with open_model(str(tmp_path / "a.apr")) as model:
        assert model.metadata["license"] == "cc-by-nc-4.0"
    single = str(tmp_path / "hf" / "model.safetensors")
    import hashlib
    digest = hashlib.sha256(open(single, "rb").read()).hexdigest()
    code, _, err = apr("import", single, "-o", str(tmp_path / "b.apr"), "--sha256", digest)
    assert code == 0, err
    code, _, err = apr("import", single, "-o", str(tmp_path / "c.apr"), "--sha256", "0" * 64)
    assert code == 5 and "E004" in err


def test_import_json_is_parseable(tmp_path):
    sm.write_gguf_model(tmp_path / "m.gguf")
    code, out, _ = apr("import", str(tmp_path / "m.gguf"), "-o", str(tmp_path / "m.apr"),
                       "--json")
    assert code == 0 and json.loads(out)["tensors"] == 21
