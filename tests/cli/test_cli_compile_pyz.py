"""`apr compile MODEL --target pyz`: the zipapp of the real SmolLM2-135M answers, in a fresh
venv holding nothing but numpy and from a folder holding nothing but the archive, exactly
what `apr run MODEL PROMPT --chat` answers (same token ids, greedy and seeded sampling,
raw); `--external` archives find the model by path or download it by URL; the other
targets and unpackable models are coded errors."""
import functools
import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
import zipfile

import numpy as np
import pytest

from apr_core.integrity import sha256_file
from cli_util import apr, apr_json
from synthetic_models import write_gguf_model, write_hf_model

pytestmark = [pytest.mark.native, pytest.mark.real_model]

QUESTION = "What is the capital of France?"
TOKENS = "24"


@pytest.fixture(scope="module")
def numpy_only_python(tmp_path_factory):
    """A fresh venv with only numpy (this numpy's version: the same numerics) installed."""
    venv = tmp_path_factory.mktemp("numpy_only") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "numpy==" + np.__version__], check=True)
    for absent in ("apr_core", "apr_native", "jinja2", "numba"):
        probe = subprocess.run([python, "-c", "import " + absent], capture_output=True,
                               env=clean_env(), cwd=str(venv))     # not the checkout
        assert probe.returncode != 0, absent + " is importable in the numpy-only venv"
    return python


def clean_env(**extra):
    """No PYTHONPATH, no apr configuration: the archive must bring everything. OpenBLAS's
    settings pass (OPENBLAS_CORETYPE picks its kernels: the same numerics as this process's
    `apr run`)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ["HOME"],
           "LANG": "C.UTF-8"}
    env.update({k: v for k, v in os.environ.items() if k.startswith("OPENBLAS_")})
    env.update(extra)
    return env


def run_pyz(python, archive, *args, cwd=None, env=None):
    done = subprocess.run([python, str(archive), *map(str, args)], capture_output=True,
                          text=True, cwd=cwd or os.path.dirname(str(archive)),
                          env=env or clean_env(), stdin=subprocess.DEVNULL, timeout=600)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="module")
def demo_pyz(smollm2_gguf, tmp_path_factory):
    """The SmolLM2 archive, alone in an otherwise empty folder."""
    folder = tmp_path_factory.mktemp("lonely")
    archive = folder / "model.pyz"
    code, report = apr_json("compile", smollm2_gguf, "--target", "pyz", "-o", archive)
    assert code == 0, report
    assert os.listdir(folder) == ["model.pyz"]
    return archive, report


def test_the_archive_holds_apr_core_and_the_model_stored(demo_pyz, smollm2_gguf):
    archive, report = demo_pyz
    size = os.path.getsize(smollm2_gguf)
    assert report["parts"]["model"] == size and report["size"] == os.path.getsize(archive)
    assert report["model"]["sha256"] == sha256_file(smollm2_gguf)
    with open(archive, "rb") as handle:
        assert handle.readline() == b"#!/usr/bin/env python3\n"
    with zipfile.ZipFile(archive) as zf:
        names = set(zf.namelist())
        member = zf.getinfo(report["model"]["member"])
        assert member.compress_type == zipfile.ZIP_STORED and member.file_size == size
        assert zf.read(member.filename) == open(smollm2_gguf, "rb").read()
    assert {"__main__.py", "apr_pyz/manifest.json", "apr_core/runtime/engine.py",
            "apr_core/data/contracts.json"} <= names
    assert not any(name.startswith("apr_native") for name in names)


def test_the_archive_answers_as_apr_run_chat(demo_pyz, numpy_only_python, smollm2_gguf):
    archive, _ = demo_pyz
    code, out, err = run_pyz(numpy_only_python, archive, QUESTION, "-n", TOKENS)
    assert code == 0, err
    # the pyz runs apr_core's numpy kernels: the same backend for apr run
    ref_code, ref_out, ref_err = apr("run", smollm2_gguf, QUESTION, "--chat", "-n", TOKENS,
                                     "--backend", "numpy")
    assert ref_code == 0, ref_err
    assert out == ref_out
    assert "Paris" in out


@pytest.mark.parametrize("flags", [[], ["--raw"], ["--temperature", "0.8", "--seed", "3"],
                                   ["--system", "Answer in French."]])
def test_flags_change_the_answer_as_they_do_for_apr_run(demo_pyz, numpy_only_python,
                                                        smollm2_gguf, flags):
    """Token for token (--json), the chat default and each flag as `apr run` takes it."""
    archive, _ = demo_pyz
    prompt = "The capital of France is" if flags == ["--raw"] else QUESTION
    code, out, err = run_pyz(numpy_only_python, archive, prompt, "-n", "16", "--json",
                             *flags)
    assert code == 0, err
    ours = json.loads(out)
    code, ref = apr_json("run", smollm2_gguf, prompt, "-n", "16", "--backend", "numpy",
                         *(flags if flags == ["--raw"] else ["--chat"] + flags))
    assert code == 0 and ours["token_ids"] and ours["token_ids"] == ref["token_ids"]
    assert (ours["text"], ours["template"], ours["prompt_tokens"]) == (
        ref["text"], ref["template"], ref["prompt_tokens"])


def test_help_and_info_work_with_numpy_only(demo_pyz, numpy_only_python):
    archive, report = demo_pyz
    code, out, err = run_pyz(numpy_only_python, archive, "--help")
    assert code == 0, err
    for flag in ("--max-tokens", "--raw", "--no-chat", "--system", "--temperature", "--seed",
                 "--json"):
        assert flag in out
    code, out, err = run_pyz(numpy_only_python, archive, "--info")
    assert code == 0 and json.loads(out)["model"] == report["model"]


def test_external_path_archive_reads_the_model_where_it_is(smollm2_gguf, numpy_only_python,
                                                          tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(open(smollm2_gguf, "rb").read())
    archive = tmp_path / "small.pyz"
    code, report = apr_json("compile", model, "-o", archive, "--external")
    assert code == 0 and report["model"]["external"] == str(model)
    assert report["parts"]["model"] == 0 and os.path.getsize(archive) < 1 << 20
    code, out, err = run_pyz(numpy_only_python, archive, QUESTION, "-n", TOKENS, "--verify")
    assert code == 0 and "Paris" in out, err
    with open(model, "ab") as handle:          # the file changed after the build
        handle.write(b"\0")
    code, out, err = run_pyz(numpy_only_python, archive, QUESTION)
    assert code == 5 and "E004" in err and "changed" in err


@pytest.fixture
def served(tmp_path):
    """A local HTTP server over tmp_path/www: (folder, base URL, request log)."""
    folder = tmp_path / "www"
    folder.mkdir()
    log = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, fmt, *args):
            log.append(self.path)
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield folder, "http://127.0.0.1:{}".format(server.server_address[1]), log
    server.shutdown()
    server.server_close()


def test_external_url_archive_downloads_once_and_checks_the_sha256(
        smollm2_gguf, numpy_only_python, served, tmp_path):
    folder, base, log = served
    data = open(smollm2_gguf, "rb").read()
    (folder / "m.gguf").write_bytes(data)
    archive = tmp_path / "url.pyz"
    code, report = apr_json("compile", smollm2_gguf, "-o", archive,
                            "--external", base + "/m.gguf")
    assert code == 0 and report["model"]["external"] == base + "/m.gguf"
    cache = tmp_path / "cache"
    env = clean_env(APR_PYZ_CACHE=str(cache))
    for _ in range(2):
        code, out, err = run_pyz(numpy_only_python, archive, QUESTION, "-n", "8", env=env)
        assert code == 0 and "Paris" in out, err
    assert log == ["/m.gguf"]                                      # fetched once
    cached = cache / hashlib.sha256(data).hexdigest()
    assert cached.read_bytes() == data
    cached.unlink()
    (folder / "m.gguf").write_bytes(data[:-1] + bytes([data[-1] ^ 1]))   # served bytes differ
    code, out, err = run_pyz(numpy_only_python, archive, QUESTION, "-n", "8", env=env)
    assert code == 5 and "E004" in err and not cached.exists()


def test_every_target_is_built():
    # (pyz, web and worker all have a builder now: no target answers E009 "not built yet")
    from apr_native.compile import BUILDERS, TARGETS
    assert sorted(BUILDERS) == sorted(TARGETS)


def test_models_the_archive_cannot_run_are_refused(tmp_path):
    write_gguf_model(tmp_path / "no_tokenizer.gguf")
    code, _, err = apr("compile", tmp_path / "no_tokenizer.gguf", "-o", tmp_path / "a.pyz")
    assert code == 2 and "E010" in err and "tokenizer" in err
    write_hf_model(str(tmp_path / "hf"))
    code, _, err = apr("compile", tmp_path / "hf", "-o", tmp_path / "b.pyz")
    assert code == 4 and "E009" in err and "--external" in err
    assert sorted(os.listdir(tmp_path)) == ["hf", "no_tokenizer.gguf"]


def test_an_existing_output_needs_force(demo_pyz, smollm2_gguf):
    archive, _ = demo_pyz
    before = os.path.getmtime(archive)
    code, _, err = apr("compile", smollm2_gguf, "-o", archive)
    assert code == 2 and "E011" in err and os.path.getmtime(archive) == before
