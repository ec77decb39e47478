"""Peak memory of a quantized model run (issue 4: peak RSS <= 1.5x the file size).

Measured in child processes, so nothing this test process loaded counts: one child imports
numpy and apr_core and runs a small matmul (so BLAS's thread buffers exist) — the
baseline; the other does the same, then loads SmolLM2-135M Q4_1 (weights kept quantized)
and greedily generates 8 tokens. Each reports `ru_maxrss` (KiB on Linux) of itself.

    peak_rss(model run) <= 1.5 * file_size + peak_rss(baseline)

Each child is started through `peak_rss.child_peak_rss_bytes`, whose launcher keeps this
test process's own peak out of the child's `ru_maxrss`.
"""
import sys

import pytest

from peak_rss import model_run_rss

pytestmark = [pytest.mark.native, pytest.mark.real_model]

CHILD = r"""
import resource, sys
import numpy as np
import apr_core
np.ones((64, 64), np.float32) @ np.ones((64, 8), np.float32)
if len(sys.argv) > 1:
    from apr_core.model import Transformer
    from apr_core.runtime.generate import generate
    model = Transformer.from_path(sys.argv[1])
    assert model.memory_report()["dense_bytes"] == 0
    assert len(generate(model, [1, 504, 3458, 282, 4649], max_tokens=8)) == 8
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="host: ru_maxrss is KiB on Linux only")
def test_quantized_smollm2_peak_rss_within_1_5x_file_size(smollm2_gguf):
    size, baseline, peak = model_run_rss(CHILD, smollm2_gguf)
    assert peak <= 1.5 * size + baseline
