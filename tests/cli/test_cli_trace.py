"""`apr trace` (seed 000 §4.8.5, checklist #64, #74, #75) on the real SmolLM2-135M: one step
per layer with the runtime's own hidden states, the model's own next-token prediction,
anomalies in a copy whose one layer was corrupted, and `--diff` that is 0 against itself
and names the corrupted layer against the copy."""
import json
import os

import numpy as np
import pytest

from apr_core import dtypes
from apr_core.formats.gguf import gguf_kv_block, read_gguf
from apr_core.formats.gguf_write import write_gguf
from apr_core.tensor import RawTensor
from cli_util import apr, apr_json

pytestmark = [pytest.mark.native, pytest.mark.real_model]

PROMPT = "The capital of France is"
CORRUPT = "blk.3.ffn_down.weight"


@pytest.fixture(scope="module")
def corrupt_gguf(smollm2_gguf, tmp_path_factory):
    """SmolLM2 with one weight of layer 3 set to NaN (stored as F32 so the NaN survives)."""
    path = str(tmp_path_factory.mktemp("trace") / "corrupt.gguf")
    with read_gguf(smollm2_gguf) as source:
        block = gguf_kv_block(source)
        tensors = []
        for name in block.get("tensor_order") or list(source.tensors):
            raw = source.read_raw(name)
            if name == CORRUPT:
                values = np.zeros(raw.shape, np.float32)
                values[0, 0] = np.nan
                raw = RawTensor(name, dtypes.BY_NAME["F32"], raw.shape, values.tobytes())
            tensors.append(raw)
        write_gguf(path, tensors, block["kv"], block["types"], block["alignment"])
    return path


def test_trace_steps_are_the_runtimes_hidden_states(smollm2_gguf):
    from apr_core.trace import trace
    from apr_native.engine import EngineOptions, load_engine
    code, report = apr_json("trace", smollm2_gguf, PROMPT, "--backend", "numpy")
    assert code == 0
    model = load_engine(smollm2_gguf, EngineOptions(backend="numpy")).model   # as trace loads
    ids = model.prompt_ids(PROMPT)
    n_layers = model.transformer.config.n_layers
    names = [s["name"] for s in report["steps"]]
    assert names == ["token_embd"] + ["blk.{}".format(i) for i in range(n_layers)] + [
        "output_norm"]
    assert report["tokens"] == len(ids)
    assert all(s["shape"] == [len(ids), 576] for s in report["steps"])
    steps = trace(model.transformer, ids, keep_values=True)
    want = model.transformer.hidden_states(ids)
    np.testing.assert_array_equal(steps[-1].values, want)
    for ours, cli in zip(steps, report["steps"]):
        assert cli["mean"] == pytest.approx(float(ours.values.astype(np.float64).mean()),
                                            rel=1e-9, abs=1e-12)
        assert cli["payload"] == pytest.approx(ours.values[-1, :8].tolist())
    logits = model.transformer.forward(ids)[-1]
    assert report["top"][0]["id"] == int(np.argmax(logits))
    assert report["top"][0]["text"].strip() == "Paris"
    assert not report["anomalies"]


def test_diff_against_itself_is_zero_and_export_is_atomic(smollm2_gguf, tmp_path):
    out = str(tmp_path / "trace.json")
    code, report = apr_json("trace", smollm2_gguf, "--diff", smollm2_gguf, "--export", out)
    assert code == 0
    assert all(r["drift"] == 0.0 for r in report["diff"]["steps"])
    assert report["diff"]["diverged_at"] is None
    with open(out) as handle:
        assert [s["name"] for s in json.load(handle)["steps"]] == [
            s["name"] for s in report["steps"]]
    code, _, err = apr("trace", smollm2_gguf, "--export", out)
    assert code != 0 and "exists" in err
    assert apr("trace", smollm2_gguf, "--export", out, "-f")[0] == 0


def test_a_corrupted_layer_is_found(smollm2_gguf, corrupt_gguf):
    code, report = apr_json("trace", corrupt_gguf, "--detect-anomalies")
    assert code == 5
    assert report["anomalies"][0] == {"step": "blk.3", "rule": "non_finite"}
    assert not [a for a in report["anomalies"] if a["step"] in ("token_embd", "blk.0",
                                                                  "blk.1", "blk.2")]
    code, out, _ = apr("trace", smollm2_gguf, "--diff", corrupt_gguf)
    assert code == 0 and "Divergence detected at: blk.3" in out
    assert os.path.getsize(corrupt_gguf) > os.path.getsize(smollm2_gguf)
