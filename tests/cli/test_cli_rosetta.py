"""`apr rosetta` (seed 004 §2.7, §10): inspect, convert, chain, verify, fingerprint,
validate-stats, diff-tensors on real files in all three formats."""
import json

import numpy as np
import pytest

import synthetic_models as sm
from apr_core.formats.open import open_model
from cli_util import apr, apr_json

pytestmark = pytest.mark.native
SUBCOMMANDS = ("inspect", "convert", "chain", "verify", "fingerprint", "validate-stats",
               "diff-tensors")


@pytest.fixture
def files(tmp_path):
    sm.write_hf_model(tmp_path / "hf", "llama")
    sm.write_gguf_model(tmp_path / "m.gguf", quant="Q8_0")
    return tmp_path


def test_every_subcommand_has_help():
    for sub in SUBCOMMANDS:
        code, out, _ = apr("rosetta", sub, "--help")
        assert code == 0 and "usage" in out, sub


def test_inspect_every_format(files):
    st = str(files / "hf" / "model.safetensors")
    for path, fmt in ((str(files / "m.gguf"), "gguf"), (st, "safetensors")):
        code, result = apr_json("rosetta", "inspect", path, "--hexdump")
        assert code == 0 and result["format"] == fmt
        with open_model(path) as model:
            assert result["tensor_count"] == len(model.tensors)
        assert bytes.fromhex(result["head_hex"]) == open(path, "rb").read(64)


def test_chain_st_apr_gguf_preserves_every_tensor(files):
    st = str(files / "hf" / "model.safetensors")
    final = str(files / "final.gguf")
    code, result = apr_json("rosetta", "chain", "st -> apr -> gguf", "--input", st, "-o", final)
    assert code == 0, result
    assert result["tensor_counts"] == [21, 21, 21]
    code, result = apr_json("rosetta", "verify", st, result["outputs"][0], "--tolerance", "0")
    assert code == 0 and result["passed"]
    code, _, err = apr("rosetta", "chain", "gguf -> apr", "--input", st)
    assert code == 2 and "starts with another format" in err


def test_verify_detects_drift(files):
    src = str(files / "m.gguf")
    q = str(files / "q.apr")
    assert apr("convert", src, "-o", q, "--quantize", "q4_0")[0] == 0
    code, result = apr_json("rosetta", "verify", src, q, "--tolerance", "1e-6")
    assert code == 5 and not result["passed"] and result["failed"]
    code, result = apr_json("rosetta", "verify", src, q, "--tolerance", "1")
    assert code == 0 and result["passed"]


def test_fingerprint_changes_when_one_byte_flips(files):
    """F-ROSETTA-004: flip one payload byte, the fingerprint of that tensor changes."""
    apr_file = str(files / "m.apr")
    assert apr("convert", str(files / "m.gguf"), "-o", apr_file)[0] == 0
    fp = str(files / "fp.json")
    assert apr("rosetta", "fingerprint", apr_file, "-o", fp)[0] == 0
    before = json.load(open(fp))
    # copy with one byte of the token embedding flipped (a valid file: APR rewritten)
    with open_model(apr_file) as model:
        from apr_core.formats.apr2 import write_apr2
        from apr_core.tensor import RawTensor
        raws = []
        for name in model.tensors:
            raw = model.read_raw(name)
            if name == "token_embd.weight":
                data = bytearray(raw.data)
                data[100] ^= 0x01
                raw = RawTensor(raw.name, raw.dtype, raw.shape, bytes(data))
            raws.append(raw)
        write_apr2(str(files / "flipped.apr"), raws, model.metadata)
    code, out, _ = apr("rosetta", "fingerprint", str(files / "flipped.apr"))
    after = json.loads(out)
    assert after["fingerprint"] != before["fingerprint"]
    changed = [n for n in before["tensors"]
               if before["tensors"][n]["sha256"] != after["tensors"][n]["sha256"]]
    assert changed == ["token_embd.weight"]


def test_validate_stats_against_a_fingerprint(files):
    fp = str(files / "fp.json")
    assert apr("rosetta", "fingerprint", str(files / "m.gguf"), "-o", fp)[0] == 0
    renamed = str(files / "canon.apr")
    assert apr("import", str(files / "m.gguf"), "-o", renamed, "--names", "apr")[0] == 0
    code, result = apr_json("rosetta", "validate-stats", renamed, "--reference", fp)
    assert code == 0 and result["passed"]          # names paired through the name maps
    scaled = str(files / "scaled.apr")
    with open_model(str(files / "m.gguf")) as model:
        from apr_core.formats.apr2 import write_apr2
        from apr_core.tensor import RawTensor
        raws = []
        for name in model.tensors:
            raw = model.read_raw(name)
            if name == "output_norm.weight":
                values = np.frombuffer(raw.data, "<f4") * 11
                raw = RawTensor(name, raw.dtype, raw.shape, values.astype("<f4").tobytes())
            raws.append(raw)
        write_apr2(scaled, raws, {"model_type": "llama"})
    code, result = apr_json("rosetta", "validate-stats", scaled, "--reference", fp)
    assert code == 5
    assert [r["tensor"] for r in result["tensors"] if not r["passed"]] == ["output_norm.weight"]


def test_diff_tensors_pairs_names_and_flags_transposes(files, tmp_path):
    hf = str(files / "hf")
    code, result = apr_json("rosetta", "diff-tensors", hf, str(files / "m.gguf"),
                            "--filter", "embed")
    assert code == 0 and len(result["tensors"]) == 1
    row = result["tensors"][0]
    assert row["a"] == "model.embed_tokens.weight" and row["b"] == "token_embd.weight"
    from apr_core import dtypes
    from apr_core.formats.safetensors import write_safetensors
    from apr_core.tensor import RawTensor
    f32 = dtypes.BY_NAME["F32"]
    w = np.arange(6, dtype="<f4").reshape(2, 3)
    write_safetensors(str(tmp_path / "a.safetensors"), [RawTensor("w", f32, (2, 3), w.tobytes())])
    write_safetensors(str(tmp_path / "b.safetensors"),
                      [RawTensor("w", f32, (3, 2), np.ascontiguousarray(w.T).tobytes())])
    code, result = apr_json("rosetta", "diff-tensors", str(tmp_path / "a.safetensors"),
                            str(tmp_path / "b.safetensors"))
    assert result["tensors"][0]["status"] == "TRANSPOSED"


def test_fingerprints_agree_across_formats(files):
    """The same tensors give the same hashes and statistics whichever format holds them."""
    src = str(files / "m.gguf")
    paths = [src]
    for ext in ("apr", "safetensors"):
        paths.append(str(files / ("m." + ext)))
        assert apr("convert", src, "-o", paths[-1])[0] == 0
    prints = []
    for path in paths:
        code, out, _ = apr("rosetta", "fingerprint", path)
        assert code == 0
        prints.append(json.loads(out))
    for other in prints[1:]:
        assert other["fingerprint"] == prints[0]["fingerprint"]
        for name, entry in prints[0]["tensors"].items():
            assert other["tensors"][name] == entry, name
