"""numba CUDA kernels under numba's CUDA simulator (no GPU here): matmul for every block
type on synthetic and real tensors, attention (causal and windowed), and greedy tokens
of a tiny synthetic model through the "cuda" backend, against the numpy reference.

The simulator must be chosen before numba.cuda is first imported, so each case runs in a
child process with NUMBA_ENABLE_CUDASIM=1 (`python tests/native/test_cuda_sim.py CASE`). Running
a whole real model in the simulator (Python threads per CUDA thread) would take hours, so
here the real models are covered by their tensors; their greedy tokens come from the same
thread code compiled for the CPU (test_cuda_emulated.py), PTX from test_cuda_ptx.py.

Tolerance: the kernels decode weights exactly and accumulate float32 products in order,
so they differ from float64 `x @ W.T` only by float32 rounding: <= 1e-5 of sum |x| |w|.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)            # the shared helpers (synthetic_models)
ROOT = os.path.dirname(TESTS)
CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
pytestmark = pytest.mark.native


def close_to_exact(got, x, w):
    exact = x.astype(np.float64) @ w.T.astype(np.float64)
    scale = np.abs(x).astype(np.float64) @ np.abs(w).T.astype(np.float64)
    assert (np.abs(got - exact) <= 1e-5 * scale + 1e-6).all(), np.abs(got - exact).max()


def case_synthetic():
    from apr_core import dtypes
    from apr_core.quant.api import dequantize, quantize
    from apr_native.kernels.cuda import cuda_matmul as kc
    rng = np.random.default_rng(0)
    for name in kc.SUPPORTED:
        dtype = dtypes.BY_NAME[name]
        values = rng.standard_normal((3, 512)).astype(np.float32)
        data = np.frombuffer(quantize(values, dtype), np.uint8)
        x = rng.standard_normal((2, 512)).astype(np.float32)
        close_to_exact(kc.cuda_matmul(data, dtype, (3, 512), x), x,
                       dequantize(data, dtype, (3, 512)))


def case_emulation_is_the_kernel():
    """The CPU emulation (cuda_emulated: the thread code compiled, the grid and the warp's
    reduction tree replayed in order) gives the simulated kernels' results bit for bit."""
    from apr_core import dtypes
    from apr_core.quant.api import quantize
    from apr_native.kernels.cuda import cuda_matmul as kc
    from apr_native.kernels.cuda import cuda_emulated as ke
    rng = np.random.default_rng(3)
    for name in kc.SUPPORTED:
        dtype = dtypes.BY_NAME[name]
        data = np.frombuffer(quantize(rng.standard_normal((5, 1024)).astype(np.float32),
                                      dtype), np.uint8)
        x = rng.standard_normal((2, 1024)).astype(np.float32)
        got, emulated = kc.cuda_matmul(data, dtype, (5, 1024), x), \
            ke.emulated_matmul(data, dtype, (5, 1024), x)
        assert np.array_equal(got, emulated), (name, np.abs(got - emulated).max())
    q = rng.standard_normal((2, 4, 8)).astype(np.float32)        # [T, H, hd]
    k = rng.standard_normal((2, 7, 8)).astype(np.float32)        # [n_kv, cap, hd]
    v = rng.standard_normal((2, 7, 8)).astype(np.float32)
    args = (q, k, v, 6, np.array([4, 5]), 0.3, 3)
    assert np.array_equal(kc.cuda_attention(*args), ke.emulated_attention(*args))


def case_real_tensors():
    from apr_core.formats.open import open_model
    from apr_core.quant.api import dequantize
    from apr_native.kernels.cuda import cuda_matmul as kc
    from apr_native.real_models import locate
    from apr_core.errors import AprError, ErrorCode
    rng = np.random.default_rng(1)
    seen = set()
    paths = {}
    for model in ("demo", "qwen2.5-coder-0.5b"):
        try:
            paths[model] = str(locate(model))
        except AprError as err:   # only a missing model package may skip (locally)
            if err.code is ErrorCode.IO and "not installed" in str(err):
                print("skipped: {}".format(err))
                sys.exit(3)
            raise
    for model in ("demo", "qwen2.5-coder-0.5b"):
        with open_model(paths[model]) as model_file:
            for name, info in model_file.tensors.items():
                key = (model, info.dtype.name)
                if len(info.shape) != 2 or info.dtype.name not in kc.SUPPORTED or key in seen:
                    continue
                seen.add(key)
                rows = 3
                data = np.frombuffer(model_file.read_raw(name).data, np.uint8)
                data = data[:rows * info.dtype.nbytes((info.shape[1],))]
                shape = (rows, info.shape[1])
                x = rng.standard_normal((1, shape[1])).astype(np.float32)
                close_to_exact(kc.cuda_matmul(data, info.dtype, shape, x), x,
                               dequantize(data, info.dtype, shape))
    assert {t for _, t in seen} >= {"Q4_1", "Q8_0", "Q5_0", "Q4_K", "Q6_K"}, seen


def case_attention():
    from apr_core.model.layers import attention
    from apr_native.kernels.cuda.cuda_matmul import cuda_attention
    rng = np.random.default_rng(2)
    q = rng.standard_normal((3, 6, 16)).astype(np.float32)       # [T, H, hd]
    k = rng.standard_normal((2, 12, 16)).astype(np.float32)      # [n_kv, cap, hd]
    v = rng.standard_normal((2, 12, 16)).astype(np.float32)
    q_pos = np.array([7, 8, 9])
    for window in (0, 4):                                         # causal, sliding window
        got = cuda_attention(q, k, v, 10, q_pos, 0.25, window)    # [T, H * hd]
        ref = attention(q, k[:, :10], v[:, :10], q_pos, 0.25, window or None)
        assert np.abs(got - ref).max() < 1e-5, (window, np.abs(got - ref).max())


def case_greedy_tiny_model():
    """The "cuda" backend end to end (registry, launches, transfers) on a model small
    enough for the simulator: a warp per output row is 32 Python threads per row and
    token here. Whole real models run the same thread code in test_numba_parity.py."""
    import tempfile
    sys.path.insert(0, TESTS)
    from synthetic_models import write_gguf_model
    from apr_core.runtime.generate import generate
    from apr_core.model import Transformer
    from apr_native import backends
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tiny.gguf")
        write_gguf_model(path, quant="Q4_1", n_layers=1, d_model=32, d_ff=64, n_vocab=32)
        prompt = [1, 7]
        ref = generate(Transformer.from_path(path), prompt, max_tokens=3)
        cuda = backends.select("cuda")
        assert cuda.backend == "cuda"
        got = generate(Transformer.from_path(path, kernels=cuda), prompt, max_tokens=3)
        assert got == ref and len(ref) == 3, (got, ref)


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


@pytest.mark.parametrize("case", [pytest.param(name, marks=pytest.mark.real_model)
                                  if name == "real_tensors" else name
                                  for name in sorted(CASES)])
def test_in_cuda_simulator(case):
    pytest.importorskip("numba")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env["PYTHONPATH"] = os.pathsep.join([ROOT, os.path.join(ROOT, "native"),
                                         env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, os.path.abspath(__file__), case], env=env,
                          capture_output=True, text=True)
    if done.returncode == 3:          # a real model package is not installed here
        if CI:
            pytest.fail(done.stdout.strip())
        pytest.skip(done.stdout.strip())
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]


if __name__ == "__main__":
    CASES[sys.argv[1]]()      # any error fails the test; exit 3 means "model not installed"
