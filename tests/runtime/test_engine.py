"""THE engine object: the backend belongs to the engine (two engines with different
backends live in one process), and every native entry point loads through it and
reports the backend it ran on (run, eval, trace, canary, bench, serve)."""
import inspect
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from apr_core.model.weights import numpy_matmul

pytestmark = [pytest.mark.native, pytest.mark.real_model]

pytest.importorskip("numba")

from apr_native.engine import EngineOptions, load_engine  # noqa: E402
from apr_native.kernels import cpu  # noqa: E402
from server_util import running_server  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPT = "The capital of France is"


def test_two_engines_with_different_backends_in_one_process(smollm2_gguf):
    on_numba = load_engine(smollm2_gguf, EngineOptions(backend="numba"))
    on_numpy = load_engine(smollm2_gguf, EngineOptions(backend="numpy"))
    assert (on_numba.backend, on_numpy.backend) == ("numba", "numpy")
    head_numba, head_numpy = on_numba.transformer.lm_head, on_numpy.transformer.lm_head
    assert head_numpy.kernels.lookup("matmul", head_numpy.dtype.name) is numpy_matmul
    assert inspect.unwrap(head_numba.kernels.lookup("matmul", head_numba.dtype.name)) is \
        cpu.numba_matmul      # wrapped by dot_select
    # each computes with its own kernels, in any order: numba's int16 activations differ
    # from numpy's float32 in the last bits, within the parity tests' tolerance
    ids = on_numpy.model.prompt_ids(PROMPT)
    a = on_numpy.session().forward(ids)                 # [n_vocab]
    b = on_numba.session().forward(ids)
    c = on_numpy.session().forward(ids)
    assert np.array_equal(a, c)
    assert not np.array_equal(a, b)
    assert np.abs(a - b).max() < 1e-2 * max(1.0, np.abs(a).max())
    numpy_answer = on_numpy.generate(ids, max_tokens=6)
    assert on_numba.generate(ids, max_tokens=6).token_ids == numpy_answer.token_ids


def apr(*args, backend_env=None):
    env = dict(os.environ, APR_QUIET="1",
               PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "native")]))
    env.pop("APR_BACKEND", None)
    if backend_env:
        env["APR_BACKEND"] = backend_env
    done = subprocess.run([sys.executable, "-m", "apr_native.cli.main"] + [str(a) for a in args],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_run_reports_the_backend_it_chose(smollm2_gguf, how, numba_ready):
    args = ["run", smollm2_gguf, PROMPT, "--raw", "-n", "2", "--json"]
    if how == "flag":
        assert apr(*args, "--backend", "numpy")["backend"] == "numpy"
    else:
        assert apr(*args, backend_env="numpy")["backend"] == "numpy"
    assert apr(*args)["backend"] == "numba"              # auto: the fastest here


def test_eval_reports_the_backend(smollm2_gguf, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 20)
    result = apr("eval", smollm2_gguf, "--dataset", text, "--ctx", "32", "--chunks", "1",
                 "--json", backend_env="numpy")
    assert result["backend"] == "numpy"


def test_trace_reports_the_backend(smollm2_gguf):
    assert apr("trace", smollm2_gguf, PROMPT, "--json", backend_env="numpy")["backend"] \
        == "numpy"


def test_canary_reports_the_backend(smollm2_gguf, tmp_path):
    canary = tmp_path / "canary.json"
    created = apr("canary", "create", smollm2_gguf, "-o", canary, "--input", PROMPT,
                  "--json", backend_env="numpy")
    assert created["backend"] == "numpy"
    assert json.loads(canary.read_text())["backend"] == "numpy"
    checked = apr("canary", "check", smollm2_gguf, "--canary", canary, "--json",
                  backend_env="numpy")
    assert checked["backend"] == "numpy" and checked["passed"]


def test_bench_reports_the_backend(smollm2_gguf):
    report = apr("bench", smollm2_gguf, "-p", "4", "-n", "2", "--repeats", "1", "--json",
                 backend_env="numpy")
    (result,) = report["results"]
    assert result["runtime"] == "apr" and result["backend"] == "numpy"


def test_serve_reports_the_backend(smollm2_gguf, tmp_path):
    with running_server(smollm2_gguf, ["--backend", "numpy"], tmp_path / "log", "k") as server:
        health = server.http.get("/health").json()
        models = server.http.get("/v1/models").json()
    assert health["backend"] == "numpy"
    assert models["data"][0]["meta"]["backend"] == "numpy"
