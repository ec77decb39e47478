"""apr_core.stats: statistics against numpy's float64 results, NaN/Inf/zero findings, the
expected-range table and its use by the inline validation of quant.quality."""
import math

import numpy as np
import pytest

from apr_core import stats as st
from apr_core.conversion.quality import EXPECTED_MEANS, check_values


def test_stats_match_numpy_float64_across_chunks():
    rng = np.random.RandomState(1)
    values = rng.standard_normal((3, st.CHUNK + 17)).astype(np.float32)   # spans 4 chunks
    values[0, :5] = 0.0
    s = st.tensor_stats("w", values)
    ref = values.astype(np.float64)
    assert s.shape == (3, st.CHUNK + 17) and s.count == values.size
    assert s.mean == pytest.approx(ref.mean(), rel=1e-12, abs=1e-15)
    assert s.std == pytest.approx(ref.std(), rel=1e-9)
    assert (s.min, s.max) == (float(ref.min()), float(ref.max()))
    assert s.l2 == pytest.approx(math.sqrt((ref ** 2).sum()), rel=1e-12)
    assert s.zeros == 5 + int(np.count_nonzero(values[:, 5:] == 0))
    assert (s.nan, s.inf) == (0, 0)


def test_nan_inf_are_counted_apart_and_excluded():
    values = np.array([1.0, np.nan, np.inf, -np.inf, 3.0, np.nan], np.float32)
    s = st.tensor_stats("w", values)
    assert (s.nan, s.inf, s.count) == (2, 2, 6)
    assert (s.mean, s.min, s.max) == (2.0, 1.0, 3.0)
    assert [f.check for f in st.check(s)] == ["nan"]
    assert st.check(s)[0].severity == "error"


def test_all_zero_tensor_warns_and_all_nan_has_neutral_stats():
    s = st.tensor_stats("blk.0.ffn_up.weight", np.zeros((4, 8), np.float32))
    assert [(f.check, f.severity) for f in st.check(s)] == [("zero", "warn")]
    assert st.check(s, zero_check=False) == []
    s = st.tensor_stats("w", np.full(4, np.nan, np.float32))
    assert (s.mean, s.std, s.min, s.max, s.nan) == (0.0, 0.0, 0.0, 0.0, 4)


@pytest.mark.parametrize("name,value,severity", [
    ("encoder.layer_norm.weight", 11.0, "error"),          # seed 000 §11 #28
    ("encoder.layer_norm.weight", 1.2, None),
    ("decoder.layers.0.self_attn_layer_norm.bias", 5.0, "error"),   # #29
    ("model.norm.weight", 11.0, "error"),                  # RMSNorm failure mode
    ("blk.0.attn_norm.weight", 0.001, None),               # real SmolLM2 value
    ("blk.0.attn_q.weight", 1.0, "warn"),                  # #35 linear mean ~0
    ("model.layers.0.mlp.down_proj.weight", 0.0, None),
    ("some.other.tensor", 50.0, None),
])
def test_mean_rules(name, value, severity):
    s = st.tensor_stats(name, np.full(16, value, np.float32))
    found = [f for f in st.check(s, zero_check=False) if f.check == "range"]
    assert [f.severity for f in found] == ([severity] if severity else [])


def test_embedding_std_rule_seed_11_30():
    rng = np.random.RandomState(0)
    wide = st.tensor_stats("token_embd.weight", rng.standard_normal((64, 32)).astype(np.float32))
    narrow = st.tensor_stats("model.embed_tokens.weight",
                             (0.05 * rng.standard_normal((64, 32))).astype(np.float32))
    assert [f.message for f in st.check(wide)] == [
        "token embedding std {:.4g} outside [0.0, 0.2]".format(wide.std)]
    assert st.check(narrow) == []


def test_inline_validation_uses_the_error_rows_of_the_table():
    errors = [r for r in st.RULES if r.stat == "mean" and r.severity == "error"]
    assert [(p.pattern, b) for p, b in EXPECTED_MEANS] == \
        [(r.pattern.pattern, (r.low, r.high)) for r in errors]
    # warn rows never abort a conversion
    assert check_values("blk.0.attn_q.weight", np.full(8, 1.0)) == []


def test_histogram_counts_finite_values():
    counts, edges = st.histogram(np.array([0.0, 0.0, 1.0, np.nan, 2.0], np.float32), bins=4)
    assert list(counts) == [2, 0, 1, 1] and (edges[0], edges[-1]) == (0.0, 2.0)
    counts, edges = st.histogram(np.full(3, 5.0, np.float32), bins=2)
    assert list(counts) == [0, 3] and (edges[0], edges[-1]) == (4.5, 5.5)
