"""The CUDA kernels compile for a real GPU: numba's CUDA target lowers each kernel (and the
thread code it calls) to PTX for sm_75 through NVVM, and ptxas assembles that PTX to
machine code. No GPU is needed for either; the simulator, which runs the kernels as
Python, would not notice code numba cannot compile for the device (it caught min/max).

Device functions are compiled for the current device's compute capability; with no
device here the test states one (7.5).
"""
import os
import shutil
import subprocess

import pytest

pytest.importorskip("numba")

from numba import types as nt                                    # noqa: E402

pytestmark = pytest.mark.native

CC = (7, 5)
F32_3D = nt.float32[:, :, ::1]
SIGNATURES = {
    # kind, w, rows, nb, row_bytes, x [T, in], y [T, out]
    "_matmul_kernel": nt.void(nt.int64, nt.uint8[::1], nt.int64, nt.int64, nt.int64,
                              nt.float32[:, ::1], nt.float32[:, ::1]),
    # q, k, v, n_keys, q_pos, scale, window, scores [T*H, L], out [T, H, hd]
    "_attention_kernel": nt.void(F32_3D, F32_3D, F32_3D, nt.int64, nt.int64[::1],
                                 nt.float64, nt.int64, nt.float64[:, ::1], F32_3D),
}


def _ptxas():
    for candidate in (shutil.which("ptxas"),
                      os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin",
                                   "ptxas")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.fixture
def cuda_target(monkeypatch):
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        pytest.skip("the simulator compiles nothing")
    from numba.cuda.cudadrv import nvvm
    if not nvvm.is_available():
        pytest.skip("NVVM (the CUDA toolkit's libnvvm) is not installed")
    import numba.cuda.dispatcher as dispatcher
    from types import SimpleNamespace
    monkeypatch.setattr(dispatcher, "get_current_device",
                        lambda: SimpleNamespace(compute_capability=CC))
    from numba import cuda
    from apr_native.kernels.cuda import cuda_matmul as kernels
    return cuda, kernels


@pytest.mark.parametrize("kernel", sorted(SIGNATURES))
def test_kernel_compiles_to_ptx_and_assembles(kernel, cuda_target, tmp_path):
    cuda, kernels = cuda_target
    ptx, _ = cuda.compile_ptx(getattr(kernels, kernel).py_func, SIGNATURES[kernel], cc=CC)
    assert ".entry" in ptx and ".target sm_75" in ptx
    ptxas = _ptxas()
    if ptxas is None:
        pytest.skip("ptxas not found (PTX compiled, not assembled)")
    source = tmp_path / (kernel + ".ptx")
    source.write_text(ptx)
    done = subprocess.run([ptxas, "-arch=sm_75", str(source), "-o", str(source) + ".cubin"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert os.path.getsize(str(source) + ".cubin") > 1000
