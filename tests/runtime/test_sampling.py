"""Samplers and penalties against exact, hand-computed expectations."""
import math

import numpy as np
import pytest

from apr_core.errors import AprError
from apr_core.runtime.sampling import (Sampler, SamplerConfig, apply_penalties, greedy, min_p_filter,
                               softmax, tail_free_filter, top_k_filter, top_p_filter,
                               typical_filter)


def logits_for(probs):
    """Logits whose softmax is exactly `probs` (up to float rounding)."""
    return np.log(np.asarray(probs, np.float64))


def kept(filtered):
    return sorted(np.nonzero(np.isfinite(filtered))[0].tolist())


LOGITS = np.array([1.0, 3.0, -2.0, 3.0, 0.5, 2.0])


def test_greedy_is_argmax_with_lowest_id_on_ties():
    assert greedy(LOGITS) == 1
    assert Sampler(SamplerConfig(temperature=0.0))(LOGITS) == 1


def test_top_k_one_is_greedy_whatever_the_seed():
    for seed in range(20):
        assert Sampler(SamplerConfig(top_k=1, seed=seed))(LOGITS) == greedy(LOGITS)


def test_top_k_keeps_the_k_largest():
    assert kept(top_k_filter(LOGITS, 3)) == [1, 3, 5]
    assert kept(top_k_filter(LOGITS, 0)) == list(range(6))


@pytest.mark.parametrize("k", [1, 5, 13, 40, 99])
def test_top_k_with_ties_at_the_cut_keeps_the_lowest_ids(k):
    """Many equal logits around the k-th: the same survivors as a stable sort's first k
    (the definition; the filter partitions instead of sorting)."""
    rng = np.random.default_rng(k)
    logits = rng.integers(-6, 6, 400).astype(np.float64)          # ~33 of each value
    logits[rng.integers(0, 400, 20)] = -np.inf
    expected = sorted(np.argsort(-logits, kind="stable")[:k].tolist())
    assert kept(top_k_filter(logits, k)) == expected


@pytest.mark.parametrize("scale,p", [(0.5, 0.9), (3.0, 0.95), (8.0, 0.5), (0.0, 0.3)])
def test_top_p_over_a_large_vocabulary_is_the_stable_sort_definition(scale, p):
    """Peaked, flat and all-equal distributions over 20k tokens (rounded logits: ties
    everywhere): the survivors of a most-likely-first stable sort's running sum."""
    rng = np.random.default_rng(int(scale * 10))
    logits = np.round(rng.standard_normal(20000) * scale, 1)
    probs = softmax(logits)
    order = np.argsort(-probs, kind="stable")
    n_keep = int(np.searchsorted(np.cumsum(probs[order]), p, side="left")) + 1
    assert kept(top_p_filter(logits, p)) == sorted(order[:n_keep].tolist())


@pytest.mark.parametrize("config", [
    dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),          # llama-server's
    dict(temperature=0.7, top_k=20, top_p=0.8, repetition_penalty=1.05),  # Qwen2.5's
    dict(temperature=1.0, top_k=0, top_p=0.9), dict(temperature=1.0, tfs_z=0.95, top_k=50)])
def test_a_draw_is_the_inverse_cdf_of_the_distribution(config):
    """The sampler draws from the survivors of its truncation stages alone: the token is
    the one an inverse-CDF draw over the whole `distribution` with the same seed picks."""
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal(5000) * 3).astype(np.float32)
    history = rng.integers(0, 5000, 64).tolist()
    for seed in range(30):
        got = Sampler(SamplerConfig(seed=seed, **config))(logits, history)
        reference = Sampler(SamplerConfig(seed=seed, **config))
        probs = reference.distribution(logits, history)
        assert probs[got] > 0
        assert got == reference.draw(probs)


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = [0.05, 0.4, 0.25, 0.2, 0.1]
    assert kept(top_p_filter(logits_for(probs), 0.6)) == [1, 2]     # 0.65 >= 0.6
    assert kept(top_p_filter(logits_for(probs), 0.7)) == [1, 2, 3]  # 0.85
    assert kept(top_p_filter(logits_for(probs), 0.3)) == [1]        # 0.4 >= 0.3
    assert kept(top_p_filter(logits_for(probs), 1.0)) == [0, 1, 2, 3, 4]


def test_min_p_keeps_tokens_above_the_scaled_maximum():
    probs = [0.05, 0.4, 0.25, 0.2, 0.1]
    assert kept(min_p_filter(logits_for(probs), 0.45)) == [1, 2, 3]   # p >= 0.18
    assert kept(min_p_filter(logits_for(probs), 0.3)) == [1, 2, 3]    # p >= 0.12
    assert kept(min_p_filter(logits_for(probs), 0.2)) == [1, 2, 3, 4]  # p >= 0.08
    assert kept(min_p_filter(logits_for(probs), 1.0)) == [1]


def test_typical_keeps_tokens_nearest_the_entropy():
    probs = np.array([0.5, 0.3, 0.15, 0.05])
    entropy = -np.sum(probs * np.log(probs))                          # 1.1437
    distance = np.abs(-np.log(probs) - entropy)   # [0.45, 0.06, 0.75, 1.85]
    assert np.argsort(distance).tolist() == [1, 0, 2, 3]
    assert kept(typical_filter(logits_for(probs), 0.7)) == [0, 1]     # 0.3 + 0.5 >= 0.7
    assert kept(typical_filter(logits_for(probs), 0.25)) == [1]
    assert kept(typical_filter(logits_for(probs), 0.9)) == [0, 1, 2]


def test_tail_free_cuts_where_curvature_accumulates():
    probs = np.array([0.4, 0.3, 0.2, 0.06, 0.04])
    # second differences of the sorted probs: |0.0|, |0.04|, |0.12| -> 0, 0.25, 1.0 cumulative
    assert kept(tail_free_filter(logits_for(probs), 0.5)) == [0, 1, 2]
    assert kept(tail_free_filter(logits_for(probs), 0.2)) == [0, 1]


def test_penalties_change_exactly_the_seen_logits():
    logits = np.array([2.0, -1.0, 0.5, 3.0, -0.5])
    history = [0, 1, 1, 3, 3, 3]
    out = apply_penalties(logits, history, repetition=2.0, presence=0.5, frequency=0.25)
    expected = [2.0 / 2 - 0.25 * 1 - 0.5, -1.0 * 2 - 0.25 * 2 - 0.5, 0.5,
                3.0 / 2 - 0.25 * 3 - 0.5, -0.5]
    assert out.tolist() == pytest.approx(expected, abs=1e-12)
    # Only the last `last_n` tokens count.
    assert apply_penalties(logits, history, frequency=1.0, last_n=2).tolist() == \
        pytest.approx([2.0, -1.0, 0.5, 1.0, -0.5])
    assert apply_penalties(logits, history, frequency=1.0, last_n=0).tolist() == logits.tolist()
    with pytest.raises(AprError):
        apply_penalties(logits, [9], frequency=1.0)


def test_repetition_penalty_can_flip_greedy():
    logits = np.array([1.0, 1.2, 0.0])
    sampler = Sampler(SamplerConfig(temperature=0.0, repetition_penalty=1.5))
    assert sampler(logits, history=[]) == 1
    assert sampler(logits, history=[1]) == 0                          # 1.2 / 1.5 = 0.8 < 1.0


def test_seeded_sampler_is_reproducible_and_follows_the_distribution():
    logits = logits_for([0.1, 0.6, 0.3])
    draws = [Sampler(SamplerConfig(seed=5))(logits) for _ in range(3)]
    assert len(set(draws)) == 1
    sampler = Sampler(SamplerConfig(seed=11))
    counts = np.bincount([sampler(logits) for _ in range(3000)], minlength=3) / 3000
    assert np.abs(counts - [0.1, 0.6, 0.3]).max() < 0.04


def test_temperature_sharpens_after_truncation():
    logits = logits_for([0.5, 0.3, 0.2])
    cold = Sampler(SamplerConfig(temperature=0.05, seed=1))
    assert {cold(logits) for _ in range(50)} == {0}
    only_two = Sampler(SamplerConfig(top_k=2, temperature=5.0, seed=2))
    assert {only_two(logits) for _ in range(200)} == {0, 1}


def test_mirostat_v2_truncates_by_surprise_and_moves_mu():
    probs = [0.7, 0.2, 0.05, 0.05]                      # surprises 0.51, 2.32, 4.32, 4.32 bits
    sampler = Sampler(SamplerConfig(mirostat=2, mirostat_tau=1.5, mirostat_eta=0.5, seed=3))
    assert sampler.mu == 3.0
    picks = set()
    for _ in range(40):
        sampler.mu = 3.0                                # keeps tokens with surprise <= 3 bits
        token = sampler(logits_for(probs))
        picks.add(token)
        renormalised = probs[token] / 0.9
        assert sampler.mu == pytest.approx(3.0 - 0.5 * (-math.log2(renormalised) - 1.5))
    assert picks == {0, 1}


def test_softmax_is_normalised_and_ignores_minus_inf():
    p = softmax(np.array([0.0, -np.inf, math.log(3.0)]))
    assert p.tolist() == pytest.approx([0.25, 0.0, 0.75])


@pytest.mark.parametrize("bad", [dict(top_k=-1), dict(top_p=0.0), dict(min_p=1.5),
                                 dict(mirostat=3), dict(repetition_penalty=0.0),
                                 dict(dry_base=0.5), dict(xtc_probability=1.5),
                                 dict(samplers=("top_k", "top_n_sigma")),
                                 dict(penalty_last_n=-2)])
def test_bad_parameters_are_refused(bad):
    with pytest.raises(AprError):
        SamplerConfig(**bad)
