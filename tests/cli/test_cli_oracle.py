"""`apr oracle`: model files checked against their family contracts (contracts/*.yaml)."""
import pytest

import synthetic_models as sm
from apr_core import dtypes
from apr_core.formats.apr2 import write_apr2
from apr_core.formats.open import open_model
from apr_core.tensor import RawTensor
from cli_util import apr, apr_json

pytestmark = pytest.mark.native


def test_synthetic_models_pass(tmp_path):
    sm.write_hf_model(tmp_path / "hf", "qwen2")
    sm.write_gguf_model(tmp_path / "m.gguf")
    for path, family, source in ((tmp_path / "hf", "qwen2", "hf"),
                                 (tmp_path / "m.gguf", "llama", "gguf")):
        code, result = apr_json("oracle", str(path))
        assert code == 0 and result["passed"], result
        assert result["family"] == family and result["source"] == source


@pytest.mark.real_model
def test_demo_model_is_the_smollm2_variant(smollm2_gguf):
    code, result = apr_json("oracle", smollm2_gguf, "--family", "llama")
    assert code == 0 and result["size_variant"] == "smollm2-135m"
    code, result = apr_json("oracle", smollm2_gguf, "--family", "qwen2")
    assert code == 5 and "expected family" in result["error"]["message"]


def _without(src, out, drop=None, reshape=None):
    with open_model(src) as model:
        from apr_core.formats.logical import apr_metadata
        raws = []
        for name in model.tensors:
            raw = model.read_raw(name)
            if name == drop:
                continue
            if name == reshape:
                raw = RawTensor(name, raw.dtype, (raw.shape[0] // 2, raw.shape[1]),
                                raw.data[:len(raw.data) // 2])
            raws.append(raw)
        write_apr2(out, raws, apr_metadata(model))


def test_contract_violations_fail(tmp_path):
    src = str(tmp_path / "m.gguf")
    sm.write_gguf_model(src)
    _without(src, str(tmp_path / "missing.apr"), drop="blk.1.ffn_down.weight")
    code, result = apr_json("oracle", str(tmp_path / "missing.apr"))
    assert code == 5 and result["error"]["context"]["tensor"] == "blk.1.ffn_down.weight"
    _without(src, str(tmp_path / "shape.apr"), reshape="blk.0.attn_q.weight")
    code, result = apr_json("oracle", str(tmp_path / "shape.apr"))
    assert code == 5 and result["error"]["code"] == "E012"
    write_apr2(str(tmp_path / "odd.apr"), [RawTensor("x", dtypes.BY_NAME["F32"], (1,),
                                                     bytes(4))], {"model_type": "odd"})
    code, _, _ = apr("oracle", str(tmp_path / "odd.apr"))
    assert code == 5


def test_describe_mode():
    code, result = apr_json("oracle", "--family", "qwen2", "--size", "0.5b")
    assert code == 0
    assert result["size_variants"]["0.5b"]["hidden_dim"] == 896
    assert result["constraints"]["qkv_bias"] is True
    assert apr("oracle", "--family", "nope")[0] == 2
