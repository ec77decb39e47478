"""The CI gate of tests/conftest.py: under CI=true a skip fails the run (a host condition
aside), a missing real-model package skips only outside CI, and a real model that fails
its sha256 always fails. Each case runs pytest in a child on a probe file."""
import os
import subprocess
import sys

import importlib.util

import pytest

from apr_core.errors import AprError, ErrorCode

pytestmark = pytest.mark.native      # runs pytest -n 2 in a child (xdist is in .venv only)

TESTS = os.path.dirname(os.path.abspath(__file__))


def _load_gate():
    """tests/conftest.py as its own module: `import conftest` may give another directory's
    conftest (pytest imports each as "conftest"; wasm_tests/ has one too)."""
    spec = importlib.util.spec_from_file_location("apr_tests_conftest",
                                                  os.path.join(TESTS, "conftest.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


conftest = _load_gate()
PROBE = '''
import pytest
def test_runs():
    pass
def test_skips():
    pytest.skip({reason!r})
'''


def _run(tmp_path, reason, ci, *args):
    (tmp_path / "test_probe.py").write_text(PROBE.format(reason=reason))
    env = dict(os.environ, PYTHONPATH=TESTS + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("CI", None)
    if ci:
        env["CI"] = "true"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "conftest", "-c", os.devnull, "--rootdir", str(tmp_path),
                           str(tmp_path)] + list(args),
                          capture_output=True, text=True, env=env, cwd=str(tmp_path))
    return done.returncode, done.stdout


@pytest.mark.parametrize("extra", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_skip_fails_under_ci(tmp_path, extra):
    code, out = _run(tmp_path, "oracle missing", True, *extra)
    assert code == 1 and "SKIP IS FAILURE" in out and "oracle missing" in out, out
    assert _run(tmp_path, "oracle missing", False)[0] == 0


def test_a_host_condition_may_skip_under_ci(tmp_path):
    code, out = _run(tmp_path, conftest.HOST_CONDITION + "a CUDA device is present", True)
    assert code == 0 and "SKIP IS FAILURE" not in out, out


def _outcome(monkeypatch, error, ci):
    """What `_real_model` does when the locator raises `error`: "skip", "fail" or "ok"."""
    import apr_native.real_models as real_models

    def locate(name):
        raise error
    monkeypatch.setattr(real_models, "locate", locate)
    monkeypatch.setattr(conftest, "CI", ci)
    try:
        conftest._real_model("demo")
    except pytest.skip.Exception:
        return "skip"
    except pytest.fail.Exception:
        return "fail"
    return "ok"


@pytest.mark.parametrize("ci", [False, True])
def test_real_model_checksum_error_fails(monkeypatch, ci):
    error = AprError(ErrorCode.CHECKSUM, "model file does not match its published sha256")
    assert _outcome(monkeypatch, error, ci) == "fail"


def test_missing_real_model_package_skips_only_outside_ci(monkeypatch):
    error = AprError(ErrorCode.IO, "model package not installed; run: pip install x")
    assert _outcome(monkeypatch, error, False) == "skip"
    assert _outcome(monkeypatch, error, True) == "fail"
