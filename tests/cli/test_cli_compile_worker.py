"""`apr compile MODEL --target worker`: the bundle directory the CLI writes (report, manifest,
the model copied or linked, overwrite protection) and the models it refuses. The bundle
answering completions is wasm_tests/test_worker_bundle.py (workerd)."""
import json
import os
import zipfile

import pytest

from apr_core.integrity import sha256_file
from cli_util import apr, apr_json
from synthetic_models import write_gguf_model, write_hf_model

pytestmark = [pytest.mark.native, pytest.mark.real_model]


def manifest_of(bundle):
    with zipfile.ZipFile(os.path.join(str(bundle), "python.zip")) as archive:
        return json.loads(archive.read("apr_worker/manifest.json"))


def test_the_json_report_matches_the_bundle(smollm2_gguf, tmp_path):
    out = tmp_path / "smol.worker"
    code, report = apr_json("compile", smollm2_gguf, "--target", "worker", "-o", out)
    assert code == 0
    size = os.path.getsize(smollm2_gguf)
    name = os.path.basename(smollm2_gguf)
    assert report["model"] == manifest_of(out)["model"] == {
        "name": name, "key": name, "format": "gguf", "size": size,
        "sha256": sha256_file(smollm2_gguf), "member": "model/" + name}
    assert sha256_file(str(out / "model" / name)) == report["model"]["sha256"]
    assert report["parts"]["model"] == size
    assert report["size"] == sum(report["parts"].values())
    with zipfile.ZipFile(str(out / "python.zip")) as archive:
        core = sum(i.file_size for i in archive.infolist() if i.filename.startswith("apr_core/"))
        members = set(archive.namelist())
    assert report["parts"]["apr_core"] == core
    assert {"apr_worker/api.py", "apr_worker/store.py", "apr_worker/js_entry.py",
            "apr_worker/openai_format.py", "apr_webkernel.py"} <= members
    for path in ("worker.mjs", "boot.mjs", "pyodide_modules.mjs", "pyodide/pyodide.asm.wasm",
                 "kernels/matmul_k.wasm", "wrangler.toml", "README.md",
                 "workerd/config.capnp", "workerd/r2_disk.mjs", "workerd/make_config.py"):
        assert (out / path).is_file(), path
    # nothing of the build left beside the output
    assert os.listdir(str(tmp_path)) == ["smol.worker"]


def test_external_links_the_model_instead_of_copying(smollm2_gguf, tmp_path):
    out = tmp_path / "linked.worker"
    code, report = apr_json("compile", smollm2_gguf, "--target", "worker", "-o", out,
                            "--external")
    assert code == 0
    link = out / "model" / os.path.basename(smollm2_gguf)
    assert os.path.islink(str(link))
    assert os.readlink(str(link)) == os.path.abspath(smollm2_gguf)
    model = manifest_of(out)["model"]
    assert model["external"] == os.path.abspath(smollm2_gguf) and "member" not in model
    assert model["sha256"] == sha256_file(smollm2_gguf)
    assert report["parts"]["model"] == 0


def test_the_table_says_how_to_run_and_deploy(smollm2_gguf, tmp_path):
    out = tmp_path / "t.worker"
    code, stdout, err = apr("compile", smollm2_gguf, "--target", "worker", "-o", out)
    assert code == 0, err
    assert "npx workerd serve workerd/config.capnp" in stdout
    assert "--experimental" not in stdout
    assert "wrangler deploy" in stdout and "apr_core" in stdout


def test_an_existing_output_needs_force(smollm2_gguf, tmp_path):
    out = tmp_path / "w.worker"
    out.mkdir()
    (out / "old-file").write_text("old")
    code, _, err = apr("compile", smollm2_gguf, "--target", "worker", "-o", out)
    assert code == 2 and "E011" in err and (out / "old-file").exists()
    code, _, err = apr("compile", smollm2_gguf, "--target", "worker", "-o", out, "-f")
    assert code == 0, err
    assert not (out / "old-file").exists() and (out / "worker.mjs").is_file()
    assert sorted(os.listdir(str(tmp_path))) == ["w.worker"]


def test_models_the_worker_cannot_run_are_refused(tmp_path):
    write_gguf_model(tmp_path / "no_tokenizer.gguf")
    code, _, err = apr("compile", tmp_path / "no_tokenizer.gguf", "--target", "worker",
                       "-o", tmp_path / "a.worker")
    assert code == 2 and "E010" in err and "tokenizer" in err
    write_hf_model(str(tmp_path / "hf"))
    code, _, err = apr("compile", tmp_path / "hf", "--target", "worker", "-o",
                       tmp_path / "b.worker")
    assert code == 4 and "E009" in err and "apr convert" in err and "--external" not in err
    assert sorted(os.listdir(str(tmp_path))) == ["hf", "no_tokenizer.gguf"]


def test_web_only_options_are_refused(smollm2_gguf, tmp_path):
    code, _, err = apr("compile", smollm2_gguf, "--target", "worker", "-o",
                       tmp_path / "c.worker", "--max-shard", "32M")
    assert code == 2 and "--max-shard" in err and not os.listdir(str(tmp_path))
