"""`apr merge` on real files: strategies through the CLI, dtype preservation, refusals.
The arithmetic of each strategy is tested exactly in test_transforms.py."""
import numpy as np
import pytest

import synthetic_models as sm
from apr_core import dtypes
from apr_core.formats.apr2 import write_apr2
from apr_core.formats.open import open_model
from apr_core.quant import dequantize, quantize
from apr_core.tensor import RawTensor
from cli_util import apr, apr_json

pytestmark = pytest.mark.native
F32 = dtypes.BY_NAME["F32"]


def _write(path, **tensors):
    write_apr2(str(path), [RawTensor(n, F32, np.shape(v), np.asarray(v, "<f4").tobytes())
                           for n, v in tensors.items()], {"model_type": "t"})
    return str(path)


def _read(path, name):
    with open_model(path) as model:
        raw = model.read_raw(name)
        return dequantize(raw.data, raw.dtype, raw.shape)


@pytest.mark.parametrize("strategy,extra,want", [
    ("average", [], [2.0, 3.0]),
    ("weighted", ["--weights", "1,3"], [2.5, 3.5]),
    ("ties", ["--density", "1"], [2.0, 3.0]),
    ("slerp", ["--t", "0.5"], None),
])
def test_strategies(tmp_path, strategy, extra, want):
    a = _write(tmp_path / "a.apr", w=[1.0, 2.0])
    b = _write(tmp_path / "b.apr", w=[3.0, 4.0])
    out = str(tmp_path / "m.apr")
    code, result = apr_json("merge", a, b, "--strategy", strategy, "-o", out, *extra)
    assert code == 0, result
    got = _read(out, "w")
    if want is None:   # slerp of [1,2] and [3,4] at 0.5, by its definition
        va, vb = np.array([1.0, 2.0]), np.array([3.0, 4.0])
        omega = np.arccos(va @ vb / np.linalg.norm(va) / np.linalg.norm(vb))
        want = (np.sin(0.5 * omega) * (va + vb) / np.sin(omega)).tolist()
    assert got.tolist() == pytest.approx(want, rel=1e-6)
    with open_model(out) as model:
        assert model.metadata["merge"]["strategy"] == strategy


def test_dare_is_seeded(tmp_path):
    a = _write(tmp_path / "a.apr", w=np.ones(256))
    b = _write(tmp_path / "b.apr", w=np.ones(256) * 3)
    outs = []
    for name, seed in (("x", "1"), ("y", "1"), ("z", "2")):
        out = str(tmp_path / (name + ".apr"))
        assert apr("merge", a, b, "--strategy", "dare", "--seed", seed, "-o", out)[0] == 0
        outs.append(_read(out, "w"))
    assert np.array_equal(outs[0], outs[1]) and not np.array_equal(outs[0], outs[2])
    # kept elements are rescaled by 1/density: each model contributes 0 or 2x its value / 2
    assert set(np.unique(outs[0]).tolist()) <= {0.0, 1.0, 3.0, 4.0}


def test_quantized_models_merge_in_their_dtype(tmp_path):
    """Two GGUF Q8_0 models merge to Q8_0; values are the average of the dequantized
    inputs, requantized (checked against quantize() of that average)."""
    a, b = str(tmp_path / "a.gguf"), str(tmp_path / "b.gguf")
    sm.write_gguf_model(a, seed=1)
    sm.write_gguf_model(b, seed=2)
    out = str(tmp_path / "m.apr")
    assert apr("merge", a, b, "-o", out)[0] == 0
    name = "blk.0.ffn_up.weight"
    with open_model(a) as ma, open_model(b) as mb, open_model(out) as mm:
        ra, rb, rm = ma.read_raw(name), mb.read_raw(name), mm.read_raw(name)
        assert rm.dtype.name == "Q8_0"
        mean = (dequantize(ra.data, ra.dtype, ra.shape).astype(np.float64)
                + dequantize(rb.data, rb.dtype, rb.shape)) / 2
        assert rm.data == quantize(mean.astype(np.float32), "Q8_0")


def test_merge_refusals(tmp_path):
    a = _write(tmp_path / "a.apr", w=[1.0, 2.0])
    c = _write(tmp_path / "c.apr", w=[1.0, 2.0, 3.0])
    code, _, err = apr("merge", a, c, "-o", str(tmp_path / "m.apr"))
    assert code == 5 and "shapes differ" in err
    code, _, err = apr("merge", a, a, "--strategy", "weighted", "-o", str(tmp_path / "m.apr"))
    assert code == 2 and "--weights" in err
    code, _, err = apr("merge", a, "-o", str(tmp_path / "m.apr"))
    assert code == 2
    code, _, err = apr("merge", a, a, "-o", a)
    assert code == 2 and "exists" in err
