"""`apr compile MODEL --target web -o DIR` on the command line: the folder it writes (the
page, the Pyodide files the page boots, the model's shards under their manifest), the size
of each part it prints, and the coded errors: options of other targets, a model without a
tokenizer, a missing Pyodide copy, an output folder it did not write. The browser side
(the folder served by `python -m http.server`, chatting in Chromium) is
wasm_tests/test_compiled_site.py."""
import json
import os
import re

import pytest

from apr_core.formats.open import open_model
from apr_core.integrity import sha256_file
from apr_native.cli.common import human_bytes
from cli_util import apr
from synthetic_models import write_gguf_model

pytestmark = [pytest.mark.native, pytest.mark.real_model]


@pytest.fixture(scope="module")
def site(smollm2_gguf, tmp_path_factory):
    """The demo model compiled with the defaults (64 MiB shards), and what it printed."""
    out = tmp_path_factory.mktemp("web") / "site"
    code, stdout, err = apr("compile", smollm2_gguf, "--target", "web", "-o", out)
    assert code == 0, err
    return out, stdout


def files_under(root):
    return {p.relative_to(root).as_posix(): p.stat().st_size
            for p in root.rglob("*") if p.is_file()}


def test_the_folder_holds_page_runtime_wheel_and_verified_shards(site, smollm2_gguf):
    out, _ = site
    files = files_under(out)
    web = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "web")
    for name in ("index.html", "src/app.js", "src/worker.js", "src/apr_web.py",
                 "src/apr_webgpu.py", "src/gpu_client.js", "src/gpu_worker.js",
                 "src/gpu_protocol.js", "site/apr_core.whl", "pyodide/017/pyodide.js", "pyodide/017/numpy.data"):
        assert name in files, name
    assert files["src/worker.js"] == os.path.getsize(os.path.join(web, "src", "worker.js"))
    assert not [n for n in files if n.endswith((".c", ".wat"))]     # build sources stay out
    config = json.loads((out / "site" / "config.json").read_text())
    assert (config["flavor"], config["autoload"]) == ("017", True)
    manifest = out / config["defaultModel"]
    assert config["defaultModel"] == "models/SmolLM2-135M-Instruct.Q4_1.apr"
    with open_model(str(manifest)) as model, open_model(smollm2_gguf) as gguf:
        entries = model.metadata["shards"]
        assert sorted(model.tensors) == sorted(gguf.tensors)
        name = "blk.3.ffn_down.weight"                   # bytes kept, not re-quantized
        assert model.read_raw(name).data == gguf.read_raw(name).data
    assert len(entries) == 2 and max(e["size"] for e in entries) <= 64 << 20
    for entry in entries:
        assert sha256_file(str(out / "models" / entry["file"])) == entry["sha256"]
    assert sorted(n for n in files if n.startswith("models/")) == sorted(
        ["models/" + e["file"] for e in entries] + [config["defaultModel"]])
    umask = os.umask(0)
    os.umask(umask)
    # a web server running as another user can read it all (not the writers' private 0600)
    assert {oct(os.stat(out / name).st_mode & 0o777) for name in files} == {oct(0o666 & ~umask)}
    assert oct(os.stat(out / "models").st_mode & 0o777) == oct(0o777 & ~umask)


def test_it_prints_the_size_of_each_part(site):
    out, stdout = site
    files = files_under(out)
    lines = stdout.splitlines()

    def row(label):
        [line] = [line for line in lines if line.startswith(label)]
        return line

    for name, size in files.items():
        if name.startswith("models/"):
            label = "shard " if re.search(r"-\d{5}-of-\d{5}\.apr$", name) else "model manifest "
            assert row(label + name).endswith(human_bytes(size))
    pyodide = sum(size for name, size in files.items() if name.startswith("pyodide/"))
    assert row("Pyodide 0.17").endswith(human_bytes(pyodide))
    assert row("total").split()[1] == str(len(files))
    assert row("total").endswith(human_bytes(sum(files.values())))
    assert "python -m http.server -d {}".format(out) in stdout


def test_options_of_other_targets_are_refused(smollm2_gguf, tmp_path):
    code, _, err = apr("compile", smollm2_gguf, "--target", "pyz", "--quantize", "q8_0",
                       "-o", tmp_path / "a.pyz")
    assert code == 2 and "E011" in err and "--quantize does not apply to --target pyz" in err
    code, _, err = apr("compile", smollm2_gguf, "--external", "--target", "web",
                       "-o", tmp_path / "b")
    assert code == 4 and "E009" in err and "--external" in err
    for size in ("0", "lots"):
        code, _, err = apr("compile", smollm2_gguf, "--target", "web", "--max-shard", size,
                           "-o", tmp_path / "c")
        assert code == 2 and "E011" in err
    assert os.listdir(tmp_path) == []


def test_a_model_the_page_could_not_chat_with_is_refused(tmp_path):
    write_gguf_model(tmp_path / "no_tokenizer.gguf")
    code, _, err = apr("compile", tmp_path / "no_tokenizer.gguf", "--target", "web",
                       "-o", tmp_path / "site")
    assert code == 2 and "E010" in err and "tokenizer" in err
    assert os.listdir(tmp_path) == ["no_tokenizer.gguf"]       # no site, no staging folder


def test_a_bad_quantization_type_leaves_nothing_behind(smollm2_gguf, tmp_path):
    code, _, err = apr("compile", smollm2_gguf, "--target", "web", "--quantize", "q9_z",
                       "-o", tmp_path / "site")
    assert code == 2 and "E011" in err and "q9_z" in err
    assert os.listdir(tmp_path) == []


def test_without_the_pyodide_copy_it_says_how_to_install_it(smollm2_gguf, tmp_path):
    code, _, err = apr("compile", smollm2_gguf, "--target", "web", "-o", tmp_path / "site",
                       env={"APR_WEB_ROOT": str(tmp_path)})
    assert code == 3 and "E007" in err and "setup_web.sh" in err
    assert os.listdir(tmp_path) == []


def test_force_replaces_an_earlier_site_and_nothing_else(site, smollm2_gguf, tmp_path):
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    for force in ([], ["-f"]):
        code, _, err = apr("compile", smollm2_gguf, "--target", "web", "-o", other, *force)
        assert code == 2 and "E011" in err
    assert os.listdir(other) == ["keep.txt"]
    earlier = tmp_path / "earlier"
    code, _, err = apr("compile", smollm2_gguf, "--target", "web", "-o", earlier,
                       "--max-shard", "40M")
    assert code == 0, err
    (earlier / "stale.txt").write_text("from the old build")
    code, _, err = apr("compile", smollm2_gguf, "--target", "web", "-o", earlier, "-f")
    assert code == 0, err
    models = sorted(n for n in files_under(earlier) if n.startswith("models/"))
    assert models == sorted(n for n in files_under(site[0]) if n.startswith("models/"))
    assert len(models) == 3 and not (earlier / "stale.txt").exists()   # 2 shards, not 3
    assert sorted(os.listdir(tmp_path)) == ["earlier", "notes"]   # no staging folders left
