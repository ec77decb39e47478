"""The sampler stages added for llama.cpp's flags, against references written here from
their definitions: DRY against a brute-force search of every repetition, XTC and the
chain order on hand-worked logits, the option table against SamplerConfig (also on
Python 3.8). llama.cpp's own samplers as the oracle: test_sampler_llama_cpp.py."""
import numpy as np
import pytest

from apr_core.errors import AprError
from apr_core.runtime.dry import dry_penalties
from apr_core.runtime.sampler_options import (OPTIONS, from_flags, from_request,
                                              parse_logit_bias)
from apr_core.runtime.sampler_stages import xtc_filter
from apr_core.runtime.sampling import Sampler, SamplerConfig, softmax


def dry_brute_force(history, multiplier, base, allowed, last_n, breakers):
    """For every token t: the longest n such that the last n tokens occurred earlier,
    ending just before an occurrence of t, with no breaker among the last n tokens."""
    w = list(history)[-last_n:] if last_n > 0 else list(history)
    size = len(w)
    after_breaker = next((i for i in range(size) if w[size - 1 - i] in breakers), size)
    best = {}
    for j in range(size - 1):                 # an earlier end; w[j + 1] followed it
        n = 0
        while j - n >= 0 and w[j - n] == w[size - 1 - n]:
            n += 1
        n = min(n, after_breaker)
        t = w[j + 1]
        if n >= allowed and t not in breakers and n > best.get(t, -1):
            best[t] = n
    if size <= allowed or after_breaker < allowed:
        return {}
    return {t: multiplier * base ** (n - allowed) for t, n in best.items()}


@pytest.mark.parametrize("seed", range(40))
def test_dry_equals_a_brute_force_search(seed):
    rng = np.random.RandomState(seed)
    vocab = 3 + seed % 4                                  # small: many repetitions
    history = rng.randint(0, vocab, size=rng.randint(2, 60)).tolist()
    breakers = frozenset([0]) if seed % 3 == 0 else frozenset()
    allowed, last_n = seed % 4, (-1, 20, 7)[seed % 3]
    tokens, penalties = dry_penalties(history, 0.8, 1.75, allowed, last_n, breakers)
    got = dict(zip(tokens.tolist(), penalties.tolist()))
    want = dry_brute_force(history, 0.8, 1.75, allowed, last_n, breakers)
    assert got.keys() == want.keys()
    for t in want:
        assert got[t] == pytest.approx(want[t], rel=1e-12)


def test_dry_worked_example():
    # "1 2 3" was followed by 4 once; it is the suffix again: choosing 4 repeats 4 tokens
    tokens, penalties = dry_penalties([1, 2, 3, 4, 9, 1, 2, 3], 1.0, 2.0, 2, -1, frozenset())
    assert tokens.tolist() == [4] and penalties.tolist() == [2.0]        # 1 * 2 ** (3 - 2)
    # a breaker (9) after the first copy: the repetition may not cross it, and the
    # breaker itself is never penalised
    assert dry_penalties([1, 2, 3, 9, 1, 2, 3], 1.0, 2.0, 2, -1, frozenset([9]))[0].size == 0
    # off: multiplier 0, or a window that is too short
    assert dry_penalties([1, 2, 1, 2], 0.0, 2.0, 1, -1, frozenset())[0].size == 0
    assert dry_penalties([1, 2, 1, 2], 1.0, 2.0, 1, 1, frozenset())[0].size == 0


def test_dry_penalty_is_capped_to_a_finite_float32():
    history = [5] * 400
    _, penalties = dry_penalties(history, 1.0, 1.75, 2, -1, frozenset())
    assert np.isfinite(np.float32(penalties[0]))


def test_xtc_removes_all_top_choices_but_the_least_likely():
    z = np.log(np.array([0.4, 0.3, 0.2, 0.1]))
    rng = np.random.RandomState(0)
    out = xtc_filter(z, 1.0, 0.15, rng)                   # 0, 1, 2 are top choices
    assert np.isneginf(out[:2]).all() and out[2:].tolist() == z[2:].tolist()
    assert xtc_filter(z, 1.0, 0.45, rng).tolist() == z.tolist()     # only one above: no-op
    assert xtc_filter(z, 1.0, 0.6, rng).tolist() == z.tolist()      # threshold > 0.5: off
    assert xtc_filter(z, 0.0, 0.15, rng).tolist() == z.tolist()     # probability 0: off


def test_xtc_applies_with_its_probability():
    z = np.log(np.array([0.4, 0.3, 0.2, 0.1]))
    rng = np.random.RandomState(7)
    applied = sum(np.isneginf(xtc_filter(z, 0.3, 0.15, rng)[0]) for _ in range(4000))
    assert abs(applied / 4000 - 0.3) < 0.03


def test_chain_order_changes_what_survives():
    """top_p 0.6 at temperature 1 keeps {0, 1}; after temperature 4 the distribution is
    flatter and top_p keeps {0, 1, 2}."""
    z = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    early = Sampler(SamplerConfig(temperature=4.0, top_p=0.6))
    late = Sampler(SamplerConfig(temperature=4.0, top_p=0.6,
                                 samplers=("temperature", "top_p")))
    assert np.nonzero(early.distribution(z))[0].tolist() == [0, 1]
    assert np.nonzero(late.distribution(z))[0].tolist() == [0, 1, 2]
    flat = softmax(z / 4.0)
    assert late.distribution(z)[:3] == pytest.approx(flat[:3] / flat[:3].sum())


def test_logit_bias_and_dry_reach_greedy_decoding():
    z = np.array([1.0, 3.0, 2.0])
    assert Sampler(SamplerConfig(temperature=0.0, logit_bias=((1, -5.0),)))(z) == 2
    # token 1 followed "0" before and "0" is the suffix again: DRY pushes 1 below 2
    dry = SamplerConfig(temperature=0.0, dry_multiplier=2.0, dry_allowed_length=1)
    assert Sampler(dry)(z, [0, 1, 0]) == 2
    assert Sampler(SamplerConfig(temperature=0.0))(z, [0, 1, 0]) == 1


def test_stateful_stages_turn_speculation_off():
    assert Sampler(SamplerConfig(temperature=1.0)).stateless
    assert not Sampler(SamplerConfig(temperature=1.0, xtc_probability=0.5)).stateless
    assert not Sampler(SamplerConfig(temperature=1.0, mirostat=1)).stateless
    with pytest.raises(AprError):
        Sampler(SamplerConfig(temperature=1.0, mirostat=1)).distribution(np.zeros(3))


def test_mirostat_v1_moves_mu_toward_tau():
    z = np.log(softmax(np.linspace(4.0, -4.0, 200)))
    sampler = Sampler(SamplerConfig(temperature=1.0, mirostat=1, mirostat_tau=3.0, seed=1))
    mus = []
    for _ in range(200):
        sampler(z)
        mus.append(sampler.mu)
    assert mus[-1] != 6.0 and abs(np.mean(mus[-50:]) - mus[-1]) < 2.0    # settled


# ---------------------------------------------------------------- the option table

def test_every_option_is_a_sampler_config_field_with_its_default():
    fields = SamplerConfig.__dataclass_fields__
    for option in OPTIONS:
        assert option.field in fields
        if option.field != "temperature":            # the CLI's default is greedy
            assert fields[option.field].default == option.default, option
    assert len({o.flag for o in OPTIONS}) == len({o.request for o in OPTIONS}) == len(OPTIONS)


def test_request_fields_become_config_values():
    kwargs = from_request({"dry_multiplier": 0.8, "dry_sequence_breakers": ["\n", "###"],
                           "xtc_probability": 0.5, "repeat_last_n": -1, "mirostat": 2,
                           "samplers": "penalties;dry;temperature", "temperature": 0.7},
                          skip=("temperature",))
    config = SamplerConfig(**kwargs)
    assert config.dry_sequence_breakers == ("\n", "###") and config.penalty_last_n == -1
    assert config.samplers == ("penalties", "dry", "temperature") and config.mirostat == 2
    assert config.temperature == 1.0                          # skipped: the caller's
    for bad in ({"mirostat": 1.5}, {"dry_base": "x"}, {"samplers": [1]}, {"top_k": True}):
        with pytest.raises(AprError):
            from_request(bad)


def test_flags_and_logit_bias():
    assert from_flags({"dry_sequence_breakers": ["none"], "top_k": None}) == \
        {"dry_sequence_breakers": ()}
    assert parse_logit_bias(["15043+1", "29871-inf", "7-0.5"]) == (
        (15043, 1.0), (29871, float("-inf")), (7, -0.5))
    for bad in ("15043", "+1", "x+1"):
        with pytest.raises(AprError):
            parse_logit_bias([bad])


class TextVocab:
    def __init__(self, texts):
        self.texts = [t.encode() for t in texts]
        self.n_vocab = len(texts)

    def token_bytes(self, token_id, skip_special=False):
        return self.texts[token_id]


def test_breaker_tokens_are_those_whose_text_holds_a_breaker():
    from apr_core.runtime.dry import breaker_ids
    a = TextVocab(["a", "b\n", "c:", "d", "\"e"])
    b = TextVocab(["x:", "y", "z*"])
    assert breaker_ids(a, ("\n", ":", "\"", "*")) == frozenset({1, 2, 4})
    assert breaker_ids(b, ("\n", ":", "\"", "*")) == frozenset({0, 2})     # its own vocabulary
    assert breaker_ids(a, ("d",)) == frozenset({3})
    assert breaker_ids(a, ("\n", ":", "\"", "*")) is breaker_ids(a, ("\n", ":", "\"", "*"))


def test_breaker_sets_are_bounded():
    """A client chooses the breakers: their number and length are capped, and the sets a
    tokenizer remembers stay few whatever clients send."""
    from apr_core.runtime.dry import MAX_BREAKER_CHARS, MAX_BREAKERS, REMEMBERED_SETS, \
        breaker_ids
    with pytest.raises(AprError):
        SamplerConfig(dry_sequence_breakers=tuple(str(i) for i in range(MAX_BREAKERS + 1)))
    with pytest.raises(AprError):
        SamplerConfig(dry_sequence_breakers=("x" * (MAX_BREAKER_CHARS + 1),))
    vocab = TextVocab(["a", "b", "c"])
    for i in range(3 * REMEMBERED_SETS):
        breaker_ids(vocab, ("q%d" % i,))
    assert len(vocab._dry_breakers) <= REMEMBERED_SETS
