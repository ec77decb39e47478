"""`apr explain`: every error code of the table, E999 is "Unknown Error Code", unknown tensors
get fuzzy suggestions, and every family with a contract is identified (seed 000 §4.12)."""
import numpy as np
import pytest

from apr_core.errors import ErrorCode
from apr_core.formats.apr2 import write_apr2
from apr_core.model.families import contracts
from cli_util import apr, apr_json
from synthetic_models import write_gguf_model, write_hf_model

pytestmark = pytest.mark.native


@pytest.mark.parametrize("code", [c.name for c in ErrorCode])
def test_every_error_code_is_explained(code):
    status, info = apr_json("explain", code)
    assert status == 0 and info["known"]
    entry = ErrorCode[code]
    assert (info["title"], info["category"], info["exit_code"]) == (
        entry.description, entry.category, entry.exit_code)
    assert info["causes"] and info["troubleshooting"]


def test_unknown_code_does_not_crash():
    status, out, err = apr("explain", "E999")
    assert status == 2 and err == ""
    assert out.splitlines()[0] == "**E999: Unknown Error Code**"
    status, info = apr_json("explain", "e999")
    assert info == {"code": "E999", "known": False, "title": "Unknown Error Code"}


def test_e002_text():
    status, out, _ = apr("explain", "E002")
    assert out.splitlines()[0] == "**E002: Corrupted data** (CORRUPT, exit code 4)"
    assert "  1. Run `apr validate --checksum FILE`" in out


@pytest.mark.parametrize("family", sorted(contracts()))
def test_architecture_of_every_family(family, tmp_path):
    archs = contracts()[family]["architectures"]
    if "gguf" in archs:
        path = str(tmp_path / "m.gguf")
        write_gguf_model(path, arch=archs["gguf"][0])
    else:   # llama.cpp writes Mistral as llama: only HF names tell it apart
        path = str(tmp_path / "hf")
        write_hf_model(path, family)
    status, info = apr_json("explain", path)
    assert status == 0 and info["family"] == family
    assert info["display_name"] == contracts()[family]["display_name"]
    assert info["hyperparameters"]["n_layers"] == 2 and info["hyperparameters"]["d_model"] == 64
    status, out, _ = apr("explain", path)
    assert out.startswith("This is a **{}** model ({}).".format(
        contracts()[family]["display_name"], family))


def test_unknown_architecture(tmp_path):
    path = str(tmp_path / "m.apr")
    write_apr2(path, [], {"model_type": "whisper"})
    status, out, _ = apr("explain", path)
    assert status == 0 and out.startswith("Unrecognised architecture: 0 tensors")


def test_tensor_role_stats_and_fuzzy_suggestions(tmp_path):
    path = str(tmp_path / "m.gguf")
    write_gguf_model(path)
    status, info = apr_json("explain", path, "--tensor", "blk.1.attn_v.weight")
    assert status == 0 and info["role"] == "Attention value projection"
    assert info["layer"] == 1 and info["shape"] == [32, 64] and info["dtype"] == "Q8_0"
    assert info["health"] == "Healthy"
    status, out, err = apr("explain", path, "--tensor", "blk.1.attn_vv.weight")
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and "E010" in err
    assert "did_you_mean=['blk.1.attn_v.weight'" in err
    status, out, _ = apr("explain", path, "--tensor", "output_norm.weight")
    assert "- **Role**: Normalization weight/bias (LayerNorm or RMSNorm)" in out
    assert np.isfinite(apr_json("explain", path, "--tensor", "output_norm.weight")[1]
                       ["stats"]["mean"])
