"""The `apr` command line on the format layer: real commands, real files, seed 000 exit codes."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.native


def apr(*args, env=None):
    """Run the CLI in a subprocess, as a user would (no TTY, so no progress bars)."""
    full_env = dict(os.environ, APR_QUIET="1", **(env or {}))
    done = subprocess.run([sys.executable, "-m", "apr_native.cli.main", *args],
                          capture_output=True, text=True, env=full_env)
    return done.returncode, done.stdout, done.stderr


def test_help_lists_commands():
    code, out, _ = apr("--help")
    assert code == 0
    for command in ("inspect", "tensors", "convert", "validate"):
        assert command in out


def test_missing_file_exits_3():
    code, _, err = apr("inspect", "/nonexistent/model.apr")
    assert code == 3
    assert "E007" in err and "Traceback" not in err


def test_not_a_model_exits_4(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello, not a model at all")
    code, _, err = apr("inspect", str(bad))
    assert code == 4
    assert "E001" in err


@pytest.mark.real_model
def test_inspect_convert_validate_demo(smollm2_gguf, tmp_path):
    code, out, _ = apr("inspect", smollm2_gguf, "--json")
    assert code == 0
    info = json.loads(out)
    assert info["format"] == "gguf"
    assert info["tensor_count"] == 272
    assert info["metadata"]["general.architecture"] == "llama"

    out_path = str(tmp_path / "demo.apr")
    code, out, err = apr("convert", smollm2_gguf, "-o", out_path, "--compress", "lz4", "--json")
    assert code == 0, err
    assert json.loads(out)["format"] == "apr"

    code, out, _ = apr("validate", out_path, "--json")
    assert code == 0
    report = json.loads(out)
    assert report["valid"] and report["tensors_checked"] == 272

    # refuse to overwrite without --force (seed 000 §11 #97), and the file stays intact
    size = os.path.getsize(out_path)
    code, _, err = apr("convert", smollm2_gguf, "-o", out_path)
    assert code == 2 and "force" in err
    assert os.path.getsize(out_path) == size

    # one flipped bit in the payload: validation fails with E004 and exit code 5
    with open(out_path, "r+b") as handle:
        handle.seek(size // 2)
        byte = handle.read(1)
        handle.seek(size // 2)
        handle.write(bytes([byte[0] ^ 0x10]))
    code, out, _ = apr("validate", out_path, "--json")
    assert code == 5
    assert json.loads(out)["problems"][0]["code"] in ("E004", "E002")


@pytest.mark.real_model
def test_tensors_lists_row_major_shapes(smollm2_gguf):
    code, out, _ = apr("tensors", smollm2_gguf, "--json", "--filter", "token_embd")
    assert code == 0
    rows = json.loads(out)
    assert rows == [{"name": "token_embd.weight", "dtype": rows[0]["dtype"],
                     "shape": [49152, 576], "offset": rows[0]["offset"],
                     "size": rows[0]["size"], "nbytes": rows[0]["nbytes"]}]
