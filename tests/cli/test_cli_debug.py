"""`apr debug` (--drama, --hex, --strings, --limit) and `apr hex` on real bytes."""
import json

import numpy as np
import pytest

from apr_core import dtypes
from apr_core.formats.apr2 import write_apr2
from apr_core.tensor import RawTensor
from cli_util import apr, apr_json, apr_subprocess

pytestmark = pytest.mark.native
F32 = dtypes.BY_NAME["F32"]


@pytest.fixture
def model(tmp_path):
    path = str(tmp_path / "m.apr")
    values = np.arange(12, dtype=np.float32).reshape(3, 4) / 8
    write_apr2(path, [RawTensor("blk.0.attn_q.weight", F32, (3, 4), values.tobytes()),
                      RawTensor("blk.0.attn_norm.weight", F32, (4,),
                                np.ones(4, np.float32).tobytes())],
               {"apr_version": "2.0.0", "name": "tiny", "license": "mit"})
    return path


def test_drama_in_ci_without_tty(model):
    """seed 000 §11 #53: drama mode in CI (no TTY, no stdin) prints the whole play."""
    code, out, err = apr_subprocess("debug", model, "--drama", env={"CI": "true"})
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "====[ DRAMA: m.apr ]===="
    assert "ACT I: THE HEADER" in lines and "ACT II: THE METADATA" in lines
    assert "  Scene 1: Magic bytes... APR2 (applause!)" in lines
    assert "  Scene 2: Format... APR2 version 2.0 (standing ovation!)" in lines
    assert "  Scene 1: Parameters... 16 (a cast of few!)" in lines
    assert lines[-1] == "  CURTAIN CALL: Model is PRODUCTION READY! (2 tensors checked)"
    assert "\x1b[" not in out   # no colour codes in a pipe


def test_drama_tragedy_keeps_exit_code_and_one_line_error(model, tmp_path):
    data = bytearray(open(model, "rb").read())
    data[-20] ^= 1                              # payload bit: CRC mismatch
    broken = tmp_path / "broken.apr"
    broken.write_bytes(bytes(data))
    code, out, err = apr("debug", str(broken), "--drama")
    assert code == 5
    assert "  TRAGEDY: E004 CRC32 mismatch: the file is corrupted" in out
    assert err.count("\n") == 1 and err.startswith("apr: error: E004")
    nan = tmp_path / "nan.apr"
    write_apr2(str(nan), [RawTensor("w", F32, (2,), np.array([1, np.nan], np.float32)
                                    .tobytes())], {})
    code, out, _ = apr("debug", str(nan), "--drama")
    assert code == 5 and "  Plot twist: w: 1 NaN and 0 Inf values" in out


def test_hex_and_limit(model):
    raw = open(model, "rb").read()
    code, out, _ = apr("debug", model, "--hex", "--limit", "20")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 2
    assert lines[0] == "00000000  41 50 52 32 02 00 00 00  " + " ".join(
        "{:02x}".format(b) for b in raw[8:16]) + "  |APR2" + "".join(
        chr(b) if 32 <= b < 127 else "." for b in raw[4:16]) + "|"
    assert lines[1].startswith("00000010  " + " ".join("{:02x}".format(b) for b in raw[16:20]))
    code, report = apr_json("debug", model, "--hex")
    assert bytes.fromhex(report["hex"]) == raw[:256]
    code, report = apr_json("hex", model, "--offset", "32", "--limit", "24")
    assert bytes.fromhex(report["hex"]) == raw[32:56]


def test_strings_lists_metadata_and_names(model):
    code, report = apr_json("debug", model, "--strings")
    texts = [s["text"] for s in report["strings"]]
    raw = open(model, "rb").read()
    assert code == 0 and texts[0] == "APR2"
    assert any("blk.0.attn_q.weight" in t for t in texts)
    assert all(raw[s["offset"]:s["offset"] + len(s["text"])].decode() == s["text"]
               for s in report["strings"])
    code, report = apr_json("debug", model, "--strings", "--limit", "2")
    assert len(report["strings"]) == 2


def test_hex_tensor_unknown_name_suggests(model):
    code, report = apr_json("hex", model, "--tensor", "blk.0.attn_q.weight")
    values = np.arange(12, dtype=np.float32) / 8
    assert code == 0 and bytes.fromhex(report["hex"]) == values.tobytes()
    assert report["values"] == values.tolist()
    code, _, err = apr("hex", model, "--tensor", "blk.0.attn_k.weight")
    assert code == 2 and "did_you_mean=['blk.0.attn_q.weight'" in err


def test_plain_debug_json(model):
    code, info = apr_json("debug", model)
    assert code == 0
    assert (info["format"], info["magic"], info["tensors"]) == ("apr2", b"APR2".hex(), 2)
    assert info["first_tensor"] == "blk.0.attn_norm.weight"   # index is sorted by name
    json.dumps(info)
    code, _, err = apr("debug", model, "--limit", "0", "--hex")
    assert code == 2 and "positive" in err
