"""`apr lint`: each falsifiable guarantee of seed 000 §4.11 fails when it must."""
import numpy as np
import pytest

from apr_core import dtypes
from apr_core.formats.apr2 import write_apr2
from apr_core.formats.safetensors import write_safetensors
from apr_core.tensor import RawTensor
from cli_util import apr, apr_json

pytestmark = pytest.mark.native
F32 = dtypes.BY_NAME["F32"]
FULL_META = {"apr_version": "2.0.0", "license": "apache-2.0", "model_card": "a card",
             "provenance": "made by test_cli_lint"}


def f32(name, shape):
    values = np.ones(shape, np.float32) * 0.01
    return RawTensor(name, F32, shape, values.tobytes())


def issues(path, *extra):
    code, report = apr_json("lint", path, *extra)
    return code, [(i["level"], i["category"], i["message"]) for i in report["issues"]]


def test_clean_model_has_no_issues(tmp_path):
    path = str(tmp_path / "m.apr")
    write_apr2(path, [f32("token_embd.weight", (16, 8)), f32("blk.0.attn_q.weight", (8, 8)),
                      f32("output_norm.weight", (8,))], FULL_META, compression="lz4")
    code, found = issues(path)
    assert code == 0 and found == []
    code, out, _ = apr("lint", path)
    assert out.strip() == "No issues found."


def test_missing_metadata_warns_and_strict_fails(tmp_path):
    path = str(tmp_path / "m.apr")
    write_apr2(path, [f32("token_embd.weight", (16, 8))], {"apr_version": "2.0.0"})
    code, found = issues(path)
    assert code == 0
    assert [f for f in found if f[1] == "Metadata"] == [
        ("WARN", "Metadata", "Missing 'license' field"),
        ("WARN", "Metadata", "Missing 'model_card' field"),
        ("WARN", "Metadata", "Missing 'provenance' field")]
    code, _ = issues(path, "--strict")
    assert code == 5
    code, out, _ = apr("lint", path)
    assert "[WARN] Metadata: Missing 'license' field" in out.splitlines()


def test_naming_info_with_hint(tmp_path):
    path = str(tmp_path / "m.apr")
    write_apr2(path, [f32("encoder.w", (4,)), f32("blk.0.attn_q.weight", (4, 4))], FULL_META)
    code, found = issues(path)
    assert found == [("INFO", "Tensor Naming", "'encoder.w' is not a canonical tensor name "
                      "(should be 'encoder.weight' for auto-mapping)")]


def test_big_uncompressed_and_unaligned_tensors(tmp_path):
    """SafeTensors: payloads follow the JSON header unaligned and are never compressed."""
    path = str(tmp_path / "m.safetensors")
    write_safetensors(path, [f32("token_embd.weight", (1024, 300)),
                             f32("output_norm.weight", (3,)), f32("blk.0.attn_q.weight", (5,))],
                      {"license": "mit"})
    code, found = issues(path)
    from apr_core.formats.open import open_model
    with open_model(path) as model:
        loose = [t for t in model.tensors.values() if t.offset % 64]
    assert loose
    info = [f for f in found if f[0] == "INFO"]
    assert ("INFO", "Compression", "1 uncompressed tensors over 1 MiB (first: "
            "token_embd.weight)") in info
    efficiency = [f for f in info if f[1] == "Efficiency"]
    assert len(efficiency) == 1 and efficiency[0][2].startswith(
        "{} tensors could be aligned to 64 bytes (currently ".format(len(loose)))
