"""`--backend webgpu`'s limits and fallbacks on the real SmolLM2, and `apr run` through it:

- a storage binding limit smaller than a tensor splits the tensor by rows across
  bindings (and the logits across chunks): the logits are bit for bit the unsplit ones;
- a limit too small for the step's buffers: the model falls back to the CPU backend,
  with the reason logged and kept;
- no adapter (APR_WEBGPU_ADAPTER=none): the CPU backend, the reason logged;
- `apr run demo ... --backend webgpu` prints what `--backend numpy` prints.
"""
import json
import logging
import os
import tempfile

import numpy as np
import pytest

from apr_core.model import Transformer
from apr_native import backends
from apr_native.mmap_source import open_mmap
from cli_util import apr_subprocess

pytestmark = [pytest.mark.native, pytest.mark.real_model]

os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="apr-xdg-"))

IDS = [1, 504, 3458, 282, 4649, 314, 253, 1345]


def load(path):
    return Transformer.from_path(path, opener=open_mmap, kernels=backends.select("webgpu"))


def test_tensors_over_the_binding_limit_are_split_by_rows(smollm2_gguf, monkeypatch):
    whole = load(smollm2_gguf)
    want = whole.device.forward_rows(IDS, whole.new_cache(16), range(len(IDS)))  # [8, V]
    # 4 MiB: the 30 MB Q8_0 embedding (tied LM head) in 8 parts, 196 KB logit rows
    # in chunks of 21
    monkeypatch.setenv("APR_WEBGPU_MAX_BINDING", str(4 << 20))
    split = load(smollm2_gguf)
    plan = split.device.plan
    parts = [name for name in plan.buffers if name.startswith("w:token_embd.weight:")]
    assert len(parts) == 8 and all(plan.buffers[p].size <= 4 << 20 for p in parts)
    got = split.device.forward_rows(IDS, split.new_cache(16), range(len(IDS)))
    assert np.array_equal(got, want)
    many = list(range(1, 24))                          # 23 logit rows: two chunks
    got = split.device.forward_rows(many, split.new_cache(24), range(len(many)))
    want = whole.device.forward_rows(many, whole.new_cache(24), range(len(many)))
    assert len(split.device.plan.logit_chunks) > 1 and np.array_equal(got, want)


def test_a_limit_too_small_falls_back_to_the_cpu(smollm2_gguf, monkeypatch, caplog):
    monkeypatch.setenv("APR_WEBGPU_MAX_BINDING", "512")   # under one 612-byte embedding row
    with caplog.at_level(logging.WARNING, logger="apr.webgpu"):
        model = load(smollm2_gguf)
    kernels = model.kernels
    assert model.device is None and kernels.backend in ("numba", "numpy")
    assert "exceeds" in kernels.fallback_reason and "512" in kernels.fallback_reason
    assert any("falling back" in r.getMessage() for r in caplog.records)
    ref = Transformer.from_path(smollm2_gguf, dequantize_at_load=True)
    logits = model.forward(IDS, model.new_cache(16), last_only=True)
    assert int(logits.argmax()) == int(ref.forward(IDS, last_only=True).argmax())


def test_no_adapter_falls_back_with_the_reason(monkeypatch, caplog):
    monkeypatch.setenv("APR_WEBGPU_ADAPTER", "none")
    with caplog.at_level(logging.WARNING, logger="apr.webgpu"):
        kernels = backends.select("webgpu")
    assert kernels.backend in ("numba", "numpy")
    assert "APR_WEBGPU_ADAPTER=none" in kernels.fallback_reason
    assert any("APR_WEBGPU_ADAPTER=none" in r.getMessage() for r in caplog.records)


def test_apr_run_with_backend_webgpu_prints_numpys_text():
    args = ["run", "demo", "The capital of France is", "-n", "8", "--raw", "--json"]
    code, out, err = apr_subprocess(*args, "--backend", "webgpu")
    assert code == 0, err
    ours = json.loads(out)
    assert ours["backend"] == "webgpu"
    code, out, err = apr_subprocess(*args, "--backend", "numpy")
    assert code == 0, err
    ref = json.loads(out)
    assert ours["token_ids"] == ref["token_ids"] and ours["text"] == ref["text"]
    code, out, err = apr_subprocess(*args, "--backend", "webgpu",
                                    env={"APR_WEBGPU_ADAPTER": "none"})
    assert code == 0 and json.loads(out)["backend"] in ("numba", "numpy")
    assert "falling back" in err and "APR_WEBGPU_ADAPTER=none" in err
