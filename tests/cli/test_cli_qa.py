"""`apr qa` on the real SmolLM2-135M and Qwen2.5-Coder-0.5B: both pass every check (or skip
one with a reason), the llama.cpp logits check included; copies damaged in different ways
fail the check that must catch them, and only that; impossible gates fail by name."""
import os
import shutil

import numpy as np
import pytest

from apr_core.formats.gguf import read_gguf
from apr_core.formats.open import open_model
from cli_util import apr, apr_json, demo_files  # noqa: F401  (demo_files: a fixture)

pytestmark = [pytest.mark.native, pytest.mark.real_model]

CHECK_NAMES = ["format", "checksum", "signature", "load", "tokenizer", "golden", "logits",
               "perplexity", "throughput", "memory"]
# gates every healthy model here meets: a floor of 0.5 tok/s, a ceiling of 8 GiB
EASY_GATES = ("--min-tok-s", "0.5", "--max-rss-mb", "8192")


def statuses(report):
    return {check["name"]: check["status"] for check in report["checks"]}


def details(report):
    return {check["name"]: check["detail"] for check in report["checks"]}


def failed(report):
    return sorted(name for name, status in statuses(report).items() if status == "fail")


def assert_shape(report):
    """Exactly {"passed", "checks": [{"name", "status", "detail"}]}, every check listed
    once in order, every detail non-empty (a skip always says why)."""
    assert set(report) == {"passed", "checks"}
    assert [c["name"] for c in report["checks"]] == CHECK_NAMES
    for check in report["checks"]:
        assert set(check) == {"name", "status", "detail"}
        assert check["status"] in ("pass", "fail", "skip")
        assert check["detail"].strip(), check


@pytest.mark.parametrize("fixture", ["smollm2_gguf", "qwen_gguf"])
def test_qa_passes_on_the_real_models(fixture, request):
    code, report = apr_json("qa", request.getfixturevalue(fixture), *EASY_GATES)
    assert_shape(report)
    assert code == 0 and report["passed"] is True, report
    got = statuses(report)
    assert {name: got[name] for name in CHECK_NAMES if got[name] != "pass"} == {
        "checksum": "skip", "signature": "skip"}, report        # GGUF has neither
    text = details(report)
    assert "no checksum" in text["checksum"] and "no signature" in text["signature"]
    assert "Paris" in text["golden"]
    assert "KL" in text["logits"]                     # llama.cpp really ran (not a skip)


def test_a_truncated_copy_fails_format_and_load(smollm2_gguf, tmp_path):
    path = tmp_path / "truncated.gguf"
    with open(smollm2_gguf, "rb") as source:
        path.write_bytes(source.read(os.path.getsize(smollm2_gguf) // 2))
    code, report = apr_json("qa", path)
    assert_shape(report)
    assert code == 1 and report["passed"] is False
    assert failed(report) == ["format", "load"]
    assert "E002" in details(report)["format"]
    for name in ("tokenizer", "golden", "logits", "perplexity", "throughput", "memory"):
        assert statuses(report)[name] == "skip" and "load" in details(report)[name]


def test_scrambled_embeddings_fail_the_golden_answer_and_perplexity(smollm2_gguf, tmp_path):
    """The embedding rows of a copy shuffled: a structurally perfect file (format passes,
    llama.cpp reads the same scrambled weights, so their logits still agree) whose model
    no longer knows anything."""
    path = str(tmp_path / "scrambled.gguf")
    shutil.copyfile(smollm2_gguf, path)
    with read_gguf(smollm2_gguf) as model:
        info = model.tensors["token_embd.weight"]                  # tied: also the LM head
    rows = info.shape[0]
    data = np.fromfile(smollm2_gguf, np.uint8, count=info.size, offset=info.offset)
    data = data.reshape(rows, info.size // rows)                   # [n_vocab, row bytes]
    with open(path, "r+b") as handle:
        handle.seek(info.offset)
        handle.write(data[np.random.default_rng(0).permutation(rows)].tobytes())
    code, report = apr_json("qa", path)
    assert_shape(report)
    assert code == 1 and failed(report) == ["golden", "perplexity"], report
    assert "does not contain 'Paris'" in details(report)["golden"]
    assert statuses(report)["format"] == "pass" and statuses(report)["logits"] == "pass"


def test_an_impossible_throughput_floor_fails_by_name(smollm2_gguf):
    code, out, err = apr("qa", smollm2_gguf, "--min-tok-s", "1e9")
    assert code == 1
    assert out.rstrip().splitlines()[-1] == "FAILED: throughput"
    row = next(line for line in out.splitlines() if line.startswith("throughput"))
    assert "FAIL" in row and "< --min-tok-s 1e+09" in row
    assert "qa failed: throughput" in err


def test_a_memory_ceiling_below_the_model_fails_by_name(smollm2_gguf):
    """1 MiB: less than the model file itself, which the process maps and reads."""
    code, report = apr_json("qa", smollm2_gguf, "--max-rss-mb", "1", "--skip", "format",
                            "--skip", "logits", "--skip", "perplexity")
    assert code == 1 and failed(report) == ["memory"]
    peak_mib = float(details(report)["memory"].split("peak RSS ")[1].split(" MiB")[0])
    assert peak_mib > os.path.getsize(smollm2_gguf) / (1 << 20)
    assert details(report)["format"] == "skipped (--skip format)"


@pytest.fixture(scope="module")
def signed_apr(demo_files, tmp_path_factory):  # noqa: F811
    """The demo converted to APR (demo_files) and signed with a fresh key: (path, key.pub)."""
    folder = tmp_path_factory.mktemp("qa_signed")
    key, signed = folder / "key", folder / "signed.apr"
    assert apr("keygen", "-o", key)[0] == 0
    assert apr("sign", demo_files["apr"], "--key", key, "-o", signed)[0] == 0
    return str(signed), str(key) + ".pub"


def test_a_signed_apr_file_passes_checksum_and_signature(signed_apr):
    path, public = signed_apr
    code, report = apr_json("qa", path, "--trusted-key", public, *EASY_GATES)
    assert_shape(report)
    assert code == 0, report
    got = statuses(report)
    assert got["checksum"] == "pass" and got["signature"] == "pass"
    assert "trusted key" in details(report)["signature"]
    assert got["logits"] == "skip" and "GGUF" in details(report)["logits"]


def test_another_trusted_key_fails_the_signature(signed_apr, tmp_path):
    path, _ = signed_apr
    assert apr("keygen", "-o", tmp_path / "other")[0] == 0
    code, report = apr_json("qa", path, "--trusted-key", tmp_path / "other.pub",
                            "--skip", "load")
    assert code == 1 and failed(report) == ["signature"]
    assert "E006" in details(report)["signature"]


def test_a_flipped_byte_in_tensor_data_fails_the_checksum(demo_files, tmp_path):  # noqa: F811
    path = str(tmp_path / "flipped.apr")
    shutil.copyfile(demo_files["apr"], path)
    with open_model(path, verify=False) as model:
        info = model.tensors["blk.0.attn_q.weight"]
        start = info.offset                          # absolute, as the reader resolved it
        before = model.read_raw(info.name).data
    with open(path, "r+b") as handle:
        handle.seek(start + 100)
        byte = handle.read(1)
        handle.seek(start + 100)
        handle.write(bytes([byte[0] ^ 0xFF]))
    with open_model(path, verify=False) as model:                  # inside that tensor
        assert bytes(model.read_raw(info.name).data) != bytes(before)
    code, report = apr_json("qa", path, "--skip", "load")
    assert code == 1 and failed(report) == ["checksum", "format"]
    assert "E004" in details(report)["checksum"]


@pytest.mark.parametrize("args, code", [(["--skip", "nosuch"], 2), (["--max-ppl", "0"], 2),
                                        (["--golden-expect", ""], 2)])
def test_bad_options_are_argument_errors(smollm2_gguf, args, code):
    assert apr("qa", smollm2_gguf, *args)[0] == code


def test_the_kl_divergence_is_the_textbook_one():
    from apr_native.cli.qa.llama_logits import compare, kl_divergence
    ours = np.array([[0.0, 0.0], [1.0, 2.0]], np.float32)                # [2, 2]
    theirs = np.array([[0.0, np.log(3.0)], [6.0, 7.0]], np.float32)      # row 1: shifted
    want = 0.5 * np.log(0.5 / 0.25) + 0.5 * np.log(0.5 / 0.75)          # p=(.5,.5) q=(.25,.75)
    np.testing.assert_allclose(kl_divergence(ours, theirs), [want, 0.0], atol=1e-7)
    _, clear, agree = compare(ours, theirs)
    assert (clear, agree) == (0, 0)                   # no top-2 gap above CLEAR_GAP here


PEAK_PROBE = """
import json, numpy as np
from apr_native.cli.qa import peak_memory
assert peak_memory.reset()
block = np.ones(64 << 17)                          # 64 MiB of float64, every page touched
high, where = peak_memory.peak_bytes()
del block
reset = peak_memory.reset()
print(json.dumps([high, where, reset, peak_memory.peak_bytes()[0]]))
"""


def test_the_peak_memory_restarts_at_the_reset():
    """In a fresh interpreter (a test worker's own allocator state and threads would blur
    what one freed block does to its RSS)."""
    import json
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", PEAK_PROBE], capture_output=True, text=True,
                          check=True)
    high, where, reset, after = json.loads(done.stdout)
    assert where == "VmHWM" and reset
    assert after <= high - (60 << 20)
