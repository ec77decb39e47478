"""Peak RSS of generation with the mmap loader and numba kernels stays within 1.3x the
model file above a baseline (issue 8; tests/model/test_model_memory.py explains the method).

The baseline child imports numpy, apr_core, numba and the compiled kernels and runs one
small quantized matmul through them (so numba's runtime, the loaded machine code and the
thread pool exist); the model child does the same, then maps SmolLM2-135M Q4_1, prefills
a prompt and greedily generates 8 tokens with the numba backend. The mapped weight pages
count in RSS once touched, so this bounds "weights stay quantized" and "no copy of the
file": a full float32 copy would add 4x the file, a second copy of the file 1x.
"""
import sys

import pytest

from peak_rss import model_run_rss

pytest.importorskip("numba")

pytestmark = [pytest.mark.native, pytest.mark.real_model]

CHILD = r"""
import resource, sys
import numpy as np
from apr_core import dtypes
from apr_core.quant import quantize
from apr_native import backends
kernels = backends.select("numba")
from apr_native.kernels import cpu
q4 = dtypes.BY_NAME["Q4_1"]
w = np.frombuffer(quantize(np.ones((64, 64), np.float32), q4), np.uint8)
cpu.numba_matmul(w, q4, (64, 64), np.ones((1, 64), np.float32), 1 << 20)
cpu.numba_matmul(w, q4, (64, 64), np.ones((8, 64), np.float32), 1 << 20)
if len(sys.argv) > 1:
    from apr_core.runtime.generate import generate
    from apr_core.model import Transformer
    from apr_native.mmap_source import open_mmap
    model = Transformer.from_path(sys.argv[1], opener=open_mmap, kernels=kernels)
    assert model.memory_report()["dense_bytes"] == 0
    assert len(generate(model, [1, 504, 3458, 282, 4649], max_tokens=8)) == 8
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="host: ru_maxrss is KiB on Linux only")
def test_mmap_numba_generation_peak_rss_within_1_3x_file_size(smollm2_gguf):
    size, baseline, peak = model_run_rss(CHILD, smollm2_gguf)
    assert peak <= 1.3 * size + baseline
