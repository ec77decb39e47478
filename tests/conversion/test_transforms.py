"""apr_core.transforms: merge strategies, magnitude pruning, SVD factorization (numpy only;
runs on the Python 3.8 + numpy 1.17 compatibility run too). Expectations are worked out by
hand from the definitions (TIES, DARE, SLERP papers) or by an independent numpy oracle."""
import math

import numpy as np
import pytest

from apr_core import dtypes
from apr_core.errors import AprError, ErrorCode
from apr_core.formats.apr2 import read_apr2, write_apr2_bytes
from apr_core.quant import dequantize
from apr_core.tensor import RawTensor
from apr_core.transforms.lowrank import expand_model, factorize, lowrank_model
from apr_core.transforms.merge import merge_models, merge_values
from apr_core.transforms.prune import prune_model, prune_values

F32 = dtypes.BY_NAME["F32"]


def _model(tensors, meta=None):
    raws = [RawTensor(n, F32, tuple(np.shape(v)), np.asarray(v, "<f4").tobytes())
            for n, v in tensors.items()]
    return read_apr2(write_apr2_bytes(raws, meta or {"model_type": "t"}))


def _values(view, name):
    t = view.lazy(name)
    return dequantize(t.load(), t.dtype, t.shape)


def test_average_and_weighted():
    assert merge_values([np.array([1.0]), np.array([3.0])], "average").tolist() == [2.0]
    got = merge_values([np.array([1.0, 0.0]), np.array([3.0, 4.0])], "weighted",
                       weights=[3, 1])
    assert got.tolist() == [1.5, 1.0]   # (3*1 + 1*3)/4, (3*0 + 1*4)/4


def test_ties_trim_elect_disjoint_mean():
    base = np.zeros(4)
    a = np.array([0.5, -2.0, 0.1, 3.0])
    b = np.array([1.0, 1.5, -0.2, -0.9])
    c = np.array([-0.1, -1.0, 0.3, 2.0])
    # density 0.5 keeps the 2 largest |tau| of each:
    #   a -> [0, -2, 0, 3], b -> [1, 1.5, 0, 0], c -> [0, -1, 0, 2]
    # elected signs (sign of the sums 1, -1.5, 0, 5): +, -, 0, +
    # disjoint means: 1 / 1, (-2 - 1) / 2, nothing, (3 + 2) / 2
    got = merge_values([a, b, c], "ties", base=base, density=0.5)
    assert got.tolist() == pytest.approx([1.0, -1.5, 0.0, 2.5])
    # density 1 trims nothing: element 0 is 0.5, 1.0, -0.1 -> + -> mean(0.5, 1.0)
    full = merge_values([a, b, c], "ties", base=base, density=1.0)
    assert full[0] == pytest.approx(0.75)


def test_ties_with_base_and_lambda():
    base = np.array([10.0, 10.0])
    got = merge_values([np.array([11.0, 9.0]), np.array([13.0, 12.0])], "ties", base=base,
                       density=1.0, lam=0.5)
    # taus [1,-1] and [3,2]: element 0 -> mean(1,3)=2; element 1 -> sum + -> 2
    assert got.tolist() == [11.0, 11.0]


def test_dare_drops_and_rescales_reproducibly():
    rng_a, rng_b = np.random.RandomState(7), np.random.RandomState(7)
    x = np.ones(10000)
    one = merge_values([x, x], "dare", density=0.25, rng=rng_a)
    two = merge_values([x, x], "dare", density=0.25, rng=rng_b)
    assert np.array_equal(one, two)
    # each kept element is 1/0.25 = 4, averaged over 2 models: values in {0, 2, 4}
    assert set(np.unique(one).tolist()) <= {0.0, 2.0, 4.0}
    assert abs(float(one.mean()) - 1.0) < 0.05    # unbiased: E = 1


def test_slerp_on_orthogonal_vectors():
    got = merge_values([np.array([1.0, 0.0]), np.array([0.0, 1.0])], "slerp", t=0.5)
    assert got.tolist() == pytest.approx([math.sqrt(0.5), math.sqrt(0.5)])
    assert merge_values([np.array([2.0]), np.array([4.0])], "slerp", t=0.25).tolist() == \
        pytest.approx([2.5])     # parallel -> linear


def test_bad_merge_arguments():
    for kwargs in ({"strategy": "nope"}, {"strategy": "weighted", "weights": [1]},
                   {"strategy": "weighted", "weights": [1, -1]},
                   {"strategy": "ties", "density": 0.0}):
        with pytest.raises(AprError) as err:
            merge_values([np.ones(2), np.ones(2)], **kwargs)
        assert err.value.code == ErrorCode.ARGUMENT


def test_merge_models_checks_shapes_and_keeps_int_tensors():
    a = _model({"w": [[1.0, 2.0]], "b": [0.0]})
    b = _model({"w": [[3.0, 4.0]], "b": [2.0]})
    view = merge_models([a, b], "average")
    assert _values(view, "w").tolist() == [[2.0, 3.0]]
    assert view.metadata["merge"]["strategy"] == "average"
    with pytest.raises(AprError) as err:
        merge_models([a, _model({"w": [[1.0, 2.0, 3.0]], "b": [0.0]})], "average")
    assert err.value.code == ErrorCode.VALIDATION and err.value.context["tensor"] == "w"


def test_prune_exact_fraction_and_threshold():
    values = np.arange(1, 101, dtype=np.float32).reshape(10, 10) * np.where(
        np.arange(100).reshape(10, 10) % 2, -1, 1)
    pruned = prune_values(values, 0.3)
    assert int(np.count_nonzero(pruned == 0)) == 30
    assert np.all(np.abs(values[pruned == 0]) <= 30) and np.all(np.abs(pruned[pruned != 0]) > 30)
    assert int(np.count_nonzero(prune_values(values, threshold=50.5) == 0)) == 50


def test_prune_model_touches_only_weight_matrices():
    rng = np.random.RandomState(0)
    model = _model({"model.layers.0.mlp.up_proj.weight": rng.randn(8, 16),
                    "model.layers.0.input_layernorm.weight": 1 + rng.randn(16) * 0.1,
                    "model.embed_tokens.weight": rng.randn(4, 16)})
    view = prune_model(model, 0.5)
    assert np.count_nonzero(_values(view, "model.layers.0.mlp.up_proj.weight") == 0) == 64
    for name in ("model.layers.0.input_layernorm.weight", "model.embed_tokens.weight"):
        assert view.read_raw(name).data == model.read_raw(name).data


def test_factorize_is_the_best_rank_r_approximation():
    rng = np.random.RandomState(1)
    w = rng.randn(40, 30)
    a, b = factorize(w, 5)
    assert a.shape == (40, 5) and b.shape == (5, 30)
    s = np.linalg.svd(w, compute_uv=False)
    # Eckart-Young: ||W - A B||_F^2 = sum of the discarded singular values squared
    err = float(np.sum((w - a.astype(np.float64) @ b) ** 2))
    assert err == pytest.approx(float(np.sum(s[5:] ** 2)), rel=1e-4)


def test_lowrank_model_round_trip():
    rng = np.random.RandomState(2)
    low = rng.randn(64, 4) @ rng.randn(4, 48)          # exactly rank 4
    model = _model({"model.layers.0.mlp.down_proj.weight": low,
                    "model.norm.weight": np.ones(8)})
    view = lowrank_model(model, 4)
    names = sorted(view.tensors)
    assert names == ["model.layers.0.mlp.down_proj.weight.lowrank_a",
                     "model.layers.0.mlp.down_proj.weight.lowrank_b", "model.norm.weight"]
    assert view.info(names[0]).shape == (64, 4) and view.info(names[1]).shape == (4, 48)
    stored = read_apr2(_bytes(view))
    back = expand_model(stored)
    got = _values(back, "model.layers.0.mlp.down_proj.weight")
    assert np.allclose(got, low, atol=1e-4)
    assert "lowrank" not in back.metadata


def _bytes(view):
    from apr_core.formats.logical import apr_metadata
    return write_apr2_bytes(view.lazy_tensors(), apr_metadata(view))
