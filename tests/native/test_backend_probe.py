"""Choosing the backend costs no CUDA probe where no NVIDIA driver can be: on Linux without
an NVIDIA (or WSL GPU) device node, `backends.available()` neither imports numba.cuda
(~0.4 s) nor asks the driver (~1 s) -- part of `apr run`'s start-up."""
import os
import subprocess
import sys

import pytest

from apr_native import backends

pytestmark = pytest.mark.native

PROBE = ("import sys; from apr_native import backends; names = backends.available(); "
         "print('numba.cuda' in sys.modules, 'cuda' in names)")


def test_no_device_node_means_no_cuda_import():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items()
                               if k not in ("NUMBA_CUDA_DRIVER", "NUMBA_ENABLE_CUDASIM",
                                            backends.CUDA_EMULATE_ENV)})
    assert done.returncode == 0, done.stderr
    imported, listed = done.stdout.split()
    device = any(os.path.exists(p) for p in backends._CUDA_DEVICE_FILES)
    if sys.platform.startswith("linux") and not device:
        assert (imported, listed) == ("False", "False")
    else:
        assert imported == "True"


def test_probe_rules(monkeypatch):
    monkeypatch.setattr(backends.os.path, "exists", lambda path: False)
    monkeypatch.delenv("NUMBA_CUDA_DRIVER", raising=False)
    monkeypatch.setattr(backends.sys, "platform", "linux")
    assert backends._cuda_driver_present() is False
    monkeypatch.setenv("NUMBA_CUDA_DRIVER", "/opt/libcuda.so")
    assert backends._cuda_driver_present() is True
    monkeypatch.delenv("NUMBA_CUDA_DRIVER")
    monkeypatch.setattr(backends.sys, "platform", "win32")
    assert backends._cuda_driver_present() is True
    monkeypatch.setattr(backends.sys, "platform", "linux")
    monkeypatch.setattr(backends.os.path, "exists", lambda path: path == "/dev/nvidiactl")
    assert backends._cuda_driver_present() is True
