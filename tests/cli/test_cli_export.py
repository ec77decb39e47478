"""`apr export`: APR (and anything else) to GGUF or SafeTensors through convert().

llama.cpp loading an exported GGUF (seed 000 §11 #61) is test_cli_tooling_and_conversion.py's
test_61; HF sources becoming llama.cpp models is test_export_gguf_hf.py.
"""
import os

import pytest

import synthetic_models as sm
from apr_core.formats.open import open_model
from cli_util import apr, apr_json

pytestmark = pytest.mark.native


def test_export_with_canonical_names_restores_gguf_names(tmp_path):
    src = str(tmp_path / "m.gguf")
    sm.write_gguf_model(src, quant="Q8_0")
    apr_file = str(tmp_path / "m.apr")
    assert apr("import", src, "-o", apr_file, "--names", "apr")[0] == 0
    out = str(tmp_path / "back.gguf")
    code, _, err = apr("export", apr_file, "--format", "gguf", "-o", out)
    assert code == 0, err
    assert open(out, "rb").read() == open(src, "rb").read()


def test_export_quantize_and_safetensors(tmp_path):
    src = str(tmp_path / "m.gguf")
    sm.write_gguf_model(src, quant="Q8_0")
    out = str(tmp_path / "q.gguf")
    code, result = apr_json("export", src, "--format", "gguf", "--quantize", "q4_0", "-o", out)
    assert code == 0, result
    with open_model(out) as model:
        kinds = {info.dtype.name for info in model.tensors.values() if len(info.shape) == 2}
    assert kinds == {"Q4_0"}
    st = str(tmp_path / "m.safetensors")
    code, _, err = apr("export", src, "--format", "safetensors", "--dequantize", "-o", st)
    assert code == 0, err
    with open_model(st) as model:
        assert {i.dtype.name for i in model.tensors.values()} == {"F32"}


def test_export_refusals(tmp_path):
    src = str(tmp_path / "m.gguf")
    sm.write_gguf_model(src)
    out = tmp_path / "exists.gguf"
    out.write_bytes(b"keep me")
    code, _, err = apr("export", src, "--format", "gguf", "-o", str(out))
    assert code == 2 and "--force" in err and out.read_bytes() == b"keep me"
    code, _, err = apr("export", src, "--format", "onnx", "-o", str(tmp_path / "m.onnx"))
    assert code == 4 and "not supported" in err
    assert not os.path.exists(str(tmp_path / "m.onnx"))
    code, _, _ = apr("export", src, "--format", "gguf", "-o", str(out), "--force")
    assert code == 0 and out.read_bytes()[:4] == b"GGUF"


def test_quantized_safetensors_export_loads_in_transformers(tmp_path):
    """A quantized model exported to SafeTensors is float32 by default: transformers loads
    it with every weight present and its logits stay those of the model (Q8_0 error only);
    `--raw-blocks` keeps U8 blocks, which transformers cannot use, and warns."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from safetensors.numpy import load_file
    from torch_checkpoints import tiny_models
    original = tiny_models()["llama"]
    src = tmp_path / "hf"
    original.save_pretrained(str(src), safe_serialization=True)
    quantized = str(tmp_path / "q8.apr")
    code, _, err = apr("convert", str(src), "-o", quantized, "--quantize", "q8_0")
    assert code == 0, err
    with open_model(quantized) as model:
        assert "Q8_0" in {i.dtype.name for i in model.tensors.values()}
    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").write_bytes((src / "config.json").read_bytes())
    code, _, err = apr("export", quantized, "--format", "safetensors",
                       "-o", str(out / "model.safetensors"))
    assert code == 0, err
    assert "raw-blocks" not in err
    arrays = load_file(str(out / "model.safetensors"))
    assert {a.dtype.name for a in arrays.values()} == {"float32"}
    loaded, info = transformers.LlamaForCausalLM.from_pretrained(
        str(out), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and \
        not info["mismatched_keys"]
    ids = torch.tensor([[1, 5, 9, 42, 17, 3]])
    with torch.no_grad():
        want = original(ids).logits
        got = loaded.eval()(ids).logits
    delta = float((want - got).abs().max())
    assert delta < 0.05 * float(want.abs().max()), delta
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "config.json").write_bytes((src / "config.json").read_bytes())
    code, _, err = apr("export", quantized, "--format", "safetensors", "--raw-blocks",
                       "-o", str(raw / "model.safetensors"))
    assert code == 0 and "warning: --raw-blocks" in err, err
    assert "uint8" in {a.dtype.name for a in load_file(str(raw / "model.safetensors")).values()}
    with pytest.raises(Exception):
        transformers.LlamaForCausalLM.from_pretrained(str(raw))
