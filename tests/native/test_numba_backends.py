"""Backend selection: APR_BACKEND / explicit names, the registry's preference order, and
fallback to numpy's kernel for weight types a backend lacks."""
import inspect
import numpy as np
import pytest

pytest.importorskip("numba")

from apr_core import dtypes                                      # noqa: E402
from apr_core.errors import AprError, ErrorCode                  # noqa: E402
from apr_core.model.weights import Linear, numpy_matmul          # noqa: E402
from apr_core.quant import quantize, registry                    # noqa: E402
from apr_native import backends                                  # noqa: E402
from apr_native.kernels import cpu  # noqa: E402

pytestmark = pytest.mark.native


def test_auto_prefers_numba_without_a_gpu(monkeypatch):
    monkeypatch.delenv("APR_BACKEND", raising=False)
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    expected = backends.available()[0]
    assert expected in ("cuda", "numba") and "numpy" == backends.available()[-1]
    assert backends.select().backend == expected


def test_env_and_explicit_names(monkeypatch):
    monkeypatch.setenv("APR_BACKEND", "numpy")
    assert backends.select().lookup("matmul", "Q4_0") is numpy_matmul
    numba_kernels = backends.select("numba")                     # explicit beats env
    assert inspect.unwrap(numba_kernels.lookup("matmul", "Q4_0")) is cpu.numba_matmul
    # a type the numba backend lacks falls back to numpy's kernel
    assert numba_kernels.lookup("matmul", "IQ4_NL") is numpy_matmul
    with pytest.raises(AprError) as err:
        backends.select("tpu")
    assert err.value.code is ErrorCode.ARGUMENT


def test_selecting_a_backend_changes_nothing_else():
    """Kernels are the model's: selecting numba leaves numpy's lookups (and every model
    loaded without it) on numpy."""
    backends.select("numba")
    assert registry.NUMPY.lookup("matmul", "Q4_0") is numpy_matmul
    assert registry.lookup("matmul", "Q4_0") is numpy_matmul


def test_cuda_needs_a_device_or_the_simulator(monkeypatch):
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    if "cuda" in backends.available():
        pytest.skip("host: a CUDA device is present")
    with pytest.raises(AprError) as err:
        backends.select("cuda")
    assert err.value.code is ErrorCode.UNSUPPORTED


def test_cuda_emulation_registers_the_thread_code_on_the_cpu(monkeypatch):
    from apr_native.kernels.cuda import cuda_emulated
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    monkeypatch.setenv("APR_CUDA_EMULATE", "1")
    assert "cuda" not in backends.available() or backends.available()[0] == "cuda"
    kernels = backends.select("cuda")
    assert kernels.backend == "cuda"
    assert kernels.lookup("matmul", "Q6_K") is cuda_emulated.emulated_matmul
    assert kernels.fused("attention") is cuda_emulated.emulated_attention
    assert kernels.lookup("matmul", "IQ4_NL") is numpy_matmul       # a type it lacks


def test_linear_runs_through_its_own_kernels():
    q = dtypes.BY_NAME["Q5_1"]
    values = np.random.default_rng(0).standard_normal((12, 64)).astype(np.float32)
    data, bias = quantize(values, q), np.arange(12, dtype=np.float32)
    on_numpy = Linear("w", data, q, (12, 64), bias=bias)
    on_numba = Linear("w", data, q, (12, 64), bias=bias, kernels=backends.select("numba"))
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    ref = on_numpy.matmul(x)
    got = on_numba.matmul(x)
    assert not np.array_equal(got, ref)          # a different kernel ran (int16 activations)
    assert np.abs(got - ref).max() < 1e-4 * np.abs(ref).max()
    assert np.array_equal(on_numpy.matmul(x), ref)   # and the numpy one is still numpy
