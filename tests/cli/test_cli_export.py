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
