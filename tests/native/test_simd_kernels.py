"""apr_native's build of the browser's exact block kernels (backend "simd",
web/src/kernels/matmul_k.c compiled for this machine on apr_native/simd/wasm_simd128.h).

Oracles: the kernel's float32 replay in numpy (wasm_tests/kquant_emulation.py, whose block
reading is checked against gguf-py in test_kquant_kernel.py) and the browser's own wasm
binary under wasmtime: on every block type the native library equals both bit for bit, so
the browser and native compute the same bytes. Then the backend through apr_core's model
code: greedy tokens and logits against numpy on both real models are in
test_numba_parity.py.
"""
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "wasm_tests"))

from kernel_runner import kernels, run_kernel  # noqa: E402,F401  (kernels: a fixture)
from kquant_emulation import LAYOUT, emulate, random_blocks  # noqa: E402
from quant_emulation import activations  # noqa: E402

from apr_core.dtypes import BY_NAME  # noqa: E402
from apr_native.simd import kernels as simd  # noqa: E402
from apr_native.simd.build import library  # noqa: E402

pytestmark = pytest.mark.native
TYPES = sorted(LAYOUT)


@pytest.fixture(scope="module")
def native():
    path = library()
    assert path is not None, "no C compiler: the dev extra installs ziglang"
    return simd.SimdMatmul(path, threads=1), simd.SimdMatmul(path, threads=2)


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("tokens", [1, 3, 20])
def test_native_kernel_equals_the_replay_and_the_wasm_binary(native, kernels, name, tokens):
    shape = (13, 512)
    data = random_blocks(name, *shape, seed=tokens + 3 * len(name))
    x = activations(tokens, shape[1], seed=tokens + 1)
    got = native[0].run([(data, BY_NAME[name], shape)], x)[0]
    want = emulate(data, name, shape, x)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), np.abs(got - want).max()
    browser = run_kernel(kernels, data, name, shape, x)
    assert np.array_equal(got.view(np.uint32), browser.view(np.uint32))


def test_rows_split_over_threads_compute_the_same_bytes(native, monkeypatch):
    monkeypatch.setattr(simd, "SPLIT_MIN_WORK", 0)      # split even these small weights
    weights = [(random_blocks(name, rows, 256, seed=rows), BY_NAME[name], (rows, 256))
               for name, rows in (("Q4_K", 61), ("Q8_0", 40), ("Q2_K", 9))]
    x = activations(7, 256, seed=5)
    one, two = native[0].run(weights, x), native[1].run(weights, x)
    for a, b, (data, dtype, shape) in zip(one, two, weights):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
        assert np.array_equal(a, emulate(data, dtype.name, shape, x))


def test_a_changed_source_builds_another_library(monkeypatch, tmp_path):
    """The cache key covers the flags (and sources): a stale build is never loaded, and a
    new build removes the old one."""
    from apr_native.simd import build
    monkeypatch.setenv("APR_CACHE", str(tmp_path))        # other tests keep their library
    first = library()
    monkeypatch.setattr(build, "FLAGS", build.FLAGS + ["-DAPR_TEST_KEY=1"])
    monkeypatch.setenv(build.BUILD_ENV, "never")
    assert library() is None                  # not built yet, and not built when told not to
    monkeypatch.delenv(build.BUILD_ENV)
    second = library()
    assert second != first and os.path.exists(second) and not os.path.exists(first)


@pytest.mark.parametrize("quant, suits", [("Q8_0", True), ("Q4_K", True), ("F16", False),
                                          ("F32", False)])
def test_quick_start_only_where_every_projection_is_a_block_type(tmp_path, quant, suits):
    """Other types would take numpy's kernel, which decodes the weight on every call: such a
    model starts on numba (`load_engine` upgrades at once)."""
    from synthetic_models import write_gguf_model
    from apr_core.model import Transformer
    from apr_native.simd.quick_start import suits as quick_start_suits
    path = tmp_path / "model.gguf"
    write_gguf_model(path, quant=quant, d_model=256, d_ff=512)
    assert quick_start_suits(Transformer.from_path(str(path))) is suits


def test_starts_without_the_library_spawn_one_background_build(monkeypatch, tmp_path):
    """Every `apr run` before the library exists would otherwise start a compiler."""
    import subprocess
    import types
    from apr_native.simd import build
    monkeypatch.setenv("APR_CACHE", str(tmp_path))
    started = []
    job = types.SimpleNamespace(pid=12345)      # what the lock records
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a[0]) or job)
    build.build_in_background()
    build.build_in_background()
    assert len(started) == 1 and started[0][-1] == str(tmp_path / "simd" / "building")
    assert (tmp_path / "simd" / "building").read_text() == "12345"
    os.utime(started[0][-1], (0, 0))            # a build that died long ago: taken over
    build.build_in_background()
    assert len(started) == 2


def test_a_background_build_leaves_the_library_and_no_lock(tmp_path):
    import subprocess
    env = dict(os.environ, APR_CACHE=str(tmp_path))
    lock = tmp_path / "simd" / "building"
    lock.parent.mkdir()
    lock.write_text("")
    done = subprocess.run([sys.executable, "-m", "apr_native.simd.build", str(lock)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert os.path.exists(done.stdout.strip()) and not lock.exists()
